"""Simple corner-to-corner paths in a grid, compiled frontier by frontier (no torch).

The grid has ``rows x cols`` CELLS (vertices ``(r, c)``, 4-connected).  Its edges, in
variable order (:func:`grid_edges`), are: cells in row-major order, for each cell its edge
to the right neighbour, then its edge to the neighbour below.  An assignment ``y`` (one
Boolean per edge, 1 = on) is a model of the constraint iff the on-edges form one simple path
from ``s = (0, 0)`` to ``t = (rows-1, cols-1)`` (and, with a bound, have at most ``max_edges``
edges):  ``deg(s) = deg(t) = 1``, every other cell has degree 0 or 2, and the on-edges are
connected (no extra cycle).  :func:`is_simple_path` checks this directly.

Compilation (Knuth's SIMPATH, Minato's frontier-based method) processes the edges in order.
After edge ``i`` the *frontier* is the set of cells with a processed and an unprocessed edge;
the state is the *mate* of every frontier cell (itself = degree 0, ``-1`` = degree 2, else the
other end of the path fragment it ends), plus the number of on-edges when bounded.  Level ``i``
holds the distinct reachable states before edge ``i``; each state ``q`` is the decision node

    node(i, q) = ([y_i = 1] AND node(i+1, hi(q)))  OR  ([y_i = 0] AND node(i+1, lo(q)))

whose two children are exclusive on ``y_i`` (deterministic) and split ``y_i`` from
``y_{i+1..}`` (decomposable); every level decides its edge, so the circuit is smooth without
padding.  A transition is pruned (FALSE) when it makes a degree > 2, a degree > 1 at ``s`` or
``t``, a cycle, a cell leaving the frontier with degree 1 (other than ``s``) or ``s`` leaving with
degree 0, a second path fragment left over when ``s`` and ``t`` join, or, with ``max_edges``,
when ``used + lower_bound > max_edges`` (:func:`_bounds`).  Once ``s`` and ``t``
are joined the state is DONE: every later edge must be off.  Dead states are removed
bottom-up and states with equal children are merged, so every node has a model.

The grid graph is bipartite, so every ``s``-``t`` path has ``rows + cols - 2 (mod 2)`` edges and at
least ``rows + cols - 2``; ``max_edges`` is rounded down to that parity and a bound of at least
``rows * cols - 1`` (every cell on the path) is no bound.

Example:
    >>> dag = simple_path_dag(2, 2)                     # 2 paths: right-down, down-right
    >>> grid_edges(2, 2)
    [((0, 0), (0, 1)), ((0, 0), (1, 0)), ((0, 1), (1, 1)), ((1, 0), (1, 1))]
    >>> dag.evaluate([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [1, 1, 1, 1]])[:, 0].tolist()
    [True, True, False, False]
"""

from __future__ import annotations

import functools
import itertools
from typing import Sequence

import numpy as np

from .dag import Dag
from .errors import DEFAULT_MAX_NODES, UnsatisfiableError
from .checks import check_int, check_limit
from .nodes import AND, CONST, LIT, OR

__all__ = ["grid_edges", "is_simple_path", "normalized_bound", "simple_path_dag", "Edge"]

Edge = tuple[tuple[int, int], tuple[int, int]]
_DEG2 = -1
_DONE = (-2,)  # the state after s and t have been joined (never a mate tuple: mates are >= -1)


def _check_grid(rows: object, cols: object) -> tuple[int, int]:
    rows, cols = check_int("rows", rows, low=1), check_int("cols", cols, low=1)
    if rows * cols == 1:
        raise ValueError("a 1x1 grid has no edges (its only path is the empty one from (0, 0) to itself); "
                         "use rows * cols >= 2")
    return rows, cols


