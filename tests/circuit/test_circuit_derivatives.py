"""Derivatives of every order through a circuit (issue 29): the backward pass of ``Circuit.log_prob`` is itself
differentiable, so second derivatives (gradient penalties, MAML, Hessian-vector products) are exact.

Checked in float64 on random circuits (Boolean and categorical inputs, several roots, ``-inf`` entries)
against finite differences (``gradcheck``, ``gradgradcheck``) and against the brute-force oracle.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from oracle import log_prob_reference
from tolerances import ATOL64, RTOL64
from pseudosl import semantic_loss, semirings
from random_circuits import random_circuit


def _finite(out: torch.Tensor) -> torch.Tensor:
    """The roots' values with ``-inf`` (no model: no derivative) set to 0."""
    return out.masked_fill(torch.isneginf(out), 0.0)


def _inputs(seed: int, batch: int, n: int, k: int, boolean: bool, n_neg_inf: int) -> torch.Tensor:
    """Float64 inputs: ``(B, n)`` ``log P(true)`` or unnormalised ``(B, n, k)``, with ``n_neg_inf`` entries at -inf."""
    g = torch.Generator().manual_seed(seed)
    x = (F.logsigmoid(2 * torch.randn(batch, n, generator=g, dtype=torch.float64)) if boolean
         else 2 * torch.randn(batch, n, k, generator=g, dtype=torch.float64))
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[:n_neg_inf]] = float("-inf")
    return x


@settings(max_examples=40)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 3), roots=st.integers(1, 3),
       boolean=st.booleans(), n_neg_inf=st.integers(0, 3), semiring=st.sampled_from(["log", "max"]))
def test_second_derivatives_match_finite_differences(seed, n, k, roots, boolean, n_neg_inf, semiring):
    k = 2 if boolean else k
    circuit, _ = random_circuit(seed, n, k, roots)
    x = _inputs(seed, 2, n, k, boolean, n_neg_inf).requires_grad_()
    allowed = None if boolean else torch.rand(2, n, k, generator=torch.Generator().manual_seed(seed)) > 0.2

    def values(x: torch.Tensor) -> torch.Tensor:
        if allowed is not None and semiring == "log":
            return _finite(circuit.log_prob(x, allowed))
        return _finite(circuit(x, semiring=semiring))

    assert torch.autograd.gradcheck(values, (x,))
    assert torch.autograd.gradgradcheck(values, (x,))


@settings(max_examples=40)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 3), roots=st.integers(1, 3),
       boolean=st.booleans(), n_neg_inf=st.integers(0, 3))
def test_hessian_vector_products_match_brute_force(seed, n, k, roots, boolean, n_neg_inf):
    """``d/dx [sum w * log Z]`` and then ``d/dx [g . v + |g|^2 + |x|^2]`` against enumeration (the issue's check)."""
    k = 2 if boolean else k
    circuit, preds = random_circuit(seed, n, k, roots)
    truths = [oracle.truth_of(p, n, k) for p in preds]
    x = _inputs(seed, 3, n, k, boolean, n_neg_inf)
    gen = torch.Generator().manual_seed(seed + 1)
    w = torch.randn(3, roots, generator=gen, dtype=torch.float64)
    v = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    finite = torch.isfinite(log_prob_reference(circuit, x).view(3, roots))

    def circuit_sum(x1: torch.Tensor) -> torch.Tensor:
        return (_finite(circuit(x1)) * w).sum()

    def oracle_sum(x1: torch.Tensor) -> torch.Tensor:  # only the finite roots: -inf has no derivative
        xc = oracle.boolean_to_categorical(x1) if boolean else x1
        return sum(((oracle.log_wmc(t, xc[finite[:, r]]) * w[finite[:, r], r]).sum()
                    for r, t in enumerate(truths) if finite[:, r].any()), x1.sum() * 0)

    got, want = [], []
    for total, out in ((circuit_sum, got), (oracle_sum, want)):
        x1 = x.clone().requires_grad_()
        g, = torch.autograd.grad(total(x1), x1, create_graph=True)
        h, = torch.autograd.grad((g.masked_fill(torch.isneginf(x), 0) * v).sum() + g.pow(2).sum()
                                 + x1.masked_fill(torch.isneginf(x), 0).pow(2).sum(), x1)
        out += [g.detach(), h]
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=ATOL64 * 10, rtol=RTOL64)


