"""The Sudoku constraint: every row, column and box all different, plus the givens.

Variables are the ``size**2`` cells in row-major order, values the digits as classes ``0..size-1``
(``size`` = 9 for the paper's boards, 4 or 6 for the CPU regime; boxes as in :func:`.data.box_shape`).
The givens are per-example unit constraints passed as the ``allowed`` mask ``(B, size**2, size)``
(:func:`givens_mask`).

What the SL and the PSL maximise (``SudokuConfig.constraint``):

* ``"puzzle"`` (the default, the paper's): ``p(alpha AND givens)`` of the whole constraint ``alpha`` = "every
  row, column and box all different", one root.  Two circuits compute it, with the same value:

  - :func:`board_circuit`: ``alpha`` over the whole board, compiled once per size (4 x 4: 867 nodes in
    0.2 s).  It is used where it compiles, :data:`BOARD_SIZES` (4 x 4 only: 6 x 6 exceeds 200 000 nodes
    after minutes, 9 x 9 is far beyond).  With the givens mask it conditions on any puzzle.
  - :func:`puzzle_circuits`: one circuit per puzzle (:func:`puzzle_circuit`), elsewhere (6 x 6, 9 x 9).
    Conditioned on a puzzle's givens ``alpha`` is small; with the givens mask the circuit's models are the
    puzzle's completions, exactly those of the board circuit under the same mask.  The losses take the
    sequence of ``B`` circuits (each example scored by its own; :func:`pseudosl.losses.per_example`).  A
    puzzle's circuit needs its givens, so ``givens = "ignore"`` (``p(alpha)`` without them) needs the board
    circuit (:class:`~.config.SudokuConfig` refuses it elsewhere).

* ``"groups"``: the product of the ``3 * size`` group probabilities, :func:`sudoku_circuit` (one root per
  group, ``compile_all_different``): ``-log [P(givens) * prod_g P(group g all different | givens)]``, a
  tractable surrogate of the conjunction, exact when the groups' probabilities factor.  Each root is smoothed
  over all cells, so root ``g`` with the mask is ``log P(group g AND givens)``; the givens count once
  (:func:`pseudosl.losses.product_log_prob`).  On a point mass (a one-hot grid) the two constraints coincide.

One puzzle's conjunction (for constrained decoding, :mod:`.decoding`, and the ``"puzzle"`` losses beyond 4 x 4):
:func:`puzzle_circuit` compiles "every blank differs from the givens and from the other blanks of its row,
column and box" (``compile_categorical``; the givens enter as digits, not as positions) into one root over
all cells, whose models together with the givens mask (``allowed = givens_mask(puzzle)``) are exactly the
puzzle's completions.  Compiled once per puzzle and process (and cached on disk by ``compile_categorical``,
unless ``disk_cache=False``); a puzzle with very many completions (few givens) would give a large circuit and
is refused above ``max_nodes`` nodes.  Compiling costs ~4 ms for a 6 x 6 puzzle with 10 blanks, ~11 ms for a
9 x 9 one, ~0.2 s for a 9 x 9 one with 40 blanks (one CPU thread).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import torch
from torch import Tensor

import pseudosl
from pseudosl import Circuit
from pseudosl.logic import SizeLimitError
from pseudosl.logic.categorical import CatFormula, all_of, any_of
from pseudosl.logic.errors import UnsatisfiableError

from .data import board_size, box_shape

__all__ = ["sudoku_groups", "sudoku_circuit", "board_circuit", "givens_mask", "is_consistent", "one_hot_log",
           "puzzle_formula", "puzzle_circuit", "puzzle_circuits", "MAX_PUZZLE_NODES", "BOARD_SIZES", "CONSTRAINTS"]

# a unique 9 x 9 puzzle's circuit has ~700 nodes (10 blanks) to ~500 (40 blanks); compiling time grows with the
# node count and the empty 9 x 9 board reaches 5 000 within seconds (docs/sudoku.md measures it), so a puzzle with
# too many completions is refused soon
MAX_PUZZLE_NODES = 5_000
# the boards whose whole constraint compiles to one circuit (4 x 4: 867 nodes in 0.2 s; 6 x 6: over 200 000 nodes,
# refused after 156 s, measured with compile_categorical)
BOARD_SIZES = (4,)
CONSTRAINTS = ("puzzle", "groups")  # what the SL / PSL maximise (module docs)


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


def board_circuit(size: int = 4) -> Circuit:
    """Every row, column and box all different over the whole board: one root over ``size**2`` cells x ``size``
    digits, compiled once per process and size (then a fresh copy).  With ``allowed = givens_mask(puzzles)`` its
    models are each puzzle's completions.  Only for ``size`` in :data:`BOARD_SIZES`."""
    if size not in BOARD_SIZES:
        raise ValueError(f"size = {size}: the whole-board circuit compiles for boards of side "
                         f"{', '.join(map(str, BOARD_SIZES))} only (6 x 6 exceeds 200 000 nodes); use "
                         "puzzle_circuits(puzzles), one circuit per puzzle")
    return Circuit(_compiled_board(size).dag)


