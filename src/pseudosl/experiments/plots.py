"""Figures shared by every experiment: the training curves (the loss terms and each metric per epoch, per model
and seed: :func:`plot_curves`) and the paired effect of each constrained model over the budget
(:func:`plot_paired_by_epoch`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["plot_curves", "plot_paired_by_epoch"]

_MARKERS = "osD^vP*X"


def _loss_panels(runs: list[dict]) -> list[tuple[str, str]]:
    """(history key, title) of the loss panels: the data term and the weighted constraint term apart when the
    objective reports them (``parts`` ``data`` / ``constraint``), else the total training loss."""
    keys = {k for r in runs for e in r["history"] for k in e}
    if "train_data" not in keys:
        return [("train_loss", "training loss")]
    panels = [("train_data", "training data term (cross-entropy / NLL)")]
    if "train_constraint" in keys:
        panels.append(("train_constraint", "training constraint term (weight × SL / PSL)"))
    return panels


def _ylim(values: list[float], percent: bool) -> tuple[float, float]:
    """Percent axes span 0..max(5, top) so a flat line at 0 reads as 0; other axes autoscale, but include 0
    when the values barely vary (a single point, a flat line), so no panel zooms into rounding noise."""
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return (0.0, 5.0 if percent else 1.0)
    lo, hi = min(finite), max(finite)
    if percent:
        return (0.0, max(5.0, hi * 1.08))
    if hi - lo <= 0.1 * max(abs(lo), abs(hi), 1e-12):
        return (min(0.0, lo * 1.1), max(0.0, hi * 1.1) or 1.0)
    pad = 0.06 * (hi - lo)
    return (lo - pad, hi + pad)


def plot_curves(runs: list[dict], metrics: tuple[str, ...], path: str | Path, labels: dict[str, str] | None = None,
                title: str = "", units: dict[str, str] | None = None) -> None:
    """The loss panels (:func:`_loss_panels`), then one panel per metric (test solid, validation dashed; the title
    names the splits drawn, the legend the models drawn).

    One colour and marker per model; seeds share them.  Every point has its marker and each model is
    shifted by a few hundredths of an epoch, so models whose curves coincide stay visible side by side.
    Percent axes (every metric not in ``units``) span at least 0..5; see :func:`_ylim`.  Undefined (NaN)
    values are gaps.
    """
    labels, units = labels or {}, units or {}
    loss_panels = _loss_panels(runs)
    n_panels = len(loss_panels) + len(metrics)
    fig, axes = plt.subplots(1, n_panels, figsize=(4.6 * n_panels, 4), squeeze=False)
    ax_loss, ax_metrics = axes[0][:len(loss_panels)], axes[0][len(loss_panels):]
    models = list(dict.fromkeys(r["model"] for r in runs))
    for r in runs:
        j = models.index(r["model"])
        style = dict(color=f"C{j % 10}", marker=_MARKERS[j % len(_MARKERS)], markersize=3.5, alpha=0.8, lw=1.2)
        shift = 0.05 * (j - (len(models) - 1) / 2)
        first_seed = r["seed"] == min(x["seed"] for x in runs if x["model"] == r["model"])
        label = labels.get(r["model"], r["model"]) if first_seed else None
        for ax, (key, _) in zip(ax_loss, loss_panels):
            ev = [e for e in r["history"] if key in e]
            if ev:
                ax.plot([e["epoch"] + shift for e in ev], [e[key] for e in ev], label=label, **style)
        for ax, m in zip(ax_metrics, metrics):
            named = False  # the model is named once per panel, on the first split drawn
            for split, ls in (("test", "-"), ("val", "--")):
                ev = [e for e in r["history"] if f"{split}_{m}" in e]
                if ev:
                    ax.plot([e["epoch"] + shift for e in ev], [e[f"{split}_{m}"] for e in ev], ls=ls,
                            label=None if named else label, **style)
                    named = True
    for ax, (key, name) in zip(ax_loss, loss_panels):
        losses = [e[key] for r in runs for e in r["history"] if key in e]
        spans_decade = bool(losses) and min(losses) > 0 and max(losses) >= 10 * min(losses)
        ax.set(xlabel="epoch", ylabel=name.split(" (")[0], title=name, yscale="log" if spans_decade else "linear")
    for ax, m in zip(ax_metrics, metrics):
        vals = [e[k] for r in runs for e in r["history"] for k in (f"test_{m}", f"val_{m}") if k in e]
        unit = units.get(m, "%")
        drawn = [split for split in ("test", "val") if any(f"{split}_{m}" in e for r in runs for e in r["history"])]
        split_note = {("test", "val"): "solid: test, dashed: validation", ("test",): "test split",
                      ("val",): "validation split, dashed", (): "not evaluated during training"}[tuple(drawn)]
        ax.set(xlabel="epoch", ylabel=f"{m} ({unit})" if unit else m, title=f"{m} ({split_note})",
               ylim=_ylim(vals, unit == "%"))
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        most = 0.05 * (len(models) - 1) / 2
        fig.suptitle(title + (f"  (models shifted by up to ±{most:.2f} epoch so that equal curves stay visible)"
                              if len(models) > 1 else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_paired_by_epoch(curves: list[dict], path: str | Path, labels: dict[str, str] | None = None, title: str = "",
                         rule: str = "") -> None:
    """One panel per metric of ``curves`` (:func:`.convergence.paired_by_epoch`): per pair a line of the mean
    per-seed difference "model - base" at each epoch with its 95 % t band, the zero line, and in the legend the
    number of paired seeds (its range where it changes with the epoch); the panel title says which sign is
    better.  ``rule`` (which checkpoint of a run counts at an epoch) is printed under the panels."""
    labels = labels or {}
    metrics = list(dict.fromkeys(c["metric"] for c in curves))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.2), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        ax.axhline(0.0, color="black", lw=0.9)
        for j, c in enumerate(x for x in curves if x["metric"] == m):
            pts = c["points"]
            x = [p["epoch"] for p in pts]
            ns = sorted({p["n"] for p in pts})
            n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]} by epoch"
            label = f"{labels.get(c['model'], c['model'])} vs {labels.get(c['base'], c['base'])} ({n})"
            ax.plot(x, [p["mean"] for p in pts], color=f"C{j % 10}", marker=_MARKERS[j % len(_MARKERS)],
                    markersize=3, lw=1.3, label=label)
            ax.fill_between(x, [p["lo"] for p in pts], [p["hi"] for p in pts], color=f"C{j % 10}", alpha=0.15, lw=0)
        first = next(c for c in curves if c["metric"] == m)
        u = first["unit"]
        sign = "below" if first["lower_is_better"] else "above"
        ax.set(xlabel="epoch (training budget)", ylabel=f"difference ({'points' if u == '%' else u})" if u else
               "difference", title=f"test {m}, model − base\n({sign} 0: the model beats its base"
               + ("; lower is better)" if first["lower_is_better"] else ")"))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle((title + ": " if title else "") + "paired difference per epoch, mean over seeds and 95 % t interval",
                 fontsize=10)
    caption = textwrap.wrap(rule[:1].upper() + rule[1:] + "." if rule else "", 70 + 50 * len(metrics))
    if caption:
        fig.text(0.01, 0.01, "\n".join(caption), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.035 * len(caption), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
