"""Checkpoints carry the SHA-256 of their bytes: one flipped bit anywhere is refused by name, on eval and on
--resume, before any data is made or weight used; checkpoints of older code (no checksum) load with a warning."""

import random
import shutil
import warnings

import pytest
import torch

from pseudosl.cli import main as cli_main
from pseudosl.experiments.checkpoints import (CheckpointError, checkpoint_bytes, has_checksum, load_checkpoint,
                                              save_checkpoint)
from pseudosl.experiments.harness import evaluate_checkpoints
from pseudosl.experiments.sudoku.train import SudokuExperiment

TINY = ["--n-train", "16", "--n-val", "0", "--n-test", "8", "--epochs", "1", "--conv-channels", "4", "--conv-layers", "1",
        "--rnn-hidden", "8", "--rnn-layers", "1", "--threads", "1", "--models", "convnet", "--seeds", "0"]


def _ckpt() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"config": {"epochs": 1}, "model_name": "convnet", "seed": 0, "epoch": 1, "history": [{"loss": 0.5}],
            "model": {"w": torch.randn(40, generator=g), "b": torch.zeros(3)}, "optimizer": None, "rng": None}


def test_every_single_bit_flip_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(_ckpt(), path)
    data = path.read_bytes()
    assert has_checksum(data) and torch.equal(load_checkpoint(path)["model"]["w"], _ckpt()["model"]["w"])
    assert torch.equal(torch.load(path, weights_only=False)["model"]["w"], _ckpt()["model"]["w"])  # still torch's
    rng = random.Random(0)
    positions = rng.sample(range(len(data)), 60) + [0, len(data) - 1, len(data) - 40]  # archive, pickle, digest
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match=f"{path}: damaged checkpoint.*delete it"):
            load_checkpoint(path)
    for cut in (1, 50, len(data) // 2):  # truncated
        path.write_bytes(data[:-cut])
        with pytest.raises(CheckpointError, match="damaged checkpoint"):
            load_checkpoint(path)


def test_a_checkpoint_without_checksum_loads_with_a_warning(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save(_ckpt(), path)  # as pseudosl wrote checkpoints before checksums
    assert not has_checksum(path.read_bytes())
    with pytest.warns(UserWarning, match=f"{path}: a checkpoint written without a checksum"):
        assert load_checkpoint(path)["epoch"] == 1
    assert checkpoint_bytes(_ckpt(), checksum=False) != checkpoint_bytes(_ckpt())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run (trained once for the module); tests copy it."""
    root = tmp_path_factory.mktemp("trained")
    cli_main(["sudoku", "train", "--quick", "--data-dir", str(root / "d"), "--out", str(root / "out"), *TINY])
    return root


def _flip_weight(path) -> None:
    """One bit of the exponent of a weight flipped, as a failing disk would (0.0578 -> 1.97e37)."""
    weights = load_checkpoint(path)["model"]
    w = next(v for v in weights.values() if v.dtype == torch.float32 and v.numel() > 4).flatten()
    data = bytearray(path.read_bytes())
    at = bytes(data).index(w.numpy().tobytes()) + 4 * 2 + 3  # the high byte of the third weight
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        changed = torch.load(path, weights_only=False)["model"]  # torch itself reads it without complaint
    assert any(not torch.equal(changed[k], weights[k]) for k in weights)


def _refused(capsys, argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err
    return err[err.index("pseudosl: error: "):]


@pytest.mark.parametrize("damage", ["a weight", "the pickle", "the digest", "truncated"])
def test_damaged_checkpoints_are_refused_on_eval_and_resume_before_any_work(trained, tmp_path, capsys, monkeypatch,
                                                                            damage):
    out = tmp_path / "out"
    shutil.copytree(trained / "out", out)
    path = out / "convnet-seed0" / "checkpoint.pt"
    data = path.read_bytes()
    if damage == "a weight":
        _flip_weight(path)
    elif damage == "the pickle":
        path.write_bytes(data[:200] + bytes([data[200] ^ 0x10]) + data[201:])
    elif damage == "the digest":
        path.write_bytes(data[:-10] + (b"0" if data[-10:-9] != b"0" else b"1") + data[-9:])
    else:
        path.write_bytes(data[:len(data) * 2 // 3])

    def made(*a, **kw):
        raise AssertionError("the data was made before the refusal")
    monkeypatch.setattr(SudokuExperiment, "load_data", made)
    for argv in (["sudoku", "eval", "--out", str(out)],
                 ["sudoku", "train", "--quick", "--data-dir", str(trained / "d"), "--out", str(out), "--resume", *TINY]):
        err = _refused(capsys, argv)
        assert f"{path}: damaged checkpoint" in err and "delete it and train that run again (without --resume)" in err
        if damage != "truncated":
            assert "its bytes have SHA-256" in err and "but it was saved with" in err
    assert path.read_bytes() != data  # nothing overwrote it


def test_legacy_checkpoints_evaluate_with_a_warning_and_resume_adds_a_checksum(trained, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(trained / "out", out)
    path = out / "convnet-seed0" / "checkpoint.pt"
    torch.save(load_checkpoint(path), path)  # rewritten as older code wrote it
    with pytest.warns(UserWarning, match="without a checksum"):
        (table,) = evaluate_checkpoints(SudokuExperiment(), out)["tables"]
    assert [r["seed"] for r in table["runs"]] == [0]
    with pytest.warns(UserWarning, match="without a checksum"):
        cli_main(["sudoku", "train", "--quick", "--data-dir", str(trained / "d"), "--out", str(out), "--resume", *TINY,
                  "--epochs", "2"])
    assert has_checksum(path.read_bytes()) and load_checkpoint(path)["epoch"] == 2
