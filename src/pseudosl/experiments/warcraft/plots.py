"""Example figure: test maps with the true minimum-cost path and each model's predicted edges."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from .grid import edge_index, mask_to_edges, shortest_paths  # noqa: E402

__all__ = ["plot_maps"]


def _segments(edges: np.ndarray, k: int) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Pixel coordinates (x, y) of the cell centres joined by each edge that is on."""
    pairs, _ = edge_index(k)
    out = []
    for a, b in pairs[np.asarray(edges).astype(bool)]:
        (ra, ca), (rb, cb) = divmod(int(a), k), divmod(int(b), k)
        out.append(((8 * ca + 3.5, 8 * ra + 3.5), (8 * cb + 3.5, 8 * rb + 3.5)))
    return out


def plot_maps(data, predictions: dict[str, np.ndarray], path: str | Path, labels: dict[str, str] | None = None,
              n: int = 4) -> None:
    """One row per test map: the map with the true path (white), then one panel per model (its edges in colour).

    A panel's title says whether the prediction is a valid path and its cost against the optimum.
    ``data`` is a :class:`~.train.WarcraftData`; ``predictions`` maps a model name to ``(N, E)`` 0/1.
    """
    from .metrics import path_metrics
    labels = labels or {}
    n = min(n, len(data))
    k = data.grid
    names = list(predictions)
    true = mask_to_edges(shortest_paths(data.weights[:n])[0])
    fig, axes = plt.subplots(n, 1 + len(names), figsize=(2.6 * (1 + len(names)), 2.7 * n), squeeze=False)
    for i in range(n):
        panels = [("label", true[i], "white")] + [(m, predictions[m][i], f"C{j}") for j, m in enumerate(names)]
        for ax, (name, edges, colour) in zip(axes[i], panels):
            ax.imshow(data.maps[i].numpy() if hasattr(data.maps, "numpy") else data.maps[i])
            if name != "label":  # the true path, thin, under every prediction
                for (x0, y0), (x1, y1) in _segments(true[i], k):
                    ax.plot([x0, x1], [y0, y1], color="white", lw=1.2, alpha=0.8)
            for (x0, y0), (x1, y1) in _segments(edges, k):
                ax.plot([x0, x1], [y0, y1], color=colour, lw=2.6 if name != "label" else 2.0)
            if name == "label":
                ax.set_title(f"map {i}: optimum {data.optimum[i]:.1f}", fontsize=8)
            else:
                m, per = path_metrics(np.asarray(edges)[None], data.weights[i:i + 1], data.optimum[i:i + 1])
                state = ("exact" if per["exact"][0] else f"valid, cost {per['cost'][0]:.1f}"
                         if per["consistent"][0] else "not a path")
                ax.set_title(f"{labels.get(name, name)}: {state}", fontsize=8)
            ax.set_xticks([]); ax.set_yticks([])
    handles = [Line2D([], [], color="white", lw=2, label="true minimum-cost path")]
    handles += [Line2D([], [], color=f"C{j}", lw=2.6, label=f"{labels.get(m, m)} (greedy)") for j, m in enumerate(names)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, facecolor="0.6")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
