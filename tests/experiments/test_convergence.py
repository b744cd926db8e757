"""Training length and convergence (selected epoch, runs at the epoch cap) and the paired effect at every epoch."""

import json
import math

import numpy as np
import pytest

from pseudosl.experiments.convergence import (EPOCH_RULE, format_training, paired_by_epoch, selected_values,
                                              stopped_early, training_lengths)
from pseudosl.experiments.plots import plot_paired_by_epoch
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.train import SudokuExperiment
from pseudosl.experiments.summary import paired_comparisons
from pseudosl.experiments.warcraft.train import WarcraftExperiment
from tolerances import ATOL64_FEW_OPS

T975 = {1: 12.706204736, 2: 4.302652730}  # Student t quantiles 0.975 from tables (df 1, 2)


def _run(model, seed, val, test, **extra):
    """A run whose history evaluates validation (Exact ``val``) and test (every Sudoku metric ``test``) at epochs
    1, 2, ...; its final metrics are those of the epoch validation selects (strictly better wins)."""
    history = [{"epoch": i + 1, "train_loss": 1.0, "val_exact": v, "val_consistent": 0.0, "val_blank_acc": 0.0,
                "test_exact": t, "test_consistent": t, "test_blank_acc": t} for i, (v, t) in enumerate(zip(val, test))]
    best = max(range(len(val)), key=lambda i: (val[i], -i))
    return {"model": model, "seed": seed, "history": history, "epochs_trained": len(val),
            "selected_epoch": best + 1, "exact": test[best], "consistent": test[best], "blank_acc": test[best],
            **extra}


def test_selected_epoch_median_range_and_runs_at_the_cap():
    runs = [_run("rnn", 0, [1, 2, 3, 4, 5, 6], [0] * 6, stopped_early=False),        # trained to the cap (6)
            _run("rnn", 1, [1, 5, 4, 4], [0] * 4, stopped_early=True),
            _run("rnn", 2, [1, 2, 9, 3, 3], [0] * 5, stopped_early=True),
            _run("rnn_psl", 0, [1, 2, 3, 4, 5, 6], [0] * 6, stopped_early=True),     # the stop at the last epoch
            _run("rnn_psl", 1, [1, 2, 3], [0] * 3, stopped_early=False),              # interrupted (a checkpoint)
            {"model": "rnn|constrained", "seed": 0, "epochs_trained": 6, "selected_epoch": 6}]  # a decoder's row
    lengths = training_lengths(runs, 6)
    assert set(lengths) == {"rnn", "rnn_psl"}
    rnn = lengths["rnn"]
    assert rnn["selected_epoch"] == {"median": 3.0, "min": 2, "max": 6}
    assert rnn["epochs_trained"] == {"min": 4, "max": 6}
    assert (rnn["runs"], rnn["trained"], rnn["stopped"], rnn["at_cap"], rnn["interrupted"]) == (3, 3, 2, 1, 0)
    psl = lengths["rnn_psl"]
    assert psl["selected_epoch"] == {"median": 4.5, "min": 3, "max": 6}
    assert (psl["at_cap"], psl["interrupted"]) == (0, 1)
    text = format_training(SudokuExperiment(), lengths, 6, patience=2)
    lines = text.splitlines()
    assert lines[0] == ("Training length (at most 6 epochs, stop after 2 evaluations without a better validation "
                        "score); selected epoch: median (range) over seeds:")
    assert lines[1].split() == "RNN selected epoch 3 (2–6), trained 4–6 epochs, 1 of 3 at the cap".split()
    assert lines[2].split() == ("RNN + PSL selected epoch 4.5 (3–6), trained 3–6 epochs, 0 of 2 at the cap, "
                                "1 interrupted").split()
    assert lines[3] == ("1 of 5 runs reached the epoch cap (6) still improving (a better validation score within "
                        "the last 2 evaluations): not converged.")
    assert lines[4].startswith("1 of 5 runs ended before the cap without the patience stop (interrupted")
    fixed = format_training(SudokuExperiment(), lengths, 6, patience=None)
    assert fixed.splitlines()[-1] == ("Fixed budget of 6 epochs without early stopping (patience unset): the models "
                                      "are not known to be converged.") and "at the cap" not in fixed


