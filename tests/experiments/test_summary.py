"""Tables and statistics of the harness: paired comparisons with t intervals, counts, selection, notes, decoders."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from pseudosl.experiments.statistics import student_t_quantile
from pseudosl.experiments.summary import (VERDICTS, format_comparisons, format_table, paired_comparisons,
                                          selection_reason, summarize, verdict)
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.train import SudokuExperiment
from pseudosl.experiments.warcraft.train import WarcraftExperiment
from tolerances import RTOL32


@pytest.mark.parametrize("df, q", [(1, 12.706204736), (2, 4.302652730), (4, 2.776445105), (9, 2.262157163),
                                   (29, 2.045229642), (1000, 1.962339081)])
def test_t_quantile_matches_tables(df, q):
    assert student_t_quantile(0.975, df) == pytest.approx(q, rel=1e-8)
    assert student_t_quantile(0.025, df) == pytest.approx(-q, rel=1e-8)


def test_t_quantile_refuses_bad_arguments():
    with pytest.raises(ValueError, match="df must be >= 1, got 0"):
        student_t_quantile(0.975, 0)
    for bad in (2.0, True):  # the one int check: no bools, no floats
        with pytest.raises(TypeError, match="df must be an int"):
            student_t_quantile(0.975, bad)
    assert student_t_quantile(0.975, np.int64(3)) == student_t_quantile(0.975, 3)
    with pytest.raises(ValueError, match="p = 1"):
        student_t_quantile(1, 3)


def _runs(rows: dict[str, list[float]], metric: str = "exact") -> list[dict]:
    return [{"model": m, "seed": s, metric: v, "consistent": v, "blank_acc": v}
            for m, vals in rows.items() for s, v in enumerate(vals)]


def test_paired_comparison_is_the_t_interval_of_per_seed_differences():
    exp = SudokuExperiment()                                          # baselines: convnet_sl -> convnet, rnn_psl -> rnn
    base = [20.0, 30.0, 25.0, 40.0, 35.0]
    runs = _runs({"rnn": base, "rnn_psl": [b + d for b, d in zip(base, [3.0, 5.0, 4.0, 6.0, 2.0])],
                  "convnet": base, "convnet_sl": [b + d for b, d in zip(base, [1.0, -2.0, 0.5, -1.0, 3.0])]})
    comps = paired_comparisons(exp, runs, ["convnet", "convnet_sl", "rnn", "rnn_psl"])
    assert {(c["model"], c["base"]) for c in comps} == {("convnet_sl", "convnet"), ("rnn_psl", "rnn")}
    psl = next(c for c in comps if c["model"] == "rnn_psl" and c["metric"] == "exact")
    d = np.array([3.0, 5.0, 4.0, 6.0, 2.0])
    half = 2.776445105 * d.std(ddof=1) / math.sqrt(5)                # t_{0.975, 4}
    assert psl["n"] == 5 and psl["mean"] == pytest.approx(4.0) and psl["ci95"] == pytest.approx([4 - half, 4 + half])
    assert psl["verdict"] == VERDICTS[0]                             # the interval (2.04, 5.96) excludes 0
    sl = next(c for c in comps if c["model"] == "convnet_sl" and c["metric"] == "exact")
    assert sl["verdict"] == VERDICTS[1]                              # straddles 0
    # the base better on every seed: worse beyond the interval
    worse = paired_comparisons(exp, _runs({"rnn": [10, 12, 11], "rnn_psl": [5, 6, 6]}), ["rnn", "rnn_psl"])
    assert worse[0]["verdict"] == VERDICTS[2]
    text = format_comparisons(exp, comps)
    line = next(t for t in text.splitlines() if t.startswith("RNN + PSL vs RNN "))
    assert line.split()[5:] == ["5", "+4.00", "[+2.04,", "+5.96]", "better", "+4.00", "[+2.04,", "+5.96]",
                                "better"], line   # Exact and blank accuracy (Consistent is Exact on unique puzzles)
    assert text.splitlines()[2].split()[:5] == ["Comparison", "seeds", "exact", "(points)", "blank_acc"]
    assert psl["p"] == pytest.approx(0.004813, abs=1e-6)              # t = 4 / (1.581 / sqrt 5) = 5.66, 4 df
    assert "n.d." in next(t for t in text.splitlines() if t.startswith("ConvNet + SL vs ConvNet "))


def test_pairing_uses_common_seeds_and_defined_values_only():
    exp = WarcraftExperiment()                                        # cost_ratio is lower-is-better, may be NaN
    runs = [{"model": m, "seed": s, "exact": 0.0, "consistent": 0.0, "edge_f1": 0.0, "cost_ratio": r}
            for m, rs in {"lstm": [1.2, math.nan, 1.4, 1.3], "lstm_psl": [1.1, 1.0, 1.2, 1.1, 9.9]}.items()
            for s, r in enumerate(rs)]
    (c,) = [c for c in paired_comparisons(exp, runs, ["lstm", "lstm_psl"]) if c["metric"] == "cost_ratio"]
    assert c["seeds"] == [0, 2, 3] and c["differences"] == pytest.approx([-0.1, -0.2, -0.2])
    assert c["verdict"] == VERDICTS[0]                               # lower cost ratio on every paired seed
    one = paired_comparisons(exp, runs[:1] + runs[4:5], ["lstm", "lstm_psl"])
    assert all(math.isnan(x["ci95"][0]) and x["verdict"] == VERDICTS[1] for x in one)
    line = format_comparisons(exp, one).splitlines()[3]
    assert "[" not in line and " n.d." in line and line.split()[5] == "1", line  # one paired seed: no interval
    three = format_comparisons(exp, [c for c in paired_comparisons(exp, runs, ["lstm", "lstm_psl"])])
    assert "(n=3)" in three and "cost_ratio: lower is better" in three
    assert verdict(-0.3, -0.1, lower_is_better=True) == VERDICTS[0] == verdict(0.1, 0.3)
    assert verdict(0.1, 0.3, lower_is_better=True) == VERDICTS[2] == verdict(-0.3, -0.1)


def test_variants_and_decoded_rows_find_their_base():
    exp = SudokuExperiment()
    exp.decoders = {"constrained": "constrained"}
    rows = ["rnn", "rnn_psl@psl_weight=0.01", "rnn|constrained", "rnn_psl@psl_weight=0.01|constrained"]
    runs = _runs({r: [1.0, 2.0] for r in rows})
    pairs = {(c["model"], c["base"]) for c in paired_comparisons(exp, runs, rows)}
    assert pairs == {("rnn_psl@psl_weight=0.01", "rnn"), ("rnn|constrained", "rnn"),
                     ("rnn_psl@psl_weight=0.01|constrained", "rnn|constrained"),
                     ("rnn_psl@psl_weight=0.01|constrained", "rnn_psl@psl_weight=0.01")}


def test_tables_count_defined_seeds_and_never_print_nan():
    exp = WarcraftExperiment()
    runs = [{"model": "resnet", "seed": s, "exact": 1.0, "consistent": 1.0, "edge_f1": 5.0, "cost_ratio": r}
            for s, r in enumerate([math.nan, 1.2, 1.4])]
    runs += [{"model": "lstm", "seed": s, "exact": 0.0, "consistent": 0.0, "edge_f1": 5.0, "cost_ratio": math.nan}
             for s in range(3)]
    summary = summarize(runs, exp.metrics, ["resnet", "lstm"])
    assert summary["resnet"]["cost_ratio_n"] == 2 and summary["lstm"]["cost_ratio_n"] == 0
    table = format_table(exp, summary, "t")
    assert "nan" not in table and "1.30 ± 0.14 (2/3)" in table and "– (0/3)" in table


def test_selection_reason_names_the_metric_that_decided():
    exp, cfg = SudokuExperiment(), SudokuConfig(preset="t")
    h = [{"epoch": 1, "val_exact": 0.0, "val_consistent": 0.0, "val_blank_acc": 40.0},
         {"epoch": 2, "val_exact": 0.0, "val_consistent": 0.0, "val_blank_acc": 55.0},
         {"epoch": 3, "val_exact": 0.0, "val_consistent": 0.0, "val_blank_acc": 50.0}]
    assert selection_reason(exp, cfg, h, 2) == "blank_acc"           # Exact tied at 0: the finer metric chose
    h[1]["val_exact"] = 1.0
    assert selection_reason(exp, cfg, h, 2) == "exact"
    assert selection_reason(exp, cfg, h[:1], 1) == "single evaluation"
    assert selection_reason(exp, cfg, [dict(h[0], epoch=1), dict(h[0], epoch=2)], 1) == "tie"
    assert selection_reason(exp, cfg, [{"epoch": 1, "train_loss": 1.0}], 0) == ""    # no validation split


TINY = ["--size", "4", "--n-missing", "6", "--n-train", "32", "--n-val", "16", "--n-test", "16", "--epochs", "2",
        "--batch-size", "16", "--conv-channels", "4", "--conv-layers", "1", "--rnn-hidden", "8", "--rnn-layers", "1",
        "--threads", "1", "--jobs", "1"]


def test_table_has_comparisons_selection_note_and_loss_terms(tmp_path, capsys):
    from pseudosl.cli import main as cli
    out = tmp_path / "o"
    cli(["sudoku", "train", "--quick", *TINY, "--seeds", "0", "1", "--data-dir", str(tmp_path / "d"),
         "--out", str(out), "--note", "A note  under\nthe table."])
    printed, table = capsys.readouterr().out, (out / "table.txt").read_text()
    for text in (printed, table):
        assert re.search(r"^RNN \+ PSL vs RNN +2 +[+-]\d+\.\d\d \[", text, re.M) and "A note under the table." in text
        assert "Checkpoints selected on validation by exact, ties broken by consistent, then blank_acc" in text
    res = json.loads((out / "results.json").read_text())
    assert {(c["model"], c["base"]) for c in res["comparisons"]} == {("convnet_sl", "convnet"), ("rnn_psl", "rnn")}
    hist = {r["model"]: r["history"][0] for r in res["runs"]}
    assert "train_constraint" in hist["rnn_psl"] and "train_psl" in hist["rnn_psl"] and "train_sl" in hist["convnet_sl"]
    assert "train_constraint" not in hist["rnn"] and "train_data" in hist["rnn"]
    psl = hist["rnn_psl"]
    assert psl["train_loss"] == pytest.approx(psl["train_data"] + psl["train_constraint"], rel=RTOL32)
    assert psl["train_constraint"] == pytest.approx(0.05 * psl["train_psl"], rel=RTOL32)


def test_extra_decoders_add_rows_from_the_same_checkpoints(tmp_path, monkeypatch, capsys):
    """A decoder listed by the experiment adds a row per model at train time and to `eval` without retraining."""
    from pseudosl.cli import main as cli
    from pseudosl.experiments.sudoku import train as sudoku_train
    calls = []

    def evaluate(self, model, data, cfg, accelerator, decoder=None):  # a stand-in decoder: greedy, then 1 point less
        calls.append(decoder)
        metrics, pred = sudoku_train.evaluate(model, data, accelerator)
        return ({k: v - 1.0 for k, v in metrics.items()} if decoder else metrics), pred

    monkeypatch.setattr(SudokuExperiment, "decoders", {"minus1": "minus one"})
    monkeypatch.setattr(SudokuExperiment, "evaluate", evaluate)
    out = tmp_path / "o"
    base = ["sudoku", "train", "--quick", *TINY, "--models", "rnn", "rnn_psl", "--seeds", "0", "1",
            "--data-dir", str(tmp_path / "d"), "--out", str(out)]
    cli(base)
    assert "minus1" not in calls
    capsys.readouterr()
    (table,) = __import__("pseudosl.experiments.harness", fromlist=["x"]).evaluate_checkpoints(
        SudokuExperiment(), out, ["minus1"])["tables"]
    assert set(table["summary"]) == {"rnn", "rnn_psl", "rnn|minus1", "rnn_psl|minus1"}
    assert table["summary"]["rnn|minus1"]["exact_mean"] == pytest.approx(table["summary"]["rnn"]["exact_mean"] - 1)
    text = capsys.readouterr().out
    assert re.search(r"^RNN \+ PSL \+ minus one vs RNN \+ minus one +\d", text, re.M)
    assert re.search(r"^RNN \+ minus one vs RNN +\d +-1\.00 ", text, re.M)
    cli([*base[:-1], str(tmp_path / "o2"), "--decoders", "minus1"])
    assert "RNN + PSL + minus one" in (tmp_path / "o2" / "table.txt").read_text()
    with pytest.raises(SystemExit):
        cli([*base[:-1], str(tmp_path / "o3"), "--decoders", "beam"])
    assert "decoders: sudoku has no decoder 'beam'; known: minus1" in capsys.readouterr().err
    assert not (tmp_path / "o3").exists()


def test_two_fresh_processes_give_identical_metrics(tmp_path):
    """The same small configuration run twice, each in a fresh Python process: identical histories and metrics
    (so a regenerated doc block can be checked, not claimed)."""
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        cmd = [sys.executable, "-m", "pseudosl.cli", "sudoku", "train", "--quick", *TINY, "--seeds", "0",
               "--data-dir", str(tmp_path / f"data{i}"), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads((out / "results.json").read_text()))
    a, b = runs
    assert a["content_key"] == b["content_key"]
    timing = {"wall_s", "cpu_s"}
    for x, y in zip(a["runs"], b["runs"]):
        assert {k: v for k, v in x.items() if k not in timing} == {k: v for k, v in y.items() if k not in timing}
    assert a["summary"] == b["summary"] and a["comparisons"] == b["comparisons"]


def test_many_metrics_make_several_comparison_tables():
    """More than COMPARISON_COLUMNS metrics: one table per group of columns, a line only where it compares one."""
    from types import SimpleNamespace

    from pseudosl.experiments.summary import COMPARISON_COLUMNS
    metrics = tuple(f"m{i}" for i in range(COMPARISON_COLUMNS + 2))
    exp = SimpleNamespace(name="x", labels={"a": "A", "b": "B", "c": "C"}, metrics=metrics, paper={},
                          units={m: "" for m in metrics}, lower_is_better=frozenset(metrics), baselines={},
                          comparison_metrics=(), decoders={})

    def comp(model, m, mean):
        return {"model": model, "base": "a", "metric": m, "n": 3, "mean": mean, "ci95": [mean - 1, mean + 1],
                "verdict": verdict(mean - 1, mean + 1, True)}
    comps = [comp("b", m, -2.0) for m in metrics] + [comp("c", m, 0.0) for m in metrics[:2]]
    text = format_comparisons(exp, comps)
    tables = text.split("\n\n")
    assert len(tables) == 2 and "lower is better for every metric" in tables[0]
    assert "m5" in tables[0] and "m6" not in tables[0] and tables[1].splitlines()[0].split()[2:] == ["m6", "m7"]
    assert "C vs A" in tables[0] and "C vs A" not in tables[1]        # C compares m0, m1 only
    assert tables[1].splitlines()[1].split()[:5] == ["B", "vs", "A", "3", "-2.00"]
    assert "better" in tables[1] and "n.d." in tables[0]


def test_p_values_are_the_paired_t_tests_and_holm_steps_down():
    from scipy.stats import ttest_rel

    from pseudosl.experiments.statistics import holm, paired_p_value
    rng = np.random.default_rng(0)
    for n in (3, 5, 12):
        a, b = rng.normal(60, 5, n), rng.normal(62, 5, n)
        assert paired_p_value(list(b - a)) == pytest.approx(ttest_rel(b, a).pvalue, rel=1e-10)
    assert math.isnan(paired_p_value([1.0])) and paired_p_value([0.0, 0.0]) == 1 and paired_p_value([2.0, 2.0]) == 0
    # Holm by hand: sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1, made monotone
    assert holm([0.04, 0.01, 0.03, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, float("nan"), 0.001]) == pytest.approx([0.5, float("nan"), 0.002], nan_ok=True)
    assert holm([]) == [] and holm([0.9, 0.8]) == [1.0, 1.0]


def test_power_matches_simulated_t_tests_and_its_inverses():
    """The noncentral-t power against 20 000 simulated paired t-tests (normal differences), and the detectable
    difference and the seeds needed as its inverses."""
    from scipy.stats import ttest_1samp

    from pseudosl.experiments.statistics import detectable_difference, seeds_for_power, t_test_power
    rng = np.random.default_rng(1)
    for effect, std, n in ((3.0, 6.0, 12), (2.0, 5.0, 5), (5.0, 4.0, 6)):
        sims = rng.normal(effect, std, (20_000, n))
        rejected = (ttest_1samp(sims, 0.0, axis=1).pvalue < 0.05).mean()
        assert t_test_power(effect, std, n) == pytest.approx(rejected, abs=0.01)   # 3.5 standard errors of the MC
        assert t_test_power(-effect, std, n) == t_test_power(effect, std, n)
    d = detectable_difference(6.0, 12)
    assert t_test_power(d, 6.0, 12) == pytest.approx(0.8, abs=1e-9) and t_test_power(0.99 * d, 6.0, 12) < 0.8
    need = seeds_for_power(3.0, 6.0)
    assert t_test_power(3.0, 6.0, need) >= 0.8 > t_test_power(3.0, 6.0, need - 1)
    assert seeds_for_power(0.0, 1.0) is None and math.isnan(t_test_power(1.0, 0.0, 5))
    assert math.isnan(detectable_difference(1.0, 1))


def test_a_weight_grid_reads_as_one_row_chosen_per_seed_on_validation():
    from pseudosl.experiments.summary import choose_on_validation, model_label
    exp, cfg = SudokuExperiment(), SudokuConfig(n_val=8)

    def run(model, seed, val, test):
        return {"model": model, "seed": seed, "exact": test, "consistent": test, "blank_acc": test,
                "selected_epoch": 2, "history": [{"epoch": 1, "val_exact": 99.0, "val_consistent": 0.0,
                                                   "val_blank_acc": 0.0},
                                                  {"epoch": 2, "val_exact": val, "val_consistent": 0.0,
                                                   "val_blank_acc": 0.0}]}
    runs = [run("w1", 0, 10.0, 50.0), run("w2", 0, 20.0, 40.0), run("w1", 1, 30.0, 70.0), run("w2", 1, 30.0, 90.0),
            run("w1", 2, 5.0, 1.0)]                          # seed 2 lacks w2: not a row of the choice
    chosen = choose_on_validation(exp, cfg, runs, ["w1", "w2"], "rnn_psl@psl_weight=chosen")
    assert [(r["seed"], r["chosen"], r["exact"]) for r in chosen] == [(0, "w2", 40.0), (1, "w1", 70.0)]  # a tie: first
    assert all(r["model"] == "rnn_psl@psl_weight=chosen" for r in chosen)
    assert model_label(exp, "rnn_psl@psl_weight=chosen") == "RNN + PSL (psl_weight chosen on validation)"


def test_the_primary_comparison_stays_out_of_the_holm_family_and_states_its_power():
    from pseudosl.experiments.statistics import detectable_difference, holm, seeds_for_power, t_test_power
    from pseudosl.experiments.summary import format_primary, holm_adjust
    exp = SudokuExperiment()
    base = [60.0, 55.0, 70.0, 65.0, 58.0, 62.0]
    runs = _runs({"rnn": base, "rnn_psl": [b + d for b, d in zip(base, [4.0, 1.0, 6.0, -1.0, 3.0, 2.0])],
                  "convnet": base, "convnet_sl": [b + d for b, d in zip(base, [1.0, -2.0, 0.5, -1.0, 3.0, 0.0])]})
    rows = ["convnet", "convnet_sl", "rnn", "rnn_psl"]
    rows_decoded = [{**r, "model": r["model"] + "|constrained"} for r in runs]
    comps = holm_adjust(paired_comparisons(exp, runs + rows_decoded, rows + [r + "|constrained" for r in rows]),
                        ("rnn_psl", "rnn", "exact"))
    family = [c for c in comps if c["p_holm"] is not None]
    assert {(c["model"], c["metric"]) for c in family} == {("convnet_sl", "exact"), ("convnet_sl", "blank_acc"),
                                                           ("rnn_psl", "blank_acc")}   # no decoder row, no primary
    assert [c["p_holm"] for c in family] == pytest.approx(holm([c["p"] for c in family]))
    text = format_primary(exp, comps, ("rnn_psl", "rnn", "exact"), runs)
    (psl,) = [c for c in comps if (c["model"], c["base"], c["metric"]) == ("rnn_psl", "rnn", "exact")]
    assert text.startswith("Primary comparison (named before the runs; tested on its own at 0.05, outside the Holm "
                           "family): RNN + PSL vs RNN, exact: +2.50 points [")
    assert f"over 6 paired seeds, p = {psl['p']:.3f}: n.d. (not distinguishable from its base)." in text
    power = t_test_power(2.5, psl["std"], 6)
    assert (f"Power at the observed spread (std 2.43 points of the per-seed differences): {power * 100:.0f} % to "
            f"detect a difference of the observed size; 6 seeds detect ±{detectable_difference(psl['std'], 6):.2f} "
            f"points with 80 % power; the observed difference would need {seeds_for_power(2.5, psl['std'])} "
            f"seeds.") in text
    assert format_primary(exp, comps, ("rnn_own", "rnn", "exact"), runs) == ""
    assert "p_H" in format_comparisons(exp, comps) and "Holm-adjusted over the 3 comparisons" in \
        format_comparisons(exp, comps, primary_left_out=True)