@lru_cache(maxsize=None)
def _compiled_board(size: int) -> Circuit:
    y = pseudosl.positions(size * size, size)
    return pseudosl.compile_categorical(all_of([y[i] != y[j] for i, j in _group_pairs(size)]), size * size,
                                        n_values=size)


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


# -- one puzzle's conjunction -----------------------------------------------------------------------
def _group_pairs(size: int) -> list[tuple[int, int]]:
    """Every pair of cells ``i < j`` that share a row, a column or a box."""
    return sorted({(min(a, b), max(a, b)) for g in sudoku_groups(size) for a in g for b in g if a != b})


def puzzle_formula(puzzle: Sequence[int]) -> CatFormula:
    """Every row, column and box all different, given the puzzle's givens (``size**2`` digits, 0 = blank), over
    the cells' classes ``0..size-1``.  The givens are constants: a blank differs from the givens of its groups
    (``y[i] != g``) and from the other blanks of its groups (``y[i] != y[j]``); two equal givens in a group make
    it FALSE.  The given cells themselves are not constrained: pass ``givens_mask`` as ``allowed``."""
    p = [int(v) for v in puzzle]
    size = board_size(len(p))
    y = pseudosl.positions(size * size, size)
    parts: list[CatFormula] = []
    for i, j in _group_pairs(size):
        if p[i] and p[j]:
            if p[i] == p[j]:
                return any_of([])  # FALSE
        elif p[i]:
            parts.append(y[j] != p[i] - 1)
        elif p[j]:
            parts.append(y[i] != p[j] - 1)
        else:
            parts.append(y[i] != y[j])
    return all_of(parts)


def _show(puzzle: tuple[int, ...]) -> str:
    return "".join(map(str, puzzle))


@lru_cache(maxsize=8192)
def _compiled_puzzle(puzzle: tuple[int, ...], max_nodes: int, device: str, disk_cache: bool) -> Circuit:
    size = board_size(len(puzzle))
    blanks = puzzle.count(0)
    try:
        circuit = pseudosl.compile_categorical(puzzle_formula(puzzle), size * size, n_values=size, max_nodes=max_nodes,
                                               cache=disk_cache)
    except UnsatisfiableError:
        raise UnsatisfiableError(f"puzzle {_show(puzzle)} has no completion (its givens clash, or no filling of "
                                 "its blanks keeps every row, column and box all different); remove it from the "
                                 "data") from None
    except SizeLimitError:
        raise SizeLimitError(f"the circuit of puzzle {_show(puzzle)} ({blanks} blanks) exceeds max_nodes = "
                             f"{max_nodes} nodes: the puzzle has too many completions to compile one by one; decode "
                             "puzzles with more givens, or raise max_nodes (puzzle_circuit's; default "
                             "MAX_PUZZLE_NODES)") from None
    return circuit.to(device)


def puzzle_circuit(puzzle: Sequence[int] | Tensor, *, max_nodes: int = MAX_PUZZLE_NODES,
                   device: torch.device | str = "cpu", disk_cache: bool = True) -> Circuit:
    """The circuit of :func:`puzzle_formula` on ``device``: one root over the ``size**2`` cells x ``size`` classes,
    compiled once per puzzle, ``max_nodes`` and device in this process (and cached on disk, unless
    ``disk_cache=False``).  With ``allowed = givens_mask(puzzle)`` its models are the puzzle's completions
    (digits - 1).  The same puzzle gives the same object (an in-memory cache of 8 192 circuits, ~60 KB each for 9 x 9).

    Raises:
        UnsatisfiableError: the puzzle has no completion.
        SizeLimitError: the circuit exceeds ``max_nodes`` nodes (a puzzle with very many completions).
    """
    key = tuple(int(v) for v in (puzzle.tolist() if isinstance(puzzle, Tensor) else puzzle))
    size = board_size(len(key))
    if any(not 0 <= v <= size for v in key):
        raise ValueError(f"puzzle {_show(key)}: a cell holds 0 (blank) or a digit 1..{size}")
    return _compiled_puzzle(key, max_nodes, str(torch.device(device)), disk_cache)


def puzzle_circuits(puzzles: Tensor) -> list[Circuit]:
    """One :func:`puzzle_circuit` per puzzle of ``puzzles (B, size**2)``, on their device, for the losses (which
    score each example by its own circuit, :func:`pseudosl.losses.per_example`).  Not cached on disk: training on
    Sudoku symmetries (``augment``) meets a new puzzle at almost every step.  Reads the puzzles on the host (one
    synchronisation per batch on a GPU)."""
    return [puzzle_circuit(p, device=puzzles.device, disk_cache=False) for p in puzzles.cpu()]
