"""Circuit queries beyond the probability (MPE, samples, marginals, the max semiring) vs brute force.

Every value is compared in float64 with enumeration (tests/helpers/oracle.py) on random circuits, random
CNFs, the builders of ``pseudosl.constraints`` and automata; sample frequencies with an L1 bound that
holds with probability 1 - 1e-9 and a chi-square test, from seeded generators (hypothesis derandomised),
so they cannot flake.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
import pseudosl.memory
from assertions import (assert_queries_match_oracle, assert_samples_match_oracle, random_log_weights,
                    sample_fit)
from tolerances import ATOL64, ATOL32_FEW_OPS, P_VALUE_MIN
from pseudosl import Circuit, CircuitBuilder, compile_automaton, compile_cnf, constraints
from pseudosl.logic.automaton import forbidden_sequences_dfa
from pseudosl.logic.dag import FALSE
from automata import dfas, simulate
from random_circuits import random_allowed, random_circuit
from cnfs import cnfs, satisfies


@pytest.fixture(autouse=True, scope="module")
def _cache_in_tmp(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PSEUDOSL_CACHE", str(tmp_path_factory.mktemp("pseudosl-cache")))
        yield


# -- MPE, marginals and the max semiring --------------------------------------------------------------
@given(seed=st.integers(0, 10**6), n=st.integers(1, 5), k=st.integers(2, 4), roots=st.integers(1, 3),
       normalised=st.booleans(), with_allowed=st.booleans())
def test_random_circuits_mpe_and_marginals(seed, n, k, roots, normalised, with_allowed):
    circuit, preds = random_circuit(seed, n, k, roots)
    x = random_log_weights(seed, 4, n, k, normalised)
    x[0, 0, 0] = float("-inf")  # probability-0 inputs too
    allowed = random_allowed(seed, 4, n, k) if with_allowed else None
    assert_queries_match_oracle(circuit, [oracle.truth_of(p, n, k) for p in preds], x, allowed)


@given(cnfs(), st.integers(0, 2**31 - 1))
def test_random_cnfs_mpe_and_marginals(cnf, seed):
    n, clauses = cnf
    circuit = compile_cnf(clauses, n, allow_unsat=True, cache=False)
    truth = oracle.truth_of(lambda y: satisfies(clauses, y), n, 2)
    assert_queries_match_oracle(circuit, [truth], random_log_weights(seed, 3, n, 2, normalised=True))


@given(dfas(), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_random_automata_mpe_and_marginals(dfa, n, seed):
    delta = dfa.delta.tolist()
    truth = oracle.truth_of(lambda y: simulate(delta, dfa.start, dfa.accepting, y), n, dfa.n_values)
    circuit = compile_automaton(dfa, n, cache=False)
    x = random_log_weights(seed, 3, n, dfa.n_values, normalised=seed % 2 == 0)
    assert_queries_match_oracle(circuit, [truth], x, random_allowed(seed, 3, n, dfa.n_values))


def builder_cases():
    """(name, circuit, predicates per root) for the builders of pseudosl.constraints and an automaton."""
    groups = [[0, 1, 2], [2, 3, 4]]
    yield "exactly_one", constraints.compile_exactly_one(5, groups), [lambda y, g=g: sum(y[i] for i in g) == 1
                                                                      for g in groups]
    yield "exactly_k", constraints.compile_exactly_k(5, [list(range(5))], 2), [lambda y: sum(y) == 2]
    yield "at_most_k", constraints.compile_at_most_k(5, [[0, 1, 3, 4]], 1), [lambda y: y[0] + y[1] + y[3] + y[4] <= 1]
    yield "all_different", constraints.compile_all_different(4, 4, [[0, 1, 2, 3]]), [lambda y: len(set(y)) == 4]
    yield ("all_different 3 of 5 values", constraints.compile_all_different(3, 5, [[0, 1, 2]]),
           [lambda y: len(set(y)) == 3])
    words = [[1, 2], [0, 0, 0]]
    yield ("forbidden_sequences_dfa", compile_automaton(forbidden_sequences_dfa(words, 3), 5, cache=False),
           [lambda y: not any(tuple(y[i:i + len(w)]) == tuple(w) for w in words for i in range(6 - len(w)))])


@pytest.mark.parametrize("name, circuit, preds", list(builder_cases()), ids=[c[0] for c in builder_cases()])
def test_builders_and_automata(name, circuit, preds):
    n, k = circuit.n_vars, circuit.n_values
    truths = [oracle.truth_of(p, n, k) for p in preds]
    x = random_log_weights(3, 5, n, k, normalised=True)
    assert_queries_match_oracle(circuit, truths, x)
    assert_queries_match_oracle(circuit, truths, x, random_allowed(4, 5, n, k))
    for r, truth in enumerate(truths):
        assert_samples_match_oracle(circuit, truth, x[:2], 20000, seed=r, root=r)


def test_boolean_inputs_give_the_categorical_answers():
    circuit, (pred,) = random_circuit(11, 5, 2)
    p_true = torch.rand(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logp = p_true.log()
    x = oracle.boolean_to_categorical(logp)
    assert torch.equal(circuit.mpe(logp).values, circuit.mpe(x).values)
    torch.testing.assert_close(circuit.marginals(logp), circuit.marginals(x), atol=ATOL64, rtol=0)
    a = circuit.sample(logp, 50, generator=torch.Generator().manual_seed(1))
    b = circuit.sample(x, 50, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.values, b.values)
    assert_queries_match_oracle(circuit, [oracle.truth_of(pred, 5, 2)], x)


def test_max_semiring_gradient_is_the_mpe_assignment():
    circuit, _ = random_circuit(23, 4, 3)
    x = random_log_weights(5, 3, 4, 3, normalised=True).requires_grad_()
    best = circuit(x, semiring="max")[:, 0]
    assert torch.isfinite(best).all()
    g, = torch.autograd.grad(best.sum(), x)
    onehot = torch.nn.functional.one_hot(circuit.mpe(x.detach()).values, 3).double()
    assert torch.equal(g, onehot)
    torch.testing.assert_close(best, circuit.mpe(x.detach()).log_prob, atol=ATOL64, rtol=0)


def test_marginals_are_the_gradient_of_log_prob():
    circuit, _ = random_circuit(29, 4, 3, 2)
    x = random_log_weights(6, 3, 4, 3, normalised=False).requires_grad_()
    for r in range(2):
        g, = torch.autograd.grad(circuit.log_prob(x)[:, r].sum(), x)
        finite = torch.isfinite(circuit.log_prob(x.detach())[:, r])
        torch.testing.assert_close(circuit.marginals(x, root=r)[finite], g[finite], atol=ATOL64, rtol=0)


# -- samples ---------------------------------------------------------------------------------------------
@settings(derandomize=True, max_examples=60)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 3), with_allowed=st.booleans())
def test_random_circuit_samples_follow_the_conditional(seed, n, k, with_allowed):
    circuit, preds = random_circuit(seed, n, k, 2)
    x = random_log_weights(seed, 3, n, k, normalised=False)
    allowed = random_allowed(seed, 3, n, k) if with_allowed else None
    for r, pred in enumerate(preds):
        assert_samples_match_oracle(circuit, oracle.truth_of(pred, n, k), x, 4000, seed, root=r, allowed=allowed)


@settings(derandomize=True, max_examples=40)
@given(cnfs(), st.integers(0, 2**31 - 1))
def test_random_cnf_samples_follow_the_conditional(cnf, seed):
    n, clauses = cnf
    circuit = compile_cnf(clauses, n, allow_unsat=True, cache=False)
    truth = oracle.truth_of(lambda y: satisfies(clauses, y), n, 2)
    x = random_log_weights(seed, 2, n, 2, normalised=True)
    assert_samples_match_oracle(circuit, truth, x, 4000, seed)


def test_sample_test_detects_a_wrong_distribution():
    """The statistical checks have power at the sample sizes the tests use: draws from q itself (not
    conditioned) fail both; draws from q(. | alpha) with 0.05 of mass moved between two models (L1 0.1) fail
    the chi-square test; the circuit's own draws pass."""
    circuit = constraints.compile_exactly_k(4, [list(range(4))], 2)
    truth = oracle.truth_of(lambda y: sum(y) == 2, 4, 2)
    x = random_log_weights(0, 1, 4, 2, normalised=True)
    p = oracle.conditional(truth, x)[0]
    g = torch.Generator().manual_seed(0)
    shifted = p.clone()
    shifted[p.argmax()] -= 0.05
    shifted[torch.where(p > 0, p, 2.0).argmin()] += 0.05
    unconditioned = oracle.conditional(np.ones_like(truth), x)[0]
    for wrong, l1_fails in ((unconditioned, True), (shifted, False)):
        counts = torch.bincount(torch.multinomial(wrong, 4000, replacement=True, generator=g), minlength=len(p))
        l1, bound, p_value = sample_fit(counts, p)
        assert p_value < P_VALUE_MIN and (l1 > bound) == l1_fails
    right = oracle.assignment_index(circuit.sample(x, 4000, generator=g).values[:, 0], 2)
    l1, bound, p_value = sample_fit(torch.bincount(right, minlength=len(p)), p)
    assert l1 <= bound and p_value > P_VALUE_MIN


