"""Token-by-token masks of an :class:`~pseudosl.tokens.constraint.AutomatonConstraint`, for any number of tokens.

A row of generated text is an automaton state.  A token is allowed when the state it leads to can still end in
an accepting state in the tokens left:

* no length limit: the destination is *live* (some word leads from it to an accepting state);
* ``max_new_tokens`` with ``r`` tokens left (this one included): the destination reaches an accepting state in
  exactly ``r - 1`` more tokens, or within ``r - 1`` when an end-of-sequence token may end the text earlier.

The sets ``S_j`` ("an accepting state in (at most) ``j`` tokens") follow ``S_0 = accepting``,
``S_{j+1} = pre(S_j)`` (``S_0 | pre(S_j)`` for "at most"); from the first repeated set on the sequence cycles,
so it is stored up to its first repeat (``<= n_states + 1`` sets for "at most", converging to the live states).
Only *usable* values count: a value with a token that is no end-of-sequence token (the automaton reads the text
before the end-of-sequence token, which is allowed exactly in accepting states).  A row that has read an
end-of-sequence token is *ended* (state ``n_states``): it bans nothing (``generate`` pads it).

Cost, as a grammar engine's (XGrammar caches a token bitmask per grammar state).  The states live on the host
(NumPy; a step is one table lookup per row).  Each ``(S_j, state)`` pair met gets its token list built once, on
first use, and shared by every row and call after: the banned tokens, or the allowed ones where they are fewer
(:class:`~pseudosl.generation.banned.Banned`).  A call then copies the scores once and writes ``-inf`` at the
listed tokens: with the forbidden words of a word list most states ban a few hundred tokens of 49,152.  On a GPU
the rows' last tokens come to the host (one small copy per call) and the lists go to the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..logic.automaton import SparseDFA
from ..logic.errors import UnsatisfiableError
from ..tokens.constraint import AutomatonConstraint
from . import banned as banned_tokens
from .banned import Banned

__all__ = ["AutomatonMask", "DENSE_ENTRIES", "MASK_CACHE_BYTES", "TokenList", "reach_sets"]

DENSE_ENTRIES = 1 << 22
"""Up to this many ``(state, value)`` pairs the transitions are kept as a dense table (32 MB at most); beyond, a
step looks its rows' exceptions up (``np.searchsorted``)."""
MASK_CACHE_BYTES = 1 << 28
"""The per-state token lists, and apart the rows' assembled lists, are dropped (and rebuilt on demand) when they grow
past this many bytes."""
BANNED_CACHE = 4096
"""How many combinations of the rows' slots keep their assembled :class:`Banned` (then all are dropped)."""
BUILD_ELEMENTS = 1 << 24
"""States whose token lists are built at once are taken in blocks of ``BUILD_ELEMENTS // V``."""


def reach_sets(dfa: SparseDFA, usable: np.ndarray, *, at_most: bool,
               horizon: int | None = None) -> tuple[np.ndarray, int]:
    """``(sets (m, n_states) bool, cycle_start)``: ``S_j`` for ``j < m`` is ``sets[j]``, later ones cycle back.

    ``S_0`` are the accepting states, ``S_{j+1} = pre(S_j)`` (``| S_0`` when ``at_most``), where ``pre(S)`` are the
    states with a usable value (``usable (n_values,)`` bool) leading into ``S``.  Stops at the first repeat
    (``S_m = S_cycle_start``; for ``j >= m``, ``S_j = sets[cycle_start + (j - cycle_start) % (m - cycle_start)]``),
    or once ``S_horizon`` is known (then ``m = cycle_start = horizon + 1``).
    """
    accepting = np.zeros(dfa.n_states, dtype=bool)
    accepting[list(dfa.accepting)] = True
    states, values, dests = dfa.exceptions.T
    rows = dfa.row_of[states]

    def pre(target: np.ndarray) -> np.ndarray:
        # s leads into `target` through its default row iff some usable value with a default in it is not excepted
        default_in = target[dfa.default] & usable  # (n_rows, n_values)
        excepted_in = np.bincount(states, weights=default_in[rows, values], minlength=dfa.n_states)
        out = excepted_in < default_in.sum(1)[dfa.row_of]
        out[states[target[dests] & usable[values]]] = True
        return out

    sets, seen = [accepting], {accepting.tobytes(): 0}
    while horizon is None or len(sets) <= horizon:
        nxt = pre(sets[-1]) | (accepting if at_most else False)
        if nxt.tobytes() in seen:
            return np.stack(sets), seen[nxt.tobytes()]
        seen[nxt.tobytes()] = len(sets)
        sets.append(nxt)
    return np.stack(sets), len(sets)


@dataclass(frozen=True)
class TokenList:
    """One ``(S_j, state)`` pair's mask: banned token ids, or (``few``) the allowed ones; ``probe`` an allowed
    token (``-1``: the state bans nothing)."""

    ids: np.ndarray
    few: bool
    probe: int


