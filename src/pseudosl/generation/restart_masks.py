"""The token masks of :class:`~.proposals.RestartProposal`'s masked regeneration: for each row's prefix, the tokens
after which the constraint stays satisfiable (a window's circuit marginals, or the streaming processor's automaton),
and the logits processor that draws under them while adding up ``log p`` and ``log q`` for the importance weights."""

from __future__ import annotations

import abc
import math

import torch
from torch import Tensor

from ..circuit import Circuit
from .window_mask import FLOAT32_LOG_COMPLETIONS, MAX_LOG_COMPLETIONS

__all__ = ["AutomatonMasks", "CircuitMasks", "MaskedSteps", "Masks"]


class Masks(abc.ABC):
    """``(R, V)`` bool: the tokens after which the constraint stays satisfiable, given each row's prefix."""

    @abc.abstractmethod
    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:
        """For the rows' prefixes ``(R, t)``, called once per ``t = 0, 1, ..`` in order; the rows where ``free (R,)``
        is False may get any mask."""


class CircuitMasks(Masks):
    """The circuit's marginal of position ``t`` given the prefix (every later position free) is positive exactly for
    the values that keep ``alpha AND allowed`` satisfiable (counts of completions, as the processor's window mode)."""

    def __init__(self, circuit: Circuit, value_map, allowed: Tensor | None, root: int | None) -> None:
        log_count = circuit.n_vars * math.log(circuit.n_values)
        if log_count > MAX_LOG_COMPLETIONS:
            raise ValueError(f"RestartProposal masks with counts of completions, up to exp({log_count:.0f}) for "
                             f"{circuit.n_vars} positions of {circuit.n_values} values, which could underflow in "
                             f"float64; use windows with n ln k <= {MAX_LOG_COMPLETIONS:.0f}, pass automaton=, or "
                             "use another proposal")
        self.dtype = torch.float32 if log_count <= FLOAT32_LOG_COMPLETIONS else torch.float64
        self.circuit, self.value_map, self.allowed, self.root = circuit, value_map, allowed, root

    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:
        out = torch.zeros(prefix.shape[0], vocab, dtype=torch.bool, device=prefix.device)
        rows = free.nonzero()[:, 0]
        if rows.numel() == 0:
            return out
        r, t = rows.shape[0], prefix.shape[1]
        n, k = self.circuit.n_vars, self.circuit.n_values
        x = torch.zeros(r, n, k, dtype=self.dtype, device=prefix.device)
        values = prefix[rows] if self.value_map is None else self.value_map.to_values(prefix[rows])
        x[:, :t] = float("-inf")
        x[:, :t].scatter_(-1, values[..., None], 0.0)  # the prefix as one-hot log-probabilities
        allowed = None if self.allowed is None else self.allowed[rows]
        ok = self.circuit.marginals(x, allowed, root=self.root)[:, t] > 0  # (r, k)
        if self.value_map is not None:
            out[rows] = ok[:, self.value_map.on(prefix.device)[1]]
        else:
            out[rows, :k] = ok
        return out


class AutomatonMasks(Masks):
    """The streaming processor's masks (``max_new_tokens = n``): an accepting state stays reachable in the tokens left."""

    def __init__(self, processor) -> None:
        self.processor = processor

    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:  # every row: states follow the tokens
        zeros = torch.zeros(prefix.shape[0], vocab, device=prefix.device)
        return ~torch.isneginf(self.processor(prefix, zeros))


class MaskedSteps:
    """The logits processor of :class:`RestartProposal` for ``engine.sample`` over ``R`` rows: before ``start[r]``
    row ``r`` takes its anchor's token; from there only the tokens ``masks`` keeps.  It adds ``log p`` (the model's
    own distribution) of every drawn token to ``log_p`` and ``log q`` (the masked distribution it was drawn from) of
    the free ones to ``log_q``; :meth:`finish` adds the last."""

    def __init__(self, masks: Masks, anchor: Tensor, start: Tensor) -> None:
        self.masks, self.anchor, self.start = masks, anchor, start
        self.log_p = torch.zeros(anchor.shape[0], dtype=torch.float64, device=anchor.device)
        self.log_q = torch.zeros_like(self.log_p)
        self._last: tuple[Tensor, Tensor, Tensor] | None = None

    def __call__(self, prefix: Tensor, logits: Tensor) -> Tensor:
        t = prefix.shape[1]
        if t:
            self._add(prefix[:, -1])
        log_p = logits.log_softmax(-1)
        free = t >= self.start
        ok = self.masks(prefix, logits.shape[-1], free) & free[:, None]
        ok[torch.arange(len(free), device=ok.device), self.anchor[:, t]] |= ~free  # the anchor's token before start
        masked = log_p.masked_fill(~ok, float("-inf"))
        self._last = (log_p, masked.log_softmax(-1), free)
        return masked

    def finish(self, sample: Tensor) -> None:
        """Add the last drawn token's terms (``sample (R, n)``, what ``engine.sample`` returned)."""
        self._add(sample[:, -1])
        self._last = None

    def _add(self, token: Tensor) -> None:
        log_p, log_q, free = self._last
        self.log_p += log_p.gather(-1, token[:, None])[:, 0].double()
        self.log_q += torch.where(free, log_q.gather(-1, token[:, None])[:, 0].double(), 0.0)
