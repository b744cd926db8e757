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
before the end-of-sequence token, which is allowed exactly in accepting states).

On a device the automaton lives as its :class:`~pseudosl.logic.automaton.SparseDFA` tables -- default rows,
``row_of``, the exceptions' sorted keys ``state * n_values + value`` (found with ``torch.searchsorted``) -- with
the sets ``S_j`` and the value map's lookup, copied there once; a step and a mask are a few gathers, with no host
synchronisation.  When ``n_states * n_values <= DENSE_ENTRIES`` the destinations and, per set, every state's
mask over the values are kept whole instead (as XGrammar caches token masks per state), so a call gathers its
rows' masks; the tokens of the most common value (the catch-all) take their mask in one broadcast sum.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..logic.automaton import SparseDFA
from ..logic.errors import UnsatisfiableError
from ..tokens.constraint import AutomatonConstraint

__all__ = ["AutomatonMask", "DENSE_ENTRIES", "reach_sets"]

DENSE_ENTRIES = 1 << 22
"""Up to this many ``(state, value)`` pairs the destinations and each set's value masks are kept as dense tables on
the device (32 MB of destinations at most); beyond, each call looks up its rows' exceptions."""
GATHER_ABOVE = 0.25
"""Above this share of the vocabulary outside the most common column, a mask is one gather of every token's column
(token classes without a large catch-all); below it, one broadcast sum plus gathers of the other tokens."""


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
class DeviceTables:
    """An :class:`AutomatonMask`'s tables on one device."""

    default: Tensor  # (n_rows, k) long
    row_of: Tensor  # (n_states,) long
    keys: Tensor  # (E,) long, sorted: state * k + value of each exception
    dest: Tensor  # (E,) long
    lookup: Tensor | None  # (V,) long, token -> value; None when the values are the token ids
    sets: Tensor  # (m, n_states) bool
    accepting: Tensor  # (n_states,) bool
    usable: Tensor  # (k,) bool
    special_tokens: Tensor  # (n_special,) long: the tokens of every column but the most common one
    special_columns: Tensor  # (n_special,) long: their columns of the biases (value, or k for an EOS token)
    columns: Tensor  # (V,) long: every token's column of the biases
    delta: Tensor | None = None  # (n_states, k) long, the dense table, when it has <= DENSE_ENTRIES entries


