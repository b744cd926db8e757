"""Packing an unfinished table into parts of at most 16 MB, unpacking it elsewhere and resuming: the results
are those of a run without a break (docs/gpu.md, "Across GPU slots")."""

import json
import shutil

import pytest
import torch

from pseudosl.errors import RunFolderError
from pseudosl.experiments import loop
from pseudosl.experiments.archive import main as archive_main
from pseudosl.experiments.archive import missing_parts, pack, unpack
from pseudosl.experiments.checkpoints import CheckpointError, load_checkpoint
from pseudosl.experiments.harness import train
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.train import SudokuExperiment

EXP = SudokuExperiment()


def _cfg(tmp_path, out, **kw) -> SudokuConfig:
    base = dict(preset="test", models=["convnet", "rnn"], seeds=[0], n_train=16, n_test=8, n_val=8, epochs=3,
                batch_size=8, conv_channels=4, conv_layers=1, rnn_hidden=8, rnn_layers=1,
                data_dir=str(tmp_path / "d"), threads=1, out=str(out))
    return SudokuConfig(**{**base, **kw})


class Interrupted(Exception):
    """The machine's slot ended."""


def _interrupted_run(tmp_path, monkeypatch, out, saves: int) -> None:
    """Train until ``saves`` checkpoints are written, then stop as a killed process would."""
    real, count = loop.save, [0]

    def save(*a, **kw):
        real(*a, **kw)
        count[0] += 1
        if count[0] == saves:
            raise Interrupted
    monkeypatch.setattr(loop, "save", save)
    with pytest.raises(Interrupted):
        train(EXP, _cfg(tmp_path, out))
    monkeypatch.setattr(loop, "save", real)


def _runs(result):
    return [{k: v for k, v in r.items() if k not in ("wall_s", "cpu_s")} for r in result["runs"]]


def test_pack_unpack_resume_is_exact(tmp_path, monkeypatch, capsys):
    straight = train(EXP, _cfg(tmp_path, tmp_path / "straight"))
    # slot 1: the ConvNet finishes (3 epochs), the RNN is cut after its first epoch
    _interrupted_run(tmp_path, monkeypatch, tmp_path / "slot1", saves=4)
    (tmp_path / "slot1.log").write_text("the log of slot 1\n")
    manifest = pack(tmp_path / "slot1", tmp_path / "carry", extra=[tmp_path / "slot1.log"], name="t1",
                    part_bytes=20_000)
    assert len(manifest["parts"]) > 1 and all(p["bytes"] <= 20_000 for p in manifest["parts"])
    assert {k: (r["epoch"], r["finished"]) for k, r in manifest["runs"].items()} == {
        "convnet-seed0": (3, True), "rnn-seed0": (1, False)}
    # the finished run keeps only its selected weights: no optimizer state, a quarter of the bytes or so
    assert manifest["runs"]["convnet-seed0"]["bytes"] < manifest["runs"]["convnet-seed0"]["unpacked_bytes"] / 2
    # slot 2, another machine: the parts only
    moved = tmp_path / "machine2" / "carry"
    shutil.copytree(tmp_path / "carry", moved)
    assert missing_parts(moved / "t1.json") == []
    unpack(moved / "t1.json", tmp_path / "machine2" / "runs" / "slot1")
    assert (tmp_path / "machine2" / "runs" / "slot1.log").read_text() == "the log of slot 1\n"
    resumed = train(EXP, _cfg(tmp_path, tmp_path / "machine2" / "runs" / "slot1"), resume=True)
    assert _runs(resumed) == _runs(straight)  # metrics, selected epochs, histories: identical
    for name in ("convnet", "rnn"):
        a = load_checkpoint(tmp_path / "straight" / f"{name}-seed0" / "checkpoint.pt")
        b = load_checkpoint(tmp_path / "machine2" / "runs" / "slot1" / f"{name}-seed0" / "checkpoint.pt")
        selected = a["best_model"] if a["best_model"] is not None else a["model"]
        weights = b["best_model"] if b["best_model"] is not None else b["model"]
        assert all(torch.equal(selected[k], weights[k]) for k in selected), name
    rnn = load_checkpoint(tmp_path / "machine2" / "runs" / "slot1" / "rnn-seed0" / "checkpoint.pt")
    straight_rnn = load_checkpoint(tmp_path / "straight" / "rnn-seed0" / "checkpoint.pt")
    for key in ("model", "best_model"):  # the RNN trained on exactly: every tensor the same
        assert all(torch.equal(rnn[key][k], straight_rnn[key][k]) for k in rnn[key]), key
    assert rnn["history"] == straight_rnn["history"]
    # a run packed as finished cannot train on
    with pytest.raises(CheckpointError, match="packed as finished after 3 epochs.*pass --epochs 3"):
        train(EXP, _cfg(tmp_path, tmp_path / "machine2" / "runs" / "slot1", epochs=4), resume=True)


