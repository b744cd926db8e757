"""Warcraft training: all four models end to end, exact --resume, the CLI, presets, the objectives."""

import json

import numpy as np
import pytest
import torch
from accelerate import Accelerator

import pseudosl
from pseudosl.cli import main as cli_main
from pseudosl.experiments.loop import train_run
from pseudosl.experiments.warcraft.config import PRESETS, WarcraftConfig, load_config, preset_path
from pseudosl.experiments.warcraft.data import generate
from pseudosl.experiments.warcraft.grid import mask_to_edges
from pseudosl.experiments.warcraft.models import CNNLSTM, EdgeResNet, ResNet18, build_model
from pseudosl.experiments.warcraft.train import Objective, WarcraftExperiment, path_circuit
from tolerances import ATOL64_FEW_OPS

EXP = WarcraftExperiment()
TINY = dict(grid=4, n_train=12, n_val=4, n_test=6, batch_size=6, psl_examples=2, width=0.0625, embed_dim=8,
            lstm_hidden=16, pos_dim=4, threads=1, jobs=1)


def _tiny(tmp_path, **kw) -> WarcraftConfig:
    base = dict(preset="test", seeds=[0], epochs=1, data_dir=str(tmp_path / "data"), out=str(tmp_path / "out"), **TINY)
    base.update(kw)
    return WarcraftConfig(**base)


def test_resnet18_shapes_and_width():
    net = ResNet18(width=1.0)
    assert sum(1 for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)) == 16
    assert net.out_dim == 512 and ResNet18(0.25).out_dim == 128
    with torch.no_grad():
        assert net(torch.zeros(2, 3, 96, 96)).shape == (2, 512)
    assert EdgeResNet(264, 0.125)(torch.zeros(2, 96, 96, 3, dtype=torch.uint8)).shape == (2, 264)
    with pytest.raises(ValueError, match="width must be > 0"):
        ResNet18(0.0)


def test_cnn_lstm_engine_gives_exact_conditionals():
    """The PSL's conditionals from the decoder engine equal brute-force renormalised joints."""
    torch.manual_seed(0)
    model = CNNLSTM(n_edges=4, width=0.0625, embed=8, hidden=8, pos_dim=3).double().eval()
    maps = torch.randint(0, 255, (2, 16, 16, 3), dtype=torch.uint8)
    y = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1]])
    with torch.no_grad():
        cond = model.engine(maps).local_conditionals(y)                        # (2, 4, 2)
        ctx, steps = model.conditioning(maps)
        for i in range(4):
            flips = y.clone()
            flips[:, i] = 1 - y[:, i]
            lj = torch.stack([model.decoder.log_joint(v, ctx, steps) for v in (y, flips)], -1)  # (2, 2)
            ref = torch.where(y[:, i:i + 1] == 0, lj, lj.flip(-1)).log_softmax(-1)           # values 0, 1
            assert torch.allclose(cond[:, i], ref, atol=ATOL64_FEW_OPS)