def grid_edges(rows: int, cols: int) -> list[Edge]:
    """The edges of the 4-connected ``rows x cols`` grid of cells, in variable order.

    Cells in row-major order; for cell ``(r, c)`` first ``((r, c), (r, c+1))``, then
    ``((r, c), (r+1, c))`` (when those cells exist): ``rows * (cols-1) + (rows-1) * cols`` edges,
    264 for 12 x 12.  The frontier is then at most ``cols + 1`` cells wide.
    """
    return list(_edges(*_check_grid(rows, cols)))


@functools.lru_cache(maxsize=16)
def _edges(rows: int, cols: int) -> tuple[Edge, ...]:
    edges: list[Edge] = []
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols:
                edges.append(((r, c), (r, c + 1)))
            if r + 1 < rows:
                edges.append(((r, c), (r + 1, c)))
    return tuple(edges)


def is_simple_path(edges_on: Sequence[int] | np.ndarray, rows: int, cols: int,
                   max_edges: int | None = None) -> bool:
    """Whether the on-edges (a 0/1 vector in :func:`grid_edges` order) are one simple path (0,0) -> (rows-1, cols-1).

    ``edges_on``: any array-like of ``len(grid_edges(rows, cols))`` values in {0, 1} (a list, a
    numpy array, a CPU tensor; bools, ints or floats).

    Checked directly: ``deg(s) = deg(t) = 1``, every other degree is 0 or 2, and walking from ``s``
    uses every on-edge (so no cycle is left over); with ``max_edges``, at most that many edges.
    """
    rows, cols = _check_grid(rows, cols)
    edges = _edges(rows, cols)
    on = np.asarray(edges_on)
    if on.shape != (len(edges),):
        raise ValueError(f"edges_on must be a vector of {len(edges)} values (one per grid edge), got shape {on.shape}")
    if on.dtype.kind not in "biuf" or not np.isin(on, (0, 1)).all():
        raise ValueError(f"edges_on must hold 0/1 (bools, ints or floats equal to 0 or 1), got {on!r}")
    chosen = [edges[i] for i in np.flatnonzero(on)]
    if max_edges is not None and len(chosen) > check_int("max_edges", max_edges, low=1):
        return False
    nbrs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for a, b in chosen:
        nbrs.setdefault(a, []).append(b)
        nbrs.setdefault(b, []).append(a)
    s, t = (0, 0), (rows - 1, cols - 1)
    if len(nbrs.get(s, ())) != 1 or len(nbrs.get(t, ())) != 1:
        return False
    if any(len(n) != 2 for v, n in nbrs.items() if v not in (s, t)):
        return False
    prev, cur, walked = None, s, 0
    while cur != t:
        nxt = next(w for w in nbrs[cur] if w != prev)  # degree 2 (or s): one way forward
        prev, cur, walked = cur, nxt, walked + 1
    return walked == len(chosen)


def normalized_bound(rows: int, cols: int, max_edges: int | None) -> int | None:
    """``max_edges`` rounded down to the parity of every path; ``None`` when it bounds nothing.

    Raises :class:`UnsatisfiableError` when it is below ``rows + cols - 2``, the shortest path.
    """
    rows, cols = _check_grid(rows, cols)
    if max_edges is None:
        return None
    bound = check_int("max_edges", max_edges, low=1)
    shortest = rows + cols - 2
    if bound < shortest:
        raise UnsatisfiableError(f"max_edges={bound} is below {shortest}, the length of the shortest path from "
                                 f"(0, 0) to ({rows - 1}, {cols - 1}); use max_edges >= {shortest} or None")
    bound -= (bound - shortest) % 2
    return None if bound >= rows * cols - 1 else bound


