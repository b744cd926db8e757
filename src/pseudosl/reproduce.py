"""``pseudosl reproduce --quick | --cpu | --real | --paper``: every experiment's preset, then the report's tables.

Each registered experiment (:data:`pseudosl.experiments.registry.EXPERIMENTS`) is trained with its ``quick``, ``cpu``,
``real`` (a real pretrained model: detox on SmolLM2) or ``paper`` preset through the shared harness (``--overwrite``: a reproduction starts afresh; ``resume=True`` (``--resume``)
continues the runs under ``runs`` instead, so a regime can be run in parts and a finished run's test rows are
recomputed from its checkpoints; an experiment without that preset is skipped, saying so), then its section of the report is written
between markers::

    <!-- BEGIN quick:sudoku -->  ...  <!-- END quick:sudoku -->

The report is ``runs/reproduce/<document>`` (a copy of the tracked document with the blocks replaced,
so ``diff docs/reproduction.md runs/reproduce/reproduction.md`` shows what a fresh run changed), where
the document is ``reproduction.md`` for ``quick`` and ``paper`` and ``results.md`` for ``cpu`` and ``real``;
``write_docs=True`` (``--write-docs``) updates the tracked ``docs/<document>`` instead, ``report`` any
file.  Text outside the markers (the paper's numbers, the notes) is left alone, so the report is
hand-written prose around generated tables; markers that cannot delimit a block (a ``BEGIN`` whose ``END`` was lost,
an ``END`` alone, a pair out of order or twice) are refused by name (:func:`check_markers`) before any run starts
and before anything is written: replacing such a block would delete the hand-written text after it.  A block holds the command, the machine and its load, the
wall time and the time per run, the table with the paired comparisons and the preset's note (the run's
``table.txt``), and the figures, copied next to the report into ``figures/``.  Extra sections (the
fidelity study) register in :data:`SECTIONS`.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from .errors import PseudoslError

__all__ = ["reproduce", "replace_section", "check_markers", "experiment_section", "ReportError", "SECTIONS", "MODES",
           "DOCUMENTS"]

MODES = ("quick", "cpu", "real", "paper")
DOCUMENTS = {"quick": "reproduction.md", "paper": "reproduction.md", "cpu": "results.md", "real": "results.md"}  # mode -> docs/<file>

# name -> "module:function(mode, runs folder of this mode, figures folder, results so far) -> markdown";
# run after the experiments
SECTIONS: dict[str, str] = {"fidelity": "pseudosl.experiments.fidelity:reproduce_section"}


class ReportError(PseudoslError, ValueError):
    """The report's markers do not delimit its generated blocks: writing one would delete or misplace text."""


def _section(name: str) -> Callable[[str, Path, Path, dict], str]:
    import importlib
    module, fn = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), fn)


def check_markers(text: str, key: str, where: str) -> None:
    """Refuse ``text`` (the report at ``where``) when the block ``key`` cannot be replaced without losing text: its
    ``<!-- BEGIN key -->`` and ``<!-- END key -->`` markers must both be missing, or appear once each, in order."""
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    n_begin, n_end = text.count(begin), text.count(end)
    if n_begin == n_end == 0 or (n_begin == n_end == 1 and text.index(begin) < text.index(end)):
        return
    if n_begin == 1 and n_end == 0:
        problem = f"{begin} has no {end} after it"
        fix = f"put {end} back where the generated block ends (the text after it is yours), or delete {begin}"
    elif n_begin == 0:
        problem, fix = f"{end} has no {begin} before it", f"delete {end} or put {begin} back where the block starts"
    elif n_begin == n_end == 1:
        problem, fix = f"{end} comes before {begin}", "put the markers back in order around the generated block"
    else:
        problem = f"{begin} appears {n_begin} times and {end} {n_end} times"
        fix = "keep one pair around the generated block"
    raise ReportError(f"{where}: {problem}, so writing the block {key!r} would delete or misplace text; {fix}. "
                      f"The block was not written")


def replace_section(text: str, key: str, body: str, where: str = "the report") -> str:
    """``text`` with the block between ``<!-- BEGIN key -->`` and ``<!-- END key -->`` set to ``body``
    (appended at the end, with its markers, when the block is missing); markers that would lose text are refused
    (:func:`check_markers`)."""
    check_markers(text, key, where)
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text:
        return text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def experiment_section(exp, cfg, result: dict, command: str, figures: Path, rel: str) -> str:
    """Markdown: the command, the setting, the run's table (with the paired comparisons and the note), figures."""
    out = Path(result["out"])
    stem = f"{exp.name}-{cfg.preset}"
    pics = []
    # comparison.png: an experiment's bar chart of the rows, if any; paired_by_epoch.png: where models have a base
    for kind in ("comparison", "curves", "paired_by_epoch", "examples"):
        src = out / f"{kind}.png"
        if src.exists():
            figures.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, figures / f"{stem}-{kind}.png")
            pics.append(f"![{exp.name} {kind}]({rel}/{stem}-{kind}.png)")
    from .experiments.harness import budget_words
    m = result["machine"]
    budget = budget_words(cfg)
    lines = [f"Command: `{command}` (config {result['content_key']}, seeds {cfg.seeds}, {budget}).",
             f"Machine: {m['device']}, torch {m['torch']}, {m['threads']} threads" + _load(m) + "; wall time "
             + _wall(result) + (f" ({cfg.jobs} runs at a time)" if cfg.jobs > 1 else "") + ".",
             _per_run(exp, result), ""]
    paper_shaped = out / "table_paper.md"  # an experiment's own paper-shaped table (Experiment.report), if any
    if paper_shaped.is_file():  # then the comparisons, the selection and the note that follow table.txt's table
        lines += [paper_shaped.read_text().strip(), "", "```", result.get("findings", "").strip(), "```", ""]
    else:
        lines += ["```", (out / "table.txt").read_text().strip(), "```", ""]
    return "\n".join(lines + pics)


