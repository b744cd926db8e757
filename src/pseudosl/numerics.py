"""Numerics of log-probabilities that plain torch gets wrong at the edges: ``log(1 - p)`` and log-sum-exp.

Example:
    >>> import torch
    >>> log1mexp(torch.tensor([-1e-10, -2.0, 0.0]))       # log(1 - exp(x)), exact near 0; -inf at 0
    tensor([-23.0259,  -0.1454,     -inf])
    >>> safe_logsumexp(torch.tensor([[float("-inf"), float("-inf")]]), 1)
    tensor([-inf])
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["log1mexp", "safe_logsumexp"]


def log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x <= 0, accurate near 0 (Maechler 2012); exactly -inf at x = 0.

    Subnormal x (between the smallest normal ``-tiny`` and 0) give ``log(-x)``, which is exact there
    (``1 - exp(x) = -x`` to rounding): -103.28 for float32's -1.4e-45, not the -87.34 of ``-tiny``.
    The derivative (about ``1/x``) overflows there and is infinite at 0: it is defined as 0 above
    ``-tiny`` (the clamp stops it), so a probability of (almost) exactly 1 gives finite gradients.
    """
    tiny = torch.finfo(x.dtype).tiny
    xs = x.clamp(max=-tiny)
    small = xs > -0.6931471805599453
    a = torch.log(-torch.expm1(torch.where(small, xs, torch.full_like(xs, -1.0))))
    b = torch.log1p(-torch.exp(torch.where(small, torch.full_like(xs, -1.0), xs)))
    subnormal = (x > -tiny) & (x < 0)
    c = torch.log(-torch.where(subnormal, x.detach(), torch.full_like(xs, -1.0)))  # no gradient, as at the clamp
    return torch.where(x >= 0, torch.full_like(x, float("-inf")), torch.where(subnormal, c, torch.where(small, a, b)))


def safe_logsumexp(x: Tensor, dim: int) -> Tensor:
    """log-sum-exp whose derivatives (of every order) are 0, not NaN, where every term is -inf."""
    m = x.amax(dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.exp(x - m).sum(dim)
    empty = s == 0
    out = torch.log(torch.where(empty, torch.ones_like(s), s)) + m.squeeze(dim)
    return torch.where(empty, torch.full_like(s, float("-inf")), out)
