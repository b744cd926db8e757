"""Shared comparisons of a compiled circuit against the brute-force oracle (float64)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

import oracle
from conftest import ATOL64


def random_log_weights(seed: int, batch: int, n: int, k: int, normalised: bool) -> torch.Tensor:
    """``(B, n, k)`` float64 log-weights: log-softmax of random logits, or raw (unnormalised) ones."""
    g = torch.Generator().manual_seed(seed)
    x = 2.0 * torch.randn(batch, n, k, generator=g, dtype=torch.float64)
    return x.log_softmax(-1) if normalised else x


def _as_columns(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 2 else out[:, None]


def assert_matches_oracle(circuit, truths: Sequence[np.ndarray], x: torch.Tensor) -> None:
    """Values and gradients of ``circuit.log_prob(x)`` (``(B, n, k)``) vs :func:`oracle.log_wmc`, per root."""
    assert circuit.n_roots == len(truths)
    x1 = x.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    got = _as_columns(circuit.log_prob(x1))
    want = torch.stack([oracle.log_wmc(t, x2) for t in truths], dim=1)
    assert got.shape == want.shape
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=ATOL64, rtol=0)
    cot = torch.rand(got.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (got * cot).masked_fill(~finite, 0.0).sum().backward()
    assert torch.isfinite(x1.grad).all()
    if finite.any():
        (want * cot).masked_fill(~finite, 0.0).sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad, atol=ATOL64, rtol=0)
    else:
        assert (x1.grad == 0).all()


def assert_boolean_matches_oracle(circuit, truths: Sequence[np.ndarray], logits: torch.Tensor) -> None:
    """Same for the Boolean ``(B, n)`` input ``logsigmoid(logits)``, gradients w.r.t. the logits."""
    l1 = logits.detach().clone().requires_grad_()
    l2 = logits.detach().clone().requires_grad_()
    got = _as_columns(circuit.log_prob(F.logsigmoid(l1)))
    x2 = torch.stack([F.logsigmoid(-l2), F.logsigmoid(l2)], dim=-1)
    want = torch.stack([oracle.log_wmc(t, x2) for t in truths], dim=1)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=ATOL64, rtol=0)
    if finite.all():
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(l1.grad, l2.grad, atol=ATOL64, rtol=0)