def test_many_samples_per_example_and_chunks():
    """K = 1000 candidates per example; chunking the samples (and the batch) changes nothing but the draws."""
    circuit = constraints.compile_all_different(4, 4, [[0, 1, 2, 3]])
    truth = oracle.truth_of(lambda y: len(set(y)) == 4, 4, 4)
    x = random_log_weights(1, 3, 4, 4, normalised=True)
    whole = circuit.sample(x, 1000, generator=torch.Generator().manual_seed(0))
    assert whole.values.shape == (1000, 3, 4)
    circuit.memory_budget = 4096  # a few samples and rows per chunk
    assert len(pseudosl.memory.chunks(1000, 3 * circuit._memory.row_bytes(x, keep=False), circuit.memory_budget)) > 10
    chunked = circuit.sample(x, 1000, generator=torch.Generator().manual_seed(0))
    again = circuit.sample(x, 1000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(chunked.values, again.values)  # reproducible for a given chunk size
    torch.testing.assert_close(chunked.log_partition, whole.log_partition, atol=ATOL64, rtol=0)
    assert_samples_match_oracle(circuit, truth, x, 3000, seed=2)
    torch.testing.assert_close(circuit.marginals(x), Circuit(circuit.dag).marginals(x), atol=ATOL64, rtol=0)
    assert torch.equal(circuit.mpe(x).values, Circuit(circuit.dag).mpe(x).values)


# -- roots, sentinels, shapes, errors ----------------------------------------------------------------
def test_several_roots_need_root():
    circuit, preds = random_circuit(3, 3, 3, 3)
    x = random_log_weights(0, 2, 3, 3, normalised=True)
    for query in (circuit.mpe, circuit.marginals, circuit.sample):
        with pytest.raises(ValueError, match=r"3 roots: pass root=r \(0 <= r < 3\)"):
            query(x)
        with pytest.raises(ValueError, match=r"root must be an int in 0..2 \(a root of the circuit\), got 3"):
            query(x, root=3)
        with pytest.raises(ValueError, match="root must be >= 0, got -1"):  # not the last root, counted from the end
            query(x, root=-1)
        with pytest.raises(TypeError, match="root must be an int, got the bool True"):
            query(x, root=True)
        query(x, root=np.int64(2))  # NumPy and 0-d tensor ints are ints (check_int)
        query(x, root=torch.tensor(1))


def test_no_model_gives_sentinels_not_an_assignment():
    b = CircuitBuilder(3, 3)
    circuit = Circuit(b.build([FALSE, b.or_(b.literal(0, 0), b.and_(b.in_set(0, [1, 2]), b.literal(1, 2)))]))
    x = random_log_weights(0, 3, 3, 3, normalised=True)
    allowed = torch.ones(3, 3, 3, dtype=torch.bool)
    allowed[1, 0, 0] = False
    allowed[1, 1, 2] = False  # example 1: root 1 has no model left
    allowed[2, 2] = False     # example 2: position 2 has no value left
    for r, unsat in ((0, [True, True, True]), (1, [False, True, True])):
        unsat = torch.tensor(unsat)
        mpe = circuit.mpe(x, allowed, root=r)
        assert (mpe.values[unsat] == -1).all() and (mpe.values[~unsat] >= 0).all()
        assert torch.equal(torch.isneginf(mpe.log_prob), unsat)
        s = circuit.sample(x, 7, allowed=allowed, root=r)
        assert (s.values[:, unsat] == -1).all() and (s.values[:, ~unsat] >= 0).all()
        assert torch.equal(torch.isneginf(s.log_partition), unsat) and torch.isneginf(s.log_prob[:, unsat]).all()
        mu = circuit.marginals(x, allowed, root=r)
        assert (mu[unsat] == 0).all()
        torch.testing.assert_close(mu[~unsat].sum(-1), torch.ones(int((~unsat).sum()), 3, dtype=x.dtype))


def test_unknown_semiring_is_named():
    circuit, _ = random_circuit(1, 2, 2)
    with pytest.raises(ValueError, match=r"unknown semiring 'tropical': use one of \['log', 'max'\]"):
        circuit(torch.zeros(1, 2, 2), semiring="tropical")


def test_query_arguments_are_checked():
    circuit, _ = random_circuit(2, 3, 3)
    x = torch.zeros(2, 3, 3)
    with pytest.raises(ValueError, match=r"shape \(B, 3, 3\)"):
        circuit.mpe(torch.zeros(2, 3, 2))
    with pytest.raises(TypeError, match="allowed must be a bool tensor"):
        circuit.marginals(x, torch.ones(2, 3, 3))
    with pytest.raises(ValueError, match=r"allowed must have shape \(B, n, k\) = \(2, 3, 3\)"):
        circuit.sample(x, allowed=torch.ones(2, 3, 2, dtype=torch.bool))
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_samples must be >= 1"):
            circuit.sample(x, bad)
    for bad in (2.0, True, np.bool_(True), "2"):
        with pytest.raises(TypeError, match="num_samples must be an int"):
            circuit.sample(x, bad)
    assert circuit.sample(x, np.int64(3)).values.shape == (3, 2, 3)  # NumPy and 0-d tensor ints are ints
    assert circuit.sample(x, torch.tensor(2)).values.shape == (2, 2, 3)
    with pytest.raises(ValueError, match="generator must be a torch.Generator on cpu"):
        circuit.sample(x, generator=np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        circuit.mpe(torch.full((2, 3, 3), float("nan")))


def test_shapes_empty_batches_and_half_precision():
    circuit, _ = random_circuit(5, 3, 3)
    empty = torch.zeros(0, 3, 3)
    assert circuit.mpe(empty).values.shape == (0, 3) and circuit.mpe(empty).log_prob.shape == (0,)
    assert circuit.marginals(empty).shape == (0, 3, 3)
    s = circuit.sample(empty, 4)
    assert s.values.shape == (4, 0, 3) and s.log_prob.shape == (4, 0) and s.log_partition.shape == (0,)
    x = random_log_weights(0, 2, 3, 3, normalised=True)
    assert circuit.sample(x).values.shape == (1, 2, 3)
    half = circuit.marginals(x.to(torch.bfloat16))
    assert half.dtype == torch.float32
    torch.testing.assert_close(half.double(), circuit.marginals(x.to(torch.bfloat16).double()), atol=ATOL32_FEW_OPS, rtol=0)
    assert circuit(x.float(), semiring="max").dtype == torch.float32
    with torch.enable_grad():
        xg = x.clone().requires_grad_()
        assert not circuit.marginals(xg).requires_grad and not circuit.sample(xg).log_prob.requires_grad


# -- the conditioned distribution: circuit.condition(x, allowed, root) -----------------------------------------------
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), k=st.integers(2, 3), roots=st.integers(1, 3),
       with_allowed=st.booleans(), budget=st.sampled_from([None, 1, 600]))
