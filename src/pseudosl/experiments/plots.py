"""Training curves shared by every experiment: the loss and each metric per epoch, per model and seed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["plot_curves"]


def plot_curves(runs: list[dict], metrics: tuple[str, ...], path: str | Path, labels: dict[str, str] | None = None,
                title: str = "", units: dict[str, str] | None = None) -> None:
    """One panel for the training loss, one per metric (test solid, validation dashed).

    One colour per model; seeds share it.  Percent axes (every metric not in ``units``) span at
    least 0..5 so a flat line at 0 reads as 0, not as noise around it; other units autoscale.
    Undefined (NaN) values are gaps.
    """
    labels, units = labels or {}, units or {}
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(4.6 * (1 + len(metrics)), 4), squeeze=False)
    ax_loss, ax_metrics = axes[0][0], axes[0][1:]
    colors: dict[str, str] = {}
    for r in runs:
        h = r["history"]
        c = colors.setdefault(r["model"], f"C{len(colors)}")
        first_seed = r["seed"] == min(x["seed"] for x in runs if x["model"] == r["model"])
        label = labels.get(r["model"], r["model"]) if first_seed else None
        ax_loss.plot([e["epoch"] for e in h], [e["train_loss"] for e in h], color=c, alpha=0.8, label=label)
        for ax, m in zip(ax_metrics, metrics):
            for split, style in (("test", "-"), ("val", "--")):
                ev = [e for e in h if f"{split}_{m}" in e]
                if ev:
                    n_finite = sum(e[f"{split}_{m}"] == e[f"{split}_{m}"] for e in ev)  # NaN: a gap
                    ax.plot([e["epoch"] for e in ev], [e[f"{split}_{m}"] for e in ev], style, color=c, alpha=0.8,
                            label=label if split == "test" else None, marker="o" if n_finite < 3 else None)
    losses = [e["train_loss"] for r in runs for e in r["history"]]
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="training loss",
                yscale="log" if losses and min(losses) > 0 else "linear")
    for ax, m in zip(ax_metrics, metrics):
        vals = [e[k] for r in runs for e in r["history"] for k in (f"test_{m}", f"val_{m}") if k in e]
        unit = units.get(m, "%")
        top = max([v for v in vals if v == v and abs(v) != float("inf")], default=0.0) * 1.08
        ax.set(xlabel="epoch", ylabel=f"{m} ({unit})" if unit else m, title=f"{m} (solid: test, dashed: validation)",
               ylim=(0, max(5.0, top) if unit == "%" else top or 1.0))
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