class AutomatonMask:
    """The automaton of an :class:`AutomatonConstraint` as per-row states and the tokens they allow.

    Args:
        constraint: the automaton and its value map.
        eos_token_ids: end-of-sequence tokens: allowed exactly in accepting states, and read by no automaton.
        max_new_tokens: the number of tokens generated (``None``: no limit, the destination must be live).

    Raises:
        UnsatisfiableError: no text of the allowed lengths satisfies the constraint (the start state is not in the
            set for ``max_new_tokens`` tokens, or not live).
    """

    n_positions = None  # every position (a window mask covers n)

    def __init__(self, constraint: AutomatonConstraint, *, eos_token_ids: Sequence[int] = (),
                 max_new_tokens: int | None = None) -> None:
        dfa, vm = constraint.dfa, constraint.value_map
        self.dfa, self.vocab_size, self.max_new_tokens = dfa, constraint.vocab_size, max_new_tokens
        self.eos_token_ids = tuple(eos_token_ids)
        self.lookup = vm.lookup.numpy() if vm is not None else np.arange(dfa.n_values)
        text_tokens = np.ones(self.vocab_size, dtype=bool)
        text_tokens[list(self.eos_token_ids)] = False
        self.usable = np.bincount(self.lookup[text_tokens], minlength=dfa.n_values) > 0
        at_most = bool(self.eos_token_ids)
        if max_new_tokens is None:  # "within j" converges to the live states: keep the limit only
            sets, _ = reach_sets(dfa, self.usable, at_most=True)
            self.sets, self.cycle_start = sets[-1:], 0
        else:
            self.sets, self.cycle_start = reach_sets(dfa, self.usable, at_most=at_most, horizon=max_new_tokens)
        if not self.sets[self.set_index(max_new_tokens)][dfa.start]:
            length = "of any length" if max_new_tokens is None else \
                f"of {'at most ' if at_most else ''}max_new_tokens={max_new_tokens} tokens"
            raise UnsatisfiableError(f"no text {length} satisfies the constraint: its automaton cannot reach an "
                                     "accepting state from its start" + ("" if max_new_tokens is None else
                                                                         "; raise max_new_tokens"))
        self.accepting = np.zeros(dfa.n_states + 1, dtype=bool)
        self.accepting[list(dfa.accepting)] = True
        self.is_eos = ~text_tokens
        self.columns = self.lookup.copy()  # each token's column: its value, or k for an end-of-sequence token
        self.columns[list(self.eos_token_ids)] = dfa.n_values
        self.delta = dfa.to_dense().delta if dfa.n_states * dfa.n_values <= DENSE_ENTRIES else None
        self.keys = dfa.exceptions[:, 0] * dfa.n_values + dfa.exceptions[:, 1]  # sorted with the exceptions
        self.clear_cache()

    def set_index(self, steps: int | None) -> int:
        """Row of the stored sets that holds ``S_steps`` (``None``: the live states)."""
        m = len(self.sets)
        if steps is None or steps < m:
            return 0 if steps is None else steps
        return self.cycle_start + (steps - self.cycle_start) % (m - self.cycle_start)

    def clear_cache(self) -> None:
        """Drop the per-state token lists (they are rebuilt on first use)."""
        self._slots: dict[int, np.ndarray] = {}  # set index -> (n_states + 1,) slot of each state, -1: not built
        self._lists: list[TokenList] = []
        # the rows' Banned on a device, by (set index, states): one per combination of their slots
        self._banned: dict[tuple[torch.device, int, np.dtype, bytes], Banned] = {}
        self._banned_bytes = 0
        self._bytes = 0

    # -- the interface a TokenMatcher drives (states: (R,) int64 NumPy arrays) --------------------------------
    def check_vocab(self, vocab_size: int) -> None:
        """Refuse scores over another vocabulary than the constraint's."""
        banned_tokens.check_scores_vocab(vocab_size, self.vocab_size)

    def start(self, rows: int, device: torch.device) -> np.ndarray:
        return np.full(rows, self.dfa.start, dtype=np.int64)

    def select(self, states: np.ndarray, rows: Tensor | np.ndarray) -> np.ndarray:
        """The states of rows ``rows`` (beam search copies and reorders rows)."""
        return states[rows.cpu().numpy() if isinstance(rows, Tensor) else rows]

    def advance(self, states: np.ndarray, tokens: Tensor | np.ndarray) -> np.ndarray:
        """``(R,)`` states after reading ``tokens (R,)`` (token ids) from ``states``; an EOS ends a row."""
        tokens = tokens if isinstance(tokens, np.ndarray) else tokens.cpu().numpy()
        values = self.lookup[tokens]
        if not self.eos_token_ids:  # no row ever ends
            return self.destinations(states, values)
        ended = states == self.dfa.n_states
        nxt = self.destinations(np.where(ended, self.dfa.start, states), values)
        return np.where(ended | self.is_eos[tokens], self.dfa.n_states, nxt)

    def banned(self, states: np.ndarray, generated: int, vocab_size: int, device: torch.device) -> Banned:
        """The tokens banned after ``generated`` tokens in rows at ``states``."""
        left = None if self.max_new_tokens is None else self.max_new_tokens - generated - 1
        set_index = self.set_index(left)
        key = (device, set_index, states.dtype, states.tobytes())  # rows often sit in the same states call after call
        banned = self._banned.get(key)
        if banned is None:
            slots = self.slots(states, set_index)
            banned = self._to_banned([self._lists[s] for s in slots], vocab_size, device)
            size = 8 * (banned.fill.numel() + banned.keep.numel())
            if len(self._banned) >= BANNED_CACHE or self._banned_bytes + size > MASK_CACHE_BYTES:
                self._banned.clear()
                self._banned_bytes = 0
            self._banned[key], self._banned_bytes = banned, self._banned_bytes + size
        return banned

    def can_end(self, states: np.ndarray, generated: int) -> np.ndarray:
        """``(R,)`` bool: rows whose text can end accepted after one more token (ended rows: True)."""
        left = None if self.max_new_tokens is None else self.max_new_tokens - generated - 1
        ok, ends, free, dest = self.allowed_values(states, self.set_index(left))
        return (ok & self.usable & self.accepting[dest]).any(1) | ends | (states == self.dfa.n_states)

    # -- the tables ----------------------------------------------------------------------------------------
    def destinations(self, states: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``delta(states, values)`` (broadcast int64 arrays): a dense lookup, or the default row unless an
        exception says otherwise."""
        if self.delta is not None:
            return self.delta[states, values]
        dfa = self.dfa
        dest = dfa.default[dfa.row_of[states], values]
        if not len(self.keys):
            return dest
        keys = states * dfa.n_values + values
        at = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        return np.where(self.keys[at] == keys, dfa.exceptions[at, 2], dest)

    def allowed_values(self, states: np.ndarray, set_index: int) -> tuple[np.ndarray, ...]:
        """``(ok (R, k), ends (R,), free (R,), dest (R, k))``: the values whose destination is in ``S_j``, whether an
        EOS may end the text (accepting, with an EOS), rows that ban nothing (ended, or no way out: a state the
        mask did not lead to), and the destinations."""
        ended = states == self.dfa.n_states
        live_states = np.where(ended, self.dfa.start, states)
        dest = self.destinations(live_states[:, None], np.arange(self.dfa.n_values)[None, :])
        ok = self.sets[set_index][dest]
        ends = self.accepting[live_states] & bool(self.eos_token_ids) & ~ended
        free = ended | ~((ok & self.usable).any(1) | ends)
        return ok, ends, free, dest

    def slots(self, states: np.ndarray, set_index: int) -> np.ndarray:
        """The cache slot of each row's ``(S_j, state)`` token list, building the lists met for the first time."""
        slot_of = self._slots.get(set_index)
        slots = None if slot_of is None else slot_of[states]
        if slots is None or (len(slots) and slots.min() < 0):
            if self._bytes > MASK_CACHE_BYTES:  # too many lists: start over
                self.clear_cache()
            slot_of = self._slots.setdefault(set_index, np.full(self.dfa.n_states + 1, -1, dtype=np.int64))
            new = np.unique(states[slot_of[states] < 0])
            block = max(1, BUILD_ELEMENTS // self.vocab_size)
            for a in range(0, len(new), block):
                for state, entry in zip(new[a:a + block], self._build(new[a:a + block], set_index)):
                    slot_of[state] = len(self._lists)
                    self._lists.append(entry)
                    self._bytes += entry.ids.nbytes
            slots = slot_of[states]
        return slots

    def _build(self, states: np.ndarray, set_index: int) -> list[TokenList]:
        ok, ends, free, _ = self.allowed_values(states, set_index)
        tokens_ok = np.concatenate([ok, ends[:, None]], 1)[:, self.columns]  # (m, V)
        out = []
        for row, is_free in zip(tokens_ok, free):
            n_ok = int(row.sum())
            few = not is_free and n_ok < banned_tokens.KEEP_BELOW * len(row)
            ids = np.flatnonzero(row) if few else np.zeros(0, np.int64) if is_free else np.flatnonzero(~row)
            out.append(TokenList(ids.astype(np.int64), few, -1 if is_free else int(row.argmax())))
        return out

    @staticmethod
    def _to_banned(lists: list[TokenList], vocab_size: int, device: torch.device) -> Banned:
        """The rows' lists as flat positions ``r * V + token``."""
        fill = [e.ids + r * vocab_size for r, e in enumerate(lists) if not e.few]
        keep = [e.ids + r * vocab_size for r, e in enumerate(lists) if e.few]
        clear = [r for r, e in enumerate(lists) if e.few]

        def tensor(parts: list[np.ndarray]) -> Tensor:
            flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            return torch.from_numpy(flat).to(device)

        probe = np.array([r * vocab_size + e.probe for r, e in enumerate(lists) if e.probe >= 0], dtype=np.int64)
        return Banned(fill=tensor(fill), clear=torch.tensor(clear, dtype=torch.long, device=device),
                      keep=tensor(keep), probe=probe)
