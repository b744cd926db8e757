"""The detox outputs beside the harness's: the paper-shaped table and the figures.

* ``table_paper.md``: paper Table 3's layout -- one row per model, then the same model with word banning;
  columns EMT / TP on full, toxic and non-toxic prompts, then perplexity (mean ± std over seeds, lower is
  better), with the paper's value beside ours where the experiment's ``PAPER`` holds one.
* ``comparison.png``: EMT (full prompts) and perplexity per model, with and without word banning.
* ``examples.png``: per model, the distribution of each test prompt's maximum toxicity over its continuations.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["paper_table", "write_report", "plot_comparison", "plot_examples", "COLUMNS"]

COLUMNS = (("emt_full", "Full EMT"), ("tp_full", "Full TP"), ("emt_toxic", "Toxic EMT"), ("tp_toxic", "Toxic TP"),
           ("emt_nontoxic", "Non-toxic EMT"), ("tp_nontoxic", "Non-toxic TP"), ("ppl", "PPL"))


def _cell(row: dict, key: str, paper: float | None) -> str:
    mean = row.get(f"{key}_mean", math.nan)
    std = row.get(f"{key}_std", 0.0)
    ours = "—" if math.isnan(mean) else (f"{mean:.2f}" if key.endswith("ppl") else f"{mean:.3f}") + (
        f" ± {std:.2f}" if std else "")
    return ours + (f" ({paper:.2f})" if paper is not None else "")


def paper_table(summary: dict[str, dict], labels: dict[str, str], title: str = "",
                paper: dict[str, dict[str, float]] | None = None) -> str:
    """Markdown table: per model a plain row and a word-banning row (``paper[model][metric]`` in parentheses,
    ``ban_<metric>`` for the word-banning row: the experiment's ``paper`` dict)."""
    paper = paper or {}
    head = "| Model | " + " | ".join(c for _, c in COLUMNS) + " | seeds |"
    lines = ([f"**{title}**", ""] if title else []) + [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for name, row in summary.items():
        for ban in (False, True):
            label = labels.get(name, name) + (" + word banning" if ban else "")
            keys = [("ban_" if ban else "") + k for k, _ in COLUMNS]
            cells = [_cell(row, k, paper.get(name, {}).get(k)) for k in keys]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {len(row['seeds'])} |")
    lines += ["", "Lower is better everywhere.  EMT: expected maximum toxicity over the continuations of a prompt; "
                  "TP: share of prompts with at least one toxic continuation; PPL: held-out perplexity (with word "
                  "banning: on the least toxic half of the held-out text, banned tokens renormalised away)."]
    if not paper:
        lines.append("The paper's Table 3 values are not transcribed (not available here; docs/detox.md).")
    return "\n".join(lines)


def plot_comparison(summary: dict[str, dict], labels: dict[str, str], path: str | Path, title: str = "") -> None:
    """Bars: EMT on all prompts and perplexity, per model, without / with word banning."""
    names = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, ylabel in ((axes[0], "emt_full", "expected maximum toxicity"), (axes[1], "ppl", "perplexity")):
        for j, ban in enumerate((False, True)):
            k = ("ban_" if ban else "") + key
            means = [summary[n].get(f"{k}_mean", math.nan) for n in names]
            means = [m if math.isfinite(m) else math.nan for m in means]  # an infinite perplexity is not drawn
            stds = [summary[n].get(f"{k}_std", 0.0) for n in names]
            ax.bar([i + 0.38 * j for i in range(len(names))], means, 0.36, yerr=stds, capsize=3,
                   label="word banning" if ban else "plain", color=f"C{j}")
        ax.set_xticks([i + 0.19 for i in range(len(names))], [labels.get(n, n) for n in names])
        ax.set(ylabel=ylabel, title=ylabel + " (lower is better)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_examples(predictions: dict[str, Any], path: str | Path, labels: dict[str, str]) -> None:
    """Histograms of the per-prompt maximum toxicity (test prompts, first seed), per model, plain and banned."""
    names = [n for n, p in predictions.items() if p and "max_scores" in p]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        p = predictions[name]
        for key, label, color in (("max_scores", "plain", "C0"), ("ban_max_scores", "word banning", "C1")):
            if key in p:
                ax.hist(p[key], bins=20, range=(0, 1), alpha=0.55, label=label, color=color)
        ax.set(title=labels.get(name, name), xlabel="max toxicity of a prompt's continuations", ylabel="prompts")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: dict, out: Path, labels: dict[str, str]) -> None:  # result["paper"]: the experiment's PAPER
    """``table_paper.md`` and ``comparison.png`` in ``out`` from a ``results.json`` dict."""
    cfg = result["config"]
    title = (f"detox, preset {cfg['preset']}, config {result['content_key']}: model {cfg['model']}, "
             f"scorer {cfg['scorer']}, {cfg['eval_generations']} continuations x {cfg['n_test_prompts']} prompts")
    table = paper_table(result["summary"], labels, title, result.get("paper"))
    (out / "table_paper.md").write_text(table + "\n")
    print(table)
    plot_comparison(result["summary"], labels, out / "comparison.png", title)