class _Levels:
    """Per-edge bookkeeping of the frontier, precomputed once.

    ``before[i]`` lists the frontier cells before edge ``i`` in the order their mates are stored.
    Edge ``i`` appends the cells it is the first edge of (``entering[i]``; ``pos[i]`` maps every cell
    of that active list to its position), and afterwards drops the cells it is the last edge of
    (``leaving[i]``); ``keep[i]`` are the positions that stay, giving ``before[i+1]``.
    """

    def __init__(self, rows: int, cols: int) -> None:
        self.s, self.t = 0, rows * cols - 1
        self.edges = [(r * cols + c, r2 * cols + c2) for (r, c), (r2, c2) in grid_edges(rows, cols)]
        m, n = len(self.edges), rows * cols
        first, last = [m] * n, [-1] * n
        for i, (u, v) in enumerate(self.edges):
            for w in (u, v):
                first[w], last[w] = min(first[w], i), max(last[w], i)
        cell = np.arange(n)
        self.dist = abs(cell[:, None] // cols - cell // cols) + abs(cell[:, None] % cols - cell % cols)  # (n, n) Manhattan
        frontier: list[int] = []
        self.before: list[list[int]] = []
        self.entering: list[list[int]] = []
        self.pos: list[dict[int, int]] = []  # cell -> position in the active list
        self.leaving: list[list[tuple[int, int]]] = []  # (position, cell)
        self.keep: list[list[int]] = []
        self.future_capacity: list[int] = []  # after edge i: sum of max degrees of the cells not yet seen
        for i in range(m):
            self.before.append(frontier)
            self.entering.append([w for w in range(n) if first[w] == i])
            active = frontier + self.entering[i]
            self.pos.append({w: p for p, w in enumerate(active)})
            self.leaving.append([(p, w) for p, w in enumerate(active) if last[w] == i])
            self.keep.append([p for p, w in enumerate(active) if last[w] != i])
            frontier = [active[p] for p in self.keep[i]]
            self.future_capacity.append(sum(1 if w in (self.s, self.t) else 2 for w in range(n) if first[w] > i))
        self.before.append(frontier)
        assert not frontier


def _step(lv: _Levels, i: int, mates: tuple[int, ...], take: bool) -> tuple[int, ...] | None:
    """The mates after deciding edge ``i`` (``take``: on), ``_DONE``, or ``None`` if no completion is a path."""
    if mates == _DONE:
        return None if take else _DONE
    s, t = lv.s, lv.t
    mate = [*mates, *lv.entering[i]]  # a cell entering the frontier has degree 0: its own mate
    done = False
    if take:
        u, v = lv.edges[i]
        pos = lv.pos[i]
        pu, pv = pos[u], pos[v]
        mu, mv = mate[pu], mate[pv]
        if mu == _DEG2 or mv == _DEG2 or mu == v:  # degree 3, or closing a cycle
            return None
        if (u in (s, t) and mu != u) or (v in (s, t) and mv != v):  # s, t: degree 1
            return None
        a = u if mu == u else mu  # the far ends of the two fragments being joined
        b = v if mv == v else mv
        if mu != u:
            mate[pu] = _DEG2
        if mv != v:
            mate[pv] = _DEG2
        if a in pos:  # s may have left the frontier already
            mate[pos[a]] = b
        if b in pos:
            mate[pos[b]] = a
        done = (a == s and b == t) or (a == t and b == s)
    for p, w in lv.leaving[i]:
        m = mate[p]
        if m == w:
            if w == s or w == t:  # s or t with degree 0
                return None
        elif m != _DEG2 and w != s and not (done and w == t):  # a dangling end leaves (t: unless joined)
            return None
    if done:  # s-t joined: no other fragment may be left
        if any(mate[p] != w and mate[p] != _DEG2 and w != s and w != t for p, w in zip(lv.keep[i], lv.before[i + 1])):
            return None
        return _DONE
    return tuple([mate[p] for p in lv.keep[i]])


def _bounds(lv: _Levels, i: int, nxt: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the on-edges still to come after edge ``i``, for every mate tuple (in bulk).

    Lower: the rest of the path joins the open end ``x`` of the ``s`` fragment to the open end ``y``
    of the ``t`` fragment (``t`` itself while unseen) through every other fragment, each traversed
    once in some order and direction, and the new edges between two consecutive ends are at least
    their Manhattan distance.  For ``k <= 4`` other fragments the minimum over all orders and
    directions is taken; beyond, ``max(k + 1, |x - y| - sum_j |a_j - b_j|)`` (a fragment bridges at
    most its ends' distance, and every gap needs an edge).  0 when DONE.
    Upper: half the degree still free (``deg <= 2``, ``deg(s), deg(t) <= 1``; cells not yet seen
    count in full), as every new edge takes two.
    """
    low = np.zeros(len(nxt), dtype=np.int64)
    high = np.zeros(len(nxt), dtype=np.int64)
    rows = [j for j, q in enumerate(nxt) if q != _DONE]
    if not rows:
        return low, high
    frontier = np.array(lv.before[i + 1], dtype=np.int64)  # (W,)
    m = np.array([nxt[j] for j in rows], dtype=np.int64).reshape(len(rows), len(frontier))  # (N, W)
    s, t = lv.s, lv.t
    top = np.where((frontier == s) | (frontier == t), 1, 2)
    free = np.where(m == _DEG2, 0, np.where(m == frontier, top, top - 1)).sum(1)
    high[rows] = (lv.future_capacity[i] + free) // 2
    at_s, at_t = (frontier == s), (frontier == t)
    x = m[:, at_s.argmax()] if at_s.any() else frontier[(m == s).argmax(1)]
    y = m[:, at_t.argmax()] if at_t.any() else np.full(len(rows), t)
    other = (m != frontier) & (m != _DEG2) & ~at_s & ~at_t & (m != s) & (m != t)
    k = other.sum(1) // 2
    d = lv.dist
    lb = d[x, y]
    many = k > 4
    lb[many] = np.maximum(k[many] + 1, d[x, y][many] - np.where(other & (m > frontier), d[frontier, m], 0).sum(1)[many])
    for kk in range(1, 5):
        r = np.flatnonzero(k == kk)
        if len(r):
            lb[r] = _order_bound(d, x[r], y[r], frontier, m[r], (other[r] & (m[r] > frontier)))
    low[rows] = lb
    return low, high


def _order_bound(d: np.ndarray, x: np.ndarray, y: np.ndarray, frontier: np.ndarray, m: np.ndarray,
                 smaller_end: np.ndarray) -> np.ndarray:
    """``(N,)`` min over orders and directions of the Manhattan gaps ``x -> fragments -> y``.

    ``smaller_end`` ``(N, W)`` marks the same number ``k`` of fragments in every row by their smaller end.
    """
    n = len(x)
    row, col = np.nonzero(smaller_end)
    k = len(row) // n
    ends_a = frontier[col].reshape(n, k)  # (N, k): the two ends of each fragment
    ends_b = m[row, col].reshape(n, k)
    best = np.full(n, 1 << 30, dtype=np.int64)
    for order in itertools.permutations(range(k)):
        # c_b / c_a: shortest x -> ... -> this fragment, leaving it through b (entered at a) / through a
        a0, b0 = ends_a[:, order[0]], ends_b[:, order[0]]
        c_b, c_a = d[x, a0], d[x, b0]
        for j in order[1:]:
            pa, pb = ends_a[:, j], ends_b[:, j]
            c_b, c_a = np.minimum(c_b + d[b0, pa], c_a + d[a0, pa]), np.minimum(c_b + d[b0, pb], c_a + d[a0, pb])
            a0, b0 = pa, pb
        best = np.minimum(best, np.minimum(c_b + d[b0, y], c_a + d[a0, y]))
    return best


def simple_path_dag(rows: int, cols: int, max_edges: int | None = None, *, progress: bool = False,
                    max_nodes: int | None = DEFAULT_MAX_NODES) -> Dag:
    """The circuit over :func:`grid_edges` whose models are the simple paths (0,0) -> (rows-1, cols-1).

    Args:
        rows, cols: grid size in cells (ints >= 1, not both 1).
        max_edges: keep only paths of at most this many edges (``None``: no bound); see
            :func:`normalized_bound`.
        progress: show a tqdm bar over the edges.
        max_nodes: stop with a :class:`~pseudosl.logic.errors.SizeLimitError` when the frontier
            states (one decision node each) exceed this (``None``: no limit).

    Raises:
        UnsatisfiableError: ``max_edges`` is below the shortest path, ``rows + cols - 2``.
        SizeLimitError: above ``max_nodes`` states (about as many as the circuit has nodes: 9.7M for the
            unbounded 12 x 12 grid, 15.7M with max_edges=44).
    """
    rows, cols = _check_grid(rows, cols)
    bound = normalized_bound(rows, cols, max_edges)
    hi, lo = _explore(rows, cols, bound, progress, max_nodes)
    return _to_dag(len(hi), *_reduce(hi, lo))  # Dag() validates it


def _explore(rows: int, cols: int, bound: int | None, progress: bool,
             max_nodes: int | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Forward pass: per level ``i``, the child indices at level ``i+1`` of every reachable state (-1: FALSE).

    A state is ``(mates, used)``.  The mate transition does not depend on ``used``, so it is
    computed once per distinct mate tuple; the states then move in bulk (numpy).  ``used`` is
    clamped from below to ``bound - upper_bound(mates)``: past that the bound prunes nothing, so
    the clamped states have the same completions and merge.  Unbounded: ``used`` stays 0.
    """
    from tqdm.auto import tqdm

    lv = _Levels(rows, cols)
    cap = 0 if bound is None else bound
    mates: list[tuple[int, ...]] = [()]  # level 0: the empty frontier
    state_mate = np.zeros(1, dtype=np.int64)  # per state: its mate index, and its used edges
    state_used = np.zeros(1, dtype=np.int64)
    his: list[np.ndarray] = []
    los: list[np.ndarray] = []
    n_states = 0
    bar = tqdm(range(len(lv.edges)), desc=f"simple_path {rows}x{cols} (max_edges={bound})", disable=not progress)
    for i in bar:
        if not len(state_used):
            break
        index: dict[tuple[int, ...], int] = {}
        moves = np.full((2, len(mates)), -1, dtype=np.int64)  # [take][mate index] -> next mate index
        for j, q in enumerate(mates):
            for take in (0, 1):
                out = _step(lv, i, q, bool(take))
                if out is not None:
                    moves[take, j] = index.setdefault(out, len(index))
        nxt = list(index)
        if bound is not None:
            low, high = _bounds(lv, i, nxt)
        keys = []
        for take in (1, 0):
            to = moves[take, state_mate]
            used = state_used + take if bound is not None else state_used
            ok = to >= 0
            if bound is not None:
                safe = np.maximum(to, 0)
                ok &= used + low[safe] <= cap
                used = np.maximum(used, cap - high[safe])
            keys.append(np.where(ok, to * (cap + 1) + used, -1))
        uniq, inverse = np.unique(np.concatenate(keys), return_inverse=True)
        inverse = inverse.reshape(2, -1) - int(uniq[0] < 0)
        his.append(np.where(keys[0] >= 0, inverse[0], -1))
        los.append(np.where(keys[1] >= 0, inverse[1], -1))
        uniq = uniq[uniq >= 0]
        kept, state_mate = np.unique(uniq // (cap + 1), return_inverse=True)  # drop mates no state reaches
        state_mate = state_mate.reshape(-1)
        state_used = uniq % (cap + 1)
        mates = [nxt[k] for k in kept]
        bar.set_postfix(states=len(uniq), mates=len(mates))
        n_states += len(uniq)
        check_limit(f"simple_path {rows}x{cols} (max_edges={bound}): after edge {i + 1} of {len(lv.edges)}, the "
                    f"frontier states number", n_states, max_nodes, "max_nodes")
    if not len(state_used) or len(his) < len(lv.edges):
        raise UnsatisfiableError(f"no simple path from (0, 0) to ({rows - 1}, {cols - 1}) within max_edges={bound}")
    assert mates == [_DONE] and len(state_used) == 1
    return his, los


def _reduce(his: list[np.ndarray], los: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Backward pass: drop states without a model and merge states with equal children.

    Returns per level the (hi, lo) children of the distinct live nodes, as indices into the
    next level's live nodes (-1: FALSE); level ``m`` is the single DONE node (index 0).
    """
    live_his: list[np.ndarray] = []
    live_los: list[np.ndarray] = []
    remap = np.zeros(1, dtype=np.int64)  # level m: DONE -> 0
    for hi, lo in zip(reversed(his), reversed(los)):
        h = np.where(hi >= 0, remap[np.maximum(hi, 0)], -1)
        l = np.where(lo >= 0, remap[np.maximum(lo, 0)], -1)
        alive = (h >= 0) | (l >= 0)
        pairs, inverse = np.unique(np.stack([h[alive], l[alive]], 1), axis=0, return_inverse=True)
        remap = np.full(len(hi), -1, dtype=np.int64)
        remap[alive] = inverse.reshape(-1)
        live_his.append(pairs[:, 0])
        live_los.append(pairs[:, 1])
    if remap[0] < 0:
        raise UnsatisfiableError("the simple-path constraint has no model")
    return live_his[::-1], live_los[::-1]


def _to_dag(n_vars: int, his: list[np.ndarray], los: list[np.ndarray]) -> Dag:
    """CSR arrays, children first: FALSE, TRUE, literals ``2 + 2 v + c``, then levels ``m-1 .. 0``.

    Per level: one AND ``[y_i = c] AND child`` per distinct child (just the literal when the child
    is TRUE), then one OR per node with two live children (a node with one is that AND).
    """
    n_lit = 2 * n_vars
    kinds = [np.array([CONST, CONST], np.int8), np.full(n_lit, LIT, np.int8)]
    var = [np.zeros(2, np.int64), np.repeat(np.arange(n_vars), 2)]
    value = [np.array([0, 1]), np.tile(np.arange(2), n_vars)]
    children: list[np.ndarray] = []  # (count, 2) per block of inner nodes
    n_nodes = 2 + n_lit
    ids = np.array([1], dtype=np.int64)  # level m: DONE = TRUE
    for i in reversed(range(n_vars)):
        node_ids = []
        for c, child in ((1, his[i]), (0, los[i])):
            lit = 2 + 2 * i + c
            kids = np.unique(ids[child[child >= 0]])
            made = kids[kids != 1]  # AND(lit, TRUE) is the literal itself
            and_ids = np.where(kids == 1, lit, 0)
            and_ids[kids != 1] = n_nodes + np.arange(len(made))
            n_nodes += len(made)
            children.append(np.stack([np.full(len(made), lit), made], 1))
            kinds.append(np.full(len(made), AND, np.int8))
            where = np.searchsorted(kids, ids[np.maximum(child, 0)]).clip(max=max(len(kids) - 1, 0))
            node_ids.append(np.where(child >= 0, and_ids[where] if len(kids) else -1, -1))
        a_hi, a_lo = node_ids
        both = (a_hi >= 0) & (a_lo >= 0)
        n_or = int(both.sum())
        children.append(np.stack([a_hi[both], a_lo[both]], 1))
        kinds.append(np.full(n_or, OR, np.int8))
        ids = np.where(a_hi >= 0, a_hi, a_lo)
        ids[both] = n_nodes + np.arange(n_or)
        n_nodes += n_or
    kind = np.concatenate(kinds)
    n_inner = n_nodes - 2 - n_lit
    var = np.concatenate(var + [np.zeros(n_inner, np.int64)])
    value = np.concatenate(value + [np.zeros(n_inner, np.int64)])
    offsets = np.concatenate([np.zeros(2 + n_lit + 1, np.int64), 2 * np.arange(1, n_inner + 1, dtype=np.int64)])
    assert len(ids) == 1 and len(kind) == n_nodes
    return Dag(n_vars, 2, kind, var, value, offsets, np.concatenate(children).reshape(-1).astype(np.int64), ids)
