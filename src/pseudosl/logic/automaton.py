"""Deterministic finite automata over categorical sequences, unrolled into circuits (no torch).

A :class:`DFA` reads a sequence ``y_0 .. y_{n-1}`` of values in ``0 .. n_values-1``;
``delta[s, c]`` is the state after reading ``c`` in state ``s``.  The constraint
"the DFA accepts ``y``" over ``n`` positions is the circuit

    node(s, n) = TRUE if s is accepting else FALSE
    node(s, t) = OR_{d} ( [y_t in {c : delta[s, c] = d}]  AND  node(d, t + 1) )

rooted at ``node(start, 0)``.  Each OR groups the values by destination state, so its
children hold on disjoint value sets of ``y_t`` (deterministic) and each AND splits
position ``t`` from positions ``> t`` (decomposable); :meth:`CircuitBuilder.build` smooths.
The circuit has at most ``n_states * n`` OR nodes -- no SDD compilation is involved.

:func:`forbidden_words_dfa` builds the Aho--Corasick automaton that accepts exactly
the sequences containing none of a set of forbidden words.

Example:
    >>> dfa = forbidden_words_dfa([[0, 1]], n_values=2)     # never "0 then 1"
    >>> dfa.accepts([1, 1, 0, 0]), dfa.accepts([1, 0, 1])
    (True, False)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .builder import CircuitBuilder
from .dag import Dag
from .errors import DEFAULT_MAX_EDGES, check_int, check_limit

__all__ = ["DFA", "automaton_dag", "automaton_edges", "automaton_node", "forbidden_words_dfa"]


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
        n_states = check_int("n_states", self.n_states, low=1)
        n_values = check_int("n_values", self.n_values, low=2,
                        fix=" (a circuit variable needs >= 2 values; add an unused catch-all value)")
        start = check_int("start", self.start, low=0)
        if start >= n_states:
            raise ValueError(f"start state {start} is out of range 0..{n_states - 1}")
        try:
            states = list(self.accepting)
        except TypeError:
            raise TypeError(f"accepting must be an iterable of int states, got {self.accepting!r}") from None
        accepting = frozenset(check_int("an accepting state", s) for s in states)
        bad = sorted(s for s in accepting if not 0 <= s < n_states)
        if bad:
            raise ValueError(f"accepting state {bad[0]} is out of range 0..{n_states - 1}")
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
        n_states = check_int("n_states", n_states, low=1)
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
        """The state reached after reading ``word`` from ``start``."""
        s = self.start
        for c in word:
            s = int(self.delta[s, c])
        return s

    def accepts(self, word: Sequence[int]) -> bool:
        return self.run(word) in self.accepting

    def key(self) -> tuple:
        """Canonical content (for the compile cache)."""
        return (self.n_states, self.n_values, self.start, tuple(sorted(self.accepting)),
                tuple(self.delta.reshape(-1).tolist()))


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


def automaton_dag(dfa: DFA, n_positions: int, *, max_edges: int | None = DEFAULT_MAX_EDGES) -> Dag:
    """The circuit over ``n_positions`` variables with ``dfa.n_values`` values: "``dfa`` accepts ``y``".

    Above ``max_edges`` estimated edges (:func:`automaton_edges`) it is a
    :class:`~pseudosl.logic.errors.SizeLimitError` before any work (``None``: no limit).
    """
    n_positions = check_int("n_positions", n_positions, low=1)
    check_limit(f"the automaton ({dfa.n_states:,} states, {dfa.n_values:,} values) over {n_positions:,} positions "
                f"needs circuit edges numbering about", automaton_edges(dfa, n_positions), max_edges, "max_edges")
    b = CircuitBuilder(n_positions, dfa.n_values)
    return b.build([automaton_node(b, dfa)])


def automaton_edges(dfa: DFA, n_positions: int) -> int:
    """An upper bound on the edges :func:`automaton_dag` makes: per position, three per (state,
    destination) pair (OR, AND) plus those of the distinct value sets, plus the smoothing nodes."""
    groups = _groups(dfa)
    sets = {vals for g in groups for _, vals in g if len(vals) < dfa.n_values}
    per_position = 3 * sum(len(g) for g in groups) + sum(len(v) for v in sets) + dfa.n_values
    return n_positions * per_position


def _groups(dfa: DFA) -> list[list[tuple[int, tuple[int, ...]]]]:
    """Per state, its values grouped by destination: ``[(dst, (c, ...)), ...]`` sorted by ``dst``."""
    groups = []
    for s in range(dfa.n_states):
        by_dst: dict[int, list[int]] = {}
        for c, d in enumerate(dfa.delta[s].tolist()):
            by_dst.setdefault(d, []).append(c)
        groups.append(sorted((d, tuple(vals)) for d, vals in by_dst.items()))
    return groups


def forbidden_words_dfa(words: Sequence[Sequence[int]], n_values: int, *,
                        max_edges: int | None = DEFAULT_MAX_EDGES) -> DFA:
    """Aho--Corasick DFA accepting the sequences in which no word of ``words`` occurs contiguously.

    States are the trie nodes (prefixes of words) that contain no complete word as a
    suffix, plus one absorbing rejecting dead state entered when a word occurrence ends
    (overlaps included: with words ``[a, b]`` and ``[b, a, b]``, reading ``b a b`` is caught).
    ``delta`` follows trie edges where they exist and failure links otherwise.

    For a large vocabulary (e.g. GPT-2 tokens) fold every value that occurs in no word into
    one catch-all value (say ``n_values - 1``) before calling this: such values always reset
    the automaton to its start, so the folded circuit is exact and stays small.  The GPT-2
    detox experiment does this over 10 token positions with forbidden words as token sequences.

    Args:
        words: non-empty sequences of ints in ``0 .. n_values-1``.
        n_values: alphabet size ``>= 2``.
        max_edges: refuse a transition table (states x values) larger than this, before
            allocating it (``None``: no limit).
    """
    n_values = check_int("n_values", n_values, low=2)
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
    # breadth-first: failure links, and full transitions delta[s][c]
    n = len(goto)
    check_limit(f"forbidden_words_dfa: {n:,} trie states x {n_values:,} values make a transition table with "
                f"entries numbering", n * n_values, max_edges, "max_edges",
                " (fold the values that occur in no word into one catch-all value first)")
    delta = np.zeros((n, n_values), dtype=np.int64)
    fail = [0] * n
    queue: deque[int] = deque()
    for c in range(n_values):
        if c in goto[0]:
            delta[0, c] = goto[0][c]
            queue.append(goto[0][c])
    while queue:
        s = queue.popleft()
        terminal[s] = terminal[s] or terminal[fail[s]]  # a word ends here as a suffix
        for c in range(n_values):
            t = goto[s].get(c)
            if t is None:
                delta[s, c] = delta[fail[s], c]
            else:
                fail[t] = int(delta[fail[s], c])
                delta[s, c] = t
                queue.append(t)
    # collapse terminal states into one dead state
    alive = [s for s in range(n) if not terminal[s]]
    new = {s: i for i, s in enumerate(alive)}
    dead = len(alive)
    remap = np.array([new.get(s, dead) for s in range(n)], dtype=np.int64)
    table = np.vstack([remap[delta[alive]], np.full((1, n_values), dead)])
    return DFA(dead + 1, n_values, 0, frozenset(range(dead)), table)
