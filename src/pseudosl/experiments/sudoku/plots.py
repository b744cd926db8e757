"""Figures: training curves per model, and a few predicted grids with the wrong cells marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch import Tensor  # noqa: E402

__all__ = ["plot_curves", "plot_grids"]


def plot_curves(runs: list[dict], path: str | Path) -> None:
    """Train loss, test Exact and test blank-cell accuracy per epoch, one line per (model, seed)."""
    fig, (ax_loss, ax_exact, ax_blank) = plt.subplots(1, 3, figsize=(15, 4))
    colors = {}
    for r in runs:
        h = r["history"]
        c = colors.setdefault(r["model"], f"C{len(colors)}")
        label = r["model"] if r["seed"] == min(x["seed"] for x in runs if x["model"] == r["model"]) else None
        ax_loss.plot([e["epoch"] for e in h], [e["train_loss"] for e in h], color=c, alpha=0.8, label=label)
        ev = [e for e in h if "test_exact" in e]
        ax_exact.plot([e["epoch"] for e in ev], [e["test_exact"] for e in ev], color=c, alpha=0.8, label=label)
        ax_blank.plot([e["epoch"] for e in ev], [e.get("test_blank_acc", 0) for e in ev], color=c, alpha=0.8,
                      label=label)
    ax_loss.set(xlabel="epoch", ylabel="train loss (CE + weight x SL/PSL)", yscale="log", title="training loss")
    ax_exact.set(xlabel="epoch", ylabel="test exact (%)", title="test exact (greedy)")
    ax_blank.set(xlabel="epoch", ylabel="test accuracy on blank cells (%)", title="blank cells (greedy)")
    for ax in (ax_loss, ax_exact, ax_blank):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_grids(test, predictions: dict[str, Tensor], path: str | Path, labels: dict[str, str] | None = None,
               n_puzzles: int = 3) -> None:
    """Rows = models, columns = the first ``n_puzzles`` test puzzles.

    Givens in black, correct predictions of blanks in bold blue, wrong cells in red on red.
    """
    models = list(predictions)
    n = min(n_puzzles, len(test))
    fig, axes = plt.subplots(len(models), n, figsize=(2.6 * n, 2.7 * len(models)), squeeze=False)
    for i, name in enumerate(models):
        pred = predictions[name]
        for j in range(n):
            ax = axes[i][j]
            puz, sol, p = test.puzzles[j].tolist(), test.solutions[j].tolist(), pred[j].tolist()
            for cell in range(81):
                r, c = divmod(cell, 9)
                wrong = p[cell] != sol[cell]
                if wrong:
                    ax.add_patch(plt.Rectangle((c, 8 - r), 1, 1, color="#f4a6a6"))
                color = "red" if wrong else ("black" if puz[cell] else "tab:blue")
                ax.text(c + 0.5, 8.5 - r, str(p[cell]), ha="center", va="center", fontsize=7, color=color,
                        fontweight="bold" if puz[cell] == 0 else "normal")
            for k in range(10):
                w = 1.5 if k % 3 == 0 else 0.3
                ax.axhline(k, color="k", lw=w)
                ax.axvline(k, color="k", lw=w)
            ax.set(xlim=(0, 9), ylim=(0, 9), xticks=[], yticks=[], aspect="equal")
            n_wrong = sum(a != b for a, b in zip(p, sol))
            ax.set_title(f"{(labels or {}).get(name, name)}: {n_wrong} wrong", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
