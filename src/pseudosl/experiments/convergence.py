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
  :func:`.plots.plot_paired_by_epoch`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .config import RunConfig, model_variant
from .experiment import Experiment
from .summary import base_rows, model_label, selection_score, split_row, t_interval, unit

__all__ = ["stopped_early", "training_lengths", "format_training", "selected_values", "paired_by_epoch",
           "EPOCH_RULE"]

EPOCH_RULE = ("at epoch e each run counts with the test value of the checkpoint it would have been tested with had "
              "training ended at e: the best on validation among its evaluations up to e (the latest one without a "
              "validation split), so a run that stopped earlier keeps the checkpoint it ended with; a model that is "
              "not trained keeps its final value; n counts the seeds where both runs have a value")


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
                    decoder_labels: Mapping[str, str] | None = None) -> str:
    """A line per row of :func:`training_lengths` ("selected epoch 23 (14–41), trained 28–46 epochs, 1 of 3 at
    the cap"), then the conclusion: the runs that reached the cap or were interrupted are not converged; without
    ``patience`` the budget is fixed and the models are not known to be converged."""
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
        if vals:  # the loop's rule: a strictly better score replaces the checkpoint, the earlier one wins a tie
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
