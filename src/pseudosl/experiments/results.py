"""The files of a finished table: ``results.json``, ``table.txt``, the figures and the experiment's own report.

* :func:`table_rows`: the per-run records of every table row (a model's own greedy decoding, then each extra
  decoder of ``cfg.decoders``);
* :func:`tables`: the summary (mean ± std per row), the paired comparisons with their base models (at the end and
  per epoch), the training lengths and the text of the table (:mod:`.summary`, :mod:`.convergence`);
* :func:`earlier_wall`: the wall times of the earlier calls that wrote a folder's ``results.json`` (a table made in
  parts with ``--resume`` reports them all), the file's shape checked before any run is recomputed;
* :func:`write_results`: ``results.json`` (config, per-run metrics and curves, the tables above, the paper's numbers,
  the machine), ``table.txt``, ``curves.png``, ``paired_by_epoch.png`` (each constrained model minus its base at
  every epoch of the budget), the experiment's example figure and :meth:`~.experiment.Experiment.report`; only the
  main process writes, each file whole or not at all (:func:`.runs.atomic_path`).
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import torch

from ..errors import RunFolderError, StorageError
from .config import RunConfig
from .convergence import (EPOCH_RULE, format_late_change, format_patience_reading, format_training, paired_by_epoch,
                          patience_reading, training_lengths)
from .experiment import Experiment, Splits
from .runs import atomic_path
from .summary import (choose_on_validation, fill_decoder_labels, format_findings, format_table, holm_adjust,
                      model_label, paired_comparisons, row_key, summarize)

__all__ = ["table_rows", "tables", "machine", "earlier_wall", "write_results"]


def table_rows(runs: list[dict], models: list[str]) -> tuple[list[dict], list[str]]:
    """Per-run records of every table row (a model's greedy decoding, then each extra decoder) and the rows."""
    records, keys = [], []
    decoders = list(dict.fromkeys(d for r in runs for d in r.get("decoded", {})))
    for decoder in [None, *decoders]:
        for name in models:
            key = row_key(name, decoder)
            for r in runs:
                if r["model"] == name and (decoder is None or decoder in r.get("decoded", {})):
                    metrics = r["decoded"][decoder] if decoder else {}
                    records.append({**{k: v for k, v in r.items() if k != "decoded"}, **metrics, "model": key})
                    keys.append(key)
    return records, list(dict.fromkeys(keys))


def tables(exp: Experiment, cfg: RunConfig, runs: list[dict], models: list[str], title: str) -> dict:
    """Summary, paired comparisons (at the end and per epoch), training lengths and the text of the table for
    ``runs`` (one config)."""
    labels = fill_decoder_labels(exp.decoders, cfg.to_dict())  # "resample {resample_candidates}" -> "resample 16"
    records, rows = table_rows(runs, models)
    summary, comparisons, chosen = _compared(exp, cfg, records, rows)
    lengths = training_lengths(runs, cfg.epochs)
    training = format_training(exp, lengths, cfg.epochs, cfg.patience, labels, cfg.test_checkpoint == "last")
    if cfg.test_checkpoint == "last":  # a common budget: had every row stopped improving on the test by its end?
        training = "\n\n".join(t for t in (training, format_late_change(exp, runs, list(models), exp.metrics[0],
                                                                          cfg.epochs, labels)) if t)
    readings, read = "", None
    if cfg.patience_reading is not None:  # the same runs as early stopping would have tested them
        read_runs = [r for r in (patience_reading(exp, cfg, run, cfg.patience_reading) for run in runs) if r]
        read_records, read_rows = table_rows(read_runs, models)
        read_summary, read_comparisons, _ = _compared(exp, cfg, read_records, read_rows)
        read = {"patience": cfg.patience_reading, "summary": read_summary, "comparisons": read_comparisons,
                "training": training_lengths(read_runs, cfg.epochs)}
        readings = format_patience_reading(exp, cfg, read_summary, read_comparisons, read_records, read["training"],
                                           labels)
    findings = format_findings(exp, comparisons, records + chosen, cfg.note, exp.selection_order(cfg), labels,
                               training, exp.primary(cfg), readings)
    return {"summary": summary, "comparisons": comparisons, "findings": findings, "patience_reading": read,
            "training": {"epochs": cfg.epochs, "patience": cfg.patience, "rows": lengths},
            "paired_by_epoch": {"rule": EPOCH_RULE, "curves": paired_by_epoch(exp, cfg, records, rows)},
            "text": format_table(exp, summary, title, labels) + ("\n\n" + findings if findings else "")}


def _compared(exp: Experiment, cfg: RunConfig, records: list[dict], rows: list[str]) -> tuple[dict, list[dict],
                                                                                                 list[dict]]:
    """The summary and the paired comparisons (Holm-adjusted, the primary one left out) of ``records``, with the
    experiment's rows chosen on validation (their records, also returned) placed after their last candidate."""
    chosen, all_rows = [], list(rows)
    for key, candidates in exp.chosen_rows(cfg).items():
        picked = choose_on_validation(exp, cfg, records, [c for c in candidates if c in rows], key)
        if picked:
            chosen += picked
            all_rows.insert(max(all_rows.index(c) for c in candidates if c in rows) + 1, key)
    summary = summarize(records + chosen, exp.metrics, all_rows)
    comparisons = holm_adjust(paired_comparisons(exp, records + chosen, all_rows, exp.contrasts(cfg)),
                              exp.primary(cfg))
    return summary, comparisons, chosen


def machine() -> dict:
    """The device, versions, threads and the load average at the end (above the cores: the machine was shared)."""
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"device": dev, "torch": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_avg_1min": load}


def earlier_wall(out: Path) -> list[float]:
    """The wall times of the earlier calls that wrote ``out/results.json`` (none when there is none).

    Raises:
        RunFolderError: the file is not what this harness writes (not JSON, not an object, ``wall_s_calls`` not a
            list of seconds), named with the fix; checked before ``--resume`` recomputes anything.
    """
    path = out / "results.json"
    if not path.is_file():
        return []
    fix = ("--resume adds this call's wall time to those of the calls before it; restore the file, or delete it "
           "(the table is then rebuilt from the checkpoints, without the earlier calls' wall times)")
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunFolderError(f"{path} is not readable JSON ({type(e).__name__}: {e}); {fix}") from None
    if not isinstance(earlier, dict):
        raise RunFolderError(f"{path} holds a JSON {type(earlier).__name__}, not the object the harness writes; {fix}")
    if "wall_s_calls" not in earlier and "wall_s" not in earlier:
        raise RunFolderError(f"{path} records no wall times (no wall_s_calls), as the harness's results do; {fix}")
    key = "wall_s_calls" if "wall_s_calls" in earlier else "wall_s"
    calls = earlier["wall_s_calls"] if key == "wall_s_calls" else [earlier["wall_s"]]
    if not isinstance(calls, list) or not all(_seconds(w) for w in calls):
        raise RunFolderError(f"{path}: {key} = {str(earlier[key])[:80]} is not "
                             f"{'a list of seconds' if key == 'wall_s_calls' else 'seconds'} (finite numbers >= 0); "
                             f"{fix}")
    return [float(w) for w in calls]


def _seconds(w: Any) -> bool:
    return isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0


def write_results(exp: Experiment, cfg: RunConfig, out: Path, splits: Splits, runs: list[dict], accelerator: Any,
                  title: str, wall_calls: list[float]) -> dict:
    """The result of the runs (``results.json``'s content) and, on the main process, every file of the table."""
    made = tables(exp, cfg, runs, cfg.models, title)
    result = {"experiment": exp.name, "config": cfg.to_dict(), "content_key": cfg.content_key(),
              "summary": made["summary"], "comparisons": made["comparisons"], "findings": made["findings"],
              "training": made["training"], "paired_by_epoch": made["paired_by_epoch"],
              "patience_reading": made["patience_reading"],
              "paper": exp.paper, "wall_s": wall_calls[-1], "wall_s_calls": wall_calls,
              "world_size": accelerator.num_processes,
              "machine": machine(), "runs": [{k: v for k, v in r.items() if k != "predictions"} for r in runs]}
    if not accelerator.is_main_process:
        return result
    from .plots import plot_curves, plot_paired_by_epoch
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2))
    labels = {m: model_label(exp, m) for m in cfg.models}
    with atomic_path(out / "curves.png") as tmp:
        plot_curves(result["runs"], exp.curve_metrics or exp.metrics, tmp, labels=labels,
                    title=f"{exp.name}, preset {cfg.preset}", units=exp.units)
    (out / "paired_by_epoch.png").unlink(missing_ok=True)  # none without pairs: no stale figure either
    if result["paired_by_epoch"]["curves"]:
        with atomic_path(out / "paired_by_epoch.png") as tmp:
            plot_paired_by_epoch(result["paired_by_epoch"]["curves"], tmp, labels=labels,
                                 title=f"{exp.name}, preset {cfg.preset}", rule=EPOCH_RULE)
    first: dict[str, Any] = {}
    for r in runs:
        first.setdefault(r["model"], r["predictions"])
    with atomic_path(out / "examples.png") as tmp:
        exp.plot_examples(splits.test, first, tmp)
    with atomic_path(out / "table.txt") as tmp:
        tmp.write_text(made["text"] + "\n")
    print(made["text"])
    try:
        exp.report(result, out)
    except OSError as e:
        raise StorageError(f"could not write the {exp.name} report under {out}: {e}; free space there or pass "
                           f"another --out") from None
    written = ", ".join(str(p) for p in sorted(out.glob("*.*")) if p.suffix in (".json", ".png", ".txt"))
    print(f"wrote {written} ({result['wall_s']:.0f}s in all)")
    return result
