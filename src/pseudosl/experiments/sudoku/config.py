"""The Sudoku experiment's configuration: :class:`SudokuConfig`, read from TOML, overridden by flags.

Presets are TOML files shipped in ``presets/`` beside this module (``quick.toml``, ``cpu.toml``,
``paper.toml``); every key is a field of :class:`SudokuConfig`, checked by type and range before
any work starts (see :mod:`pseudosl.experiments.config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..config import ConfigError, RunConfig, spec
from ..config import load_config as _load_config
from ..config import preset_path as _preset_path

__all__ = ["SudokuConfig", "MODELS", "CONSTRAINT_LOSS", "load_config", "preset_path", "PRESETS"]

MODELS = ("convnet", "convnet_sl", "rnn", "rnn_psl", "rnn_own")
# model -> its constraint term; rnn_own: the PSL's control, the solution after the model's own sample (objective.py)
CONSTRAINT_LOSS = {"convnet": None, "convnet_sl": "sl", "rnn": None, "rnn_psl": "psl", "rnn_own": "own"}
PRESETS = Path(__file__).resolve().parent / "presets"


@dataclass
class SudokuConfig(RunConfig):
    MODELS: ClassVar[tuple[str, ...]] = MODELS
    # data: "generate" (our generator), "satnet:<dir>" (features.pt/labels.pt) or "csv:<file>"
    data: str = spec("generate", help="generate, satnet:<dir with features.pt, labels.pt> or csv:<file>")
    data_dir: str | None = spec(None, help="generator cache; default pseudosl.cache.cache_dir()/sudoku")
    n_train: int = spec(9000, min=1)
    n_test: int = spec(1000, min=1)
    n_val: int = spec(0, min=0, help="validation puzzles (after the test ones) for model selection; 0 = none")
    size: int = spec(9, choices=(4, 6, 9), help="the board's side: 9 (the paper), 6 (2 x 3 boxes) or 4 (2 x 2 boxes)")
    n_missing: int = spec(10, min=1, max=64, help="blank cells per generated puzzle (paper: 10); at most "
                                                  "size^2 minus the fewest givens of a unique puzzle (4, 8, 17)")
    satnet_dist: bool = spec(False, help="generate with 31..42 givens (SATNet's distribution) instead of n_missing")
    data_seed: int = spec(1234, min=0, help="seed of the generated data set (the same for every model seed; with "
                                            "split = balanced each model seed's split is drawn from it and the seed)")
    # optimisation (paper: Adam, lr 3e-4)
    epochs: int = spec(50, min=1)
    lr: float = spec(3e-4, min=0.0)
    sl_weight: float = spec(0.05, min=0.0, help="ConvNet + SL: weight of the semantic loss")
    psl_weight: float = spec(0.05, min=0.0, help="RNN + PSL: weight of the pseudo-semantic loss (paper: 0.01, 0.05); "
                                                 "also of the own-sample cross-entropy of rnn_own, its control")
    psl_examples: int | None = spec(None, min=1, help="PSL on the first m examples of each batch (default: all)")
    constraint: str = spec("puzzle", choices=("puzzle", "groups"),
                           help="what the SL/PSL maximise: puzzle (the whole constraint, every row, column and box "
                                "all different: one circuit for 4x4 boards, each puzzle's own beyond, as the paper) or "
                                "groups (the product over the 3 x size groups of P(group all different))")
    givens: str = spec("conjoin", choices=("conjoin", "condition", "ignore"),
                       help="how the SL/PSL treat the givens: conjoin (-log P(alpha AND givens)), condition "
                            "(-log P(alpha | givens); the PSL then needs only the blanks' conditionals) or ignore "
                            "(-log P(alpha), the paper's code; constraint = puzzle: 4x4 only); alpha = the puzzle "
                            "constraint, or with constraint = groups the product over the groups")
    augment: bool = spec(False, help="train on a random Sudoku symmetry of every puzzle (relabel digits, permute "
                                     "rows/columns within bands/stacks, bands, stacks, transpose); with "
                                     "split = grids on relabelled digits only")

    # the split's solution grids (split.py): which solutions the test puzzles may share with training
    split: str = spec("random", choices=("random", "grids", "balanced"),
                      help="random: the generated puzzles in order, so test solution grids may occur in training "
                           "(in the cpu preset's data 271 of the 279 distinct test grids do); grids: train / "
                           "validation / test solutions from disjoint classes of grids under relabelling digits "
                           "(4x4: 8 / 2 / 2 of the 12 classes), one draw of the classes (data_seed) for every model "
                           "seed, and augment relabels digits only, so no test solution grid occurs in training up to "
                           "relabelling digits; balanced: the same, but each model seed draws its own classes, on 4x4 "
                           "one of either grid type for validation and for test")

    # models
    conv_channels: int = spec(64, min=1)
    conv_layers: int = spec(6, min=0)
    conv_dropout: float = spec(0.0, min=0.0, max=0.99, help="ConvNet: dropout before the heads")
    rnn_hidden: int = spec(128, min=1)
    rnn_layers: int = spec(5, min=1)
    rnn_dropout: float = spec(0.2, min=0.0, max=0.99)
    # constrained decoding (decoders = ["constrained", "resample"]; test time only, so not in the content key)
    resample_candidates: int = spec(16, min=1, run_free=True,
                                    help="decoder 'resample': candidates K per puzzle of the RNN's locally constrained "
                                         "resampling (pseudosl.constrained_sample; the ConvNet's draw is exact)")

    def check(self) -> None:
        from .constraint import BOARD_SIZES
        from .data import MIN_GIVENS
        if not (self.data == "generate" or self.data.startswith(("satnet:", "csv:"))):
            raise ConfigError(f"data = {self.data!r}: expected 'generate', 'satnet:<dir>' or 'csv:<file>'")
        most = self.size ** 2 - MIN_GIVENS[self.size]
        if self.data == "generate" and not self.satnet_dist and self.n_missing > most:
            raise ConfigError(f"n_missing = {self.n_missing}: a unique {self.size}x{self.size} puzzle has at most "
                              f"{most} blanks; lower n_missing or raise size")
        if self.constraint == "puzzle" and self.givens == "ignore" and self.size not in BOARD_SIZES:
            raise ConfigError(f"constraint = 'puzzle' with givens = 'ignore' on {self.size}x{self.size} boards: the "
                              "whole-board circuit compiles for 4x4 only, beyond it each puzzle's own circuit scores the "
                              "constraint, and it needs the givens; set givens = 'condition' or 'conjoin', or constraint "
                              "= 'groups'")
        if self.size != 9 and (self.satnet_dist or self.data.startswith("satnet:")):
            raise ConfigError(f"size = {self.size}: SATNet's puzzles (data = 'satnet:...', satnet_dist) are 9x9; "
                              f"use size = 9, or data = 'generate' / 'csv:<file>'")
        if self.split != "random" and self.data != "generate":
            raise ConfigError(f"split = {self.split!r} draws each split's puzzles from its own generated solution "
                              f"grids; data = {self.data!r} is read as it is: use data = 'generate', or split = "
                              f"'random'")


    def validation_size(self) -> int:
        return self.n_val

    def memory_needs(self) -> tuple[int, int, str] | None:
        """Generated puzzles: about 40 bytes a cell while they are made (measured: 30 for 9x9 boards, 39 for 4x4),
        16 (two int64 tensors) once made; loaded puzzles are not estimated."""
        if self.data != "generate":
            return None
        n, cells = self.n_train + self.n_test + self.n_val, self.size ** 2
        return (n * cells * MAKE_BYTES_PER_CELL, n * cells * 16,
                f"n_train + n_test + n_val = {n:,} generated {self.size}x{self.size} puzzles")


MAKE_BYTES_PER_CELL = 40  # peak memory of data.generate per cell of a puzzle (numpy temporaries of the symmetries)


def preset_path(name: str) -> Path:
    """The preset ``<name>.toml`` shipped in the package (``pseudosl/experiments/sudoku/presets/``)."""
    return _preset_path(PRESETS, name)


def load_config(path: str | Path | None = None, **overrides) -> SudokuConfig:
    """Fields from the TOML file ``path`` (if any), then ``overrides`` (``None`` values are ignored)."""
    return _load_config(SudokuConfig, path, **overrides)