class AutomatonMask:
    """The automaton of an :class:`AutomatonConstraint` as per-row states and the masks they allow.

    Args:
        constraint: the automaton and its value map.
        eos_token_ids: end-of-sequence tokens: allowed exactly in accepting states, and read by no automaton.
        max_new_tokens: the number of tokens generated (``None``: no limit, the destination must be live).

    Raises:
        UnsatisfiableError: no text of the allowed lengths satisfies the constraint (the start state is not in the
            set for ``max_new_tokens`` tokens, or not live).
    """

    def __init__(self, constraint: AutomatonConstraint, *, eos_token_ids: Sequence[int] = (),
                 max_new_tokens: int | None = None) -> None:
        dfa, vm = constraint.dfa, constraint.value_map
        self.dfa, self.vocab_size, self.max_new_tokens = dfa, constraint.vocab_size, max_new_tokens
        self.eos_token_ids = tuple(eos_token_ids)
        lookup = vm.lookup.cpu().numpy() if vm is not None else np.arange(dfa.n_values)
        text_tokens = np.ones(self.vocab_size, dtype=bool)
        text_tokens[list(self.eos_token_ids)] = False
        usable = np.bincount(lookup[text_tokens], minlength=dfa.n_values) > 0
        at_most = bool(self.eos_token_ids)
        if max_new_tokens is None:  # "within j" converges to the live states: keep the limit only
            sets, _ = reach_sets(dfa, usable, at_most=True)
            sets, self.cycle_start = sets[-1:], 0
        else:
            sets, self.cycle_start = reach_sets(dfa, usable, at_most=at_most, horizon=max_new_tokens)
        self.n_sets = len(sets)
        if not sets[self.set_index(max_new_tokens)][dfa.start]:
            length = "of any length" if max_new_tokens is None else \
                f"of {'at most ' if at_most else ''}max_new_tokens={max_new_tokens} tokens"
            raise UnsatisfiableError(f"no text {length} satisfies the constraint: its automaton cannot reach an "
                                     "accepting state from its start" + ("" if max_new_tokens is None else
                                                                         "; raise max_new_tokens"))
        accepting = np.zeros(dfa.n_states, dtype=bool)
        accepting[list(dfa.accepting)] = True
        exceptions = dfa.exceptions  # sorted by (state, value): the keys are sorted
        column = lookup.copy()  # each token's column of the biases: its value, or k for an end-of-sequence token
        column[list(self.eos_token_ids)] = dfa.n_values
        self.common_column = int(np.bincount(column).argmax())
        special = np.flatnonzero(column != self.common_column)
        self._host = dict(default=dfa.default, row_of=dfa.row_of,
                          keys=exceptions[:, 0] * dfa.n_values + exceptions[:, 1], dest=exceptions[:, 2],
                          lookup=None if vm is None else lookup, sets=sets, accepting=accepting, usable=usable,
                          special_tokens=special, special_columns=column[special], columns=column)
        self._tables: dict[torch.device, DeviceTables] = {}
        self._biases: dict[tuple[torch.device, torch.dtype, int], tuple[Tensor, Tensor]] = {}

    def set_index(self, steps: int | None) -> int:
        """Row of the stored sets that holds ``S_steps`` (``None``: the live states)."""
        m = self.n_sets
        if steps is None or steps < m:
            return 0 if steps is None else steps
        return self.cycle_start + (steps - self.cycle_start) % (m - self.cycle_start)

    def tables(self, device: torch.device) -> DeviceTables:
        """The tables on ``device``, copied there on first use (a copy per call would wait for the device)."""
        if device not in self._tables:
            tab = DeviceTables(**{name: None if a is None else torch.tensor(a, device=device)
                                  for name, a in self._host.items()})
            if self.dense:
                every = torch.arange(max(self.dfa.n_states, self.dfa.n_values), device=device)
                delta = self.destinations(tab, every[:self.dfa.n_states, None], every[None, :self.dfa.n_values])
                tab = dataclasses.replace(tab, delta=delta)
            self._tables[device] = tab
        return self._tables[device]

    @property
    def dense(self) -> bool:
        """Whether the tables per state (destinations, masks per set) are small enough to keep whole on a device."""
        return self.dfa.n_states * self.dfa.n_values <= DENSE_ENTRIES

    def start_states(self, rows: int, device: torch.device) -> Tensor:
        return torch.full((rows,), self.dfa.start, dtype=torch.long, device=device)

    def destinations(self, tab: DeviceTables, states: Tensor, values: Tensor) -> Tensor:
        """``delta(states, values)`` (broadcast long tensors): the default row unless an exception says otherwise."""
        if tab.delta is not None:
            return tab.delta[states, values]
        dest = tab.default[tab.row_of[states], values]
        if tab.keys.numel() == 0:
            return dest
        keys = states * self.dfa.n_values + values
        at = torch.searchsorted(tab.keys, keys).clamp_(max=tab.keys.numel() - 1)
        return torch.where(tab.keys[at] == keys, tab.dest[at], dest)

    def step(self, states: Tensor, tokens: Tensor) -> Tensor:
        """``(R,)`` states after reading ``tokens (R,)`` (token ids) from ``states (R,)``."""
        tab = self.tables(states.device)
        values = tokens if tab.lookup is None else tab.lookup[tokens]
        return self.destinations(tab, states, values)

    def bias_rows(self, tab: DeviceTables, states: Tensor, set_index: int, dtype: torch.dtype) -> Tensor:
        """``(R, k + 1)``: 0 for the values allowed in ``states (R,)`` with ``S_j`` (``j = set_index``) to reach,
        ``-inf`` for the others; column ``k`` for the end of the text (allowed in accepting states, with an EOS).

        A row where everything would be banned (a state the processor did not lead to: padding after an
        end-of-sequence token, a prefix some other processor forced) bans nothing.
        """
        every_value = torch.arange(self.dfa.n_values, device=states.device)
        ok = tab.sets[set_index][self.destinations(tab, states[:, None], every_value[None, :])]  # (R, k)
        ends = tab.accepting[states] if self.eos_token_ids else torch.zeros_like(states, dtype=torch.bool)
        stuck = ~((ok & tab.usable).any(-1) | ends)
        allowed = torch.cat([ok, ends[:, None]], 1) | stuck[:, None]
        return torch.zeros(allowed.shape, dtype=dtype, device=ok.device).masked_fill_(~allowed, -math.inf)

    def mask(self, states: Tensor, generated: int, scores: Tensor) -> Tensor:
        """``scores (R, V)`` plus ``-inf`` at the tokens banned in rows at ``states (R,)`` after ``generated`` tokens.

        Every token of the most common column (the catch-all value of a folded vocabulary) gets its column's bias
        in one broadcast sum over ``(R, V)``, the other tokens theirs by gathers over ``(R, n_special)``; when those
        are more than a quarter of the vocabulary (token classes without a large catch-all, e.g.
        :func:`pseudosl.no_forbidden_words`), one gather of every token's column over ``(R, V)`` is cheaper.  With the
        dense tables the biases of every state are computed once per recurring set ``S_j`` (and dtype) and a call
        gathers its rows; a set met once per generation (before the sequence cycles) is computed for the rows.
        """
        tab = self.tables(states.device)
        left = None if self.max_new_tokens is None else self.max_new_tokens - generated - 1
        set_index = self.set_index(left)
        if self.dense and set_index >= self.cycle_start:  # a set that recurs (the live states without a budget)
            key = (states.device, scores.dtype, set_index)
            if key not in self._biases:
                every_state = torch.arange(self.dfa.n_states, device=states.device)
                self._biases[key] = self.bias_rows(tab, every_state, set_index, scores.dtype)
            bias = self._biases[key][states]
        else:
            bias = self.bias_rows(tab, states, set_index, scores.dtype)  # (R, k + 1)
        if tab.special_tokens.numel() > GATHER_ABOVE * scores.shape[1]:  # no large catch-all: one gather
            return scores + bias.index_select(1, tab.columns)
        out = scores + bias[:, self.common_column, None]
        special = scores.index_select(1, tab.special_tokens) + bias.index_select(1, tab.special_columns)
        return out.index_copy_(1, tab.special_tokens, special)