def test_all_stopped_untrained_models_and_old_results():
    # results written before runs recorded stopped_early: a finished run shorter than the cap stopped early
    old = [_run("rnn", s, [1, 3, 2, 2], [0] * 4) for s in range(2)] + [_run("rnn_psl", 0, [1, 2, 3], [0] * 3)]
    assert [stopped_early(r, 4) for r in old] == [False, False, True]
    assert stopped_early({"model": "rnn", "seed": 0}, 4) is False
    old[0]["epochs_trained"] = old[1]["epochs_trained"] = 2
    lengths = training_lengths(old + [{"model": "gpt2", "seed": 0, "epochs_trained": 0, "selected_epoch": 0},
                                      {"model": "rnn", "seed": 7, "exact": 1.0}], 4)   # no length recorded: left out
    assert lengths["gpt2"] == {"runs": 1, "trained": 0, "stopped": 0, "at_cap": 0, "interrupted": 0,
                               "selected_epoch": None, "epochs_trained": None}
    assert lengths["rnn"]["runs"] == 2 and lengths["rnn"]["stopped"] == 2
    text = format_training(SudokuExperiment(), lengths, 4, patience=3)
    assert "gpt2  " in text and "not trained (evaluated as built)" in text
    assert text.splitlines()[-1] == ("Every trained run stopped by patience, before or at the cap (4): trained until "
                                     "validation stopped improving.")
    assert "selected epoch 3, trained 3 epochs" in text and "selected epoch 2 (every seed), trained 2 epochs" in text
    assert format_training(SudokuExperiment(), {}, 4, 3) == ""


def test_paired_by_epoch_is_the_t_interval_of_the_selected_checkpoints():
    """Three seeds, runs stopping at different epochs: at epoch e each run counts with the test value of its
    best-on-validation checkpoint up to e, and the last point is the final paired comparison."""
    exp, cfg = SudokuExperiment(), SudokuConfig(preset="t", n_val=8, epochs=5, patience=2)
    runs = [_run("rnn", 0, [1, 2, 3, 4, 5], [10, 20, 30, 40, 50]),
            _run("rnn", 1, [5, 4, 4], [11, 12, 13]),                       # stopped at 3, selected epoch 1
            _run("rnn", 2, [1, 3, 2, 2], [30, 31, 32, 33]),                # stopped at 4, selected epoch 2
            _run("rnn_psl", 0, [5, 1, 1], [15, 99, 99]),
            _run("rnn_psl", 1, [1, 2, 3, 4, 5], [20, 21, 22, 23, 24]),
            _run("rnn_psl", 2, [2, 2, 2], [40, 41, 42])]                   # a tie: the earlier epoch kept
    assert selected_values(exp, cfg, runs[2], "exact") == {1: 30.0, 2: 31.0, 3: 31.0, 4: 31.0}
    selected = {  # by hand: (rnn_psl, rnn) selected test values per seed at epochs 1..5
        1: [(15, 10), (20, 11), (40, 30)], 2: [(15, 20), (21, 11), (40, 31)], 3: [(15, 30), (22, 11), (40, 31)],
        4: [(15, 40), (23, 11), (40, 31)], 5: [(15, 50), (24, 11), (40, 31)]}
    curves = paired_by_epoch(exp, cfg, runs, ["rnn", "rnn_psl"])
    assert [(c["model"], c["base"], c["metric"]) for c in curves] == [("rnn_psl", "rnn", m)
                                                                       for m in exp.comparison_metrics]
    exact = curves[0]
    assert [p["epoch"] for p in exact["points"]] == [1, 2, 3, 4, 5] and not exact["lower_is_better"]
    for p in exact["points"]:
        d = np.array([a - b for a, b in selected[p["epoch"]]], dtype=float)
        half = T975[2] * d.std(ddof=1) / math.sqrt(3)
        assert p["n"] == 3 and p["mean"] == pytest.approx(d.mean(), abs=ATOL64_FEW_OPS)
        assert [p["lo"], p["hi"]] == pytest.approx([d.mean() - half, d.mean() + half], rel=1e-8)
    (final,) = [c for c in paired_comparisons(exp, runs, ["rnn", "rnn_psl"]) if c["metric"] == "exact"]
    assert exact["points"][-1]["mean"] == pytest.approx(final["mean"], abs=ATOL64_FEW_OPS)
    assert [exact["points"][-1]["lo"], exact["points"][-1]["hi"]] == pytest.approx(final["ci95"], rel=1e-8)


