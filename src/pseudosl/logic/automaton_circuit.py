"""Automata unrolled into circuits that grow with their transitions, not states x values (no torch).

:func:`automaton_dag` compiles "the automaton accepts ``y_0 .. y_{n-1}``" for a :class:`~.automaton.SparseDFA`
(a :class:`~.automaton.DFA` is first stored as one, :meth:`~.automaton.SparseDFA.from_dense`).  Writing
``N_t(s)`` for "from state ``s``, positions ``t .. n-1`` are accepted":

    N_n(s) = TRUE if s is accepting else FALSE
    N_t(s) = OR( the interval-tree nodes T_t(r, I) over the values outside E_s,
                 [y_t in C] AND N_{t+1}(d)  for each destination d of the exceptions of s, C its values )

where ``r`` is the default row of ``s`` and ``E_s`` its excepted values.  The values are laid out in one
order (:func:`_value_order`: each row's values of equal destination side by side, then by the first state
that excepts them) and split into a balanced tree of intervals ``I``.  ``T_t(r, I)`` is
``[y_t in I] AND N_{t+1}(d)`` when every value of ``I`` has the same default destination ``d`` in row ``r``,
else the OR of ``T_t(r, .)`` over the children of ``I``; ``[y_t in I]`` is itself the OR of the literals of
``I`` built as the same tree (``V_t(I)``), shared by every row and exception set.  With a binary tree the
values outside ``E_s`` are covered by at most ``|E_s| * depth`` tree intervals, so a state costs
``O(|E_s| log k)`` edges per position and every state without exceptions is its row's tree root (no edge at
all): the circuit has about ``n * (R * k + E log k)`` edges for ``R`` default rows and ``E`` exceptions,
against ``n * states * values`` for a table.  Each tree level is a layer of the evaluation, so a small
automaton, whose table is cheap, gets a flat tree (the root's children are the values: one OR per state and
position, as a table's unrolling) when its estimated size is at most twice the binary tree's (:func:`_plan`).
Only states reachable from the start at ``t`` are built, and a node that is FALSE (no accepted continuation
of this length) is dropped, so no dead node is ever made.

It is smooth by construction (every node of position ``t`` mentions exactly ``y_t .. y_{n-1}``: literals
and ``V_t`` of ``y_t``, ``N_{t+1}`` of the later ones), decomposable (each AND joins ``y_t`` to
``N_{t+1}``) and deterministic by construction (every OR's children fix ``y_t`` to disjoint value sets:
the parts of an interval, or the cover intervals and exception groups of a partition of the
values), and monotone (no subtraction), so MPE and sampling are exact.  The arrays are made directly,
not through :class:`~.builder.CircuitBuilder`, whose node-by-node determinism check would dominate the
time; :class:`~.dag.Dag` still validates smoothness and decomposability, and the tests check determinism
by enumeration (``tests/logic/test_automaton_circuit.py``).

Example:
    >>> from pseudosl.logic.automaton import forbidden_sequences_sparse_dfa
    >>> dfa = forbidden_sequences_sparse_dfa([[0, 1], [2]], n_values=4)   # never "0 1", never "2"
    >>> dag = automaton_dag(dfa, 5)
    >>> dag.evaluate([[1, 0, 0, 3, 1], [0, 1, 3, 3, 3]])[:, 0].tolist()
    [True, False]
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .automaton import DFA, SparseDFA
from .dag import Dag
from .nodes import AND, CONST, FALSE, LIT, OR, TRUE
from .errors import DEFAULT_MAX_EDGES
from .checks import check_int, check_limit

__all__ = ["automaton_dag", "automaton_edges"]


@dataclass(frozen=True)
class _Tree:
    """A balanced tree of intervals of value positions ``0 .. k-1``: node 0 is everything, a node of ``m > 1``
    positions has ``min(fanout, m)`` children of near-equal sizes, ids ``first .. first + count - 1``
    (numbered breadth-first: children after parents); a leaf (one position) has ``count = 0``."""

    lo: list[int]
    hi: list[int]
    first: list[int]
    count: list[int]
    levels: list[np.ndarray]  # the node ids of each depth, root first

    @staticmethod
    def over(k: int, fanout: int) -> "_Tree":
        lo, hi = [np.zeros(1, dtype=np.int64)], [np.full(1, k, dtype=np.int64)]
        first, count, levels, n = [], [], [np.zeros(1, dtype=np.int64)], 1
        while True:
            parts = np.minimum(hi[-1] - lo[-1], fanout)
            parts[parts == 1] = 0
            count.append(parts)
            first.append(np.where(parts > 0, n + np.cumsum(parts) - parts, -1))
            if not parts.any():
                break
            parent = np.repeat(np.arange(len(parts)), parts)
            j = np.arange(len(parent)) - np.repeat(np.cumsum(parts) - parts, parts)  # child index in its parent
            a, size, p = lo[-1][parent], (hi[-1] - lo[-1])[parent], parts[parent]
            lo.append(a + size * j // p)
            hi.append(a + size * (j + 1) // p)
            levels.append(np.arange(n, n + len(parent)))
            n += len(parent)
        return _Tree(np.concatenate(lo).tolist(), np.concatenate(hi).tolist(), np.concatenate(first).tolist(),
                     np.concatenate(count).tolist(), levels)

    def kids(self, i: int) -> range:
        return range(self.first[i], self.first[i] + self.count[i])

    def cover(self, positions: list[int], inside: bool) -> list[int]:
        """The largest tree intervals inside the sorted ``positions`` (``inside``) or outside them (not)."""
        out: list[int] = []
        stack = [0]
        while stack:
            i = stack.pop()
            a, b = self.lo[i], self.hi[i]
            n_in = bisect.bisect_left(positions, b) - bisect.bisect_left(positions, a)
            if n_in == (b - a if inside else 0):
                out.append(i)
            elif n_in != (0 if inside else b - a):
                stack += reversed(self.kids(i))
        return out


@dataclass(frozen=True)
class _Plan:
    """What every position shares: the value order, the tree, each row's pure intervals, each state's parts."""

    dfa: SparseDFA
    order: np.ndarray  # value at each position of the tree's leaves
    tree: _Tree
    pure: list[list[int]]  # [row][tree node] the default destination common to its values, -1 if several
    covers: dict[int, list[int]]  # live state with exceptions -> tree nodes over its non-excepted values
    groups: dict[int, list[tuple[int, list[int]]]]  # live state -> [(destination, tree nodes of its values)]
    live: np.ndarray  # (n_states,) bool: some accepting state is reachable

    @staticmethod
    def of(dfa: SparseDFA, fanout: int) -> "_Plan":
        live = dfa.live_states()
        s, c, d = _real_exceptions(dfa).T
        keep = live[s]
        s, c, d = s[keep], c[keep], d[keep]
        order = _value_order(dfa, s, c)
        position = np.empty(dfa.n_values, dtype=np.int64)
        position[order] = np.arange(dfa.n_values)
        tree = _Tree.over(dfa.n_values, fanout)
        pure = _pure_intervals(tree, dfa.default[:, order])
        covers: dict[int, list[int]] = {}
        groups: dict[int, list[tuple[int, list[int]]]] = {}
        bounds = np.flatnonzero(np.diff(s)) + 1
        for ss, cc, dd in zip(np.split(s, bounds), np.split(position[c], bounds), np.split(d, bounds)):
            if not len(ss):
                continue
            state = int(ss[0])
            covers[state] = tree.cover(sorted(cc.tolist()), inside=False)
            by_dest = np.argsort(dd, kind="stable")
            cuts = np.flatnonzero(np.diff(dd[by_dest])) + 1
            groups[state] = [(int(dd[g[0]]), tree.cover(sorted(cc[g].tolist()), inside=True))
                             for g in np.split(by_dest, cuts) if live[dd[g[0]]]]
        return _Plan(dfa, order, tree, pure, covers, groups, live)

    def edges_per_position(self) -> int:
        """An upper bound on the edges one position adds: the value tree, each used row's tree, each live
        state's OR (its cover intervals, and per exception group an AND of two and its set's OR)."""
        rows = len(set(self.dfa.row_of[self.live].tolist()))
        trees = 2 * len(self.tree.lo) * (1 + rows)
        states = sum(len(cover) + sum(4 + len(nodes) for _, nodes in self.groups[s]) for s, cover in self.covers.items())
        return trees + states

    def flat_edges_per_position(self) -> int:
        """The same bound for a flat tree (``fanout = k``: a state's cover lists its values one by one)."""
        rows = len(set(self.dfa.row_of[self.live].tolist()))
        k = self.dfa.n_values
        return 2 * (k + 1) * (1 + rows) + sum(k + 4 * len(self.groups[s]) for s in self.covers)


def _plan(dfa: SparseDFA, fanout: int | None) -> _Plan:
    """The plan with this tree fan-out; ``None``: binary, or flat (one OR per state and position, as a table's
    unrolling, and so fewer layers to evaluate) where the flat circuit is at most twice the binary one's size."""
    if fanout is not None:
        return _Plan.of(dfa, check_int("fanout", fanout, low=2))
    binary = _Plan.of(dfa, 2)
    if binary.flat_edges_per_position() <= 2 * binary.edges_per_position():
        return _Plan.of(dfa, dfa.n_values)
    return binary


def _real_exceptions(dfa: SparseDFA) -> np.ndarray:
    """``(E', 3)`` the exceptions that change a destination (sorted by state, as stored)."""
    s, c, d = dfa.exceptions.T
    return dfa.exceptions[d != dfa.default[dfa.row_of[s], c]]


def _value_order(dfa: SparseDFA, s: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The values in tree order: by their default destinations (row 0 first; equal destinations of a row side by
    side, so its tree has few mixed intervals), then by the first state that excepts them (so the exception
    sets of one state sit together and their complement takes few intervals)."""
    first = np.full(dfa.n_values, dfa.n_states, dtype=np.int64)
    np.minimum.at(first, c, s)
    keys = [np.arange(dfa.n_values), first] + [dfa.default[r] for r in reversed(range(dfa.n_rows))]
    return np.lexsort(keys)


def _pure_intervals(tree: _Tree, default: np.ndarray) -> list[list[int]]:
    """Per row, per tree node: the destination shared by all of its values, -1 if they differ."""
    first, count = np.array(tree.first), np.array(tree.count)
    pure = default[:, np.array(tree.lo)]  # right for the leaves
    for level in reversed(tree.levels[:-1]):  # children before parents; a level's children are the next level
        inner = level[count[level] > 0]
        starts = first[inner] - first[inner[0]]
        kids = pure[:, first[inner[0]]:first[inner[-1]] + count[inner[-1]]]
        low, high = np.minimum.reduceat(kids, starts, axis=1), np.maximum.reduceat(kids, starts, axis=1)
        pure[:, inner] = np.where(low == high, low, -1)
    return pure.tolist()


def _reachable(dfa: SparseDFA, n_positions: int) -> list[np.ndarray]:
    """``reach[t]``: bool over states, reachable from the start in exactly ``t`` steps (``t < n_positions``)."""
    s, c, d = _real_exceptions(dfa).T
    reach = np.zeros(dfa.n_states, dtype=bool)
    reach[dfa.start] = True
    out = [reach]
    for _ in range(n_positions - 1):
        rows = dfa.row_of[reach]
        per_row = np.bincount(rows, minlength=dfa.n_rows)
        excepted = np.zeros((dfa.n_rows, dfa.n_values), dtype=np.int64)
        np.add.at(excepted, (dfa.row_of[s], c), reach[s])
        # value c leads to default[r, c] from some reached state of row r unless every one of them excepts c
        taken = (per_row[:, None] > 0) & (excepted < per_row[:, None])
        reach = np.zeros(dfa.n_states, dtype=bool)
        reach[dfa.default[taken]] = True
        reach[d[out[-1][s]]] = True
        out.append(reach)
    return out


def automaton_edges(dfa: DFA | SparseDFA, n_positions: int, *, fanout: int | None = None) -> int:
    """An upper bound on the edges :func:`automaton_dag` makes over ``n_positions`` positions (see
    :meth:`_Plan.edges_per_position`); it costs ``O(R * k + E log k)``, not a circuit."""
    n_positions = check_int("n_positions", n_positions, low=1)
    return n_positions * _plan(_sparse(dfa), fanout).edges_per_position()


def automaton_dag(dfa: DFA | SparseDFA, n_positions: int, *, max_edges: int | None = DEFAULT_MAX_EDGES,
                  fanout: int | None = None) -> Dag:
    """The circuit over ``n_positions`` variables with ``dfa.n_values`` values: "``dfa`` accepts ``y``".

    ``fanout`` is the branching of the interval tree (``None``: binary, or flat where that is at most twice
    as large; see the module docs).  Above ``max_edges`` estimated edges (:func:`automaton_edges`) it is a
    :class:`~pseudosl.logic.errors.SizeLimitError` before the circuit is built (``None``: no limit).
    """
    dfa = _sparse(dfa)
    n_positions = check_int("n_positions", n_positions, low=1)
    plan = _plan(dfa, fanout)
    check_limit(f"the automaton ({dfa.n_states:,} states, {dfa.n_values:,} values, {dfa.n_exceptions:,} exceptions) "
                f"over {n_positions:,} positions needs circuit edges numbering about",
                n_positions * plan.edges_per_position(), max_edges, "max_edges")
    return _Unroller(plan, n_positions).dag()


def _sparse(dfa: DFA | SparseDFA) -> SparseDFA:
    if isinstance(dfa, DFA):
        return SparseDFA.from_dense(dfa)
    if not isinstance(dfa, SparseDFA):
        raise TypeError(f"dfa must be a pseudosl.logic.automaton.DFA or SparseDFA, got {type(dfa).__name__}")
    return dfa


class _Unroller:
    """Makes the CSR arrays position by position, from the last one back (children before parents)."""

    def __init__(self, plan: _Plan, n_positions: int) -> None:
        self.plan, self.n = plan, n_positions
        self.kind, self.var, self.value = [CONST, CONST], [0, 0], [0, 1]
        self.offsets, self.children = [0, 0, 0], []
        self.index: dict[tuple[int, tuple[int, ...]], int] = {}  # hash-consing within a position

    def dag(self) -> Dag:
        plan, dfa = self.plan, self.plan.dfa
        rows = dfa.row_of.tolist()
        nxt = [TRUE if s in dfa.accepting else FALSE for s in range(dfa.n_states)]
        for t, reach in reversed(list(enumerate(_reachable(dfa, self.n)))):
            self.index.clear()
            sets = [-1] * len(plan.tree.lo)
            trees = [[-1] * len(plan.tree.lo) for _ in range(dfa.n_rows)]
            here = [FALSE] * dfa.n_states
            for s in np.flatnonzero(reach & plan.live).tolist():
                tree = trees[rows[s]]
                cover = plan.covers.get(s)
                if cover is None:  # no exception: the row's tree
                    here[s] = self._row(t, rows[s], 0, nxt, tree, sets)
                    continue
                kids = [self._row(t, rows[s], i, nxt, tree, sets) for i in cover]
                for d, nodes in plan.groups[s]:
                    if nxt[d] != FALSE:
                        values = self._or([self._values(t, i, sets) for i in nodes])
                        kids.append(self._and(values, nxt[d]))
                here[s] = self._or(kids)
            nxt = here
        root = nxt[dfa.start]
        arrays = [np.array(a, dtype=np.int64) for a in (self.var, self.value, self.offsets, self.children)]
        return Dag(self.n, dfa.n_values, np.array(self.kind, dtype=np.int8), *arrays, np.array([root], dtype=np.int64))

    def _row(self, t: int, r: int, i: int, nxt: list[int], tree: list[int], sets: list[int]) -> int:
        """``T_t(r, I_i)``: over the values of interval ``i``, ``[y_t = c] AND N_{t+1}(default[r, c])``."""
        if tree[i] < 0:
            d = self.plan.pure[r][i]
            if d >= 0:
                tree[i] = FALSE if nxt[d] == FALSE else self._and(self._values(t, i, sets), nxt[d])
            else:
                tr = self.plan.tree
                tree[i] = self._or([self._row(t, r, j, nxt, tree, sets) for j in tr.kids(i)])
        return tree[i]

    def _values(self, t: int, i: int, sets: list[int]) -> int:
        """``V_t(I_i)``: ``y_t`` takes a value of interval ``i`` (its literals, as the tree)."""
        if sets[i] < 0:
            tr = self.plan.tree
            if not tr.count[i]:
                sets[i] = self._new(LIT, [], t, int(self.plan.order[tr.lo[i]]))
            else:
                sets[i] = self._new(OR, [self._values(t, j, sets) for j in tr.kids(i)])
        return sets[i]

    def _and(self, values: int, after: int) -> int:
        return values if after == TRUE else self._node(AND, [values, after])

    def _or(self, kids: list[int]) -> int:
        kids = [k for k in kids if k != FALSE]
        return FALSE if not kids else kids[0] if len(kids) == 1 else self._node(OR, kids)

    def _node(self, kind: int, kids: list[int]) -> int:
        key = (kind, tuple(sorted(kids)))
        node = self.index.get(key)
        if node is None:
            node = self.index[key] = self._new(kind, list(key[1]))
        return node

    def _new(self, kind: int, kids: list[int], var: int = 0, value: int = 0) -> int:
        self.kind.append(kind)
        self.var.append(var)
        self.value.append(value)
        self.children += kids
        self.offsets.append(len(self.children))
        return len(self.kind) - 1
