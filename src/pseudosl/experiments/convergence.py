"""How long the runs trained, whether they converged, and the paired effect at every epoch of the budget.

With ``patience``, a run trains until its validation score has not improved for ``patience`` evaluations, at most
``epochs`` epochs (the cap); a run that reaches the cap without that stop was still improving, so it is not
converged.  Without ``patience`` every run trains the fixed budget and nobody knows whether it converged.

* :func:`training_lengths`: per table row, the selected epoch (median and range over seeds), the epochs trained,
  and how many runs stopped by patience, reached the cap, or ended before it without the stop (interrupted);
* :func:`format_training`: those lines and the plain conclusion, for ``table.txt``
  (:func:`.summary.format_findings` places it after the selection);
* :func:`paired_by_epoch`: for every "constrained row vs its base" pair of :func:`.summary.paired_comparisons`
  (greedy rows), the per-seed difference of each test metric at every evaluated epoch, with its mean and 95 %
  Student-t interval (:data:`EPOCH_RULE` says which model of a run counts at epoch ``e``); drawn by
  :func:`.plots.plot_paired_by_epoch`;
* :func:`late_change` / :func:`format_late_change`: whether each row had stopped improving on the test by the end of
  a common budget (``test_checkpoint = "last"``): per seed, the mean test value over the last epochs minus the mean
  over the epochs before them, with its interval;
* :func:`patience_reading`: a run read as early stopping with a given patience would have tested it, from its
  history (``patience_reading``: the second reading of a table trained to a common budget).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .config import RunConfig, model_variant
from .experiment import Experiment
from .statistics import t_interval
from .summary import base_rows, model_label, selection_score, split_row, unit

__all__ = ["stopped_early", "training_lengths", "format_training", "selected_values", "paired_by_epoch",
           "late_change", "format_late_change", "patience_reading", "format_patience_reading", "EPOCH_RULE",
           "LATE_WINDOW"]

EPOCH_RULE = ("at epoch e each run counts with the test value of the checkpoint it would have been tested with had "
              "training ended at e: the best on validation among its evaluations up to e (the latest one without a "
              "validation split, or with test_checkpoint = last), so a run that stopped earlier keeps the checkpoint "
              "it ended with; a model that is not trained keeps its final value; n counts the seeds where both runs "
              "have a value")
LATE_WINDOW = 0.25  # late_change compares the last quarter of the budget with the quarter before it


def stopped_early(run: Mapping[str, Any], epochs: int) -> bool:
    """Whether ``run`` ended by the patience stop.  Results written before runs recorded ``stopped_early`` are
    read by their length: a finished run that trained fewer than ``epochs`` epochs can only have stopped early."""
    if "stopped_early" in run:
        return bool(run["stopped_early"])
    return 0 < run.get("epochs_trained", epochs) < epochs


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


def _evaluations(n: int) -> str:
    return f"{n} evaluation{'s' if n != 1 else ''}"


def training_lengths(runs: list[dict], epochs: int) -> dict[str, dict]:
    """Per greedy row (a decoder's row shares its model's checkpoints) of runs that recorded their length:
    ``runs`` and ``trained`` (runs that trained at least an epoch), the ``selected_epoch`` median / min / max and
    ``epochs_trained`` min / max over the trained runs, and the counts ``stopped`` (by patience), ``at_cap``
    (trained all ``epochs`` without the stop) and ``interrupted`` (ended before the cap without it)."""
    out: dict[str, dict] = {}
    for r in runs:
        if split_row(r["model"])[1] is not None or "epochs_trained" not in r:
            continue
        row = out.setdefault(r["model"], {"runs": 0, "trained": 0, "stopped": 0, "at_cap": 0, "interrupted": 0,
                                          "selected": [], "lengths": []})
        row["runs"] += 1
        if r["epochs_trained"] == 0:  # evaluated as built (Experiment.trains)
            continue
        row["trained"] += 1
        row["selected"].append(r.get("selected_epoch", r["epochs_trained"]))
        row["lengths"].append(r["epochs_trained"])
        key = "stopped" if stopped_early(r, epochs) else "at_cap" if r["epochs_trained"] >= epochs else "interrupted"
        row[key] += 1
    for row in out.values():
        sel, lengths = row.pop("selected"), row.pop("lengths")
        row["selected_epoch"] = ({"median": float(np.median(sel)), "min": min(sel), "max": max(sel)} if sel else None)
        row["epochs_trained"] = {"min": min(lengths), "max": max(lengths)} if lengths else None
    return out


def format_training(exp: Experiment, lengths: dict[str, dict], epochs: int, patience: int | None,
                    decoder_labels: Mapping[str, str] | None = None, common_budget: bool = False) -> str:
    """A line per row of :func:`training_lengths` ("selected epoch 23 (14–41), trained 28–46 epochs, 1 of 3 at
    the cap"), then the conclusion: the runs that reached the cap or were interrupted are not converged; without
    ``patience`` the budget is fixed and the models are not known to be converged (``common_budget``: every run is
    read at its last epoch, and :func:`format_late_change` says whether it had stopped improving)."""
    if not lengths:
        return ""
    stop = f"stop after {_evaluations(patience)} without a better validation score" if patience else "no early stop"
    lines = [f"Training length (at most {epochs} epochs, {stop}); selected epoch: median (range) over seeds:"]
    w = max(len(model_label(exp, k, decoder_labels)) for k in lengths) + 2
    for key, row in lengths.items():
        label = f"  {model_label(exp, key, decoder_labels):<{w}}"
        if not row["trained"]:
            lines.append(label + "not trained (evaluated as built)")
            continue
        s, t = row["selected_epoch"], row["epochs_trained"]
        spread = (f" ({s['min']}–{s['max']})" if s["min"] != s["max"] else
                  " (every seed)" if row["trained"] > 1 else "")
        text = (f"selected epoch {s['median']:g}{spread}"
                + f", trained {_span([t['min'], t['max']])} epochs")
        if patience:
            text += f", {row['at_cap']} of {row['trained']} at the cap"
            text += f", {row['interrupted']} interrupted" if row["interrupted"] else ""
        lines.append(label + text)
    trained = sum(row["trained"] for row in lengths.values())
    at_cap = sum(row["at_cap"] for row in lengths.values())
    interrupted = sum(row["interrupted"] for row in lengths.values())
    if not trained:
        return "\n".join(lines)
    if patience is None and common_budget:
        lines.append(f"A common budget of {epochs} epochs for every row (test_checkpoint = last: each run is tested "
                     f"at its last epoch, no checkpoint chosen on validation).")
        return "\n".join(lines)
    if patience is None:
        lines.append(f"Fixed budget of {epochs} epochs without early stopping (patience unset): the models are "
                     f"not known to be converged.")
        return "\n".join(lines)
    if at_cap:
        lines.append(f"{at_cap} of {trained} runs reached the epoch cap ({epochs}) still improving (a better "
                     f"validation score within the last {_evaluations(patience)}): not converged.")
    if interrupted:
        lines.append(f"{interrupted} of {trained} runs ended before the cap without the patience stop (interrupted; "
                     f"resume them): not converged.")
    if not at_cap and not interrupted:
        lines.append(f"Every trained run stopped by patience, before or at the cap ({epochs}): trained until "
                     f"validation stopped improving.")
    return "\n".join(lines)


def selected_values(exp: Experiment, cfg: RunConfig, run: dict, metric: str) -> dict[int, float]:
    """Epoch -> test ``metric`` of the checkpoint ``run`` would have been tested with had training ended at that
    epoch (:data:`EPOCH_RULE`), at every epoch of its history that evaluated the test split; an untrained run
    (no evaluation, ``epochs_trained`` 0) has its final value at epoch 0 only (the caller carries it on)."""
    evaluated = [e for e in run.get("history", []) if any(k.startswith(("val_", "test_")) for k in e)]
    if not evaluated:
        return {0: float(run[metric])} if run.get("epochs_trained") == 0 and metric in run else {}
    order_cfg = model_variant(cfg, run["model"])[1]
    out: dict[int, float] = {}
    best: list[float] | None = None
    chosen: dict | None = None
    for e in evaluated:
        vals = {k[4:]: v for k, v in e.items() if k.startswith("val_")}
        if vals and cfg.test_checkpoint == "best_validation":  # the loop's rule: a strictly better score replaces the
            # checkpoint, the earlier one wins a tie
            score = selection_score(exp, vals, order_cfg)
            if best is None or score > best:
                best, chosen = score, e
        else:
            chosen = e
        if chosen is not None and f"test_{metric}" in chosen:
            out[e["epoch"]] = float(chosen[f"test_{metric}"])
    return out


def _value_at(values: dict[int, float], epoch: int) -> float | None:
    """The value at the latest epoch ``<= epoch`` (a run that stopped keeps its last checkpoint)."""
    before = [e for e in values if e <= epoch]
    return values[max(before)] if before else None


def paired_by_epoch(exp: Experiment, cfg: RunConfig, runs: list[dict], rows: list[str]) -> list[dict]:
    """For every greedy row of ``rows`` with a base (:func:`.summary.base_rows`) and every metric of
    ``exp.comparison_metrics`` (default ``exp.metrics``) that the histories hold on the test split: ``points``, a
    dict ``{epoch, mean, lo, hi, n}`` per epoch that either run evaluated, of the per-seed differences
    ``row - base`` (:data:`EPOCH_RULE`; the 95 % Student-t interval, NaN with one seed; NaN values left out);
    ``lower_is_better`` says which sign favours the row."""
    by = {(r["model"], r["seed"]): r for r in runs}
    out = []
    for key in rows:
        if split_row(key)[1] is not None:
            continue
        for base in base_rows(exp, key, rows):
            seeds = [s for (k, s) in by if k == key and (base, s) in by]
            for m in exp.comparison_metrics or exp.metrics:
                curves = [(selected_values(exp, cfg, by[(key, s)], m), selected_values(exp, cfg, by[(base, s)], m))
                          for s in seeds]
                epochs = sorted({e for a, b in curves for e in (*a, *b) if e > 0})
                points = []
                for epoch in epochs:
                    diffs = [a - b for a, b in ((_value_at(x, epoch), _value_at(y, epoch)) for x, y in curves)
                             if a is not None and b is not None and not math.isnan(a - b)]
                    if diffs:
                        mean, _, lo, hi = t_interval(diffs)
                        points.append({"epoch": epoch, "mean": mean, "lo": lo, "hi": hi, "n": len(diffs)})
                if points:
                    out.append({"model": key, "base": base, "metric": m, "unit": unit(exp, m),
                                "lower_is_better": m in exp.lower_is_better, "points": points})
    return out


def late_change(runs: list[dict], row: str, metric: str, epochs: int, window: int) -> dict | None:
    """Whether ``row``'s runs were still improving on the test at the end of the budget: per seed, the mean test
    ``metric`` over the evaluations of the last ``window`` epochs minus its mean over the ``window`` epochs before
    them (runs that trained all ``epochs``), averaged over the seeds with a 95 % Student-t interval (NaN with one
    seed); ``None`` without two full windows of test evaluations."""
    diffs = []
    for r in runs:
        if r["model"] != row or r.get("epochs_trained") != epochs:
            continue
        late = [e[f"test_{metric}"] for e in r.get("history", [])
                if f"test_{metric}" in e and epochs - window < e["epoch"] <= epochs]
        before = [e[f"test_{metric}"] for e in r.get("history", [])
                  if f"test_{metric}" in e and epochs - 2 * window < e["epoch"] <= epochs - window]
        if late and before:
            diffs.append(float(np.mean(late) - np.mean(before)))
    if not diffs or window < 1 or epochs < 2 * window:
        return None
    mean, _, lo, hi = t_interval(diffs)
    return {"row": row, "metric": metric, "window": window, "mean": mean, "ci95": [lo, hi], "n": len(diffs)}


def format_late_change(exp: Experiment, runs: list[dict], rows: list[str], metric: str, epochs: int,
                       decoder_labels: Mapping[str, str] | None = None) -> str:
    """A line per greedy row of :func:`late_change` over the last :data:`LATE_WINDOW` of the budget, then whether
    every row had stopped improving (no interval above 0 for a higher-is-better metric, below for a lower one)."""
    window = max(1, int(epochs * LATE_WINDOW))
    changes = [c for c in (late_change(runs, r, metric, epochs, window) for r in rows if split_row(r)[1] is None) if c]
    if not changes:
        return ""
    u = unit(exp, metric)
    last, before = f"{epochs - window + 1}–{epochs}", f"{epochs - 2 * window + 1}–{epochs - window}"
    lines = [f"Still improving at the end of the budget? Test {metric}, per seed the mean over epochs {last} minus "
             f"the mean over epochs {before} ({'points' if u == '%' else u}), mean [95 % interval] over the seeds:"]
    w = max(len(model_label(exp, c["row"], decoder_labels)) for c in changes) + 2
    lower = metric in exp.lower_is_better
    rising = []
    for c in changes:
        lo, hi = c["ci95"]
        improving = hi < 0 if lower else lo > 0
        rising += [c["row"]] if improving else []
        lines.append(f"  {model_label(exp, c['row'], decoder_labels):<{w}}{c['mean']:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                     + (" still improving" if improving else ""))
    lines.append("Every row had stopped improving on the test by the end of the budget (no interval on the improving "
                 "side of 0)." if not rising else
                 f"{len(rising)} row(s) still improving beyond the interval at the end of the budget: "
                 + ", ".join(model_label(exp, r, decoder_labels) for r in rising) + "; a longer budget may change "
                 "their comparisons.")
    return "\n".join(lines)


def patience_reading(exp: Experiment, cfg: RunConfig, run: dict, patience: int) -> dict | None:
    """``run`` as early stopping with ``patience`` would have tested it: its evaluations walked in order, the best
    validation score kept (:func:`.summary.selection_score`, the loop's rule: a strictly better score replaces it),
    the walk stopped after ``patience`` evaluations without a better one; the record holds the test metrics of the
    evaluation kept (from its history), ``selected_epoch`` and ``epochs_trained`` (where the stop fell) and
    ``stopped_early``.  ``None`` when the history lacks validation or the kept evaluation's test values."""
    order_cfg = model_variant(cfg, run["model"])[1]
    best, kept, bad, end, stopped = None, None, 0, 0, False
    for e in run.get("history", []):
        end = e["epoch"]
        vals = {k[4:]: v for k, v in e.items() if k.startswith("val_")}
        if not vals:
            continue
        score = selection_score(exp, vals, order_cfg)
        if best is None or score > best:
            best, kept, bad = score, e, 0
        else:
            bad += 1
            if bad >= patience:
                stopped = True
                break
    if kept is None or not all(f"test_{m}" in kept for m in exp.metrics):
        return None
    return {**{k: v for k, v in run.items() if k not in exp.metrics and k != "decoded"},
            **{m: kept[f"test_{m}"] for m in exp.metrics}, "selected_epoch": kept["epoch"], "epochs_trained": end,
            "stopped_early": stopped, "history": [e for e in run.get("history", []) if e["epoch"] <= end]}


def format_patience_reading(exp: Experiment, cfg: RunConfig, summary: dict, comparisons: list[dict],
                            records: list[dict], lengths: dict[str, dict],
                            decoder_labels: Mapping[str, str] | None = None) -> str:
    """The second reading of a table (``cfg.patience_reading``): its table, paired comparisons, primary comparison
    and training lengths, with every run read by :func:`patience_reading`."""
    from .summary import format_comparisons, format_primary, format_table
    primary = exp.primary(cfg)
    title = (f"Read under the patience rule instead (patience {cfg.patience_reading}, applied to each run's "
             f"validation history: the checkpoint early stopping would have tested, within the {cfg.epochs} "
             f"epochs trained):")
    held = any(primary and (c["model"], c["base"], c["metric"]) == primary for c in comparisons)
    parts = [format_table(exp, summary, title, decoder_labels),
             format_comparisons(exp, comparisons, decoder_labels, primary_left_out=held),
             format_primary(exp, comparisons, primary, records, decoder_labels),
             format_training(exp, lengths, cfg.epochs, cfg.patience_reading, decoder_labels)]
    return "\n\n".join(p for p in parts if p)