def test_paired_by_epoch_counts_seeds_with_values_and_marks_lower_is_better():
    """A NaN difference and a missing test value leave their seed out (n drops); one pair: no interval; an untrained
    base keeps its final value at every epoch; a lower-is-better metric says so."""
    exp = WarcraftExperiment()                                          # cost_ratio: lower is better, may be NaN
    cfg = exp.config_class(preset="t", epochs=3)

    def run(model, seed, ratios):
        h = [{"epoch": i + 1, "train_loss": 1.0, "test_exact": 0.0, "test_cost_ratio": r} for i, r in enumerate(ratios)]
        return {"model": model, "seed": seed, "history": h, "epochs_trained": len(h), "exact": 0.0,
                "cost_ratio": ratios[-1]}
    runs = [run("lstm", 0, [1.5, 1.4, 1.3]), run("lstm", 1, [1.6, math.nan, 1.2]),
            run("lstm_psl", 0, [1.2, 1.2, 1.1]), run("lstm_psl", 1, [1.3, 1.0])]   # no validation: the latest epoch
    (ratio,) = [c for c in paired_by_epoch(exp, cfg, runs, ["lstm", "lstm_psl"]) if c["metric"] == "cost_ratio"]
    assert ratio["lower_is_better"] and ratio["unit"] == "x"
    pts = {p["epoch"]: p for p in ratio["points"]}
    assert pts[1]["n"] == 2 and pts[1]["mean"] == pytest.approx(-0.3)
    assert pts[2]["n"] == 1 and pts[2]["mean"] == pytest.approx(-0.2) and math.isnan(pts[2]["lo"])  # NaN seed out
    assert pts[3]["n"] == 2 and pts[3]["mean"] == pytest.approx((-0.2 - 0.2) / 2)                  # 1.0 carried on
    untrained = {"model": "lstm", "seed": 0, "history": [], "epochs_trained": 0, "exact": 0.0, "cost_ratio": 2.0}
    (c,) = [c for c in paired_by_epoch(exp, cfg, [untrained, runs[2]], ["lstm", "lstm_psl"])
            if c["metric"] == "cost_ratio"]
    assert [(p["epoch"], p["n"]) for p in c["points"]] == [(1, 1), (2, 1), (3, 1)]
    assert [p["mean"] for p in c["points"]] == pytest.approx([-0.8, -0.8, -0.9])
    assert paired_by_epoch(exp, cfg, [dict(r, history=[]) for r in runs], ["lstm", "lstm_psl"]) == []


