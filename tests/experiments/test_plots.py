"""curves.png: loss terms apart, no validation label without a validation split, no zoom on flat panels."""

import matplotlib.pyplot as plt
import pytest

from pseudosl.experiments import plots
from pseudosl.experiments.plots import _loss_panels, _ylim, plot_curves


def _figure(monkeypatch, runs, metrics, units=None):
    """Draw ``runs`` and return the figure instead of closing it."""
    shown = []
    monkeypatch.setattr(plots.plt, "close", lambda fig: shown.append(fig))
    plot_curves(runs, metrics, "/dev/null", units=units)
    return shown[0]


def _run(model, seed, val, **extra):
    h = [{"epoch": e, "train_loss": 2.0 / e, "train_data": 1.5 / e, **({"train_constraint": 0.5 / e} if extra else {}),
          "test_exact": 10.0 * e, **({"val_exact": 9.0 * e} if val else {})} for e in (1, 2, 3)]
    return {"model": model, "seed": seed, "history": h}


def test_loss_panels_split_the_data_and_the_weighted_constraint_term(monkeypatch):
    runs = [_run("rnn", 0, val=False), _run("rnn_psl", 0, val=False, constraint=True)]
    assert _loss_panels(runs) == [("train_data", "training data term (cross-entropy / NLL)"),
                                  ("train_constraint", "training constraint term (weight × SL / PSL)")]
    fig = _figure(monkeypatch, runs, ("exact",))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["training data term (cross-entropy / NLL)", "training constraint term (weight × SL / PSL)"]
    assert titles[2] == "exact (test split)"                            # no "dashed: validation" without one
    assert len(fig.axes[1].get_lines()) == 1                             # only the constrained model has the term
    xs = [line.get_xdata()[0] for line in fig.axes[2].get_lines()]
    assert xs[0] != xs[1] and all(line.get_marker() not in (None, "None", "") for line in fig.axes[2].get_lines())
    plt.close(fig)
    fig = _figure(monkeypatch, [_run("rnn", 0, val=True)], ("exact",))
    assert fig.axes[1].get_title() == "exact (solid: test, dashed: validation)"
    plt.close(fig)
    assert _loss_panels([{"model": "a", "seed": 0, "history": [{"epoch": 1, "train_loss": 1.0}]}]) == \
        [("train_loss", "training loss")]


@pytest.mark.parametrize("values, percent, expected", [
    ([6.0], False, (0.0, 6.6)),                    # a single point: the axis starts at 0, not at 5.68
    ([6.0, 6.1, 6.05], False, (0.0, 6.71)),        # a flat line likewise
    ([1.0, 2.0], False, (0.94, 2.06)),             # a real range: autoscaled with a margin
    ([0.0, 0.0], True, (0.0, 5.0)),                # percent axes span at least 0..5
    ([float("nan")], False, (0.0, 1.0)),
])
def test_axis_limits(values, percent, expected):
    assert _ylim(values, percent) == pytest.approx(expected)
