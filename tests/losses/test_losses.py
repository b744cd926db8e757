"""Semantic loss, constraint probability and conditioned entropy against enumeration."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
import pseudosl
from tolerances import ATOL64
from pseudosl import constraint_log_prob, semantic_loss
from pseudosl.losses import constraint_entropy
from random_circuits import random_circuit


def _satisfiable(seed: int, n: int, k: int):
    for s in range(seed, seed + 200):
        circuit, (pred,) = random_circuit(s, n, k)
        truth = oracle.truth_of(pred, n, k)
        if truth.any():
            return circuit, truth
    raise AssertionError("no satisfiable random circuit")


@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 4))
def test_semantic_loss_is_mean_of_neg_log_prob(seed, n, k):
    circuit, truth = _satisfiable(seed, n, k)
    logits = (torch.randn(4, n, k, dtype=torch.float64) * 3).requires_grad_()
    per_example = -oracle.log_wmc(truth, logits.log_softmax(-1))
    loss = semantic_loss(circuit, logits)
    assert torch.allclose(loss, per_example.mean(), atol=ATOL64)
    assert torch.allclose(semantic_loss(circuit, logits, "sum"), per_example.sum(), atol=ATOL64)
    assert torch.allclose(semantic_loss(circuit, logits, "none"), per_example, atol=ATOL64)
    g, = torch.autograd.grad(loss, logits)
    g_ref, = torch.autograd.grad(per_example.mean(), logits)
    assert torch.allclose(g, g_ref, atol=ATOL64)


def test_boolean_logits_match_categorical():
    circuit, truth = _satisfiable(1, 4, 2)
    logits = torch.randn(3, 4, dtype=torch.float64)
    cat = torch.stack([torch.zeros_like(logits), logits], -1)  # softmax([0, l]) = (1 - s(l), s(l))
    assert torch.allclose(semantic_loss(circuit, logits), semantic_loss(circuit, cat), atol=ATOL64)
    expect = -oracle.log_wmc(truth, cat.log_softmax(-1)).mean()
    assert torch.allclose(semantic_loss(circuit, logits), expect, atol=ATOL64)


@given(seed=st.integers(0, 10**6))
def test_allowed_mask_conjoins_unit_constraints(seed):
    n, k = 3, 3
    circuit, truth = _satisfiable(seed, n, k)
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(2, n, k, generator=gen) < 0.7
    lp = torch.randn(2, n, k, dtype=torch.float64, generator=gen).log_softmax(-1).requires_grad_()
    got = constraint_log_prob(circuit, lp, allowed)
    ys = oracle.assignments(n, k)
    for b in range(2):
        ok = truth & allowed[b].numpy()[range(n), ys].all(1)
        expect = oracle.log_wmc(ok, lp[b:b + 1])[0]
        assert torch.isclose(got[b], expect, atol=ATOL64) or (torch.isinf(got[b]) and torch.isinf(expect))


@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 3))
def test_constraint_entropy_matches_enumeration(seed, n, k):
    circuit, truth = _satisfiable(seed, n, k)
    logits = torch.randn(3, n, k, dtype=torch.float64).requires_grad_()
    h = constraint_entropy(circuit, logits)
    h_ref = oracle.conditional_entropy(truth, logits)
    assert torch.allclose(h, h_ref, atol=ATOL64)
    g, = torch.autograd.grad(h.sum(), logits)
    g_ref, = torch.autograd.grad(h_ref.sum(), logits)
    assert torch.allclose(g, g_ref, atol=ATOL64)


def test_unsatisfiable_loss_is_inf_not_nan():
    from pseudosl import Circuit, CircuitBuilder
    b = CircuitBuilder(2, 2)
    circuit = Circuit(b.build(b.false()))
    logits = torch.randn(2, 2, requires_grad=True)
    loss = semantic_loss(circuit, logits)
    assert torch.isposinf(loss)
    g, = torch.autograd.grad(loss, logits)
    assert not torch.isnan(g).any()


def test_loss_errors_name_the_problem():
    circuit, _ = _satisfiable(2, 3, 3)
    with pytest.raises(ValueError, match="reduction"):
        semantic_loss(circuit, torch.zeros(1, 3, 3), reduction="avg")
    with pytest.raises(ValueError, match=r"logits must have shape \(B, 3, 3\)"):
        semantic_loss(circuit, torch.zeros(1, 3))
    with pytest.raises(TypeError, match="bool"):
        constraint_log_prob(circuit, torch.zeros(1, 3, 3), torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match="allowed must have the shape"):
        constraint_log_prob(circuit, torch.zeros(1, 3, 3), torch.ones(1, 3, 2, dtype=torch.bool))


@given(seed=st.integers(0, 10**6), negate=st.booleans(), condition=st.booleans())
def test_several_roots_count_unit_constraints_once(seed, negate, condition):
    from pseudosl.losses import product_log_prob
    n, k = 3, 3
    circuit, preds = random_circuit(seed, n, k, n_roots=3)
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(2, n, k, generator=gen) < 0.8
    logits = torch.randn(2, n, k, dtype=torch.float64, generator=gen).requires_grad_()
    lp = logits.log_softmax(-1)
    ys = oracle.assignments(n, k)
    expect = []
    for b in range(2):
        in_allowed = allowed[b].numpy()[range(n), ys].all(1)
        log_allowed = oracle.log_wmc(in_allowed, lp[b:b + 1])[0]
        total = log_allowed * 0 if condition else log_allowed
        for p in preds:
            truth = oracle.truth_of(p, n, k)
            event = in_allowed & (~truth if negate else truth)
            total = total + oracle.log_wmc(event, lp[b:b + 1])[0] - log_allowed
        expect.append(total)
    expect = torch.stack(expect)
    got = product_log_prob(circuit, lp, allowed, negate=negate, condition=condition)
    finite = torch.isfinite(expect)
    if negate:  # log(1 - p) for p = 1 up to rounding bottoms out near -37 in float64 (documented)
        finite &= expect > -30
        got = torch.where(got < -30, torch.full_like(got, float("-inf")), got)
    assert torch.equal(finite, torch.isfinite(got))
    assert torch.allclose(got[finite], expect[finite], atol=ATOL64)
    loss = semantic_loss(circuit, logits, "none", allowed, condition=condition) if not negate else -got
    if not negate:
        assert torch.allclose(loss[finite], -expect[finite], atol=ATOL64)
    if finite.any():
        g, = torch.autograd.grad(got[finite].sum(), logits, retain_graph=True)
        g_ref, = torch.autograd.grad(expect[finite].sum(), logits)
        assert torch.allclose(g, g_ref, atol=ATOL64)


def test_per_example_returns_tuples_in_the_examples_order():
    """``per_example`` is the one place where "one circuit, or one per example" is resolved; a function returning a
    tuple (the decoders' values and weights) gets each part back in the examples' order, ``None`` parts kept."""
    from pseudosl.losses import per_example
    a, b = pseudosl.compile_cnf([[1, 2]]), pseudosl.compile_cnf([[1], [2]])
    x = torch.arange(8.0).view(4, 2)
    calls = []

    def fn(c, rows):
        calls.append((c, len(rows)))
        return rows * (1 if c is a else -1), None
    values, none = per_example([a, b, b, a], fn, x)
    assert none is None and [n for _, n in calls] == [2, 2]
    torch.testing.assert_close(values, x * torch.tensor([1.0, -1, -1, 1])[:, None], atol=0, rtol=0)
    assert per_example(a, fn, x)[0] is not None and len(calls) == 3  # one circuit: one call on the whole batch
    with pytest.raises(ValueError, match="3 constraints for a batch of 4"):
        per_example([object()] * 3, fn, x)
