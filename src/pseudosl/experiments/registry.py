"""The registered experiments: name -> one-line help and where its :class:`~pseudosl.experiments.experiment.Experiment` lives.

The command line (:mod:`pseudosl.cli`), ``pseudosl reproduce`` and ``pseudosl fidelity`` read the registry from
here; an experiment adds one line to :data:`EXPERIMENTS`.  Experiments are imported on demand
(``"module:class"``), so listing them costs nothing.
"""

from __future__ import annotations

import importlib

__all__ = ["EXPERIMENTS", "experiment"]

# name -> (one-line help, "module:class" of its Experiment); an experiment adds one line here
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "sudoku": ("Sudoku as autoregressive generation (paper Table 1)",
               "pseudosl.experiments.sudoku.train:SudokuExperiment"),
    "warcraft": ("Warcraft shortest paths (paper Table 2)", "pseudosl.experiments.warcraft.train:WarcraftExperiment"),
    "detox": ("Detoxifying a language model: SGEAT and PSL (paper Table 3)",
              "pseudosl.experiments.detox.train:DetoxExperiment"),
}


def experiment(name: str):
    """The registered :class:`~pseudosl.experiments.experiment.Experiment` called ``name``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    module, cls = EXPERIMENTS[name][1].split(":")
    return getattr(importlib.import_module(module), cls)()
