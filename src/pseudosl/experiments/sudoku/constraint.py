"""The Sudoku constraint: all-different groups (rows, columns, boxes) plus the givens.

Variables are the ``size**2`` cells in row-major order, values the digits as classes ``0..size-1``
(``size`` = 9 for the paper's boards, 4 or 6 for the CPU regime; boxes as in :func:`.data.box_shape`).
The circuit has one root per group (``compile_all_different``, ``3 * size`` roots: 27 for 9 x 9); the
givens are per-example unit constraints passed as the ``allowed`` mask ``(B, size**2, size)``.

The loss is ``-log [P(givens) * prod_g P(group g all different | givens)]``: the product of the
group probabilities (each exact, conditioned on the givens) rather than the probability of
their conjunction.  Each root of the circuit is smoothed over all cells, so root ``g``
evaluated with the ``allowed`` mask is ``log P(group g AND givens)``; summing the 27 roots would
count ``log P(givens)`` 27 times, hence the ``- 26 log P(givens)`` correction
(:func:`pseudosl.losses.product_log_prob`).
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

from .data import board_size, box_shape

__all__ = ["sudoku_groups", "sudoku_circuit", "givens_mask", "is_consistent", "one_hot_log"]


def sudoku_groups(size: int = 9) -> list[list[int]]:
    """The ``3 * size`` groups of cell indices: rows, then columns, then boxes (27 for 9 x 9)."""
    br, bc = box_shape(size)
    rows = [[size * r + c for c in range(size)] for r in range(size)]
    cols = [[size * r + c for r in range(size)] for c in range(size)]
    boxes = [[size * (br * i + di) + bc * j + dj for di in range(br) for dj in range(bc)]
             for i in range(size // br) for j in range(size // bc)]
    return rows + cols + boxes


@lru_cache(maxsize=None)
def _compiled(size: int) -> Circuit:
    from pseudosl.constraints import compile_all_different
    return compile_all_different(size * size, size, sudoku_groups(size))


def sudoku_circuit(size: int = 9) -> Circuit:
    """The ``3 * size``-rooted circuit over ``size**2`` cells x ``size`` digits (compiled once per process and
    size, then a fresh copy)."""
    return Circuit(_compiled(size).dag)


def givens_mask(puzzles: Tensor) -> Tensor:
    """``allowed`` mask ``(B, size**2, size)``: a given cell allows only its digit, a blank allows every digit."""
    size = board_size(int(puzzles.shape[-1]))
    given = puzzles > 0                                          # (B, size**2)
    digit = torch.nn.functional.one_hot((puzzles - 1).clamp(min=0), size).bool()
    return torch.where(given.unsqueeze(-1), digit, torch.ones_like(digit))


def one_hot_log(grids: Tensor) -> Tensor:
    """Digits ``1..size`` ``(B, size**2)`` -> log one-hot ``(B, size**2, size)`` (0 at the digit, -inf elsewhere)."""
    oh = torch.nn.functional.one_hot(grids - 1, board_size(int(grids.shape[-1]))).float()
    return torch.log(oh)


def is_consistent(grids: Tensor, puzzles: Tensor | None = None) -> Tensor:
    """Direct checker: ``(B,)`` bool, every row/column/box holds distinct digits (and the givens are kept)."""
    g = torch.as_tensor(grids)                                    # (B, size**2), (size**2,) or (B, size, size)
    size = board_size(int(g.shape[-1]) if g.dim() == 1 or g.shape[-1] > 9 else int(g.shape[-2] * g.shape[-1]))
    g = g.reshape(-1, size * size)
    idx = torch.tensor(sudoku_groups(size))                       # (3 size, size)
    groups = g[:, idx]                                            # (B, 3 size, size)
    ok = (groups.sort(-1).values == torch.arange(1, size + 1)).all(-1).all(-1)
    if puzzles is not None:
        p = torch.as_tensor(puzzles).reshape(-1, size * size)
        ok &= ((p == 0) | (p == g)).all(-1)
    return ok
