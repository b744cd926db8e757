"""The Sudoku constraint: 27 all-different groups (9 rows, 9 columns, 9 boxes) plus the givens.

Variables are the 81 cells in row-major order, values the digits as classes ``0..8``.
The circuit has one root per group (``compile_all_different``, 27 roots); the givens are
per-example unit constraints passed as the ``allowed`` mask ``(B, 81, 9)``.

The loss is ``-log [P(givens) * prod_g P(group g all different | givens)]``: the product of the
27 group probabilities (each exact, conditioned on the givens) rather than the probability of
their conjunction.  Each root of the circuit is smoothed over all 81 cells, so root ``g``
evaluated with the ``allowed`` mask is ``log P(group g AND givens)``; summing the 27 roots would
count ``log P(givens)`` 27 times, hence the ``- 26 log P(givens)`` correction below.
The conjunction over 81 nine-valued cells counts completions of a Sudoku (a #P-hard
count in general, and a circuit for it is impractically large); the product is the
standard tractable surrogate and is exact whenever the groups' probabilities factor.
On a point mass (a one-hot grid) the two coincide: the grid satisfies the conjunction
iff every group root is 1 (log-probability 0), see ``tests/test_sudoku_constraint.py``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from pseudosl import Circuit

__all__ = ["sudoku_groups", "sudoku_circuit", "givens_mask", "is_consistent", "one_hot_log"]


def sudoku_groups() -> list[list[int]]:
    """The 27 groups of cell indices: rows 0-8, columns 9-17, boxes 18-26."""
    rows = [[9 * r + c for c in range(9)] for r in range(9)]
    cols = [[9 * r + c for r in range(9)] for c in range(9)]
    boxes = [[9 * (3 * br + i) + 3 * bc + j for i in range(3) for j in range(3)]
             for br in range(3) for bc in range(3)]
    return rows + cols + boxes


@lru_cache(maxsize=1)
def _compiled() -> Circuit:
    from pseudosl.constraints import compile_all_different
    return compile_all_different(81, 9, sudoku_groups())


def sudoku_circuit() -> Circuit:
    """The 27-rooted circuit over 81 cells x 9 digits (compiled once per process, then a fresh copy)."""
    c = _compiled()
    return Circuit(c.dag)


def givens_mask(puzzles: Tensor) -> Tensor:
    """``allowed`` mask ``(B, 81, 9)``: a given cell allows only its digit, a blank allows all nine."""
    given = puzzles > 0                                          # (B, 81)
    digit = torch.nn.functional.one_hot((puzzles - 1).clamp(min=0), 9).bool()
    return torch.where(given.unsqueeze(-1), digit, torch.ones_like(digit))


def one_hot_log(grids: Tensor) -> Tensor:
    """Digits ``1..9`` ``(B, 81)`` -> log one-hot ``(B, 81, 9)`` (0 at the digit, -inf elsewhere)."""
    oh = torch.nn.functional.one_hot(grids - 1, 9).float()
    return torch.log(oh)


def is_consistent(grids: Tensor, puzzles: Tensor | None = None) -> Tensor:
    """Direct checker: ``(B,)`` bool, every row/column/box holds distinct digits (and the givens are kept)."""
    g = torch.as_tensor(grids).reshape(-1, 81)
    idx = torch.tensor(sudoku_groups())                           # (27, 9)
    groups = g[:, idx]                                            # (B, 27, 9)
    ok = (groups.sort(-1).values == torch.arange(1, 10)).all(-1).all(-1)
    if puzzles is not None:
        p = torch.as_tensor(puzzles).reshape(-1, 81)
        ok &= ((p == 0) | (p == g)).all(-1)
    return ok