def test_the_figure_has_a_panel_per_metric_a_zero_line_and_the_better_sign(tmp_path, monkeypatch):
    from pseudosl.experiments import plots
    shown = []
    monkeypatch.setattr(plots.plt, "close", lambda fig: shown.append(fig))
    pts = [{"epoch": e, "mean": -0.1 * e, "lo": -0.2 * e, "hi": 0.0, "n": 3 if e < 3 else 2} for e in (1, 2, 3)]
    curves = [{"model": "lstm_psl", "base": "lstm", "metric": m, "unit": u, "lower_is_better": low, "points": pts}
              for m, u, low in (("exact", "%", False), ("cost_ratio", "x", True))]
    path = tmp_path / "paired_by_epoch.png"
    plot_paired_by_epoch(curves, path, labels={"lstm": "LSTM", "lstm_psl": "LSTM + PSL"}, title="w", rule=EPOCH_RULE)
    assert path.stat().st_size > 0
    (fig,) = shown
    assert [ax.get_title() for ax in fig.axes] == [
        "test exact, model − base\n(above 0: the model beats its base)",
        "test cost_ratio, model − base\n(below 0: the model beats its base; lower is better)"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["difference (points)", "difference (x)"]
    ax = fig.axes[0]
    assert any(list(line.get_ydata()) == [0.0, 0.0] for line in ax.get_lines())               # the zero line
    assert ax.get_legend().get_texts()[0].get_text() == "LSTM + PSL vs LSTM (n = 2–3 by epoch)"
    assert any("At epoch e each run counts" in t.get_text() for t in fig.texts)


TINY = ["--size", "4", "--n-missing", "6", "--n-train", "32", "--n-val", "16", "--n-test", "16", "--batch-size", "16",
        "--conv-channels", "4", "--conv-layers", "1", "--rnn-hidden", "8", "--rnn-layers", "1", "--threads", "1",
        "--jobs", "1", "--models", "rnn", "rnn_psl", "--seeds", "0", "1"]


def test_train_reports_training_length_and_the_effect_over_the_budget(tmp_path):
    """A tiny run with patience: table.txt says how long the runs trained; results.json holds the lengths and the
    paired differences per epoch, whose last point is the table's comparison; paired_by_epoch.png is written."""
    from pseudosl.cli import main as cli
    out = tmp_path / "o"
    cli(["sudoku", "train", "--quick", *TINY, "--epochs", "3", "--patience", "1", "--data-dir", str(tmp_path / "d"),
         "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    table = (out / "table.txt").read_text()
    assert "patience 1" in table.splitlines()[0]
    assert "Training length (at most 3 epochs, stop after 1 evaluation without" in table
    assert all(isinstance(r["stopped_early"], bool) for r in res["runs"])
    at_cap = sum(not r["stopped_early"] for r in res["runs"])
    assert sum(row["at_cap"] for row in res["training"]["rows"].values()) == at_cap
    assert (f"{at_cap} of 4 runs reached the epoch cap (3) still improving" in table) == (at_cap > 0)
    for r in res["runs"]:
        assert r["stopped_early"] or r["epochs_trained"] == 3
    assert res["paired_by_epoch"]["rule"] == EPOCH_RULE
    curves = {c["metric"]: c for c in res["paired_by_epoch"]["curves"]}
    (final,) = [c for c in res["comparisons"] if c["metric"] == "exact"]
    last = curves["exact"]["points"][-1]
    assert last["n"] == 2 and last["mean"] == pytest.approx(final["mean"], abs=1e-9)
    assert (out / "paired_by_epoch.png").stat().st_size > 0
    from pseudosl.experiments.harness import evaluate_checkpoints
    (again,) = evaluate_checkpoints(SudokuExperiment(), out)["tables"]   # eval reads the lengths from checkpoints
    assert again["training"] == res["training"]


def test_the_patience_reading_is_what_early_stopping_tests_and_last_reads_the_last_epoch(tmp_path):
    """One training to a common budget read two ways: ``test_checkpoint = last`` tests the model at the last epoch
    (the history's last test values; eval and the checkpoint agree), and ``patience_reading = P`` gives, run by run,
    the metrics, selected epoch and stop of a run trained with ``patience = P`` (the same seed and data)."""
    from pseudosl.cli import main as cli
    from pseudosl.experiments.harness import evaluate_checkpoints
    tiny = [*TINY, "--lr", "0.01", "--data-dir", str(tmp_path / "d")]
    cli(["sudoku", "train", "--quick", *tiny, "--epochs", "5", "--test-checkpoint", "last", "--patience-reading", "1",
         "--out", str(tmp_path / "budget")])
    cli(["sudoku", "train", "--quick", *tiny, "--epochs", "5", "--patience", "1", "--out", str(tmp_path / "stop")])
    budget = json.loads((tmp_path / "budget" / "results.json").read_text())
    stop = json.loads((tmp_path / "stop" / "results.json").read_text())
    exp = SudokuExperiment()
    for r in budget["runs"]:
        assert r["epochs_trained"] == r["selected_epoch"] == 5 and r["selected_on"] == ""
        assert [r[m] for m in exp.metrics] == [r["history"][-1][f"test_{m}"] for m in exp.metrics]
    read = budget["patience_reading"]
    assert read["patience"] == 1 and read["summary"] == stop["summary"]
    assert read["comparisons"] == stop["comparisons"] and read["training"] == stop["training"]["rows"]
    table = (tmp_path / "budget" / "table.txt").read_text()
    assert "Read under the patience rule instead (patience 1" in table
    assert "A common budget of 5 epochs for every row (test_checkpoint = last" in table
    assert "Still improving at the end of the budget? Test exact, per seed the mean over epochs 5–5" in table
    (again,) = evaluate_checkpoints(exp, tmp_path / "budget")["tables"]  # eval tests the last epoch's weights too
    assert {(r["model"], r["seed"]): r["exact"] for r in again["runs"]} == {
        (r["model"], r["seed"]): r["exact"] for r in budget["runs"]}


def test_a_common_budget_and_its_readings_refuse_contradictions():
    from pseudosl.experiments.config import ConfigError
    with pytest.raises(ConfigError, match="test_checkpoint = 'last' reads every run at the last of its 10 epochs, but "
                                          "patience = 3 ends runs early"):
        SudokuConfig(epochs=10, n_val=8, patience=3, test_checkpoint="last")
    with pytest.raises(ConfigError, match="patience_reading = 2 reads the validation history, but n_val = 0"):
        SudokuConfig(patience_reading=2)
    with pytest.raises(ConfigError, match="test_checkpoint = 'best': expected one of 'best_validation', 'last'"):
        SudokuConfig(test_checkpoint="best")
    a = SudokuConfig(n_val=8)
    assert SudokuConfig(n_val=8, test_checkpoint="last", patience_reading=4).content_key() == a.content_key()


def test_late_change_is_the_t_interval_of_the_last_window_minus_the_one_before():
    from pseudosl.experiments.convergence import format_late_change, late_change
    exp = SudokuExperiment()
    rising = [_run("rnn", s, [0] * 8, [10, 20, 30, 40, 50 + s, 60, 70, 80 + 2 * s]) for s in range(3)]
    flat = [_run("rnn_psl", s, [0] * 8, [50, 50, 50, 50, 50 + s, 50 - s, 50, 50]) for s in range(3)]
    c = late_change(rising, "rnn", "exact", 8, 2)
    d = np.array([(70 + 80 + 2 * s) / 2 - (50 + s + 60) / 2 for s in range(3)])
    half = T975[2] * d.std(ddof=1) / math.sqrt(3)
    assert c["n"] == 3 and c["mean"] == pytest.approx(d.mean()) and c["ci95"] == pytest.approx([d.mean() - half,
                                                                                                d.mean() + half])
    text = format_late_change(exp, rising + flat, ["rnn", "rnn_psl"], "exact", 8)
    assert "  RNN        +20.50 [" in text and "still improving" in text.splitlines()[1]
    assert "1 row(s) still improving beyond the interval at the end of the budget: RNN;" in text
    assert "Every row had stopped" in format_late_change(exp, flat, ["rnn_psl"], "exact", 8)
    assert late_change(rising, "rnn", "exact", 8, 5) is None  # no two full windows
