"""Tables and statistics of a set of runs: the part of the harness that says what the numbers show.

* :func:`summarize`: mean ± sample std (ddof = 1) of each metric per table row, and on how many
  seeds it is defined (a Warcraft cost ratio is undefined for a run without a consistent path);
* :func:`paired_comparisons`: every "X + SL/PSL vs X" comparison (``Experiment.baselines``, and the experiment's
  ``contrasts``) as the per-seed difference, paired by seed (a seed fixes the data order and the initialisation),
  with a 95 % Student-t interval over the seeds (:func:`.statistics.t_interval`), a verdict (:func:`verdict`): "beats its base beyond the 95 %
  interval", "not distinguishable from its base" or "worse than its base beyond the 95 % interval", and the
  two-sided paired t-test's p-value (:func:`.statistics.paired_p_value`);
* :func:`holm_adjust`: Holm's step-down adjustment of those p-values over the comparisons of the losses (the greedy
  rows), the experiment's primary comparison (``Experiment.primary``) left out of the family;
* :func:`choose_on_validation`: a row made of, per seed, the run among some candidate rows (a weight grid) with
  the best validation score of the model it tested;
* the primary comparison's paragraph with the power the run had at its observed spread (:func:`format_primary`;
  the tests, intervals and power: :mod:`.statistics`);
* :func:`selection_reason`: which validation metric chose a run's checkpoint (``metrics[0]``, or the
  finer metric that broke its tie);
* :func:`format_report`: the text of ``table.txt`` and of the printout: the table, then
  :func:`format_findings` (the comparisons, the selection, how long the runs trained (made by
  :mod:`.convergence`), and the preset's ``note``).

Rows: a table row is a model (or model variant) decoded greedily, or ``"<model>|<decoder>"`` for an
extra decoder of ``cfg.decoders`` evaluated on the same checkpoint (:func:`row_key`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .config import RunConfig, split_model
from .experiment import Experiment
from .statistics import (ALPHA, POWER, detectable_difference, holm, paired_p_value, seeds_for_power, t_interval,
                         t_test_power)

__all__ = ["summarize", "paired_comparisons", "base_rows", "verdict", "holm_adjust", "choose_on_validation",
           "tested_validation", "CHOSEN", "selection_score", "selection_reason", "format_table", "format_comparisons",
           "format_primary", "format_findings", "format_report", "fill_decoder_labels", "model_label", "unit",
           "row_key", "split_row", "VERDICTS", "VERDICT_WORDS"]

VERDICTS = ("beats its base beyond the 95 % interval", "not distinguishable from its base",
            "worse than its base beyond the 95 % interval")
CHOSEN = "chosen"  # the override value of a row chosen on validation: "rnn_psl@psl_weight=chosen"


# -- rows, labels, units ------------------------------------------------------------------------------
def row_key(model: str, decoder: str | None = None) -> str:
    """The table row of ``model`` decoded by ``decoder`` (``None``: the experiment's own greedy decoding)."""
    return model if decoder is None else f"{model}|{decoder}"


def split_row(key: str) -> tuple[str, str | None]:
    """``"rnn_psl|constrained"`` -> ``("rnn_psl", "constrained")``; ``"rnn"`` -> ``("rnn", None)``."""
    model, _, decoder = key.partition("|")
    return model, decoder or None


def fill_decoder_labels(templates: Mapping[str, str], fields: Mapping[str, Any]) -> dict[str, str]:
    """Decoder row labels with their config fields filled: ``{"resample": "resample {resample_candidates}"}``
    and ``{"resample_candidates": 16}`` -> ``{"resample": "resample 16"}``.

    Example:
        >>> fill_decoder_labels({"resample": "resample {resample_candidates}", "greedy": "greedy"},
        ...                     {"resample_candidates": 16})
        {'resample': 'resample 16', 'greedy': 'greedy'}
    """
    return {name: label.format(**fields) if "{" in label else label for name, label in templates.items()}


def model_label(exp: Experiment, spec: str, decoder_labels: Mapping[str, str] | None = None) -> str:
    """Table label of a row: ``"RNN + PSL (psl_weight=0.01)"``, ``"RNN + PSL + constrained"``.

    ``decoder_labels`` (decoder name -> label suffix, e.g. from :func:`fill_decoder_labels`) defaults to
    ``exp.decoders``, whose labels may still hold ``{field}`` templates."""
    model, decoder = split_row(spec)
    base, overrides = split_model(model)
    label = exp.labels.get(base, base)
    label += " (" + ", ".join(f"{k} chosen on validation" if v == CHOSEN else f"{k}={v}"
                              for k, v in overrides.items()) + ")" if overrides else ""
    suffixes = exp.decoders if decoder_labels is None else decoder_labels
    return label + (f" + {suffixes.get(decoder, decoder)}" if decoder else "")


def unit(exp: Experiment, metric: str) -> str:
    """The unit of ``metric`` in tables and plots (``%`` unless ``exp.units`` says otherwise)."""
    return exp.units.get(metric, "%")


# -- summary --------------------------------------------------------------------------------------
def summarize(runs: list[dict], metrics: tuple[str, ...], models: tuple[str, ...] | list[str]) -> dict[str, dict]:
    """Mean, sample standard deviation (ddof=1; 0 for one seed) and number of seeds of each metric, per row.

    A metric that is undefined (NaN) for some seeds is averaged over the others (NaN if it is for all);
    ``<metric>_n`` counts the seeds where it is defined."""
    out = {}
    for name in models:
        rs = [r for r in runs if r["model"] == name]
        if not rs:
            continue
        row: dict[str, Any] = {"seeds": [r["seed"] for r in rs]}
        for k in metrics:
            v = np.array([r[k] for r in rs], dtype=float)
            v = v[~np.isnan(v)]
            row[f"{k}_mean"] = float(v.mean()) if len(v) else float("nan")
            row[f"{k}_std"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0 if len(v) else float("nan")
            row[f"{k}_n"] = int(len(v))
        out[name] = row
    return out


# -- paired comparisons ---------------------------------------------------------------------------------
def holm_adjust(comparisons: list[dict], primary: tuple[str, str, str] | None = None) -> list[dict]:
    """``comparisons`` with ``p_holm`` set on each of the family (the comparisons between greedy rows, i.e. of the
    losses, except the ``primary`` ``(row, base, metric)``), Holm-adjusted over that family; ``None`` on the
    others (the decoders' rows, the primary comparison, which is tested at alpha on its own)."""
    family = [c for c in comparisons if split_row(c["model"])[1] is None and split_row(c["base"])[1] is None
              and (c["model"], c["base"], c["metric"]) != primary]
    for c in comparisons:
        c["p_holm"] = None
    for c, p in zip(family, holm([c["p"] for c in family])):
        c["p_holm"] = p
    return comparisons


def verdict(lo: float, hi: float, lower_is_better: bool = False) -> str:
    """One of :data:`VERDICTS` for the interval ``[lo, hi]`` of "model minus its base"."""
    if math.isnan(lo) or math.isnan(hi):
        return VERDICTS[1]
    better, worse = (hi < 0, lo > 0) if lower_is_better else (lo > 0, hi < 0)
    return VERDICTS[0] if better else VERDICTS[2] if worse else VERDICTS[1]


def base_rows(exp: Experiment, key: str, rows: list[str], contrasts: list[tuple[str, str]] = ()) -> list[str]:
    """The rows ``key`` is compared with: its model's base (``exp.baselines``) under the same decoder, for an extra
    decoder also the same model decoded greedily, then the rows ``contrasts`` pairs it with (``(row, other)``)."""
    model, decoder = split_row(key)
    out = []
    base = exp.baselines.get(split_model(model)[0])
    if base is not None:
        out.append(row_key(base, decoder))
    if decoder is not None:
        out.append(model)
    out += [other for row, other in contrasts if row == key and other not in out]
    return [r for r in out if r in rows]


def paired_comparisons(exp: Experiment, runs: list[dict], rows: list[str],
                       contrasts: list[tuple[str, str]] = ()) -> list[dict]:
    """Every "row vs its base" comparison (and every ``(row, other)`` of ``contrasts``), per metric, paired by seed,
    with a 95 % Student-t interval and the paired t-test's two-sided p-value (``p``).

    For each row whose model has a base in ``exp.baselines`` (``"rnn_psl": "rnn"``; variants such as
    ``rnn_psl@psl_weight=0.01`` too) and for each metric of ``exp.comparison_metrics`` (default: ``exp.metrics``)
    defined for both rows on at least one seed (a metric a decoder does not define is left out): the differences
    ``d_s = row(seed s) - base(seed s)`` over the seeds both ran with the metric defined, their mean,
    sample std, and the interval ``mean ± t_{0.975, n-1} · std / sqrt(n)``; ``verdict`` reads it
    (a lower-is-better metric beats its base when the whole interval is below 0).  With one paired seed
    there is no interval (NaN) and the verdict is "not distinguishable".
    """
    by = {(r["model"], r["seed"]): r for r in runs}
    out = []
    for key in rows:
        for base in base_rows(exp, key, rows, contrasts):
            for m in exp.comparison_metrics or exp.metrics:
                pairs = [(s, by[(key, s)][m] - by[(base, s)][m]) for (k, s) in by
                         if k == key and (base, s) in by]
                pairs = [(s, float(d)) for s, d in pairs if d == d]
                if not pairs:
                    continue
                n = len(pairs)
                mean, std, lo, hi = t_interval([v for _, v in pairs])
                out.append({"model": key, "base": base, "metric": m, "seeds": [s for s, _ in pairs],
                            "differences": [v for _, v in pairs], "n": n, "mean": mean, "std": std,
                            "ci95": [lo, hi], "verdict": verdict(lo, hi, m in exp.lower_is_better),
                            "p": paired_p_value([v for _, v in pairs])})
    return out


def tested_validation(run: dict) -> dict[str, float]:
    """The validation metrics of the model ``run`` tested: those of its history's evaluation at its
    ``selected_epoch`` (the last evaluation if that epoch has none); empty without validation."""
    evaluated = [e for e in run.get("history", []) if any(k.startswith("val_") for k in e)]
    at = [e for e in evaluated if e["epoch"] == run.get("selected_epoch")] or evaluated[-1:]
    return {k[4:]: v for k, v in at[0].items() if k.startswith("val_")} if at else {}


def choose_on_validation(exp: Experiment, cfg: RunConfig, runs: list[dict], candidates: list[str],
                         key: str) -> list[dict]:
    """The row ``key``: per seed that every candidate row ran, a copy of the candidates' run whose tested model has
    the best validation score (:func:`selection_score` of :func:`tested_validation`; the earlier candidate wins a
    tie), its model renamed ``key`` and ``chosen`` naming the candidate.  So a weight grid becomes one row whose
    weight is chosen per seed on that seed's validation split, never on the test."""
    by = {(r["model"], r["seed"]): r for r in runs}
    seeds = sorted({s for (_, s) in by if all((c, s) in by for c in candidates)})
    out = []
    for s in seeds:
        scored = [(selection_score(exp, tested_validation(by[(c, s)]), cfg), -i, c) for i, c in enumerate(candidates)
                  if tested_validation(by[(c, s)])]
        if scored:
            best = max(scored)[2]
            out.append({**by[(best, s)], "model": key, "chosen": best})
    return out


# -- model selection ----------------------------------------------------------------------------------
def selection_score(exp: Experiment, values: dict[str, float], cfg: RunConfig | None = None) -> list[float]:
    """The one model-selection rule of every experiment: validation metrics as a list compared lexicographically,
    larger = better: ``exp.selection_order(cfg)`` (default ``exp.metrics``) in
    order, so the next breaks the ties of the previous; ``lower_is_better`` metrics negated; NaN (undefined) is
    ``-inf``, the worst."""
    out = []
    for m in exp.selection_order(cfg):
        v = float(values[m])
        out.append(-np.inf if np.isnan(v) else -v if m in exp.lower_is_better else v)
    return out


def selection_reason(exp: Experiment, cfg: RunConfig, history: list[dict], best_epoch: int) -> str:
    """The validation metric that chose ``best_epoch`` over the runner-up epoch: the first entry of
    :func:`selection_score` where they differ (``"exact"``, or e.g. ``"blank_acc"`` when Exact tied),
    ``"tie"`` (a full tie, the earlier epoch kept) or ``"single evaluation"``; ``""`` without validation."""
    keys = {e["epoch"]: selection_score(exp, {k[4:]: v for k, v in e.items() if k.startswith("val_")}, cfg)
            for e in history if any(k.startswith("val_") for k in e)}
    if best_epoch not in keys:
        return ""
    others = [k for e, k in keys.items() if e != best_epoch]
    if not others:
        return "single evaluation"
    best, runner_up = keys[best_epoch], max(others)
    names = exp.selection_order(cfg)
    for i, (a, b) in enumerate(zip(best, runner_up)):
        if a != b:
            return names[i] if len(names) == len(best) else f"selection key {i}"
    return "tie"


# -- text -----------------------------------------------------------------------------------------------
def _cell(row: dict, m: str) -> str:
    n, total = row.get(f"{m}_n", len(row["seeds"])), len(row["seeds"])
    if n == 0:
        return f"{'– (0/' + str(total) + ')':>18}"
    text = f"{row[m + '_mean']:.2f} ± {row[m + '_std']:.2f}"
    return f"{text + (f' ({n}/{total})' if n < total else ''):>18}"


def format_table(exp: Experiment, summary: dict, title: str, decoder_labels: Mapping[str, str] | None = None) -> str:
    """Row × metric (mean ± std over seeds; ``(n/N)`` where a metric is defined on n of N seeds, ``–`` on
    none), then the paper's values where it reports them (greedy rows only: an extra decoder's row has none).
    ``decoder_labels``: as in :func:`model_label`."""
    paper_cols = [m for m in exp.metrics if any(m in p for p in exp.paper.values())]
    w = max([16] + [len(model_label(exp, name, decoder_labels)) + 2 for name in summary])  # variants: long labels
    head = f"{'Model':<{w}}" + "".join(f"{(m + ' ' + unit(exp, m)).strip():>18}" for m in exp.metrics) + "".join(
        f"{'paper ' + m:>18}" for m in paper_cols) + f"{'seeds':>7}"
    lines = [title, head, "-" * len(head)]
    for name, row in summary.items():
        cells = "".join(_cell(row, m) for m in exp.metrics)
        model, decoder = split_row(name)
        paper = exp.paper.get(split_model(model)[0], {}) if decoder is None else {}  # the paper decodes greedily
        paper_cells = "".join(f"{paper[m]:>18.2f}" if m in paper else f"{'':>18}" for m in paper_cols)
        lines.append(f"{model_label(exp, name, decoder_labels):<{w}}{cells}{paper_cells}{len(row['seeds']):>7}")
    return "\n".join(lines)


VERDICT_WORDS = {VERDICTS[0]: "better", VERDICTS[1]: "n.d.", VERDICTS[2]: "worse"}  # a verdict in a table cell
COMPARISON_COLUMNS = 6  # metrics per comparison table (more metrics: several tables, so lines stay readable)


def _p(p: float) -> str:
    """A p-value in a cell: ``0.031``, ``<0.001``, ``1``."""
    return "nan" if p != p else "<0.001" if p < 0.001 else "1" if p >= 0.9995 else f"{p:.3f}"


def format_comparisons(exp: Experiment, comparisons: list[dict],
                       decoder_labels: Mapping[str, str] | None = None, primary_left_out: bool = False) -> str:
    """A table of the paired comparisons: a line per row and its base, a cell per metric with the mean paired
    difference, its 95 % interval and the verdict in a word (:data:`VERDICT_WORDS`); ``(n=..)`` where a metric
    is paired on fewer seeds than the line's others, no interval with one paired seed, ``–`` where a metric
    is not compared; ``p_H`` and the Holm-adjusted p-value where :func:`holm_adjust` set one.  ``decoder_labels``:
    as in :func:`model_label`; ``primary_left_out``: the intro says the primary comparison is not in the family."""
    if not comparisons:
        return ""
    metrics = list(dict.fromkeys(c["metric"] for c in comparisons))
    pairs: dict[tuple[str, str], dict[str, dict]] = {}
    for c in comparisons:
        pairs.setdefault((c["model"], c["base"]), {})[c["metric"]] = c

    def cell(c: dict | None, n: int) -> str:
        if c is None:
            return "–"
        text = f"{c['mean']:+.2f}" + (" [{:+.2f}, {:+.2f}]".format(*c["ci95"]) if c["n"] > 1 else "")
        holm_p = c.get("p_holm")
        return (f"{text} {VERDICT_WORDS[c['verdict']]}" + (f" (n={c['n']})" if c["n"] != n else "")
                + (f" p_H {_p(holm_p)}" if holm_p is not None else ""))

    def header(m: str) -> str:
        u = unit(exp, m)
        return f"{m} ({'points' if u == '%' else u})" if u else m

    lower = [m for m in metrics if m in exp.lower_is_better]
    family = sum(c.get("p_holm") is not None for c in comparisons)
    intro = ("Paired by seed: each row minus its base, per metric the mean difference [95 % Student-t interval] "
             "over the seeds;\nbetter / worse: beyond the interval"
             + (" (lower is better for every metric)" if lower == metrics else
                f" ({', '.join(lower)}: lower is better)" if lower else "")
             + "; n.d.: not distinguishable (the interval holds 0)."
             + (f"\np_H: the paired t-test's two-sided p-value, Holm-adjusted over the {family} comparisons of the "
                f"losses (rows decoded greedily{', the primary comparison left out' if primary_left_out else ''}); "
                f"below {ALPHA:g}: the difference stands with every comparison of the family counted."
                if family else ""))
    blocks = []
    for first in range(0, len(metrics), COMPARISON_COLUMNS):  # many metrics: several tables of a few columns
        cols = metrics[first:first + COMPARISON_COLUMNS]
        lines = [["Comparison", "seeds", *map(header, cols)]]
        for (row, base), cs in pairs.items():
            if any(m in cs for m in cols):
                n = max(c["n"] for c in cs.values())
                label = f"{model_label(exp, row, decoder_labels)} vs {model_label(exp, base, decoder_labels)}"
                lines.append([label, str(n),
                              *(cell(cs.get(m), n) for m in cols)])
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        blocks.append("\n".join("  ".join(f"{t:<{w}}" if i == 0 else f"{t:>{w}}"
                                           for i, (t, w) in enumerate(zip(line, widths))).rstrip() for line in lines))
    return "\n\n".join([intro + "\n" + blocks[0], *blocks[1:]])


def format_primary(exp: Experiment, comparisons: list[dict], primary: tuple[str, str, str] | None, runs: list[dict],
                   decoder_labels: Mapping[str, str] | None = None) -> str:
    """The primary comparison ``(row, base, metric)`` in words: its mean paired difference, 95 % interval, p-value
    and verdict, which candidate a row chosen on validation took per seed, and the power the run had at the spread
    it observed: to detect a difference of the observed size, the smallest difference it detects with
    :data:`POWER`, and the seeds the observed difference would need; ``""`` when the table does not hold it."""
    c = next((c for c in comparisons if primary and (c["model"], c["base"], c["metric"]) == primary), None)
    if c is None:
        return ""
    row, base, metric = primary
    u = unit(exp, metric)
    pts = " points" if u == "%" else f" {u}" if u else ""
    lo, hi = c["ci95"]
    label = f"{model_label(exp, row, decoder_labels)} vs {model_label(exp, base, decoder_labels)}"
    text = (f"Primary comparison (named before the runs; tested on its own at {ALPHA:g}, outside the Holm family): "
            f"{label}, {metric}: {c['mean']:+.2f}{pts} [{lo:+.2f}, {hi:+.2f}] over {c['n']} paired seeds, "
            f"p = {_p(c['p'])}: {VERDICT_WORDS[c['verdict']]} ({c['verdict']}).")
    chosen = [r["chosen"] for r in runs if r["model"] == row and "chosen" in r]
    if chosen:
        text += (" Chosen per seed on its validation split: " + ", ".join(
            f"{model_label(exp, k, decoder_labels)} ×{chosen.count(k)}" for k in dict.fromkeys(chosen)) + ".")
    power, mde = t_test_power(c["mean"], c["std"], c["n"]), detectable_difference(c["std"], c["n"])
    if power == power:
        need = seeds_for_power(c["mean"], c["std"])
        text += (f" Power at the observed spread (std {c['std']:.2f}{pts} of the per-seed differences): "
                 f"{power * 100:.0f} % to detect a difference of the observed size; {c['n']} seeds detect "
                 f"±{mde:.2f}{pts} with {POWER * 100:.0f} % power; the observed difference would need "
                 + (f"{need} seeds." if need else "more seeds than are countable."))
    return text


def _format_selection(exp: Experiment, runs: list[dict], order: list[str]) -> str:
    per: dict[str, dict[str, int]] = {}
    for r in runs:
        if r.get("selected_on") and split_row(r["model"])[1] is None:  # a decoder's row shares its model's checkpoint
            counts = per.setdefault(r["model"], {})
            counts[r["selected_on"]] = counts.get(r["selected_on"], 0) + 1
    if not per:
        return ""
    body = "; ".join(f"{model_label(exp, m)}: " + ", ".join(f"{why} ×{k}" for why, k in counts.items())
                     for m, counts in per.items())
    rule = f" by {order[0]}, ties broken by {', then '.join(order[1:])}" if len(order) > 1 else \
        f" by {order[0]}" if order else ""
    return f"Checkpoints selected on validation{rule}; the metric that decided, per run: {body}."


def format_findings(exp: Experiment, comparisons: list[dict], runs: list[dict], note: str = "",
                    selection_order: list[str] | None = None, decoder_labels: Mapping[str, str] | None = None,
                    training: str = "", primary: tuple[str, str, str] | None = None, readings: str = "") -> str:
    """What follows the table in ``table.txt``: the paired comparisons, the ``primary`` comparison
    (:func:`format_primary`), how checkpoints were selected (runs with ``selected_on``; ``selection_order`` names the
    validation metrics in order), ``training`` (how long the runs trained and whether they converged:
    :func:`pseudosl.experiments.convergence.format_training`), ``readings`` (the table read another way, e.g. under
    a patience rule), the preset's note.  ``decoder_labels``: as in :func:`model_label`."""
    held = any(primary and (c["model"], c["base"], c["metric"]) == primary for c in comparisons)
    parts = [format_comparisons(exp, comparisons, decoder_labels, primary_left_out=held),
             format_primary(exp, comparisons, primary, runs, decoder_labels),
             _format_selection(exp, runs, selection_order or []), training, readings, " ".join(note.split())]
    return "\n\n".join(p for p in parts if p)


def format_report(exp: Experiment, summary: dict, comparisons: list[dict], runs: list[dict], title: str,
                  note: str = "", selection_order: list[str] | None = None,
                  decoder_labels: Mapping[str, str] | None = None, training: str = "",
                  primary: tuple[str, str, str] | None = None, readings: str = "") -> str:
    """The text of ``table.txt``: the table (:func:`format_table`), then :func:`format_findings`."""
    findings = format_findings(exp, comparisons, runs, note, selection_order, decoder_labels, training, primary,
                               readings)
    return format_table(exp, summary, title, decoder_labels) + ("\n\n" + findings if findings else "")
