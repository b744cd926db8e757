"""The brute-force oracle every test compares against: enumeration in float64.

``log_wmc(truth, x)`` sums ``exp(sum_v x[b, v, y_v])`` over the assignments ``y`` where
``truth`` holds; it is written with plain differentiable torch ops, so gradients are
compared through autograd too.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
import torch
from torch import Tensor


def assignments(n: int, k: int) -> np.ndarray:
    """All ``k**n`` assignments, ``(k**n, n)`` int64, in lexicographic order."""
    return np.array(list(itertools.product(range(k), repeat=n)), dtype=np.int64).reshape(-1, n)


def truth_of(predicate: Callable[[tuple[int, ...]], bool], n: int, k: int) -> np.ndarray:
    """Boolean vector over :func:`assignments` from a Python predicate on a tuple."""
    return np.array([bool(predicate(tuple(a))) for a in assignments(n, k)])


def log_weights(x: Tensor) -> Tensor:
    """``(B, k**n)``: ``sum_v x[b, v, y_v]`` for every assignment ``y``."""
    b, n, k = x.shape
    ys = torch.as_tensor(assignments(n, k), device=x.device)  # (A, n)
    return x[:, torch.arange(n), :][:, None, :, :].expand(b, len(ys), n, k).gather(
        3, ys[None, :, :, None].expand(b, len(ys), n, 1)).squeeze(-1).sum(-1)


def log_wmc(truth: np.ndarray, x: Tensor) -> Tensor:
    """``(B,)`` log of the weighted model count of ``truth`` under log-weights ``x`` (B, n, k)."""
    w = log_weights(x)
    mask = torch.as_tensor(truth, device=x.device)
    if not mask.any():  # unsatisfiable: -inf, still attached to x (zero gradient)
        return w[:, 0].masked_fill(torch.ones_like(w[:, 0], dtype=torch.bool), float("-inf"))
    return torch.logsumexp(w[:, mask], dim=1)


def conditional_entropy(truth: np.ndarray, x: Tensor) -> Tensor:
    """``(B,)`` entropy of the fully-factorized distribution ``softmax(x)`` conditioned on ``truth``."""
    w = log_weights(x.log_softmax(-1))[:, torch.as_tensor(truth)]
    logp = w - torch.logsumexp(w, dim=1, keepdim=True)
    return -(logp.exp() * logp).sum(1)


def boolean_to_categorical(logp_true: Tensor) -> Tensor:
    """``(B, n)`` log P(true) -> ``(B, n, 2)`` with index 1 = true (float64-accurate)."""
    return torch.stack([torch.log1p(-logp_true.exp()), logp_true], dim=-1)


def max_log_weight(truth: np.ndarray, x: Tensor) -> Tensor:
    """``(B,)`` ``max_{y |= truth} sum_v x[b, v, y_v]`` (the MPE value; ``-inf`` where ``truth`` has no model)."""
    w = log_weights(x)
    return w.masked_fill(~torch.as_tensor(truth, device=x.device), float("-inf")).amax(1)


def conditional(truth: np.ndarray, x: Tensor) -> Tensor:
    """``(B, k**n)`` ``q(y | truth)`` over :func:`assignments` (rows of 0 where ``truth`` has no model, or no weight)."""
    w = log_weights(x).masked_fill(~torch.as_tensor(truth, device=x.device), float("-inf"))
    z = torch.logsumexp(w, 1, keepdim=True)
    return torch.where(torch.isneginf(z), torch.zeros_like(w), (w - z.masked_fill(torch.isneginf(z), 0.0)).exp())


def marginals(truth: np.ndarray, x: Tensor) -> Tensor:
    """``(B, n, k)`` ``q(y_v = c | truth)`` (0 where ``truth`` has no model)."""
    b, n, k = x.shape
    p = conditional(truth, x)  # (B, A)
    onehot = torch.nn.functional.one_hot(torch.as_tensor(assignments(n, k), device=x.device), k).to(p.dtype)  # (A, n, k)
    return torch.einsum("ba,avc->bvc", p, onehot)


def assignment_index(values: Tensor, k: int) -> Tensor:
    """Position in :func:`assignments` of each assignment ``(..., n)`` (the last variable varies fastest)."""
    n = values.shape[-1]
    return (values * torch.tensor([k ** (n - 1 - v) for v in range(n)], device=values.device)).sum(-1)


def resampling_output(q: Tensor, log_p: Tensor, k: int) -> Tensor:
    """``(A,)`` the exact output distribution of sampling importance resampling over assignments ``A``.

    ``K = k`` candidates are drawn independently from ``q`` ``(A,)`` (0 off its support), weighted by
    ``w = p / q`` (``log_p`` ``(A,)``, unnormalised) and one is returned with probability ``w_j / sum_l w_l``:

        P(out = z) = K q(z) w(z) E[1 / (w(z) + S)],   S = the sum of the weights of K - 1 other draws,

    with the expectation enumerated over every ``(K - 1)``-tuple of the support (``|support|^(K-1)`` terms).
    """
    support = q > 0
    qs = q[support]
    ws = (log_p[support] - qs.log()).exp()
    ws = ws / ws.max()  # the output is invariant to the weights' scale
    sums, probs = ws.new_zeros(1), ws.new_ones(1)
    for _ in range(k - 1):
        sums = (sums[:, None] + ws[None, :]).flatten()
        probs = (probs[:, None] * qs[None, :]).flatten()
    out = torch.zeros_like(q)
    out[support] = k * qs * ws * (probs[None, :] / (ws[:, None] + sums[None, :])).sum(1)
    return out


def log_prob_reference(circuit, x: Tensor) -> Tensor:
    """``circuit.log_prob(x)`` through plain differentiable torch ops
    (:func:`pseudosl.semirings.evaluate_differentiable`), not the circuit's hand-written backward: a cross-check of
    its values and of derivatives of every order.  ``(B,)``, or ``(B, R)`` for ``R`` roots."""
    from pseudosl import semirings

    x = circuit.categorical_input(x)
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    out = semirings.evaluate_differentiable(circuit._leaves(x), circuit._meta, circuit._indices(), circuit.root_rows).t()
    return out[:, 0] if circuit.n_roots == 1 else out
