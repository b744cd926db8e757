"""Built-in constraints as circuit fragments (builders need no torch).

Each builder adds nodes to a :class:`~pseudosl.logic.CircuitBuilder` and returns the
node id, so several constraints can share one builder and one multi-rooted circuit.
All are deterministic and decomposable by construction (dynamic programs over the
variables in order); :meth:`CircuitBuilder.build` smooths them.

* ``exactly_k(b, vs, k)``   ``sum_i [X_{vs_i} = 1] = k``   (Boolean; ``exactly_one`` is ``k = 1``)
* ``at_most_k(b, vs, k)``   ``sum_i [X_{vs_i} = 1] <= k``  (Boolean)
* ``all_different(b, ps, values)``  the positions ``ps`` take pairwise different values, all in ``values``
* ``simple_path(rows, cols, max_edges)``  a whole circuit over the edges of a grid (``grid_edges``):
  the on-edges form one simple path between opposite corners (:mod:`pseudosl.logic.simpath`);
  ``is_simple_path`` checks an edge vector directly

The ``compile_*`` conveniences return a :class:`~pseudosl.Circuit` with one root per group.

Conjoining fragments with ``b.and_`` stays decomposable only when they mention disjoint
variables; constraints that overlap go to separate roots (``b.build([r1, r2])``), or
through :func:`pseudosl.compile_formula` when their conjunction is needed as one root.

Example:
    >>> from pseudosl.logic import CircuitBuilder
    >>> b = CircuitBuilder(n_vars=5)
    >>> both = b.and_(exactly_one(b, [0, 1]), at_most_k(b, [2, 3, 4], 1))   # disjoint: one root
    >>> dag = b.build([both, exactly_k(b, [1, 2], 1)])                       # overlapping: two roots
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from tqdm.auto import tqdm

from .logic.builder import CircuitBuilder
from .logic.errors import DEFAULT_MAX_NODES
from .logic.checks import check_bool, check_int
from .logic.simpath import grid_edges, is_simple_path, normalized_bound, simple_path_dag

if TYPE_CHECKING:  # pragma: no cover
    from .circuit import Circuit

_SIMPATH_VERSION = 1  # part of the cache key of simple_path: bump when its construction changes

__all__ = ["exactly_one", "exactly_k", "at_most_k", "all_different", "all_different_size",
           "compile_exactly_one", "compile_exactly_k", "compile_at_most_k", "compile_all_different",
           "grid_edges", "is_simple_path", "simple_path"]


def exactly_k(b: CircuitBuilder, variables: Sequence[int], k: int) -> int:
    """``sum_i [X_{variables_i} = 1] == k`` over distinct Boolean variables.

    Counting DP, ``O(len(variables) * k)`` nodes:
    ``node(i, r)`` = "exactly ``r`` of ``variables[i:]`` are true"
    = ``([X_i=1] AND node(i+1, r-1)) OR ([X_i=0] AND node(i+1, r))``.
    """
    return _count(b, variables, k, at_most=False, name="exactly_k")


def exactly_one(b: CircuitBuilder, variables: Sequence[int]) -> int:
    """Exactly one of the Boolean ``variables`` is true."""
    return _count(b, variables, 1, at_most=False, name="exactly_one")


def at_most_k(b: CircuitBuilder, variables: Sequence[int], k: int) -> int:
    """``sum_i [X_{variables_i} = 1] <= k`` over distinct Boolean variables (same DP as :func:`exactly_k`)."""
    return _count(b, variables, k, at_most=True, name="at_most_k")


def all_different_size(n_positions: int, n_values: int) -> int:
    """Edges of the :func:`all_different` DP for ``n_positions`` over ``n_values`` values (before smoothing):
    ``sum_{i < m} C(V, i) (V - i)`` (one element per state and unused value)."""
    return sum(math.comb(n_values, i) * (n_values - i) for i in range(min(n_positions, n_values + 1)))


def all_different(b: CircuitBuilder, positions: Sequence[int], values: Sequence[int] | None = None, *,
                  max_edges: int | None = 2_000_000) -> int:
    """The categorical ``positions`` take pairwise different values, each one of ``values``.

    ``values`` defaults to all ``b.n_values`` values; more positions than values is FALSE.
    DP over (index, set of used values), memoised:
    ``node(i, U) = OR_{c in values - U} ([X_{p_i} = c] AND node(i+1, U + {c}))``, ``node(m, U) = TRUE``;
    ``sum_i C(|values|, i)`` states (512 for 9 positions over 9 values, e.g. a Sudoku row).
    The size grows like ``2^|values|``: above ``max_edges`` (:func:`all_different_size`) it is a named
    error before any work (``max_edges=None`` lifts the guard); large builds show a progress bar.
    """
    positions = _variables(b, positions, "all_different")
    vals = list(range(b.n_values)) if values is None else sorted({check_int("value", c) for c in values})
    bad = [c for c in vals if not 0 <= c < b.n_values]
    if bad:
        raise ValueError(f"all_different: value {bad[0]} is out of range 0..{b.n_values - 1}")
    m = len(positions)
    if m > len(vals):
        return b.false()
    size = all_different_size(m, len(vals))
    if max_edges is not None and size > max_edges:
        raise ValueError(f"all_different over {m} positions and {len(vals)} values needs {size:,} circuit edges "
                         f"(the DP has one state per subset of used values, ~2^{len(vals)}), above "
                         f"max_edges={max_edges:,}; pass max_edges=None (or a larger bound) to build it anyway")
    bar = tqdm(total=2 * m, desc=f"all_different ({size:,} edges)", disable=size < 500_000, leave=False)
    memo: dict[int, int] = {}  # used-values bitmask -> node; level = popcount(mask)
    level: list[int] = [0]
    for i in range(m):  # breadth-first: masks reachable after i positions
        nxt = {mask | (1 << j) for mask in level for j in range(len(vals)) if not mask >> j & 1}
        level = sorted(nxt)
        bar.update()
    for mask in level:  # all masks after m positions
        memo[mask] = b.true()
    for i in reversed(range(m)):
        prev = {mask & ~(1 << j) for mask in memo for j in range(len(vals)) if mask >> j & 1}
        memo = {mask: b.or_(*(b.and_(b.literal(positions[i], vals[j]), memo[mask | (1 << j)])
                              for j in range(len(vals)) if not mask >> j & 1))
                for mask in prev}
        bar.update()
    bar.close()
    return memo[0]


# -- compiled conveniences ---------------------------------------------------------------------
def compile_exactly_one(n_vars: int, groups: Sequence[Sequence[int]] | Sequence[int]) -> "Circuit":
    """Boolean circuit over ``n_vars`` variables, one root "exactly one true" per group.

    ``groups`` is a list of variable lists, or one flat list of variables (= one group).
    """
    return _compile(n_vars, 2, groups, lambda b, g: exactly_one(b, g))


def compile_exactly_k(n_vars: int, groups: Sequence[Sequence[int]] | Sequence[int], k: int) -> "Circuit":
    """Boolean circuit, one root "exactly ``k`` true" per group (see :func:`compile_exactly_one`)."""
    return _compile(n_vars, 2, groups, lambda b, g: exactly_k(b, g, k))


def compile_at_most_k(n_vars: int, groups: Sequence[Sequence[int]] | Sequence[int], k: int) -> "Circuit":
    """Boolean circuit, one root "at most ``k`` true" per group (see :func:`compile_exactly_one`)."""
    return _compile(n_vars, 2, groups, lambda b, g: at_most_k(b, g, k))


def compile_all_different(n_vars: int, n_values: int, groups: Sequence[Sequence[int]] | Sequence[int],
                          values: Sequence[int] | None = None, *, max_edges: int | None = 2_000_000) -> "Circuit":
    """Categorical circuit, one root "all different" per group of positions.

    ``max_edges`` bounds each group's DP (see :func:`all_different`); a larger one is a named error.

    Example (Sudoku, 81 cells with 9 values, 27 roots)::

        rows = [[9 * r + c for c in range(9)] for r in range(9)]
        cols = [[9 * r + c for r in range(9)] for c in range(9)]
        boxes = [[9 * (3 * br + r) + 3 * bc + c for r in range(3) for c in range(3)]
                 for br in range(3) for bc in range(3)]
        circuit = compile_all_different(81, 9, rows + cols + boxes)
    """
    return _compile(n_vars, n_values, groups, lambda b, g: all_different(b, g, values, max_edges=max_edges))


def simple_path(rows: int, cols: int, max_edges: int | None = None, *, cache: bool = True,
                progress: bool | None = None, max_nodes: int | None = DEFAULT_MAX_NODES) -> "Circuit":
    """Boolean circuit over the edges of the ``rows x cols`` cell grid, in :func:`grid_edges` order,
    whose models are the simple paths from cell ``(0, 0)`` to cell ``(rows-1, cols-1)``.

    Compiled frontier by frontier (:mod:`pseudosl.logic.simpath`; smooth, decomposable and
    deterministic) and kept in the on-disk cache (:mod:`pseudosl.cache`), so a large grid is
    compiled once.  :func:`is_simple_path` is the direct check of one edge vector.

    Args:
        rows, cols: grid size in cells, ints >= 1 (a 1 x 1 grid has no edge and raises ``ValueError``).
        max_edges: keep only paths of at most this many edges; ``None`` = no bound.  It is rounded
            down to the parity of ``rows + cols`` (every path has that parity) and one of at least
            ``rows * cols - 1`` is no bound.  Below ``rows + cols - 2`` (the shortest path) raises
            :class:`~pseudosl.logic.errors.UnsatisfiableError`.
        cache: use the on-disk compile cache.
        progress: show a tqdm bar while compiling (default: for grids of 100 edges or more).
        max_nodes: stop with a ``SizeLimitError`` above this many frontier states (about the circuit's
            nodes: 9.7M for the unbounded 12 x 12 grid); ``None``: no limit.

    Example:
        >>> import torch
        >>> c = simple_path(3, 3)                            # 12 edges, 12 paths
        >>> c.log_prob(torch.zeros(1, 12, 2)).exp().round()  # log-weights 0: the model count
        tensor([12.])
    """
    from .cache import cached_circuit
    from .circuit import Circuit

    bound = normalized_bound(rows, cols, max_edges)  # validates rows, cols, max_edges
    progress = check_bool("progress", progress, none="for grids of 100 edges or more")
    show = len(grid_edges(rows, cols)) >= 100 if progress is None else progress
    return cached_circuit(("simple_path", _SIMPATH_VERSION, rows, cols, bound),
                          lambda: Circuit(simple_path_dag(rows, cols, bound, progress=show, max_nodes=max_nodes)),
                          enabled=cache)


# -- helpers ----------------------------------------------------------------------------------------
def _compile(n_vars: int, n_values: int, groups, make) -> "Circuit":
    from .circuit import Circuit

    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or len(groups) == 0:
        raise ValueError(f"groups must be a non-empty list of variable lists, got {groups!r}")
    if all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        groups = [groups]
    b = CircuitBuilder(n_vars, n_values)
    return Circuit(b.build([make(b, g) for g in groups]))


def _count(b: CircuitBuilder, variables: Sequence[int], k: int, *, at_most: bool, name: str) -> int:
    if b.n_values != 2:
        raise ValueError(f"{name} counts Boolean variables but the builder has n_values={b.n_values}; "
                         f"use a CircuitBuilder(n_vars, 2)")
    vs = _variables(b, variables, name)
    k = check_int("k", k)
    if k < 0:
        raise ValueError(f"{name}: k must be >= 0, got {k}")
    n = len(vs)
    # node[r] = constraint on variables[i:] with r true ones still needed (exactly) / allowed (at most)
    node = [b.true() if (r == 0 or at_most) else b.false() for r in range(k + 1)]
    for i in reversed(range(n)):
        remaining = n - i
        pos, neg = b.literal(vs[i], 1), b.literal(vs[i], 0)
        node = [b.false() if (r > remaining and not at_most) else
                b.true() if (at_most and r >= remaining) else
                b.or_(b.and_(neg, node[r]), b.and_(pos, node[r - 1]) if r > 0 else b.false())
                for r in range(k + 1)]
    return node[k]


def _variables(b: CircuitBuilder, variables: Sequence[int], name: str) -> list[int]:
    if isinstance(variables, (str, bytes)) or not isinstance(variables, Sequence):
        raise TypeError(f"{name}: variables must be a sequence of ints, got {type(variables).__name__}")
    vs = [check_int("variable", v) for v in variables]
    if len(set(vs)) != len(vs):
        dup = next(v for v in vs if vs.count(v) > 1)
        raise ValueError(f"{name}: variable {dup} is listed twice; the variables must be distinct")
    bad = [v for v in vs if not 0 <= v < b.n_vars]
    if bad:
        raise ValueError(f"{name}: variable {bad[0]} is out of range 0..{b.n_vars - 1}")
    return vs