@settings(max_examples=40, deadline=None)
def test_condition_answers_every_query_of_one_root_as_brute_force(seed, n, k, roots, with_allowed, budget):
    """``condition(x, allowed, r)``: ``log_partition``, ``mpe()``, ``marginals`` and ``sample(S)`` of root ``r`` vs
    enumeration (float64), whatever the chunks (``memory_budget`` of 1 byte: one row per chunk)."""
    circuit, preds = random_circuit(seed, n, k, roots)
    circuit.memory_budget = budget
    x = random_log_weights(seed, 5, n, k, normalised=seed % 2 == 0)
    allowed = random_allowed(seed, 5, n, k) if with_allowed else None
    xa = x if allowed is None else x.masked_fill(~allowed, float("-inf"))
    r = seed % roots
    truth = oracle.truth_of(preds[r], n, k)
    q = circuit.condition(x, allowed, r)
    want_z = oracle.log_wmc(truth, xa)
    unsat = torch.isneginf(want_z)
    assert torch.equal(torch.isneginf(q.log_partition), unsat)
    torch.testing.assert_close(q.log_partition[~unsat], want_z[~unsat], atol=ATOL64, rtol=0)
    best = q.mpe()
    torch.testing.assert_close(best.log_prob, oracle.max_log_weight(truth, xa), atol=ATOL64, rtol=0)
    assert (best.values[unsat] == -1).all()
    sat = ~unsat
    idx = oracle.assignment_index(best.values[sat], k)
    assert torch.as_tensor(truth)[idx].all()
    torch.testing.assert_close(q.marginals, oracle.marginals(truth, xa), atol=ATOL64, rtol=0)
    s = q.sample(50, generator=torch.Generator().manual_seed(seed))
    assert s.values.shape == (50, 5, n) and (s.values[:, unsat] == -1).all()
    assert torch.as_tensor(truth)[oracle.assignment_index(s.values[:, sat].reshape(-1, n), k)].all()
    torch.testing.assert_close(s.log_partition, q.log_partition, atol=ATOL64, rtol=0)


