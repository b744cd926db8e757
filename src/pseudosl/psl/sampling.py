"""Sampling anchor sequences from autoregressive models.

The pseudo-semantic loss needs one sequence ``y`` per example; it is always used as a constant
(detached ``LongTensor (B, n)``).  It may come from

* an engine's own ``engine.sample(...)`` (:mod:`pseudosl.psl.engine`; a recurrent engine's, and
  ``RecurrentDecoder.sample``, with fixed positions): drawn in the mode of the engine's conditionals (eval mode,
  dropout off, unless the engine keeps dropout), i.e. from the distribution the loss is the pseudolikelihood of,
* :func:`sample_autoregressive` with any ``step_fn(prefix (B, t)) -> logits (B, k)``,
* or data: a window of a training sequence can be passed to the loss directly.
"""

from __future__ import annotations

import math

from typing import Callable

import torch
from torch import Tensor

from .. import checks
from ..checks import check_bool, check_int


__all__ = ["sample_autoregressive", "sample_from_logits"]


def sample_from_logits(logits: Tensor, *, temperature: float = 1.0, top_p: float | None = None,
                       greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
    """Draw one value per row of ``logits (B, k)``: ``(B,)`` long.

    ``temperature`` divides the logits; ``top_p`` keeps the smallest set of most likely values whose
    mass reaches ``top_p`` (nucleus sampling); ``greedy`` takes the argmax.

    The draw is ``argmax(p / E)`` with ``E ~ Exponential(1)`` per value (an exponential race): the same
    random numbers and the same values as ``torch.multinomial(p, 1)``, whose one-sample path computes
    exactly this, but without its two host synchronisations per call (it checks ``p`` on the host),
    so an autoregressive sampling loop on a GPU never waits for the device.  The check that a row has
    a possible value (no NaN, not all ``-inf``) runs on CPU tensors only (:mod:`pseudosl.checks`).
    """
    if check_bool("greedy", greedy):
        return logits.argmax(-1)
    if not 0 < temperature < math.inf:  # also refuses NaN; inf would turn -inf logits into NaN (-inf / inf)
        raise ValueError(f"temperature must be a finite number > 0 (use greedy=True for argmax), got {temperature}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    logits = logits.detach().float() / temperature
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # mass before this value already reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = logits.softmax(-1)
    if checks.reads_values(probs):
        checks.require(~torch.isnan(probs).any(), "logits: a row is NaN or all -inf (no value can be drawn)")
    race = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / race).argmax(-1)


def sample_autoregressive(step_fn: Callable[[Tensor], Tensor], length: int, *, batch_size: int,
                          temperature: float = 1.0, top_p: float | None = None, greedy: bool = False,
                          generator: torch.Generator | None = None,
                          device: torch.device | str | None = None) -> Tensor:
    """Sample ``(B, n)`` detached long sequences from ``step_fn(prefix (B, t) long) -> logits (B, k)``, the scores of
    the next value (``t = 0`` gets a ``(B, 0)`` prefix).  Engines sample themselves (``engine.sample``).

    Args:
        step_fn: scores the next value from the prefix.
        length: ``n``.
        batch_size: ``B``.
        temperature, top_p, greedy, generator: see :func:`sample_from_logits`.
    """
    if not callable(step_fn):
        raise TypeError(f"step_fn must map a (B, t) prefix to (B, k) logits, got {type(step_fn).__name__}")
    length, batch_size = check_int("length", length, 1), check_int("batch_size", batch_size, 0)
    y = torch.zeros(batch_size, 0, dtype=torch.long, device=device)
    with torch.no_grad():
        for _ in range(length):
            nxt = sample_from_logits(step_fn(y), temperature=temperature, top_p=top_p, greedy=greedy,
                                     generator=generator)
            y = torch.cat([y, nxt[:, None].to(y.device)], dim=1)
    return y
