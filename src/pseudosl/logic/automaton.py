"""Deterministic finite automata over categorical sequences (no torch).

A :class:`DFA` reads a sequence ``y_0 .. y_{n-1}`` of values in ``0 .. n_values-1``;
``delta[s, c]`` is the state after reading ``c`` in state ``s``.  A :class:`SparseDFA` is the same
automaton stored as a few default rows plus exceptions, without the ``states x values`` table.
:mod:`pseudosl.logic.automaton_circuit` compiles either into a circuit whose size grows with the
exceptions (:func:`~pseudosl.logic.automaton_circuit.automaton_dag`); :func:`automaton_node` embeds a
small dense DFA into a :class:`~pseudosl.logic.builder.CircuitBuilder` circuit, one OR per state and
position over the values grouped by destination:

    node(s, n) = TRUE if s is accepting else FALSE
    node(s, t) = OR_{d} ( [y_t in {c : delta[s, c] = d}]  AND  node(d, t + 1) )

:func:`forbidden_sequences_sparse_dfa` builds the Aho--Corasick automaton that accepts exactly
the sequences containing none of a set of forbidden sequences (:func:`forbidden_sequences_dfa`: as a table).

Example:
    >>> dfa = forbidden_sequences_dfa([[0, 1]], n_values=2)     # never "0 then 1"
    >>> dfa.accepts([1, 1, 0, 0]), dfa.accepts([1, 0, 1])
    (True, False)
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .builder import CircuitBuilder
from .errors import DEFAULT_MAX_EDGES, STATES_CEILING
from .checks import as_array, check_in_range, check_int, check_int_array, check_limit, check_states, check_word

__all__ = ["DFA", "SparseDFA", "automaton_node", "forbidden_sequences_dfa", "forbidden_sequences_sparse_dfa"]


_STATES = " (the states 0 .. n_states-1; at most 2**31 - 1: beyond, the per-state tables alone take over 16 GB)"


def _checked_header(dfa: "DFA | SparseDFA") -> tuple[int, int, int, frozenset[int]]:
    """``(n_states, n_values, start, accepting)`` of a DFA being made, each checked."""
    n_states = check_int("n_states", dfa.n_states, low=1, high=STATES_CEILING, fix=_STATES)
    n_values = check_int("n_values", dfa.n_values, low=2,
                         fix=" (a circuit variable needs >= 2 values; add an unused catch-all value)")
    start = check_int("start", dfa.start, low=0)
    if start >= n_states:
        raise ValueError(f"start state {start} is out of range 0..{n_states - 1}")
    return n_states, n_values, start, check_states("accepting", dfa.accepting, n_states)


@dataclass(frozen=True, eq=False)
class DFA:
    """A complete DFA: ``delta`` is an ``(n_states, n_values)`` int array of next states.

    Args:
        n_states: number of states ``>= 1`` (states are ``0 .. n_states-1``).
        n_values: alphabet size ``>= 2`` (the values a position can take).
        start: the initial state.
        accepting: the accepting states (any iterable; stored as a ``frozenset``).
        delta: ``(n_states, n_values)`` integer array, ``delta[s, c]`` = next state.
    """

    n_states: int
    n_values: int
    start: int
    accepting: frozenset[int]
    delta: np.ndarray

    def __post_init__(self) -> None:
        n_states, n_values, start, accepting = _checked_header(self)
        delta = np.asarray(self.delta)
        if delta.shape != (n_states, n_values):
            raise ValueError(f"delta must have shape (n_states, n_values) = ({n_states}, {n_values}), "
                             f"got {delta.shape}")
        if delta.size and not np.issubdtype(delta.dtype, np.integer):
            raise TypeError(f"delta must hold integer states, got dtype {delta.dtype}")
        delta = delta.astype(np.int64)
        out = (delta < 0) | (delta >= n_states)
        if out.any():
            s, c = (int(i) for i in np.argwhere(out)[0])
            raise ValueError(f"delta[{s}, {c}] = {delta[s, c]} is not a state (0..{n_states - 1})")
        delta.setflags(write=False)
        for name, value in (("n_states", n_states), ("n_values", n_values), ("start", start),
                            ("accepting", accepting), ("delta", delta)):
            object.__setattr__(self, name, value)

    @classmethod
    def from_transitions(cls, n_states: int, n_values: int, start: int, accepting: Iterable[int],
                         transitions: Iterable[tuple[int, Iterable[int] | int, int]]) -> "DFA":
        """A DFA from ``(src, values, dst)`` triples (``values``: an int or an iterable of ints).

        Pairs ``(state, value)`` without a transition go to an added rejecting, absorbing dead
        state (state ``n_states``; only added when needed).  Two transitions for the same
        ``(state, value)`` to different states raise ``ValueError`` (the automaton must be deterministic).

        Example:
            >>> even_ones = DFA.from_transitions(2, 2, 0, {0}, [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0)])
        """
        n_states = check_int("n_states", n_states, low=1, high=STATES_CEILING, fix=_STATES)
        n_values = check_int("n_values", n_values, low=2)
        delta = np.full((n_states, n_values), -1, dtype=np.int64)
        for i, triple in enumerate(transitions):
            try:
                src, values, dst = triple
            except (TypeError, ValueError):
                raise ValueError(f"transition {i} must be a triple (src, values, dst), got {triple!r}") from None
            src, dst = check_int(f"transition {i} src", src, 0), check_int(f"transition {i} dst", dst, 0)
            for name, s in (("src", src), ("dst", dst)):
                if s >= n_states:
                    raise ValueError(f"transition {i}: {name} state {s} is out of range 0..{n_states - 1}")
            vals = [values] if isinstance(values, (int, np.integer)) else list(values)
            for c in vals:
                c = check_int(f"transition {i} value", c, 0)
                if c >= n_values:
                    raise ValueError(f"transition {i}: value {c} is out of range 0..{n_values - 1}")
                if delta[src, c] not in (-1, dst):
                    raise ValueError(f"transition {i}: state {src} on value {c} goes to both "
                                     f"{delta[src, c]} and {dst}; a DFA must be deterministic")
                delta[src, c] = dst
        if (delta < 0).any():
            dead = n_states
            delta = np.vstack([np.where(delta < 0, dead, delta), np.full((1, n_values), dead)])
            n_states += 1
        return cls(n_states, n_values, start, accepting, delta)  # type: ignore[arg-type]  (made a frozenset)

    def run(self, word: Sequence[int]) -> int:
        """The state reached after reading ``word`` (values ``0 .. n_values-1``) from ``start``."""
        s = self.start
        for c in check_word(word, self.n_values):
            s = int(self.delta[s, c])
        return s

    def accepts(self, word: Sequence[int]) -> bool:
        return self.run(word) in self.accepting

    def key(self) -> tuple:
        """Canonical content (for the compile cache)."""
        return (self.n_states, self.n_values, self.start, tuple(sorted(self.accepting)),
                tuple(self.delta.reshape(-1).tolist()))


@dataclass(frozen=True, eq=False)
class SparseDFA:
    """A complete DFA stored as a few default rows plus exceptions: ``delta[s, c] = default[row_of[s], c]`` unless
    ``(s, c, d)`` is listed in ``exceptions`` (then ``delta[s, c] = d``).

    The Aho--Corasick automaton of a word list, and a character automaton lifted to tokens, move from almost
    every state on almost every value as one of a few typical states does (the start state; a state that has
    just read a whole word): a table of ``n_states * n_values`` entries would list the same destinations again
    and again.  This form costs ``n_rows * n_values + len(exceptions)``.

    Args:
        n_states: number of states ``>= 1``.
        n_values: alphabet size ``>= 2``.
        start: the initial state.
        accepting: the accepting states.
        default: ``(n_rows, n_values)`` integer array (or ``(n_values,)`` for one row): ``default[r, c]`` is the
            destination of value ``c`` from a state of row ``r`` unless an exception says otherwise.
        exceptions: ``(E, 3)`` integer array of rows ``(state, value, destination)``, no ``(state, value)`` twice;
            stored sorted by ``(state, value)``.
        row_of: ``(n_states,)`` integer array, the default row of each state (``None``: row 0 for every state).

    Example:
        >>> even_ones = SparseDFA(2, 2, 0, {0}, default=[0, 1], exceptions=[(1, 1, 0), (1, 0, 1)])
        >>> even_ones.accepts([1, 0, 1]), even_ones.accepts([1, 0, 0])
        (True, False)
        >>> even_ones.to_dense().delta.tolist()
        [[0, 1], [1, 0]]
        >>> SparseDFA(2, 2, 0, {0}, default=[[0, 1], [1, 0]], exceptions=[], row_of=[0, 1]).to_dense().delta.tolist()
        [[0, 1], [1, 0]]
    """

    n_states: int
    n_values: int
    start: int
    accepting: frozenset[int]
    default: np.ndarray
    exceptions: np.ndarray
    row_of: np.ndarray | None = None

    def __post_init__(self) -> None:
        n_states, n_values, start, accepting = _checked_header(self)
        default = as_array("default", self.default)
        default = check_int_array("default", default[None] if default.ndim == 1 else default, (None, n_values))
        if default.shape[0] < 1:
            raise ValueError("default must hold at least one row of n_values destinations")
        row_of = np.zeros(n_states, dtype=np.int64) if self.row_of is None else check_int_array("row_of", self.row_of,
                                                                                         (n_states,))
        exceptions = check_int_array("exceptions", self.exceptions, (None, 3))
        check_in_range("default", default, n_states)
        check_in_range("row_of", row_of, default.shape[0])
        check_in_range("exceptions[:, 0] (states)", exceptions[:, 0], n_states)
        check_in_range("exceptions[:, 1] (values)", exceptions[:, 1], n_values)
        check_in_range("exceptions[:, 2] (destinations)", exceptions[:, 2], n_states)
        keys = exceptions[:, 0] * n_values + exceptions[:, 1]
        order = np.argsort(keys, kind="stable")
        exceptions, keys = exceptions[order], keys[order]
        twice = np.flatnonzero(np.diff(keys) == 0)
        if twice.size:
            s, c = (int(v) for v in exceptions[twice[0], :2])
            raise ValueError(f"exceptions list (state {s}, value {c}) twice; a DFA has one destination per (state, value)")
        for a in (default, exceptions, keys, row_of):
            a.setflags(write=False)
        for name, value in (("n_states", n_states), ("n_values", n_values), ("start", start),
                            ("accepting", accepting), ("default", default), ("exceptions", exceptions),
                            ("row_of", row_of)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_keys", keys)

    @classmethod
    def from_dense(cls, dfa: DFA) -> "SparseDFA":
        """The same automaton with one default row: each value's most frequent destination."""
        if not isinstance(dfa, DFA):
            raise TypeError(f"dfa must be a pseudosl.DFA, got {type(dfa).__name__}")
        delta = dfa.delta
        default = np.array([np.bincount(delta[:, c], minlength=dfa.n_states).argmax() for c in range(dfa.n_values)],
                           dtype=np.int64)
        s, c = np.nonzero(delta != default[None, :])
        return cls(dfa.n_states, dfa.n_values, dfa.start, dfa.accepting, default,
                   np.stack([s, c, delta[s, c]], axis=1))

    def to_dense(self, *, max_entries: int | None = DEFAULT_MAX_EDGES) -> DFA:
        """The ``(n_states, n_values)`` table as a :class:`DFA` (refused above ``max_entries`` entries)."""
        check_limit(f"a dense table of {self.n_states:,} states x {self.n_values:,} values has entries numbering",
                    self.n_states * self.n_values, max_entries, "max_entries")
        delta = self.default[self.row_of].copy()
        delta[self.exceptions[:, 0], self.exceptions[:, 1]] = self.exceptions[:, 2]
        return DFA(self.n_states, self.n_values, self.start, self.accepting, delta)

    @property
    def n_rows(self) -> int:
        """Number of default rows."""
        return int(self.default.shape[0])

    @property
    def n_exceptions(self) -> int:
        return int(self.exceptions.shape[0])

    def step(self, states: np.ndarray | int, values: np.ndarray | int) -> np.ndarray:
        """Destinations of ``(states, values)`` (broadcast integer arrays; values must lie in ``0 .. n_values-1``)."""
        states, values = (check_int_array(name, a, (None,) * np.ndim(a)) for name, a in (("states", states), ("values", values)))
        check_in_range("states", states, self.n_states)
        check_in_range("values", values, self.n_values)
        try:
            states, values = np.broadcast_arrays(states, values)
        except ValueError:
            raise ValueError(f"states {states.shape} and values {values.shape} must broadcast to one shape (numpy's "
                             "rules: equal sizes or 1 on each axis from the right)") from None
        dest = self.default[self.row_of[states], values]
        if not len(self._keys):
            return dest
        keys = states * self.n_values + values
        at = np.searchsorted(self._keys, keys).clip(max=len(self._keys) - 1)
        return np.where(self._keys[at] == keys, self.exceptions[at, 2], dest)

    def run(self, word: Sequence[int]) -> int:
        """The state reached after reading ``word`` from ``start``."""
        s = self.start
        for c in check_word(word, self.n_values):
            s = int(self.step(s, c))
        return s

    def accepts(self, word: Sequence[int]) -> bool:
        return self.run(word) in self.accepting

    def live_states(self) -> np.ndarray:
        """``(n_states,)`` bool: the states from which some (possibly empty) word reaches an accepting state."""
        live = np.zeros(self.n_states, dtype=bool)
        live[list(self.accepting)] = True
        states, values, dests = self.exceptions.T
        rows = self.row_of[states]
        while True:
            # s reaches a live state through its default row iff some value with a live default is not excepted at s
            live_default = live[self.default]  # (n_rows, n_values)
            excepted_live = np.bincount(states, weights=live_default[rows, values], minlength=self.n_states)
            new = live | (excepted_live < live_default.sum(1)[self.row_of])
            new[states[live[dests]]] = True
            if (new == live).all():
                return live
            live = new

    def key(self) -> tuple:
        """Canonical content (for the compile cache)."""
        digest = hashlib.sha256(b"".join(a.tobytes() for a in (self.default, self.exceptions, self.row_of))).hexdigest()
        return ("sparse", self.n_states, self.n_values, self.start, tuple(sorted(self.accepting)), digest)