def test_the_one_call_queries_are_the_conditioned_ones_and_the_batch_is_cut_once(monkeypatch):
    circuit, _ = random_circuit(7, 4, 3, 2)
    circuit.memory_budget = 900  # a few rows per chunk
    x = random_log_weights(3, 9, 4, 3, normalised=True)
    allowed = random_allowed(3, 9, 4, 3)
    q = circuit.condition(x, allowed, 1)
    assert len(q.chunks) > 2
    cuts = []
    real = pseudosl.memory.chunks
    monkeypatch.setattr(pseudosl.memory, "chunks", lambda total, *a: cuts.append(total) or real(total, *a))
    best, marg = q.mpe(), q.marginals
    draws = q.sample(4, generator=torch.Generator().manual_seed(0))
    assert 9 not in cuts  # the batch is not cut again (only the samples are, per chunk of rows)
    monkeypatch.undo()
    assert torch.equal(best.values, circuit.mpe(x, allowed, root=1).values)
    assert torch.equal(marg, circuit.marginals(x, allowed, root=1))
    again = circuit.sample(x, 4, allowed=allowed, root=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws.values, again.values) and torch.equal(draws.log_prob, again.log_prob)
    assert torch.equal(q.log_partition, circuit.log_prob(x, allowed)[:, 1])
    with pytest.raises(ValueError, match=r"2 roots: pass root=r \(0 <= r < 2\) to choose the constraint"):
        circuit.condition(x)


def test_log_partition_is_differentiable_and_its_gradient_is_the_marginals():
    circuit, _ = random_circuit(11, 3, 3)
    x = random_log_weights(5, 4, 3, 3, normalised=False).requires_grad_()
    q = circuit.condition(x)
    (g,) = torch.autograd.grad(q.log_partition.sum(), x)
    finite = torch.isfinite(q.log_partition.detach())
    torch.testing.assert_close(g[finite], q.marginals[finite], atol=ATOL64, rtol=0)