def _wall(result: dict) -> str:
    """``"18.1 min"``, or for a table made in several calls (``--resume``) their sum and each call."""
    calls = result.get("wall_s_calls") or [result["wall_s"]]
    if len(calls) == 1:
        return f"{calls[0] / 60:.1f} min"
    return (f"{sum(calls) / 60:.1f} min in {len(calls)} calls (resumed: "
            + " + ".join(f"{c / 60:.1f}" for c in calls) + " min)")


def _per_run(exp, result: dict) -> str:
    """``"Time per run (wall / CPU): ConvNet 12–17 s / 4–5 s, ..."``: the training epochs of one model and seed,
    wall clock and the process's CPU time (on a shared machine the CPU time is what an idle one would take)."""
    from .experiments.summary import model_label

    def span(v: list[float]) -> str:
        return f"{min(v):.0f}–{max(v):.0f}" if len(v) > 1 and round(min(v)) != round(max(v)) else f"{v[0]:.0f}"

    times: dict[str, tuple[list[float], list[float]]] = {}
    for r in result["runs"]:
        wall, cpu = times.setdefault(r["model"], ([], []))
        wall.append(r["wall_s"]); cpu.append(r.get("cpu_s", float("nan")))
    total = sum(c for _, cpu in times.values() for c in cpu)
    return ("Time per run, wall / CPU (training epochs): " + ", ".join(
        f"{model_label(exp, k)} {span(w)} s / {span(c)} s" for k, (w, c) in times.items())
        + f"; CPU time of all runs {total / 60:.1f} min.")


def _load(machine: dict) -> str:
    """``", load 7.3 on 2 cores (shared)"`` when the results recorded the load average at the end."""
    load, cores = machine.get("load_avg_1min"), machine.get("cpu_count")
    if load is None or load != load or not cores:
        return ""
    return f", load average {load:.1f} on {cores} cores" + (" (shared with other jobs)" if load > cores + 0.5 else "")


def reproduce(mode: str, report: Path | None = None, only: list[str] | None = None,
              runs: Path = Path("runs/reproduce"), write_docs: bool = False, resume: bool = False) -> Path:
    """Run ``mode`` (one of :data:`MODES`) for every experiment (or ``only`` those) and update the report:
    ``report``, else ``docs/<document>`` with ``write_docs``, else ``runs/<document>`` (see the module docs)."""
    from .experiments.registry import EXPERIMENTS, experiment
    from .experiments.config import ConfigError, load_config, preset_path
    from .experiments.harness import train
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    names = only or [*EXPERIMENTS, *(SECTIONS if mode in ("quick", "paper") else [])]
    unknown = [n for n in names if n not in EXPERIMENTS and n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown experiments {unknown}; choose from {', '.join([*EXPERIMENTS, *SECTIONS])}")
    tracked = Path("docs") / DOCUMENTS[mode]
    if report is None:
        report = tracked if write_docs else runs / DOCUMENTS[mode]
    figures = report.parent / "figures"

    def current() -> str:  # read again before every block: edits made while the runs train are kept
        start = report if report.exists() else tracked if tracked.exists() else None
        return start.read_text() if start is not None else "# Reproduction report\n"

    for name in names:  # every block this call writes, checked before anything trains or is written
        check_markers(current(), f"{mode}:{name}", str(report if report.exists() else tracked))

    results: dict[str, dict] = {}
    t0 = time.time()
    for name in names:
        if name not in EXPERIMENTS:
            continue
        exp = experiment(name)
        try:
            preset = preset_path(exp.presets, mode)
        except ConfigError:
            print(f"{name}: no {mode} preset; skipped")
            continue
        out = runs / mode / name
        cfg = load_config(exp.config_class, preset, out=str(out))
        result = train(exp, cfg, resume=resume, overwrite=not resume)
        result["out"] = str(out)
        results[name] = result
        command = f"pseudosl {name} train --preset {mode} --out {out}"
        text = replace_section(current(), f"{mode}:{name}",
                               experiment_section(exp, cfg, result, command, figures, "figures"), str(report))
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text)  # after every experiment: an interrupted reproduction keeps what it made
    for name in EXPERIMENTS:  # sections also see the runs of an earlier `reproduce --only ...`
        saved = runs / mode / name / "results.json"
        if name not in results and saved.is_file():
            results[name] = {**json.loads(saved.read_text()), "out": str(saved.parent)}
    for name in names:
        if name in SECTIONS:
            text = replace_section(current(), f"{mode}:{name}", _section(name)(mode, runs / mode, figures, results),
                                   str(report))
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(text)
    print(f"wrote {report} ({(time.time() - t0) / 60:.1f} min)")
    return report
