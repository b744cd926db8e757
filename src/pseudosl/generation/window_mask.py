"""Token masks over a window: a compiled :class:`~pseudosl.Constraint` (or :class:`~pseudosl.Circuit`) covering the
``n`` tokens generated after the prompt.

At step ``t < n`` the prefix ``y_<t`` is known; with it fixed as one-hot log-probabilities and every later
position free (log-weight 0 for every value), the circuit's marginal ``P(y_t = c | alpha, y_<t)`` is positive
exactly for the values ``c`` that some completion extends to a model of ``alpha`` (:meth:`pseudosl.Circuit.marginals`,
one batched pass per step for all rows, beams included).  After ``n`` generated tokens nothing is masked.

End of text.  With ``eos_token_ids``, an end-of-sequence token ends the text early and ``generate`` pads the row:
the EOS is allowed only where the window *filled with that EOS from here on* satisfies ``alpha`` (one exact
evaluation of that completion; with ``pad_token_id = eos_token_id`` it is the window ``generate`` writes, and for a
text-level constraint such as :func:`pseudosl.no_forbidden_words`, where special tokens carry no text, it is "the
text so far is accepted").  The other tokens are planned over full-length texts: their free positions take only
values with a token that is no EOS, so a kept token always has a completion ``generate`` can write (a token whose
only completions end early with an EOS is masked).  A row that has read an EOS is ended and bans nothing.
Without ``eos_token_ids`` the processor cannot tell that the EOS ``generate`` stops at ends the text: pass it
whenever ``generate`` may stop before ``n`` tokens.

Exactness of the marginals.  They are ratios of counts: a positive marginal (and every weight on the way down)
is at least ``1 / #completions >= k^-n = exp(-n ln k)``, and a forbidden value gets exactly 0.  They are
computed in float32 when ``n ln k <= 80`` (float32's smallest normal number is ``exp(-87.3)``; a window of 10
tokens over 600 values is ``n ln k = 64``), in float64 up to ``n ln k = 700``, and larger circuits are refused:
no allowed token is ever masked by underflow.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..checks import check_root
from ..circuit import Circuit
from ..tokens.constraint import Constraint, sample_satisfies
from .banned import Banned, check_scores_vocab

__all__ = ["FLOAT32_LOG_COMPLETIONS", "MAX_LOG_COMPLETIONS", "WindowMask"]

FLOAT32_LOG_COMPLETIONS = 80.0
"""Up to this ``n ln k`` the marginals run in float32 (its smallest normal number is ``exp(-87.3)``)."""
MAX_LOG_COMPLETIONS = 700.0
"""``n ln k`` above this could underflow a float64 marginal (``exp(-745)`` is 0): such circuits are refused."""


class WindowMask:
    """A window's circuit as per-row prefixes and the tokens that keep it satisfiable.

    Args:
        constraint: a :class:`Constraint` (its value map folds the vocabulary into the circuit's values) or a
            :class:`Circuit` whose values are the token ids ``0 .. k-1`` (tokens ``>= k`` are masked in the window).
        root: which root of a multi-rooted circuit (required there).
        eos_token_ids: end-of-sequence tokens (module docs).
    """

    max_new_tokens = None  # a window reads any number of tokens; it masks the first n

    def __init__(self, constraint: Constraint | Circuit, *, root: int | None = None,
                 eos_token_ids: Sequence[int] = ()) -> None:
        circuit, value_map = (constraint.circuit, constraint.value_map) if isinstance(constraint, Constraint) \
            else (constraint, None)
        self.root = check_root(root, circuit.n_roots)
        log_count = circuit.n_vars * math.log(circuit.n_values)
        if log_count > MAX_LOG_COMPLETIONS:
            raise ValueError(f"a circuit over {circuit.n_vars} positions with {circuit.n_values} values has up to "
                             f"exp({log_count:.0f}) completions, so a float64 marginal could underflow to 0 and mask "
                             f"an allowed token; use windows with n ln k <= {MAX_LOG_COMPLETIONS:.0f}")
        self.circuit, self.value_map = circuit, value_map
        self.vocab_size = value_map.vocab_size if value_map is not None else None  # a bare circuit: any V >= k
        self.n_positions = circuit.n_vars
        self.dtype = torch.float32 if log_count <= FLOAT32_LOG_COMPLETIONS else torch.float64
        self.eos_token_ids = tuple(eos_token_ids)
        k = circuit.n_values
        eos = np.asarray(self.eos_token_ids, dtype=np.int64)
        if value_map is not None:
            lookup = value_map.lookup.numpy()
            text = np.ones(value_map.vocab_size, dtype=bool)
            text[eos] = False
            self.usable = np.bincount(lookup[text], minlength=k) > 0
            self.eos_values = lookup[eos]
        else:  # the values are the token ids: an EOS >= k is no value (masked in the window)
            self.usable = ~np.isin(np.arange(k), eos)
            self.eos_values = np.where(eos < k, eos, -1)

    # -- the interface a TokenMatcher drives (states: the generated token ids (R, t) on the device) ------------
    def check_vocab(self, vocab_size: int) -> None:
        """Refuse scores over ``vocab_size`` tokens that the value map (or the bare circuit) cannot read."""
        if self.vocab_size is not None:
            check_scores_vocab(vocab_size, self.vocab_size)
        if self.value_map is None and vocab_size < self.circuit.n_values:
            raise ValueError(f"scores have {vocab_size} tokens but the circuit reads token ids "
                             f"0..{self.circuit.n_values - 1}")
        if self.eos_token_ids and max(self.eos_token_ids) >= vocab_size:
            raise ValueError(f"eos_token_id holds {max(self.eos_token_ids)}, outside the scores' vocabulary "
                             f"0..{vocab_size - 1}: pass the model's end-of-sequence token")

    def start(self, rows: int, device: torch.device) -> Tensor:
        if self.circuit.root_rows.device != device:
            raise ValueError(f"the circuit is on {self.circuit.root_rows.device} but the tokens on {device}: move it "
                             f"with circuit.to({str(device)!r})")
        return torch.zeros(rows, 0, dtype=torch.long, device=device)

    def select(self, state: Tensor, rows: Tensor | np.ndarray) -> Tensor:
        return state[torch.as_tensor(rows, device=state.device)]

    def advance(self, state: Tensor, tokens: Tensor | np.ndarray) -> Tensor:
        return torch.cat([state, torch.as_tensor(tokens, device=state.device).long()[:, None]], 1)

    def banned(self, state: Tensor, generated: int, vocab_size: int, device: torch.device) -> Banned:
        allowed, free = self.allowed_tokens(state, vocab_size)
        return Banned.from_allowed(allowed, free)

    def can_end(self, state: Tensor, generated: int) -> np.ndarray:
        """``(R,)`` bool: rows whose window can be complete after one more token (the last position, an ended
        row, or an EOS allowed now)."""
        rows = state.shape[0]
        if generated + 1 >= self.n_positions:
            return np.ones(rows, dtype=bool)
        if not self.eos_token_ids:
            return np.zeros(rows, dtype=bool)
        return (self.ended(state) | self.eos_ends(state).any(1)).cpu().numpy()

    # -- the circuit's answers ---------------------------------------------------------------------------------
    def values(self, tokens: Tensor) -> Tensor:
        """Circuit values of token ids (a token ``>= k`` of a bare circuit: ``k - 1``, see :meth:`allowed_tokens`)."""
        if self.value_map is not None:
            return self.value_map.to_values(tokens)
        return tokens.clamp(max=self.circuit.n_values - 1)

    def ended(self, state: Tensor) -> Tensor:
        """``(R,)`` bool: rows that have read an end-of-sequence token."""
        if not self.eos_token_ids:
            return torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)
        return torch.isin(state, torch.tensor(self.eos_token_ids, device=state.device)).any(1)

    def allowed_values(self, prefix: Tensor, allowed: Tensor | None = None) -> Tensor:
        """``(R, k)`` bool, the values of position ``t`` that keep the constraint satisfiable after ``prefix (R, t)``
        (circuit values, ``t < n``), later positions free over the usable values (and, with ``allowed (R, n, k)``
        bool, over each row's allowed values: ``alpha AND allowed``); all False in a row whose prefix has no
        completion."""
        r, t = prefix.shape
        n, k = self.circuit.n_vars, self.circuit.n_values
        x = torch.zeros(r, n, k, dtype=self.dtype, device=prefix.device)
        x[:, t + 1:, torch.from_numpy(~self.usable).to(prefix.device)] = float("-inf")
        x[:, :t] = float("-inf")
        x[:, :t].scatter_(-1, prefix.unsqueeze(-1), 0.0)  # the prefix as one-hot log-probabilities
        return self.circuit.marginals(x, allowed, root=self.root)[:, t] > 0

    def eos_ends(self, generated: Tensor) -> Tensor:
        """``(R, len(eos_token_ids))`` bool: does the window filled with each EOS after ``generated (R, t)``
        satisfy the constraint?"""
        values, n = self.values(generated), self.circuit.n_vars
        out = []
        for v in self.eos_values.tolist():
            if v < 0:
                out.append(torch.zeros(values.shape[0], dtype=torch.bool, device=values.device))
                continue
            full = torch.cat([values, values.new_full((values.shape[0], n - values.shape[1]), v)], 1)
            out.append(sample_satisfies(self.circuit, full, root=self.root))
        return torch.stack(out, 1)

    def allowed_tokens(self, generated: Tensor, vocab_size: int,
                       allowed: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(allowed (R, V) bool, free (R,) bool)``: the tokens kept after the generated tokens ``(R, t)``, and the
        rows that ban nothing (past the window, ended, or no completion left: a prefix the mask did not make).
        ``allowed (R, n, k)`` bool: each row's allowed circuit values too (the constraint ``alpha AND allowed``;
        not with ``eos_token_ids``, whose completions :meth:`eos_ends` checks against ``alpha`` alone)."""
        if allowed is not None and self.eos_token_ids:
            raise ValueError("allowed= restricts the circuit's values but eos_token_ids' completions are checked "
                             "against the constraint alone: pass one of them")
        rows, t = generated.shape
        device = generated.device
        if t >= self.n_positions:
            return torch.ones(rows, vocab_size, dtype=torch.bool, device=device), \
                torch.ones(rows, dtype=torch.bool, device=device)
        if self.value_map is not None:
            known = torch.ones(rows, dtype=torch.bool, device=device)
            ok = self.allowed_values(self.value_map.to_values(generated), allowed)  # (R, k)
            ok_tokens = ok[:, self.value_map.on(device)[1]]  # (R, V)
        else:
            k = self.circuit.n_values
            known = (generated < k).all(-1)  # a token outside the circuit's values: the prefix has no completion
            ok = self.allowed_values(self.values(generated), allowed) & known[:, None]
            ok_tokens = torch.cat([ok, ok.new_zeros(rows, vocab_size - k)], -1)
        if self.eos_token_ids:
            ok_tokens[:, list(self.eos_token_ids)] = self.eos_ends(generated) & known[:, None]
        free = ~ok_tokens.any(-1) | self.ended(generated)
        return ok_tokens, free