def automaton_node(b: CircuitBuilder, dfa: DFA, positions: Sequence[int] | None = None) -> int:
    """Node of ``b`` true iff ``dfa`` accepts the values at ``positions`` (default ``0 .. b.n_vars-1``).

    ``b.n_values`` must equal ``dfa.n_values``.  Built bottom-up over positions, one OR per
    (reachable or not) state and position; unreachable ones are dropped by :meth:`CircuitBuilder.build`.
    """
    if b.n_values != dfa.n_values:
        raise ValueError(f"the builder has n_values={b.n_values} but the DFA reads {dfa.n_values} values")
    positions = list(range(b.n_vars)) if positions is None else [check_int("a position", p, 0) for p in positions]
    if len(set(positions)) != len(positions):
        raise ValueError(f"positions must be distinct, got {positions}")
    groups = _groups(dfa)
    nodes = [b.true() if s in dfa.accepting else b.false() for s in range(dfa.n_states)]
    for pos in reversed(positions):
        nodes = [b.or_(*(b.and_(b.in_set(pos, vals), nodes[d]) for d, vals in groups[s] if nodes[d] != b.false()))
                 for s in range(dfa.n_states)]
    return nodes[dfa.start]


def _groups(dfa: DFA) -> list[list[tuple[int, tuple[int, ...]]]]:
    """Per state, its values grouped by destination: ``[(dst, (c, ...)), ...]`` sorted by ``dst``."""
    groups = []
    for s in range(dfa.n_states):
        by_dst: dict[int, list[int]] = {}
        for c, d in enumerate(dfa.delta[s].tolist()):
            by_dst.setdefault(d, []).append(c)
        groups.append(sorted((d, tuple(vals)) for d, vals in by_dst.items()))
    return groups


