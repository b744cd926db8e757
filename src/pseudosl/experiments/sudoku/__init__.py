"""Sudoku as autoregressive generation (paper Table 1); see docs/sudoku.md.

``data`` (generator, loaders), ``constraint`` (27 all-different groups + givens, one puzzle's conjunction),
``models`` (ConvNet, SudokuRNN), ``decoding`` (constrained decoders), ``config`` (SudokuConfig, TOML presets),
``train`` (the script), ``split`` (train / validation / test puzzles from disjoint solution grids).
"""

from .config import MODELS, SudokuConfig, load_config
from .constraint import givens_mask, is_consistent, puzzle_circuit, sudoku_circuit, sudoku_groups
from .data import (
           SudokuData,
           count_solutions,
           generate,
           load_csv,
           load_satnet,
           save_csv,
           save_satnet,
)

__all__ = ["MODELS", "SudokuConfig", "load_config", "givens_mask", "is_consistent", "puzzle_circuit", "sudoku_circuit",
           "sudoku_groups", "SudokuData", "count_solutions", "generate", "load_csv",
           "load_satnet", "save_csv", "save_satnet"]