def test_unpack_refuses_missing_damaged_parts_and_a_full_folder(tmp_path, capsys):
    train(EXP, _cfg(tmp_path, tmp_path / "run", models=["convnet"], epochs=1))
    manifest = pack(tmp_path / "run", tmp_path / "carry", part_bytes=10_000)
    parts = [tmp_path / "carry" / p["file"] for p in manifest["parts"]]
    parts[1].unlink()
    with pytest.raises(RunFolderError, match=f"parts missing or damaged beside it: {parts[1].name}"):
        unpack(tmp_path / "carry" / "run.json", tmp_path / "new")
    assert archive_main(["status", str(tmp_path / "carry" / "run.json")]) == 1
    assert f"missing: {parts[1].name}" in capsys.readouterr().out
    pack(tmp_path / "run", tmp_path / "carry", part_bytes=10_000)
    data = bytearray(parts[0].read_bytes())
    data[100] ^= 1
    parts[0].write_bytes(bytes(data))
    assert missing_parts(tmp_path / "carry" / "run.json") == [parts[0].name]
    pack(tmp_path / "run", tmp_path / "carry", part_bytes=10_000)
    with pytest.raises(RunFolderError, match="already holds runs"):
        unpack(tmp_path / "carry" / "run.json", tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        archive_main(["unpack", str(tmp_path / "carry" / "nope.json"), str(tmp_path / "x")])
    assert e.value.code == 2 and "not an archive manifest" in capsys.readouterr().err
    assert json.loads((tmp_path / "carry" / "run.json").read_text())["runs"]["convnet-seed0"]["finished"]


def test_checksums_travel_and_a_damaged_checkpoint_is_not_packed(tmp_path):
    from pseudosl.experiments.checkpoints import has_checksum, save_checkpoint
    w = torch.arange(8.0)
    ckpt = {"config": {"epochs": 2}, "model_name": "convnet", "seed": 0, "epoch": 1, "history": [], "rng": None,
            "model": {"w": w}, "best_model": {"w": w.clone()}, "optimizer": {"state": {}}}
    run = tmp_path / "run"
    path = run / "convnet-seed0" / "checkpoint.pt"
    path.parent.mkdir(parents=True)
    save_checkpoint(ckpt, path)
    pack(run, tmp_path / "a")  # unfinished, its best weights are its last: stored once, copied back
    unpack(tmp_path / "a" / "run.json", tmp_path / "back")
    back = tmp_path / "back" / "convnet-seed0" / "checkpoint.pt"
    assert has_checksum(back.read_bytes()) and torch.equal(load_checkpoint(back)["best_model"]["w"], w)
    data = bytearray(path.read_bytes())
    data[data.index(w.numpy().tobytes()) + 13] ^= 0x04  # a bit of the fourth weight
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{path}: damaged checkpoint"):
        pack(run, tmp_path / "b")
    assert not list((tmp_path / "b").glob("*"))  # no part of a half archive