def forbidden_sequences_sparse_dfa(words: Sequence[Sequence[int]], n_values: int, *,
                               max_edges: int | None = DEFAULT_MAX_EDGES) -> SparseDFA:
    """Aho--Corasick automaton accepting the sequences in which no word of ``words`` occurs contiguously.

    States are the trie nodes (prefixes of words) that contain no complete word as a suffix, numbered in the
    order the words first reach them (the start is 0), plus one absorbing rejecting dead state (the last),
    entered when a word occurrence ends (overlaps included: with words ``[a, b]`` and ``[b, a, b]``, reading
    ``b a b`` is caught).  Stored sparse, without a ``states x values`` table: row 0 is the start's row
    (each value's trie child of the start, else the start), row 1 the dead state's, and a state's exceptions
    are the values where its trie children or those of its failure links lead elsewhere -- a few per state.

    Args:
        words: non-empty sequences of ints in ``0 .. n_values-1``.
        n_values: alphabet size ``>= 2``.
        max_edges: refuse default rows (``2 * n_values`` entries) or exceptions above this many, before
            allocating them (``None``: no limit).

    Example:
        >>> dfa = forbidden_sequences_sparse_dfa([[0, 1], [2]], n_values=4)
        >>> dfa.n_states, dfa.n_exceptions, dfa.accepts([1, 0, 0, 3]), dfa.accepts([3, 0, 1])
        (3, 1, True, False)
    """
    n_values = check_int("n_values", n_values, low=2)
    goto, terminal = _trie(words, n_values)
    n = len(goto)
    check_limit(f"forbidden_sequences_sparse_dfa: two default rows of {n_values:,} values hold entries numbering",
                2 * n_values, max_edges, "max_edges", " (fold the values that occur in no word into one catch-all "
                "value first)")
    root = np.zeros(n_values, dtype=np.int64)
    root[list(goto[0])] = list(goto[0].values())
    # breadth-first: failure links; exc[s] = {value: destination} wherever delta(s, .) differs from the root row
    fail = [0] * n  # the start's children fail to the start
    exc: list[dict[int, int]] = [{} for _ in range(n)]
    queue = deque(goto[0].values())
    while queue:
        s = queue.popleft()
        terminal[s] = terminal[s] or terminal[fail[s]]  # a word ends here as a suffix
        exc[s] = {c: d for c, d in exc[fail[s]].items() if c not in goto[s]}
        for c, t in goto[s].items():
            fail[t] = exc[fail[s]].get(c, int(root[c]))
            exc[s][c] = t
            queue.append(t)
        exc[s] = {c: d for c, d in exc[s].items() if d != root[c]}
    # collapse terminal states into one dead state
    alive = [s for s in range(n) if not terminal[s]]
    dead = len(alive)
    remap = np.full(n, dead, dtype=np.int64)
    remap[alive] = np.arange(dead)
    default = np.stack([remap[root], np.full(n_values, dead)])
    triples = [(i, c, remap[d]) for i, s in enumerate(alive) for c, d in exc[s].items() if remap[d] != default[0, c]]
    check_limit("forbidden_sequences_sparse_dfa: the exceptions number", len(triples), max_edges, "max_edges")
    return SparseDFA(dead + 1, n_values, 0, frozenset(range(dead)), default,
                     np.array(triples, dtype=np.int64).reshape(-1, 3), row_of=[0] * dead + [1])


