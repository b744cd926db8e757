"""``pseudosl reproduce --quick | --paper``: every experiment's preset, then the report's tables.

Each registered experiment (:data:`pseudosl.experiments.registry.EXPERIMENTS`) is trained with its ``quick`` or
``paper`` preset through the shared harness (``--overwrite``: a reproduction starts afresh), then
its section of the report is written between markers::

    <!-- BEGIN quick:sudoku -->  ...  <!-- END quick:sudoku -->

in ``--report`` (default ``docs/reproduction.md`` when it exists in the working directory, else
``runs/reproduce/reproduction.md``).  Text outside the markers (the paper's numbers, the notes) is
left alone, so the report is hand-written prose around generated tables.  Figures are copied next to
the report, into ``figures/``.  Extra sections (the fidelity study) register in :data:`SECTIONS`.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["reproduce", "replace_section", "experiment_section", "SECTIONS"]

# name -> "module:function(mode, runs folder of this mode, figures folder, results so far) -> markdown";
# run after the experiments
SECTIONS: dict[str, str] = {"fidelity": "pseudosl.experiments.fidelity:reproduce_section"}


def _section(name: str) -> Callable[[str, Path, Path, dict], str]:
    import importlib
    module, fn = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), fn)


def replace_section(text: str, key: str, body: str) -> str:
    """``text`` with the block between ``<!-- BEGIN key -->`` and ``<!-- END key -->`` set to ``body``
    (appended at the end, with its markers, when the block is missing)."""
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text)
    return text.rstrip("\n") + "\n\n" + block + "\n"


def experiment_section(exp, cfg, result: dict, command: str, figures: Path, rel: str) -> str:
    """Markdown: the command, the setting, ours beside the paper, and the figures."""
    from .experiments.harness import format_table
    out = Path(result["out"])
    stem = f"{exp.name}-{cfg.preset}"
    pics = []
    for kind in ("curves", "examples"):
        src = out / f"{kind}.png"
        if src.exists():
            figures.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, figures / f"{stem}-{kind}.png")
            pics.append(f"![{exp.name} {kind}]({rel}/{stem}-{kind}.png)")
    m = result["machine"]
    lines = [f"Command: `{command}` (config {result['content_key']}, seeds {cfg.seeds}, {cfg.epochs} epochs).",
             f"Machine: {m['device']}, torch {m['torch']}, {m['threads']} threads" + _load(m) + "; wall time "
             f"{result['wall_s'] / 60:.1f} min.", ""]
    paper_shaped = out / "table_paper.md"  # an experiment's own paper-shaped table (Experiment.report), if any
    if paper_shaped.is_file():
        lines += [paper_shaped.read_text().strip(), ""]
    else:
        lines += ["```", format_table(exp, result["summary"], f"{exp.name}, preset {cfg.preset}"), "```", ""]
    return "\n".join(lines + pics)


def _load(machine: dict) -> str:
    """``", load 7.3 on 2 cores (shared)"`` when the results recorded the load average at the end."""
    load, cores = machine.get("load_avg_1min"), machine.get("cpu_count")
    if load is None or load != load or not cores:
        return ""
    return f", load average {load:.1f} on {cores} cores" + (" (shared with other jobs)" if load > cores + 0.5 else "")


def reproduce(mode: str, report: Path | None = None, only: list[str] | None = None,
              runs: Path = Path("runs/reproduce")) -> Path:
    """Run ``mode`` (``quick`` or ``paper``) for every experiment (or ``only`` those) and update ``report``."""
    from .experiments.registry import EXPERIMENTS, experiment
    from .experiments.config import load_config
    from .experiments.harness import train
    if mode not in ("quick", "paper"):
        raise ValueError(f"mode must be 'quick' or 'paper', got {mode!r}")
    names = only or [*EXPERIMENTS, *SECTIONS]
    unknown = [n for n in names if n not in EXPERIMENTS and n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown experiments {unknown}; choose from {', '.join([*EXPERIMENTS, *SECTIONS])}")
    if report is None:
        report = Path("docs/reproduction.md") if Path("docs/reproduction.md").exists() else runs / "reproduction.md"
    figures = report.parent / "figures"
    text = report.read_text() if report.exists() else "# Reproduction report\n"
    results: dict[str, dict] = {}
    t0 = time.time()
    for name in names:
        if name not in EXPERIMENTS:
            continue
        exp = experiment(name)
        out = runs / mode / name
        cfg = load_config(exp.config_class, exp.preset_path(mode), out=str(out))
        result = train(exp, cfg, overwrite=True)
        result["out"] = str(out)
        results[name] = result
        command = f"pseudosl {name} train --preset {mode} --out {out}"
        text = replace_section(text, f"{mode}:{name}", experiment_section(exp, cfg, result, command, figures, "figures"))
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text)  # after every experiment: an interrupted reproduction keeps what it made
    for name in EXPERIMENTS:  # sections also see the runs of an earlier `reproduce --only ...`
        saved = runs / mode / name / "results.json"
        if name not in results and saved.is_file():
            results[name] = {**json.loads(saved.read_text()), "out": str(saved.parent)}
    for name in names:
        if name in SECTIONS:
            text = replace_section(text, f"{mode}:{name}", _section(name)(mode, runs / mode, figures, results))
            report.write_text(text)
    print(f"wrote {report} ({(time.time() - t0) / 60:.1f} min)")
    return report
