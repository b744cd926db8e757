"""The token masks of :class:`~.proposals.RestartProposal`'s masked regeneration: for each row's prefix, the tokens
after which the constraint stays satisfiable -- a compiled mask of :mod:`.matcher` (the window's circuit marginals,
or the streaming automaton read by a :class:`~.matcher.TokenMatcher`) -- and the logits processor that draws under
them while adding up ``log p`` and ``log q`` for the importance weights."""

from __future__ import annotations

import abc

import torch
from torch import Tensor

from .automaton_mask import AutomatonMask
from .matcher import TokenMatcher
from .window_mask import WindowMask

__all__ = ["MatcherMasks", "MaskedSteps", "Masks", "WindowMasks"]


class Masks(abc.ABC):
    """``(R, V)`` bool: the tokens after which the constraint stays satisfiable, given each row's prefix."""

    @abc.abstractmethod
    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:
        """For the rows' prefixes ``(R, t)``, called once per ``t = 0, 1, ..`` in order; the rows where ``free (R,)``
        is False may get any mask."""


class WindowMasks(Masks):
    """The window's marginals (:meth:`WindowMask.allowed_tokens`) with each row's ``allowed (R, n, k)`` values (the
    constraint ``alpha AND allowed``), computed for the free rows only (a pass over the circuit per step)."""

    def __init__(self, mask: WindowMask, allowed: Tensor | None) -> None:
        self.mask, self.allowed = mask, allowed

    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:
        out = torch.zeros(prefix.shape[0], vocab, dtype=torch.bool, device=prefix.device)
        rows = free.nonzero()[:, 0]
        if rows.numel():
            allowed = None if self.allowed is None else self.allowed[rows]
            out[rows] = self.mask.allowed_tokens(prefix[rows], vocab, allowed)[0]
        return out


class MatcherMasks(Masks):
    """A streaming automaton's masks: a :class:`TokenMatcher` over every row, advanced by the rows' last tokens (a
    table lookup per row and step; the per-state token lists are built once per compiled mask)."""

    def __init__(self, mask: AutomatonMask) -> None:
        self.mask = mask
        self.matcher: TokenMatcher | None = None

    def __call__(self, prefix: Tensor, vocab: int, free: Tensor) -> Tensor:
        if prefix.shape[1] == 0:
            self.matcher = TokenMatcher(self.mask, prefix.shape[0], prefix.device, vocab_size=vocab)
        else:
            self.matcher.advance(prefix[:, -1])
        return self.matcher.allowed()


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
