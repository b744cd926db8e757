"""A byte automaton lifted to a vocabulary of tokens, each a byte string (no torch, no tokenizer).

Token ``t`` takes state ``s`` to the state the byte automaton reaches reading ``t``'s bytes from ``s``; a token
with no bytes (``None`` or ``b""``: a special token a decoder skips) leaves every state where it is.  Running
every token from every state costs ``n_states * V * bytes`` steps; most of them are not needed:

* each state ``s`` has a *reference* state ``r`` (:class:`~pseudosl.logic.words.ByteAutomaton`): from ``s`` a
  token goes where it goes from ``r`` unless its bytes leave ``s`` and ``r`` in different states all the way;
* the default rows -- the destination of every token from every reference state -- come from one walk per
  reference over the trie of the vocabulary's byte strings;
* the exceptions come from walking that trie from each state in step with its reference, breadth-first and for
  all states at once, and pruning a branch as soon as the two walks meet (from then on they agree).

Then the states no token sequence reaches from the start are dropped, and the tokens are grouped into classes of
identical behaviour (the same destination from every state): the automaton reads classes, and ``lookup[t]`` is
the class of token ``t``.

Example:
    >>> from pseudosl.logic.words import words_byte_automaton
    >>> lifted = lift_to_tokens(words_byte_automaton(["ab"]), [b"a", b"b", b"ab", b" ", None])
    >>> lifted.lookup.tolist()                   # "a" and "b" differ, "ab" and " " too, None is the identity
    [0, 1, 2, 3, 4]
    >>> dfa = lifted.dfa
    >>> dfa.accepts([0, 4, 1]), dfa.accepts([0, 1, 0]), dfa.accepts([2, 2, 3]), dfa.accepts([3, 2, 3])
    (False, True, True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .automaton import SparseDFA
from .words import ByteAutomaton

__all__ = ["LiftedAutomaton", "lift_to_tokens"]


@dataclass(frozen=True, eq=False)
class LiftedAutomaton:
    """``dfa`` over token classes and ``lookup (V,)``: the class of each token."""

    dfa: SparseDFA
    lookup: np.ndarray


def lift_to_tokens(automaton: ByteAutomaton, tokens: Sequence[bytes | None]) -> LiftedAutomaton:
    """The automaton over ``tokens`` (module docs): a :class:`SparseDFA` over token classes and the class lookup."""
    if len(tokens) < 2:
        raise ValueError(f"tokens must list at least 2 tokens (a vocabulary), got {len(tokens)}")
    trie = _VocabularyTrie(tokens)
    delta = automaton.delta
    rows = np.unique(automaton.reference)
    # default rows: the walk of the trie from each reference state
    walk = np.empty((len(rows), trie.n_nodes), dtype=np.int64)
    walk[:, 0] = rows
    for level in trie.levels:
        walk[:, level] = delta[walk[:, trie.parent[level]], trie.byte[level][None, :]]
    default = walk[:, trie.node_of_token]  # (rows, V); a token without bytes stays at the row's own state
    row_of = np.searchsorted(rows, automaton.reference)
    exceptions = _exceptions(automaton, trie)
    keep, start = _reachable(automaton, default, row_of, exceptions)
    return _classes(automaton, default, row_of, exceptions, keep, start)


class _VocabularyTrie:
    """The trie of the tokens' byte strings: node 0 is the empty string; children stored by parent (CSR)."""

    def __init__(self, tokens: Sequence[bytes | None]) -> None:
        children: list[dict[int, int]] = [{}]
        parent, byte, depth = [0], [0], [0]
        node_of_token = np.zeros(len(tokens), dtype=np.int64)
        for t, data in enumerate(tokens):
            if data is None:
                continue
            if not isinstance(data, bytes):
                raise TypeError(f"tokens[{t}] must be bytes or None, got {type(data).__name__}")
            node = 0
            for b in data:
                nxt = children[node].get(b)
                if nxt is None:
                    nxt = children[node][b] = len(children)
                    children.append({})
                    parent.append(node)
                    byte.append(b)
                    depth.append(depth[node] + 1)
                node = nxt
            node_of_token[t] = node
        self.n_nodes = len(children)
        self.parent, self.byte = np.array(parent), np.array(byte)
        depth_arr = np.array(depth)
        by_depth = np.argsort(depth_arr, kind="stable")
        self.levels = np.split(by_depth, np.flatnonzero(np.diff(depth_arr[by_depth])) + 1)[1:]
        self.node_of_token = node_of_token
        kids = np.argsort(self.parent[1:], kind="stable") + 1  # the non-root nodes grouped by parent
        self.child_nodes = kids
        self.child_start = np.searchsorted(self.parent[kids], np.arange(self.n_nodes))
        self.child_count = np.bincount(self.parent[1:], minlength=self.n_nodes)
        order = np.argsort(node_of_token, kind="stable")
        self.token_order = order
        self.token_start = np.searchsorted(node_of_token[order], np.arange(self.n_nodes))
        self.token_count = np.bincount(node_of_token, minlength=self.n_nodes)

    def expand(self, entries: np.ndarray, count: np.ndarray, start: np.ndarray, items: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """For frontier entries at nodes ``entries``: ``(entry index, item)`` per child (or token) of its node."""
        n = count[entries]
        which = np.repeat(np.arange(len(entries)), n)
        offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        return which, items[start[entries][which] + offset]


def _exceptions(automaton: ByteAutomaton, trie: _VocabularyTrie) -> np.ndarray:
    """``(E, 3)`` rows ``(state, token, destination)`` where a token leaves a state elsewhere than its reference."""
    delta = automaton.delta
    state = np.flatnonzero(automaton.reference != np.arange(automaton.n_states))
    node = np.zeros_like(state)  # the trie node each frontier entry stands at
    here, ref = state.copy(), automaton.reference[state]  # where the walks from the state and its reference are
    found = []
    while len(state):
        which, tok = trie.expand(node, trie.token_count, trie.token_start, trie.token_order)
        found.append(np.stack([state[which], tok, here[which]], axis=1))
        which, child = trie.expand(node, trie.child_count, trie.child_start, trie.child_nodes)
        b = trie.byte[child]
        here_c, ref_c = delta[here[which], b], delta[ref[which], b]
        apart = here_c != ref_c  # where the walks meet, every token below goes where the reference sends it
        state, node, here, ref = state[which][apart], child[apart], here_c[apart], ref_c[apart]
    return np.concatenate(found) if found else np.zeros((0, 3), dtype=np.int64)


def _reachable(automaton: ByteAutomaton, default: np.ndarray, row_of: np.ndarray, exceptions: np.ndarray
               ) -> tuple[np.ndarray, int]:
    """``(n_states,)`` bool: the states some token sequence reaches from the start (exactly: a default destination
    counts for a state only where some token of it is not an exception of that state)."""
    n = automaton.n_states
    row_dest, row_count = [], []
    for r in range(default.shape[0]):
        d, c = np.unique(default[r], return_counts=True)
        row_dest.append(d)
        row_count.append(dict(zip(d.tolist(), c.tolist())))
    src, tok, dst = exceptions.T
    key, count = np.unique(src * n + default[row_of[src], tok], return_counts=True)  # excepted tokens per default
    covered: dict[int, set[int]] = {}
    for k, c in zip(key.tolist(), count.tolist()):
        s, d = divmod(k, n)
        if row_count[row_of[s]][d] == c:  # every token that would go to d goes elsewhere from s
            covered.setdefault(s, set()).add(d)
    order = np.argsort(src, kind="stable")
    exc_start = np.searchsorted(src[order], np.arange(n + 1))
    missing = [set(d.tolist()) for d in row_dest]  # per row, the default destinations not yet reached
    reached = np.zeros(n, dtype=bool)
    reached[automaton.start] = True
    stack = [automaton.start]
    while stack:
        s = stack.pop()
        r = int(row_of[s])
        new = missing[r] - covered.get(s, set())
        missing[r] -= new
        new.update(dst[order[exc_start[s]:exc_start[s + 1]]].tolist())
        for d in new:
            if not reached[d]:
                reached[d] = True
                stack.append(d)
    return reached, automaton.start


def _classes(automaton: ByteAutomaton, default: np.ndarray, row_of: np.ndarray, exceptions: np.ndarray,
             keep: np.ndarray, start: int) -> LiftedAutomaton:
    """Restrict to the kept states and group the tokens by behaviour: the :class:`SparseDFA` over classes."""
    renumber = np.cumsum(keep) - 1
    exceptions = exceptions[keep[exceptions[:, 0]]]
    rows_used = np.unique(row_of[keep])
    default = renumber[default[rows_used]].clip(min=0)  # a dropped destination is excepted wherever its row is used
    row_of = np.searchsorted(rows_used, row_of[keep])
    src, tok, dst = renumber[exceptions[:, 0]], exceptions[:, 1], renumber[exceptions[:, 2]]
    order = np.lexsort((src, tok))
    src, tok, dst = src[order], tok[order], dst[order]
    V = default.shape[1]
    start_of = np.searchsorted(tok, np.arange(V + 1))
    columns = np.ascontiguousarray(default.T.astype(np.int64))
    pairs = np.stack([src, dst], axis=1)
    ids: dict[bytes, int] = {}
    lookup = np.empty(V, dtype=np.int64)
    for t in range(V):
        signature = columns[t].tobytes() + b"|" + pairs[start_of[t]:start_of[t + 1]].tobytes()
        lookup[t] = ids.setdefault(signature, len(ids))
    if len(ids) < 2:  # a circuit variable needs two values: give one token a class of its own (the same column)
        lookup[-1] = 1
    n_classes = int(lookup.max()) + 1
    rep = np.zeros(n_classes, dtype=np.int64)
    rep[lookup[::-1]] = np.arange(V)[::-1]  # the first token of each class
    rep_class = np.full(V, -1)
    rep_class[rep] = np.arange(n_classes)
    mine = rep_class[tok] >= 0
    table = np.stack([src[mine], rep_class[tok[mine]], dst[mine]], axis=1)
    accepting = np.flatnonzero(automaton.accepting[keep])
    dfa = SparseDFA(int(keep.sum()), n_classes, int(renumber[start]), accepting, default[:, rep], table, row_of=row_of)
    return LiftedAutomaton(dfa, lookup)