def forbidden_sequences_dfa(words: Sequence[Sequence[int]], n_values: int, *,
                        max_edges: int | None = DEFAULT_MAX_EDGES) -> DFA:
    """:func:`forbidden_sequences_sparse_dfa` as a dense table (``states x values``; refused above ``max_edges``
    entries, before it is allocated: ``None`` for no limit).

    For a large vocabulary (e.g. GPT-2 tokens) fold every value that occurs in no word into
    one catch-all value (say ``n_values - 1``) before calling this: such values always reset
    the automaton to its start, so the folded circuit is exact and stays small.

    Example:
        >>> forbidden_sequences_dfa([[0, 1]], n_values=2).delta.tolist()     # never "0 then 1"; state 2 is dead
        [[1, 0], [1, 2], [2, 2]]
    """
    n_values = check_int("n_values", n_values, low=2)
    n_states = len(_trie(words, n_values)[0])  # the table has at most this many states, dead one included
    check_limit(f"forbidden_sequences_dfa: {n_states:,} trie states x {n_values:,} values make a transition table with "
                f"entries numbering", n_states * n_values, max_edges, "max_edges",
                " (fold the values that occur in no word into one catch-all value first)")
    return forbidden_sequences_sparse_dfa(words, n_values, max_edges=None).to_dense(max_entries=None)


def _trie(words: Sequence[Sequence[int]], n_values: int) -> tuple[list[dict[int, int]], list[bool]]:
    """The trie of ``words``: ``goto[s]`` = {value: child}, and whether a word ends at each node."""
    goto: list[dict[int, int]] = [{}]
    terminal = [False]
    for i, w in enumerate(words):
        w = list(w)
        if not w:
            raise ValueError(f"forbidden word {i} is empty; an empty word occurs in every sequence")
        s = 0
        for c in w:
            c = check_int(f"forbidden word {i} value", c, 0)
            if c >= n_values:
                raise ValueError(f"forbidden word {i} = {w} has value {c} outside 0..{n_values - 1}")
            if c not in goto[s]:
                goto[s][c] = len(goto)
                goto.append({})
                terminal.append(False)
            s = goto[s][c]
        terminal[s] = True
    return goto, terminal
