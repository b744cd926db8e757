"""The Sudoku example figure: a few predicted grids per model, the wrong cells marked (curves: ``..plots``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from torch import Tensor  # noqa: E402

from .data import box_shape  # noqa: E402

__all__ = ["plot_grids"]


def plot_grids(test, predictions: dict[str, Tensor], path: str | Path, labels: dict[str, str] | None = None,
               n_puzzles: int = 3) -> None:
    """Rows = models, columns = the first ``n_puzzles`` test puzzles (boards of any size).

    Givens in black, correct predictions of blanks in bold blue, wrong cells in red on red
    (a legend at the bottom says so); thick lines mark the boxes.
    """
    models = list(predictions)
    n = min(n_puzzles, len(test))
    size = test.size
    br, bc = box_shape(size)
    font = {4: 12, 6: 10, 9: 7}[size]
    fig, axes = plt.subplots(len(models), n, figsize=(2.6 * n, 2.7 * len(models)), squeeze=False)
    for i, name in enumerate(models):
        pred = predictions[name]
        for j in range(n):
            ax = axes[i][j]
            puz, sol, p = test.puzzles[j].tolist(), test.solutions[j].tolist(), pred[j].tolist()
            for cell in range(size * size):
                r, c = divmod(cell, size)
                wrong = p[cell] != sol[cell]
                if wrong:
                    ax.add_patch(plt.Rectangle((c, size - 1 - r), 1, 1, color="#f4a6a6"))
                color = "red" if wrong else ("black" if puz[cell] else "tab:blue")
                ax.text(c + 0.5, size - 0.5 - r, str(p[cell]), ha="center", va="center", fontsize=font, color=color,
                        fontweight="bold" if puz[cell] == 0 else "normal")
            for k in range(size + 1):
                ax.axhline(k, color="k", lw=1.5 if k % br == 0 else 0.3)   # bands: br rows each
                ax.axvline(k, color="k", lw=1.5 if k % bc == 0 else 0.3)   # stacks: bc columns each
            ax.set(xlim=(0, size), ylim=(0, size), xticks=[], yticks=[], aspect="equal")
            n_wrong = sum(a != b for a, b in zip(p, sol))
            n_blank = sum(v == 0 for v in puz)
            ax.set_title(f"{(labels or {}).get(name, name)}: {n_wrong} of {n_blank} blanks wrong", fontsize=8)
    handles = [Patch(facecolor="white", edgecolor="black", label="given (black digit)"),
               Patch(facecolor="white", edgecolor="tab:blue", label="blank filled correctly (bold blue)"),
               Patch(facecolor="#f4a6a6", edgecolor="red", label="wrong cell (red on red)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"Greedy predictions on the first test puzzles ({size}x{size})", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