@pytest.mark.parametrize("name", ["resnet_sl", "lstm_psl"])
def test_constraint_objectives_train(tmp_path, name):
    cfg = _tiny(tmp_path)
    d, _, _ = generate(6, 4, seed=0)
    maps, edges = torch.from_numpy(d.maps), torch.from_numpy(mask_to_edges(d.paths)).long()
    torch.manual_seed(0)
    objective = Objective(build_model(name, cfg, 24), name, cfg, 4)
    opt = torch.optim.Adam(objective.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        torch.manual_seed(1)  # the same PSL sample each step, so the losses are comparable
        loss, parts = objective(maps, edges)
        assert ("sl" if name == "resnet_sl" else "psl") in parts and parts["data"] > 0
        weight = cfg.sl_weight if name == "resnet_sl" else cfg.psl_weight
        assert torch.isclose(loss.detach(), parts["data"] + parts["constraint"])             # the two summands
        assert torch.isclose(parts["constraint"], weight * parts["sl" if name == "resnet_sl" else "psl"])
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_semantic_loss_of_the_label_is_zero_for_a_point_mass():
    d, _, _ = generate(3, 4, seed=2)
    edges = torch.from_numpy(mask_to_edges(d.paths)).float()
    logits = (edges * 2 - 1) * 40.0                                         # a near point mass on each label
    assert pseudosl.semantic_loss(path_circuit(4), logits).item() < 1e-6
    assert pseudosl.semantic_loss(path_circuit(4), -logits).item() > 10      # all off: not a path


def test_all_models_end_to_end_and_resume(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["warcraft", "train", "--quick", "--epochs", "1", "--out", str(out), "--data-dir", str(tmp_path / "data"),
            "--seeds", "0"] + [x for k, v in TINY.items() for x in ("--" + k.replace("_", "-"), str(v))]
    cli_main(argv)
    res = json.loads((out / "results.json").read_text())
    assert set(res["summary"]) == {"resnet", "resnet_sl", "lstm", "lstm_psl"} and res["config"]["preset"] == "quick"
    for r in res["runs"]:
        assert 0 <= r["exact"] <= r["consistent"] <= 100 and r["epochs_trained"] == 1
    assert (out / "curves.png").stat().st_size > 0 and (out / "examples.png").stat().st_size > 0
    assert "CNN-LSTM + PSL" in (out / "table.txt").read_text()
    with pytest.raises(SystemExit):                                          # no silent replacement
        cli_main(argv)
    more = [a if a != "1" else "2" for a in argv[:5]] + argv[5:] + ["--resume"]
    capsys.readouterr()
    with pytest.raises(SystemExit):  # one model of four: the folder's results would lose the other three
        cli_main(more + ["--models", "lstm_psl"])
    assert "also holds the runs lstm-seed0, resnet-seed0, resnet_sl-seed0" in capsys.readouterr().err
    cli_main(more)
    ck = torch.load(out / "lstm_psl-seed0" / "checkpoint.pt", weights_only=False)
    assert ck["epoch"] == 2 and len(ck["history"]) == 2
    capsys.readouterr()
    cli_main(["warcraft", "eval", "--out", str(out)])
    assert "ResNet-18 + SL" in capsys.readouterr().out
    # pseudosl fidelity on the CNN-LSTM checkpoint (2^24 sequences: Monte-Carlo)
    cli_main(["fidelity", "--checkpoint", str(out / "lstm_psl-seed0" / "checkpoint.pt"), "--n-examples", "2",
              "--n-mc", "50", "--out", str(tmp_path / "fid")])
    fid = json.loads((tmp_path / "fid" / "fidelity.json").read_text())
    assert fid["method"] == "monte-carlo" and fid["length"] == 24 and fid["summary"]["entropy_local"]["mean"] >= 0
    with pytest.raises(SystemExit):                                          # the ResNet is not autoregressive
        cli_main(["fidelity", "--checkpoint", str(out / "resnet-seed0" / "checkpoint.pt"), "--out", str(tmp_path / "f2")])


def test_resume_is_exact(tmp_path):
    acc = Accelerator()
    splits = EXP.load_data(_tiny(tmp_path))
    train_run(EXP, _tiny(tmp_path, epochs=2), "lstm_psl", 0, splits, acc, tmp_path / "a")
    train_run(EXP, _tiny(tmp_path, epochs=1), "lstm_psl", 0, splits, acc, tmp_path / "b")
    train_run(EXP, _tiny(tmp_path, epochs=2), "lstm_psl", 0, splits, acc, tmp_path / "b", resume=True)
    a = torch.load(tmp_path / "a" / "lstm_psl-seed0" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "lstm_psl-seed0" / "checkpoint.pt", weights_only=False)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert json.dumps(a["history"]) == json.dumps(b["history"]) and "val_cost_ratio" in a["history"][0]


def test_presets_and_bad_config(tmp_path):
    names = sorted(p.stem for p in PRESETS.glob("*.toml"))
    assert {"quick", "paper"} <= set(names)
    for name in names:
        cfg = load_config(preset_path(name))
        assert cfg.preset == name and cfg.models == ["resnet", "resnet_sl", "lstm", "lstm_psl"]
        assert cfg.lr == (1e-3 if name == "cpu" else 5e-4)  # the cpu regime's, for every row, to converge in budget
    assert load_config(preset_path("cpu")).patience is not None
    paper = load_config(preset_path("paper"))
    assert (paper.grid, paper.n_train, paper.n_val, paper.n_test, paper.seeds) == (12, 10000, 1000, 1000, [0, 1, 2])
    assert paper.lstm_hidden == 512 and paper.embed_dim == 128 and paper.width == 1.0
    with pytest.raises(ValueError, match="data = 'kaggle'"):
        WarcraftConfig(data="kaggle")
    with pytest.raises(ValueError, match="grid = 1: must be >= 2"):
        WarcraftConfig(grid=1)
    with pytest.raises(ValueError, match="max_path_edges = 0: must be >= 1"):
        WarcraftConfig(max_path_edges=0)
    monotone = Objective(build_model("resnet_sl", _tiny(tmp_path), 24), "resnet_sl", _tiny(tmp_path, max_path_edges=6), 4)
    assert monotone.circuit is path_circuit(4, 6) and monotone.circuit is not path_circuit(4)
    with pytest.raises(ValueError, match="the train split has 12 maps, but n_train = 50"):
        d, _, _ = generate(12, 3, seed=0)
        from pseudosl.experiments.warcraft.data import save_layout
        save_layout(tmp_path / "real", {"train": d, "val": d, "test": d})
        EXP.load_data(WarcraftConfig(data=f"dir:{tmp_path / 'real'}", n_train=50))
    assert np.isclose(EXP.load_data(WarcraftConfig(data=f"dir:{tmp_path / 'real'}", n_train=12, n_val=12,
                                                   n_test=12)).test.optimum, _opt(d)).all()


def _opt(d):
    from pseudosl.experiments.warcraft.grid import shortest_paths
    return shortest_paths(d.weights)[1]


def test_the_own_sample_control_is_refused_where_the_model_has_no_prefix_nll(tmp_path):
    """The CNN-LSTM is autoregressive but does not score targets after a prefix: ``loss = 'own'`` is refused when the
    objective is built, naming the method to implement, not at the first training step."""
    from pseudosl.experiments.objective import ConstrainedObjective, ConstraintTerm
    model = build_model("lstm", _tiny(tmp_path), 24)
    assert model.autoregressive
    with pytest.raises(ValueError, match=r"loss = 'own'.*CNNLSTM does not implement.*prefix_nll"):
        ConstrainedObjective(model, ConstraintTerm("own", 0.1))
