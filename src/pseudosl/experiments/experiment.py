"""The interface an experiment implements for the harness, declared once: :class:`Experiment` and its data,
:class:`Splits`.

An experiment is a subclass of :class:`Experiment`: its data, models, objective (:class:`.objective.Objective`) and
metrics, plus the table it reports.  The harness (:mod:`.harness`) and the training loop (:mod:`.loop`) do the rest.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, NamedTuple, TypeVar

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from .config import RunConfig
from .objective import Objective

__all__ = ["Action", "Experiment", "Splits"]

C = TypeVar("C", bound=RunConfig)


@dataclass
class Splits:
    """``train`` yields tuples of tensors for the objective; ``val``/``test`` are what ``evaluate`` takes.
    ``for_seed``: where each model seed has its own data (a split drawn per seed), the splits of a seed; these are
    then one seed's (:meth:`of_seed` is what a run of a given seed trains and is tested on)."""

    train: Dataset
    val: Any | None
    test: Any
    description: str = ""
    for_seed: Callable[[int], "Splits"] | None = None

    def of_seed(self, seed: int) -> "Splits":
        """The splits of model seed ``seed``: these, unless each seed has its own (``for_seed``)."""
        return self if self.for_seed is None else self.for_seed(seed)


class Action(NamedTuple):
    """An extra command-line step of an experiment (``pseudosl detox pretrain``): its help and what it runs."""

    help: str
    run: Callable[[Any], None]  # run(cfg)


class Experiment(abc.ABC, Generic[C]):
    """What an experiment adds to the harness.  Metrics are percentages, higher is better, unless
    ``units`` names another unit (e.g. ``{"cost_ratio": "x"}``), ``lower_is_better`` lists them, or
    :meth:`selection_order` (the validation order) says otherwise.

    ``baselines`` pairs a constrained model with its base (``{"rnn_psl": "rnn"}``): every table then
    reports their per-seed difference with a 95 % interval and a verdict
    (:func:`pseudosl.experiments.summary.paired_comparisons`).  ``decoders`` names extra test-time decoders
    (``{"constrained": "constrained"}``: config name -> label suffix, which may name config fields in braces,
    ``"resample {resample_candidates}"``, filled from the table's config) that ``evaluate(..., decoder=name)``
    implements; ``cfg.decoders`` picks some, each adds a row per model from the same checkpoints.  The harness
    seeds torch, numpy and Python with the run's seed before each decoder's evaluation.
    """

    name: str                                  # folder under runs/, e.g. "sudoku"
    config_class: type[C]
    labels: dict[str, str]                     # model name -> table label
    metrics: tuple[str, ...]                   # table columns; selection on validation compares them in order
    paper: dict[str, dict[str, float]] = {}    # model -> metric -> the paper's value
    units: dict[str, str] = {}                 # metric -> unit shown in tables and plots (default "%")
    lower_is_better: frozenset[str] = frozenset()  # metrics where smaller is better (for model selection)
    baselines: dict[str, str] = {}             # constrained model -> its base model, compared seed by seed
    comparison_metrics: tuple[str, ...] = ()  # the metrics compared seed by seed (default: ``metrics``)
    decoders: dict[str, str] = {}              # extra test-time decoders: name -> label suffix of their rows
    presets: Path                              # folder of the shipped <name>.toml presets (config.preset_path)
    curve_metrics: tuple[str, ...] = ()        # metrics plotted in curves.png (default: all of ``metrics``)
    test_curves: bool = True                   # evaluate the test split at every evaluation (False: at the end only)
    fidelity_models: tuple[str, ...] = ()      # globs of models whose seed-0 checkpoints `reproduce` measures

    @abc.abstractmethod
    def load_data(self, cfg: C) -> Splits: ...

    @abc.abstractmethod
    def build_model(self, name: str, cfg: C) -> nn.Module: ...

    @abc.abstractmethod
    def objective(self, model: nn.Module, name: str, cfg: C) -> Objective:
        """What trains ``model``: ``forward(*batch, constrained=bool)`` returns ``(loss, parts)`` and ``.model`` is
        ``model`` (:class:`.objective.Objective`; the shared :class:`.objective.ConstrainedObjective` for data term
        + weight x SL/PSL)."""

    @abc.abstractmethod
    def evaluate(self, model: nn.Module, data: Any, cfg: C, accelerator: Any,
                 decoder: str | None = None) -> tuple[dict[str, float], Any]:
        """Metrics (``metrics`` keys at least) and the predictions on ``data``; the model is in eval mode.
        ``decoder``: one of ``decoders`` (called only with a name it lists), ``None`` the model's own decoding."""

    def optimizer(self, model: nn.Module, cfg: C) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def plot_examples(self, test: Any, predictions: dict[str, Any], path: Path) -> None:
        """Optional figure of a few test predictions per model (the first seed of each)."""

    def fidelity_inputs(self, model: nn.Module, test: Any, n_examples: int) -> tuple[Any, Tensor, str]:
        """For ``pseudosl fidelity`` (autoregressive models): an engine bound to the first ``n_examples`` test
        inputs, the ``(B, n)`` anchors to approximate around, and how the anchors were drawn (one line)."""
        raise ValueError(f"pseudosl fidelity does not support the {self.name} experiment (no autoregressive model)")

    def fidelity_language_model(self, cfg: C) -> str | None:
        """For the fidelity block of ``pseudosl reproduce``: the ``from_pretrained`` folder (or model name) of the
        language model this config's runs start from, if the experiment has one (detox); ``None`` otherwise."""
        return None

    def selection_order(self, cfg: C | None = None) -> list[str]:
        """The validation metrics that select a checkpoint, in order (:func:`selection_score`, the one rule);
        by default ``metrics``."""
        return list(self.metrics)

    def primary(self, cfg: C) -> tuple[str, str, str] | None:
        """The comparison the experiment is run to decide, ``(row, base row, metric)``, named before the runs: the
        table states it with its power, and it stays out of the Holm family of the other comparisons
        (:func:`pseudosl.experiments.summary.holm_adjust`); ``None``: every comparison is in the family."""
        return None

    def chosen_rows(self, cfg: C) -> dict[str, list[str]]:
        """Rows made of other rows, one chosen per seed on validation (a weight grid read as one row): row key ->
        candidate rows (:func:`pseudosl.experiments.summary.choose_on_validation`)."""
        return {}

    def contrasts(self, cfg: C) -> list[tuple[str, str]]:
        """Pairs ``(row, other row)`` compared seed by seed beyond each row and its base (controls)."""
        return []

    def trains(self, name: str, cfg: C) -> bool:
        """Whether model ``name`` is trained (False: evaluated as built, e.g. a pretrained baseline)."""
        return True

    def report(self, result: dict, out: Path) -> None:
        """Optional extra outputs (tables, figures) from the final ``results.json`` content, main process only."""

    def actions(self) -> dict[str, Action]:
        """Extra command-line steps beside ``train`` and ``eval`` (name -> :class:`Action`), e.g.
        ``pseudosl detox pretrain``; none by default."""
        return {}
