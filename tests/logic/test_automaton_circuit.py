"""The sparse unrolling of automata (pseudosl.logic.automaton_circuit) vs brute force, every query.

Random SparseDFAs with several default rows and exceptions, Aho--Corasick automata and dense DFAs:
log_prob and its gradient, the max semiring, MPE, marginals (with and without ``allowed``) and sample
frequencies against enumeration in float64 (tests/helpers/oracle.py); determinism, which the construction
claims by design instead of proving node by node, is checked by enumeration (``Circuit.check``).
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from assertions import assert_matches_oracle, assert_queries_match_oracle, assert_samples_match_oracle, random_log_weights
from pseudosl import Circuit, compile_automaton
from pseudosl.logic.automaton import DFA, SparseDFA, forbidden_sequences_dfa, forbidden_sequences_sparse_dfa
from pseudosl.logic.automaton_circuit import automaton_dag, automaton_edges
from pseudosl.logic.errors import SizeLimitError
from random_circuits import random_allowed


def random_sparse_dfa(seed: int) -> SparseDFA:
    """1-6 states, 2-4 values, 1-3 default rows, each (state, value) an exception with probability 0.3."""
    rng = np.random.default_rng(seed)
    n_states, k, n_rows = int(rng.integers(1, 7)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
    default = rng.integers(0, n_states, size=(n_rows, k))
    s, c = np.nonzero(rng.random((n_states, k)) < 0.3)
    exceptions = np.stack([s, c, rng.integers(0, n_states, size=len(s))], axis=1)
    accepting = np.flatnonzero(rng.random(n_states) < 0.5).tolist()
    return SparseDFA(n_states, k, int(rng.integers(0, n_states)), accepting, default, exceptions,
                     row_of=rng.integers(0, n_rows, size=n_states))


def random_words_dfa(seed: int) -> SparseDFA:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    words = [rng.integers(0, k, size=int(rng.integers(1, 4))).tolist() for _ in range(int(rng.integers(1, 5)))]
    return forbidden_sequences_sparse_dfa(words, k)


def cases(n_seeds: int) -> list:
    return [case for seed in range(n_seeds) for case in (
        pytest.param(random_sparse_dfa(seed), id=f"sparse-{seed}"),
        pytest.param(random_words_dfa(seed), id=f"words-{seed}"),
        pytest.param(random_sparse_dfa(1000 + seed).to_dense(), id=f"dense-{seed}"))]


def truth_and_circuit(dfa: DFA | SparseDFA, n: int):
    truth = oracle.truth_of(dfa.accepts, n, dfa.n_values)
    circuit = compile_automaton(dfa, n, cache=False)
    assert (circuit.n_vars, circuit.n_values) == (n, dfa.n_values)
    assert circuit.dag.is_false() == (not truth.any())
    return truth, circuit


@pytest.mark.parametrize("dfa", cases(25))
def test_probabilities_queries_and_determinism_match_brute_force(dfa):
    n_max = {2: 6, 3: 4, 4: 3}[dfa.n_values]
    for n in range(1, n_max + 1):
        fanout = (2, 3, None)[n % 3]  # binary, ternary, or as chosen (flat or binary)
        truth = oracle.truth_of(dfa.accepts, n, dfa.n_values)
        circuit = Circuit(automaton_dag(dfa, n, fanout=fanout))
        assert (circuit.n_vars, circuit.n_values) == (n, dfa.n_values)
        assert circuit.dag.is_false() == (not truth.any())
        circuit.check()  # smooth, decomposable, and deterministic by enumeration
        assert circuit.n_edges <= automaton_edges(dfa, n, fanout=fanout)  # the estimate is an upper bound
        x = random_log_weights(n, 3, n, dfa.n_values, normalised=n % 2 == 0)
        assert_matches_oracle(circuit, [truth], x)
        assert_queries_match_oracle(circuit, [truth], x)
        assert_queries_match_oracle(circuit, [truth], x, random_allowed(n, 3, n, dfa.n_values))


@pytest.mark.parametrize("dfa", cases(6))
def test_samples_follow_the_conditional(dfa):
    n = {2: 5, 3: 3, 4: 3}[dfa.n_values]
    truth, circuit = truth_and_circuit(dfa, n)
    x = random_log_weights(7, 2, n, dfa.n_values, normalised=True)
    assert_samples_match_oracle(circuit, truth, x, 4000, seed=3)
    assert_samples_match_oracle(circuit, truth, x, 4000, seed=4, allowed=random_allowed(5, 2, n, dfa.n_values))


def test_words_automaton_is_sparse_and_its_circuit_grows_with_its_exceptions():
    rng = np.random.default_rng(0)
    k = 400
    words = [rng.integers(0, k - 1, size=int(rng.integers(1, 4))).tolist() for _ in range(150)]
    sparse = forbidden_sequences_sparse_dfa(words, k)
    dense = forbidden_sequences_dfa(words, k)
    assert np.array_equal(sparse.to_dense().delta, dense.delta) and sparse.accepting == dense.accepting
    assert sparse.n_exceptions < 3 * sparse.n_states  # against n_states * k = 400 per state in a table
    n = 8
    dag = automaton_dag(sparse, n)
    assert dag.n_edges < n * (10 * k + 20 * sparse.n_exceptions)  # O(n (R k + E log k)), not n * states * k
    assert dag.n_edges < n * sparse.n_states * k / 20
    ys = rng.integers(0, k, size=(500, n))
    for y in ys[:250]:  # plant words, so that both answers occur
        w = words[rng.integers(len(words))]
        y[:len(w)] = w
    assert np.array_equal(dag.evaluate(ys)[:, 0], [sparse.accepts(y) for y in ys.tolist()])


def test_a_large_vocabulary_needs_no_table():
    words, k = [[0, 1], [5, 5]], 30_000  # 5 trie states: a table would hold 150,000 entries, the default rows 60,000
    sparse = forbidden_sequences_sparse_dfa(words, n_values=k, max_edges=100_000)
    assert sparse.n_exceptions <= 2 and sparse.accepts([0, 0, 5, 1]) and not sparse.accepts([2, 5, 5])
    with pytest.raises(SizeLimitError, match="transition table .* above max_edges=100,000"):
        forbidden_sequences_dfa(words, n_values=k, max_edges=100_000)
    assert automaton_dag(sparse, 3).n_edges < 3 * 4 * k


def test_dead_and_unreachable_states_add_nothing():
    # state 1 is unreachable, state 2 is dead (absorbing, rejecting): the circuit is "no value 1 anywhere"
    dfa = SparseDFA(3, 3, 0, {0, 1}, default=[[0, 2, 0], [2, 2, 2]], exceptions=[(1, 0, 1)], row_of=[0, 1, 1])
    truth, circuit = truth_and_circuit(dfa, 4)
    assert truth.sum() == 2**4
    without = SparseDFA(2, 3, 0, {0}, default=[[0, 1, 0], [1, 1, 1]], exceptions=[], row_of=[0, 1])
    for fanout in (2, 3):
        assert automaton_dag(dfa, 4, fanout=fanout).n_edges == automaton_dag(without, 4, fanout=fanout).n_edges


def test_refusals_name_the_argument():
    dfa = forbidden_sequences_sparse_dfa([[0, 1]], 3)
    with pytest.raises(SizeLimitError, match=r"3 values, 1 exceptions\) over 6 positions .*above max_edges=10"):
        automaton_dag(dfa, 6, max_edges=10)
    with pytest.raises(TypeError, match="DFA or SparseDFA, got list"):
        automaton_dag([[0, 1]], 3)
    with pytest.raises(ValueError, match="n_positions"):
        automaton_edges(dfa, 0)
    with pytest.raises(ValueError, match="fanout must be >= 2"):
        automaton_dag(dfa, 3, fanout=1)
    with pytest.raises(SizeLimitError, match="default rows .* above max_edges=100 .*catch-all"):
        forbidden_sequences_sparse_dfa([[0, 1]], 1000, max_edges=100)