def test_the_issue_example_and_a_categorical_gradient_that_is_differentiable():
    """The issue: -9.03 where brute force gives 4.01; on a categorical circuit ``g.requires_grad`` was False."""
    circuit, (pred,) = random_circuit(7, 4, 3)
    truth = oracle.truth_of(pred, 4, 3)
    x = torch.randn(5, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).requires_grad_()
    g, = torch.autograd.grad(circuit.log_prob(x).sum(), x, create_graph=True)
    assert g.requires_grad
    h, = torch.autograd.grad(g.pow(2).sum() + x.pow(2).sum(), x)
    x2 = x.detach().clone().requires_grad_()
    g2, = torch.autograd.grad(oracle.log_wmc(truth, x2).sum(), x2, create_graph=True)
    h2, = torch.autograd.grad(g2.pow(2).sum() + x2.pow(2).sum(), x2)
    torch.testing.assert_close(h, h2, atol=ATOL64, rtol=0)
    hessian = torch.autograd.functional.hessian(lambda y: circuit.log_prob(y).sum(), x.detach()[:1])
    hessian2 = torch.autograd.functional.hessian(lambda y: oracle.log_wmc(truth, y).sum(), x.detach()[:1])
    torch.testing.assert_close(hessian, hessian2, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("boolean", [True, False])
def test_semantic_loss_gradient_penalty_is_exact(boolean):
    """A gradient penalty through ``semantic_loss`` (logits, ``allowed``) against finite differences."""
    circuit, _ = random_circuit(23, 4, 2 if boolean else 3, 2)
    shape = (3, 4) if boolean else (3, 4, 3)
    logits = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).requires_grad_()
    allowed = None if boolean else torch.ones(3, 4, 3, dtype=torch.bool).index_fill_(2, torch.tensor([0]), False)
    loss = lambda z: semantic_loss(circuit, z, reduction="none", allowed=allowed).clamp(max=1e6)  # noqa: E731
    assert torch.autograd.gradgradcheck(loss, (logits,))


def test_first_order_backward_stays_on_the_fast_path(monkeypatch):
    """Only ``create_graph=True`` pays for the differentiable backward; ``.backward()`` runs top_down alone."""
    circuit, _ = random_circuit(4, 3, 3, 2)
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    expected, = torch.autograd.grad(_finite(circuit.log_prob(x)).sum(), x, create_graph=True)

    def refuse(*args, **kwargs):
        raise AssertionError("the differentiable path ran")

    monkeypatch.setattr(semirings, "evaluate_differentiable", refuse)
    _finite(circuit.log_prob(x)).sum().backward()
    torch.testing.assert_close(x.grad, expected.detach(), atol=ATOL64, rtol=0)
    with pytest.raises(AssertionError, match="differentiable path ran"):
        torch.autograd.grad(_finite(circuit.log_prob(x)).sum(), x, create_graph=True)


def test_a_compiled_pass_refuses_second_derivatives_by_name():
    """torch.compile traces the backward once without a graph (backends eager, aot_eager: silently wrong before)."""
    circuit, _ = random_circuit(4, 3, 3)
    f = circuit.compiled(backend="eager")
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(f(x).sum(), x)  # first order: as the eager pass
    torch.testing.assert_close(g, torch.autograd.grad(circuit.log_prob(x).sum(), x)[0], atol=ATOL64, rtol=0)
    with pytest.raises(RuntimeError, match=r"circuit\.compiled\(\) is differentiable once: .* call circuit\.log_prob"):
        torch.autograd.grad(f(x).sum(), x, create_graph=True)
