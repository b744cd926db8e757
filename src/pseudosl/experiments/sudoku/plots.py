"""The Sudoku example figure: a few predicted grids per model, the wrong cells marked (curves: ``..plots``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch import Tensor  # noqa: E402

__all__ = ["plot_grids"]


def plot_grids(test, predictions: dict[str, Tensor], path: str | Path, labels: dict[str, str] | None = None,
               n_puzzles: int = 3) -> None:
    """Rows = models, columns = the first ``n_puzzles`` test puzzles.

    Givens in black, correct predictions of blanks in bold blue, wrong cells in red on red
    (a legend at the bottom says so).
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
    from matplotlib.patches import Patch
    handles = [Patch(facecolor="white", edgecolor="black", label="given (black digit)"),
               Patch(facecolor="white", edgecolor="tab:blue", label="blank filled correctly (bold blue)"),
               Patch(facecolor="#f4a6a6", edgecolor="red", label="wrong cell (red on red)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Greedy predictions on the first test puzzles (title: wrong cells out of 81)", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
