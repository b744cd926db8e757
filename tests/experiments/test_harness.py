"""The shared harness and the typed config: named errors before any work, run folders, resume, eval."""

import json
import re

import numpy as np
import pytest
import torch

from pseudosl.cli import main as cli_main
from pseudosl.experiments.checkpoints import checkpoint_bytes
from pseudosl.experiments.config import ConfigError, load_config
from pseudosl.experiments.checkpoints import CheckpointError, load_checkpoint
from pseudosl.experiments.harness import evaluate_checkpoints
from pseudosl.experiments.runs import run_folder
from pseudosl.experiments.sudoku.config import SudokuConfig, preset_path
from pseudosl.experiments.sudoku.train import SudokuExperiment

TINY = ["--n-train", "16", "--n-val", "8", "--n-test", "8", "--epochs", "1", "--conv-channels", "4", "--conv-layers", "1",
        "--seeds", "0", "--jobs", "1"]


@pytest.mark.parametrize("toml, message", [
    ('lr = "0.001"', r"lr = '0.001': expected a number"),
    ('epochs = "three"', r"epochs = 'three': expected an integer"),
    ("epochs = true", r"epochs = True: expected an integer"),
    ("seeds = 0", r"seeds = 0: expected a list of integers"),
    ('sl_weight = "0.1"', r"sl_weight = '0.1': expected a number"),
    ('models = "convnet"', r"models = 'convnet': expected a list of strings"),
    ('satnet_dist = "false"', r"satnet_dist = 'false': expected true or false"),
    ("epochs = 0", r"epochs = 0: must be >= 1"),
    ("rnn_dropout = 1.5", r"rnn_dropout = 1.5: must be <= 0.99"),
    ("seeds = [0, 0]", r"repeats a seed"),
    ("seeds = [-1]", r"seeds\[0\] = -1: must be >= 0"),
    ('models = ["mlp"]', r"models: unknown \['mlp'\]"),
    ('data = "kaggle"', r"data = 'kaggle': expected 'generate'"),
    ("sl_weight = nan", r"sl_weight = nan: expected a finite number"),
    ("epochs = 3\nconstraint_start_epoch = 5", r"constraint_start_epoch = 5 is past the last epoch"),
    ('models = ["rnn_psl@psl_weigth=0.1"]', r"'psl_weigth' is not a config field"),
    ('models = ["rnn_psl@psl_weight=-1"]', r"rnn_psl@psl_weight=-1.*psl_weight = -1.0: must be >= 0"),
    ('models = ["rnn_psl@epochs=3"]', r"cannot vary per model"),
    ('models = ["rnn_psl@psl_weight"]', r"expected name@field=value"),
    ('models = ["rnn", "rnn"]', r"repeats a model"),
])
def test_bad_toml_values_are_named(tmp_path, toml, message):
    (tmp_path / "c.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError, match=message) as e:
        load_config(SudokuConfig, tmp_path / "c.toml")
    assert "c.toml" in str(e.value)


def test_good_values_are_normalised():
    cfg = SudokuConfig(lr=1, seeds=(3, 4))
    assert isinstance(cfg.lr, float) and cfg.seeds == [3, 4] and cfg.models == list(SudokuConfig.MODELS)


@pytest.mark.parametrize("flags, message", [
    (["--sl-weight", "nan"], "--sl-weight: sl_weight = nan: expected a finite number"),
    (["--threads", "0"], "--threads: threads = 0: must be >= 1"),
    (["--epochs", "2", "--constraint-start-epoch", "3"], "past the last epoch"),
    (["--models", "convnet", "mlp"], r"unknown \['mlp'\]"),
])
def test_bad_flags_fail_before_any_data_is_made(tmp_path, capsys, flags, message):
    data = tmp_path / "data"
    with pytest.raises(SystemExit) as e:
        cli_main(["sudoku", "train", "--quick", "--data-dir", str(data), "--out", str(tmp_path / "o"), *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "pseudosl: error:" in err and pytest.importorskip("re").search(message, err), err
    assert not data.exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags", [["--epochs", "\u0663"], ["--epochs", "1_0"], ["--seeds", "0", "\u0661"],
                                   ["--jobs", "+1"]])
def test_int_flags_take_ascii_digits_only(tmp_path, capsys, flags):
    """``int()`` reads Arabic-Indic digits and ``1_0``: argparse then ran 3 epochs for ``--epochs \u0663``."""
    with pytest.raises(SystemExit) as e:
        cli_main(["sudoku", "train", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o"), *flags])
    assert e.value.code == 2
    assert f"argument {flags[0]}: invalid int value: {flags[-1]!r}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_numpy_ints_are_config_ints():
    cfg = load_config(SudokuConfig, preset_path("quick"), epochs=np.int64(2))
    assert cfg.epochs == 2 and type(cfg.epochs) is int
    with pytest.raises(ConfigError, match="epochs = np.float64\\(2.0\\): expected an integer"):
        load_config(SudokuConfig, preset_path("quick"), epochs=np.float64(2))


def test_presets_get_their_own_folders(monkeypatch, tmp_path):
    exp = SudokuExperiment()
    quick, paper = (load_config(SudokuConfig, preset_path(p)) for p in ("quick", "paper"))
    a, b = run_folder(exp, quick), run_folder(exp, paper)
    assert a.parts[:2] == b.parts[:2] == ("runs", "sudoku") and a != b
    assert a.name.startswith("quick-") and b.name.startswith("paper-")
    # fields that do not change what is computed keep the folder (so --resume finds it)
    more = load_config(SudokuConfig, preset_path("quick"), epochs=9, seeds=[5], threads=2)
    assert run_folder(exp, more) == a
    assert run_folder(exp, load_config(SudokuConfig, preset_path("quick"), lr=1e-3)) != a


def test_overwrite_resume_and_eval_grouping(tmp_path, capsys):
    out = tmp_path / "runs"
    base = ["sudoku", "train", "--quick", "--models", "convnet", "--data-dir", str(tmp_path / "d"), *TINY]
    with pytest.raises(SystemExit):  # nothing to resume yet
        cli_main([*base, "--out", str(out / "a"), "--resume"])
    assert "nothing to resume" in capsys.readouterr().err
    cli_main([*base, "--out", str(out / "a")])
    with pytest.raises(SystemExit):  # refuses to replace the checkpoint
        cli_main([*base, "--out", str(out / "a")])
    assert "--resume to continue them, --overwrite to replace them" in capsys.readouterr().err
    cli_main([*base, "--out", str(out / "a"), "--overwrite"])
    cli_main([*base, "--out", str(out / "a"), "--resume", "--epochs", "2"])
    assert load_checkpoint(out / "a" / "convnet-seed0" / "checkpoint.pt")["epoch"] == 2
    cli_main([*base, "--out", str(out / "b"), "--lr", "0.001", "--seeds", "0", "1"])
    capsys.readouterr()
    res = evaluate_checkpoints(SudokuExperiment(), out)
    assert len(res["tables"]) == 2  # two configs: never averaged into one row
    assert sorted(len(t["runs"]) for t in res["tables"]) == [1, 2]
    assert json.loads((out / "b" / "results.json").read_text())["summary"]["convnet"]["seeds"] == [0, 1]


def test_bad_checkpoints_are_named(tmp_path, capsys):
    path = tmp_path / "convnet-seed0" / "checkpoint.pt"
    path.parent.mkdir()
    path.write_bytes(b"\x80\x02garbage")
    with pytest.raises(CheckpointError, match="checkpoint.pt: damaged checkpoint: it ends neither with a checksum"):
        load_checkpoint(path)
    torch.save({"model": {}}, path)  # a complete archive without a checksum (older code): read, then refused
    with pytest.raises(CheckpointError, match="not a pseudosl checkpoint"), pytest.warns(UserWarning):
        load_checkpoint(path)
    path.write_bytes(checkpoint_bytes([1, 2]))  # intact, but not a checkpoint's dict
    with pytest.raises(CheckpointError, match="not a pseudosl checkpoint"):
        load_checkpoint(path)
    path.write_bytes(checkpoint_bytes({"model": {}}, checksum=False)[:-30] + checkpoint_bytes({"model": {}})[-95:])
    with pytest.raises(CheckpointError, match="damaged checkpoint: its bytes have SHA-256"):
        load_checkpoint(path)
    path.write_bytes(checkpoint_bytes({"model": {}}))
    with pytest.raises(SystemExit):
        cli_main(["sudoku", "train", "--quick", "--models", "convnet", "--out", str(tmp_path), "--resume", *TINY,
                  "--data-dir", str(tmp_path / "d")])
    assert f"{path}: not a pseudosl checkpoint" in capsys.readouterr().err


def test_parallel_jobs_give_the_same_runs(tmp_path):
    """Runs in worker processes (--jobs) are the runs of the serial loop: same weights, same history."""
    from pseudosl.experiments.harness import train
    exp = SudokuExperiment()
    kw = dict(preset="test", models=["convnet", "rnn"], seeds=[0], n_train=16, n_test=8, epochs=1, batch_size=8,
              conv_channels=4, conv_layers=1, rnn_hidden=8, rnn_layers=1, data_dir=str(tmp_path / "d"), threads=1)
    train(exp, SudokuConfig(**kw, out=str(tmp_path / "serial")))
    train(exp, SudokuConfig(**kw, out=str(tmp_path / "parallel"), jobs=2))
    for name in ("convnet", "rnn"):
        a, b = (load_checkpoint(tmp_path / d / f"{name}-seed0" / "checkpoint.pt") for d in ("serial", "parallel"))
        assert a["history"][0]["train_loss"] == b["history"][0]["train_loss"]
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_report_blocks_are_replaced_in_place():
    from pseudosl.reproduce import replace_section
    text = "# R\nintro\n<!-- BEGIN quick:a -->\nold\n<!-- END quick:a -->\noutro\n"
    new = replace_section(text, "quick:a", "new table")
    assert new == "# R\nintro\n<!-- BEGIN quick:a -->\nnew table\n<!-- END quick:a -->\noutro\n"
    added = replace_section(new, "quick:b", "b")
    assert added.endswith("<!-- BEGIN quick:b -->\nb\n<!-- END quick:b -->\n") and "new table" in added


@pytest.mark.parametrize("text, named", [
    ("# R\n<!-- BEGIN quick:a -->\nold table\nmy notes, written by hand\n", "<!-- BEGIN quick:a --> has no <!-- END"),
    ("# R\nnotes\n<!-- END quick:a -->\n", "<!-- END quick:a --> has no <!-- BEGIN"),
    ("<!-- END quick:a -->\nnotes\n<!-- BEGIN quick:a -->\n", "comes before"),
    ("<!-- BEGIN quick:a -->\n1\n<!-- END quick:a -->\n<!-- BEGIN quick:a -->\nnotes\n", "appears 2 times")])
def test_report_markers_that_would_lose_text_are_refused(text, named):
    from pseudosl.reproduce import ReportError, replace_section
    with pytest.raises(ReportError, match=re.escape(named)) as e:
        replace_section(text, "quick:a", "new table", "docs/r.md")
    assert "docs/r.md" in str(e.value) and "'quick:a'" in str(e.value)
    assert replace_section(text, "quick:b", "b").startswith(text.rstrip("\n"))  # other blocks are not concerned


def test_reproduce_refuses_a_lost_end_marker_before_anything_trains_or_is_written(tmp_path, monkeypatch, capsys):
    """A report whose BEGIN marker lost its END: refused by name, the report unchanged, no run started."""
    import pseudosl.experiments.sudoku.train as sudoku_train
    monkeypatch.setattr(sudoku_train.SudokuExperiment, "load_data",
                        lambda *a: (_ for _ in ()).throw(AssertionError("trained before the refusal")))
    report = tmp_path / "docs" / "reproduction.md"
    report.parent.mkdir()
    text = "# Report\n<!-- BEGIN quick:sudoku -->\nold\nhand-written analysis after the block\n"
    report.write_text(text)
    with pytest.raises(SystemExit) as e:
        cli_main(["reproduce", "--quick", "--only", "sudoku", "--report", str(report), "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "<!-- BEGIN quick:sudoku --> has no <!-- END quick:sudoku -->" in err
    assert str(report) in err and "Traceback" not in err
    assert report.read_text() == text and not (tmp_path / "runs").exists()


def test_reproduce_quick_writes_the_report(tmp_path, monkeypatch):
    """The reproduce command on a tiny quick preset: trains, then fills the marked block of the report."""
    import pseudosl.experiments.sudoku.train as sudoku_train
    from pseudosl.cli import main as cli
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "quick.toml").write_text('preset = "quick"\nmodels = ["convnet", "rnn"]\nseeds = [0]\nn_train = 16\n'
                                        'n_test = 8\nepochs = 1\nconv_channels = 4\nconv_layers = 1\n'
                                        'rnn_hidden = 8\nrnn_layers = 1\n'
                                        f'data_dir = "{tmp_path / "d"}"\n')
    monkeypatch.setattr(sudoku_train.SudokuExperiment, "presets", presets)
    report = tmp_path / "docs" / "reproduction.md"
    report.parent.mkdir()
    report.write_text("# Report\nprose\n<!-- BEGIN quick:sudoku -->\n<!-- END quick:sudoku -->\nmore prose\n")
    cli(["reproduce", "--quick", "--only", "sudoku", "fidelity", "--report", str(report), "--runs", str(tmp_path / "runs")])
    text = report.read_text()
    assert "<!-- BEGIN quick:fidelity -->" in text and "KL(p~_y || p)" in text and "pseudosl fidelity --checkpoint" in text
    assert (report.parent / "figures" / "fidelity-quick-sudoku-rnn.png").stat().st_size > 0
    assert "ConvNet" in text and "prose\n" in text and "more prose" in text
    assert "pseudosl sudoku train --preset quick" in text
    assert (report.parent / "figures" / "sudoku-quick-curves.png").stat().st_size > 0


def test_model_variants_train_with_their_overrides(tmp_path, monkeypatch, capsys):
    """"name@field=value" trains the base model with the override: its own row, folder and label."""
    seen = []
    original = SudokuExperiment.objective
    monkeypatch.setattr(SudokuExperiment, "objective",
                        lambda self, model, name, cfg: seen.append((name, cfg.sl_weight)) or original(self, model, name, cfg))
    out = tmp_path / "runs"
    cli_main(["sudoku", "train", "--quick", "--models", "convnet_sl", "convnet_sl@sl_weight=0.5", "--data-dir",
              str(tmp_path / "d"), "--out", str(out), "--sl-weight", "0.05", *TINY])
    assert seen == [("convnet_sl", 0.05), ("convnet_sl", 0.5)]
    result = json.loads((out / "results.json").read_text())
    assert set(result["summary"]) == {"convnet_sl", "convnet_sl@sl_weight=0.5"}
    assert "ConvNet + SL (sl_weight=0.5)" in (out / "table.txt").read_text()
    ckpt = load_checkpoint(out / "convnet_sl@sl_weight=0.5-seed0" / "checkpoint.pt")
    assert ckpt["config"]["sl_weight"] == 0.05 and ckpt["model_name"] == "convnet_sl@sl_weight=0.5"
    capsys.readouterr()
    (table,) = evaluate_checkpoints(SudokuExperiment(), out)["tables"]
    assert sorted(r["model"] for r in table["runs"]) == ["convnet_sl", "convnet_sl@sl_weight=0.5"]


def test_units_and_lower_is_better_metrics(tmp_path):
    """Selection negates lower-is-better metrics and ranks NaN last; tables, summaries and curves show units."""
    import math

    from pseudosl.experiments.summary import format_table, selection_score, summarize
    from pseudosl.experiments.plots import plot_curves
    from pseudosl.experiments.warcraft.train import WarcraftExperiment

    exp = WarcraftExperiment()                          # metrics exact, consistent, cost_ratio (lower is better), edge_f1
    a = selection_score(exp, {"exact": 10.0, "consistent": 20.0, "cost_ratio": 1.05, "edge_f1": 1.0})
    b = selection_score(exp, {"exact": 10.0, "consistent": 20.0, "cost_ratio": 1.20, "edge_f1": 2.0})
    c = selection_score(exp, {"exact": 10.0, "consistent": 20.0, "cost_ratio": float("nan"), "edge_f1": 3.0})
    assert a > b > c and selection_score(exp, {"exact": 11.0, "consistent": 0.0, "cost_ratio": math.nan,
                                               "edge_f1": 0.0}) > a
    runs = [{"model": "resnet", "seed": s, "exact": e, "consistent": e, "cost_ratio": r, "edge_f1": e,
             "history": [{"epoch": 1, "train_loss": 1.0, "test_exact": e, "test_cost_ratio": r}]}
            for s, (e, r) in enumerate([(0.0, math.nan), (10.0, 1.2), (20.0, 1.4)])]
    row = summarize(runs, exp.metrics, ["resnet"])["resnet"]
    assert row["exact_mean"] == 10.0 and row["cost_ratio_mean"] == pytest.approx(1.3)   # NaN seed left out
    assert row["cost_ratio_std"] == pytest.approx(math.sqrt(0.02))
    assert math.isnan(summarize(runs[:1], exp.metrics, ["resnet"])["resnet"]["cost_ratio_mean"])
    table = format_table(exp, {"resnet": row}, "t")
    assert "cost_ratio x" in table and "exact %" in table
    plot_curves(runs, exp.metrics, tmp_path / "c.png", units=exp.units)      # NaN points are gaps, no error
    assert (tmp_path / "c.png").stat().st_size > 0


def test_reproduce_writes_under_runs_unless_asked_to_write_the_docs(tmp_path, monkeypatch):
    """`pseudosl reproduce` leaves the tracked docs alone: its report is a copy under --runs; --write-docs
    updates docs/<document> (results.md for the cpu presets); an experiment without the preset is skipped."""
    import pseudosl.experiments.sudoku.train as sudoku_train
    import pseudosl.experiments.warcraft.train as warcraft_train
    from pseudosl.cli import main as cli
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "cpu.toml").write_text('preset = "cpu"\nmodels = ["convnet", "convnet_sl"]\nseeds = [0, 1]\nsize = 4\n'
                                      'n_missing = 6\nn_train = 16\nn_val = 8\nn_test = 8\nepochs = 2\npatience = 1\n'
                                      'conv_channels = 4\n'
                                      f'conv_layers = 1\nnote = "the cpu note"\ndata_dir = "{tmp_path / "d"}"\n')
    monkeypatch.setattr(sudoku_train.SudokuExperiment, "presets", presets)
    monkeypatch.setattr(warcraft_train.WarcraftExperiment, "presets", tmp_path / "none")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    tracked = "# Results\nprose\n<!-- BEGIN cpu:sudoku -->\nSTALE BLOCK\n<!-- END cpu:sudoku -->\n"
    (tmp_path / "docs" / "results.md").write_text(tracked)
    cli(["reproduce", "--cpu", "--only", "sudoku", "warcraft"])
    assert (tmp_path / "docs" / "results.md").read_text() == tracked
    copy = (tmp_path / "runs" / "reproduce" / "results.md").read_text()
    assert copy.startswith("# Results\nprose\n") and "STALE BLOCK" not in copy and "the cpu note" in copy
    assert "ConvNet + SL vs ConvNet  " in copy and "pseudosl sudoku train --preset cpu" in copy
    assert "Time per run, wall / CPU (training epochs): ConvNet" in copy and "cpu:warcraft" not in copy
    assert "up to 2 epochs, patience 1" in copy and "Training length (at most 2 epochs" in copy
    assert "![sudoku paired_by_epoch](figures/sudoku-cpu-paired_by_epoch.png)" in copy
    cli(["reproduce", "--cpu", "--only", "sudoku", "--write-docs"])
    written = (tmp_path / "docs" / "results.md").read_text()
    assert "STALE BLOCK" not in written and "ConvNet + SL vs ConvNet" in written
    assert (tmp_path / "docs" / "figures" / "sudoku-cpu-curves.png").stat().st_size > 0
    assert (tmp_path / "docs" / "figures" / "sudoku-cpu-paired_by_epoch.png").stat().st_size > 0
    # --resume continues the runs: finished checkpoints are re-tested, not retrained (nor rewritten)
    ckpts = sorted((tmp_path / "runs" / "reproduce" / "cpu" / "sudoku").glob("*/checkpoint.pt"))
    stamps = [c.stat().st_mtime_ns for c in ckpts]
    (tmp_path / "docs" / "results.md").write_text(tracked)
    cli(["reproduce", "--cpu", "--only", "sudoku", "--write-docs", "--resume"])
    assert len(ckpts) == 4 and [c.stat().st_mtime_ns for c in ckpts] == stamps
    assert "ConvNet + SL vs ConvNet" in (tmp_path / "docs" / "results.md").read_text()
    assert re.search(r"wall time [0-9.]+ min in 2 calls \(resumed: [0-9.]+ \+ [0-9.]+ min\)",
                     (tmp_path / "docs" / "results.md").read_text())


def test_a_paper_shaped_block_keeps_the_comparisons_and_the_bar_chart(tmp_path):
    """An experiment with its own paper-shaped table (detox): the block shows it, then the paired comparisons, the
    selection and the note (results.json's findings), and its comparison.png beside the curves."""
    from types import SimpleNamespace

    from pseudosl.reproduce import experiment_section
    out = tmp_path / "run"
    out.mkdir()
    (out / "table_paper.md").write_text("| Model | x |\n|---|---|\n| A | 1 |\n")
    (out / "table.txt").write_text("the plain table\n\nthe findings")
    for kind in ("comparison", "curves"):
        (out / f"{kind}.png").write_bytes(b"png")
    result = {"out": str(out), "content_key": "abcd1234", "wall_s": 60.0, "findings": "Paired by seed: lines\n\nnote",
              "machine": {"device": "cpu", "torch": "2", "threads": 1}, "runs": [{"model": "rnn", "wall_s": 1.0,
                                                                                   "cpu_s": 1.0}]}
    cfg = SimpleNamespace(preset="cpu", seeds=[0], epochs=1, jobs=1, patience=None, patience_reading=None)
    text = experiment_section(SudokuExperiment(), cfg, result, "pseudosl sudoku train", tmp_path / "figs", "figures")
    assert "| A | 1 |" in text and "```\nPaired by seed: lines\n\nnote\n```" in text and "the plain table" not in text
    assert text.index("sudoku-cpu-comparison.png") < text.index("sudoku-cpu-curves.png")
    assert (tmp_path / "figs" / "sudoku-cpu-comparison.png").read_bytes() == b"png"


def test_reproduce_real_writes_its_block_into_results(tmp_path, monkeypatch, capsys):
    """`reproduce --real`: the experiments' real-model presets (detox on SmolLM2 in the package), blocks
    ``real:<name>`` in results.md; an experiment without one is skipped, saying so."""
    import pseudosl.experiments.sudoku.train as sudoku_train
    import pseudosl.experiments.warcraft.train as warcraft_train
    from pseudosl.cli import main as cli
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "real.toml").write_text('preset = "real"\nmodels = ["convnet"]\nseeds = [0]\nsize = 4\nn_missing = 6\n'
                                       'n_train = 16\nn_val = 8\nn_test = 8\nepochs = 1\nconv_channels = 4\n'
                                       f'conv_layers = 1\ndata_dir = "{tmp_path / "d"}"\n')
    monkeypatch.setattr(sudoku_train.SudokuExperiment, "presets", presets)
    monkeypatch.setattr(warcraft_train.WarcraftExperiment, "presets", tmp_path / "none")
    monkeypatch.chdir(tmp_path)
    cli(["reproduce", "--real", "--only", "sudoku", "warcraft"])
    assert "warcraft: no real preset; skipped" in capsys.readouterr().out
    text = (tmp_path / "runs" / "reproduce" / "results.md").read_text()
    assert "<!-- BEGIN real:sudoku -->" in text and "pseudosl sudoku train --preset real" in text
