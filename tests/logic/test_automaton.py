"""compile_automaton / forbidden words vs brute force; DFA validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from tolerances import ATOL64
from assertions import assert_matches_oracle, random_log_weights
from pseudosl import DFA, compile_automaton
from pseudosl.logic.automaton import forbidden_sequences_dfa
from automata import dfas, simulate


def occurs(word, y) -> bool:
    m = len(word)
    return any(tuple(y[i:i + m]) == tuple(word) for i in range(len(y) - m + 1))


@given(dfas(), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_random_dfa_matches_oracle(dfa, n, seed):
    delta = dfa.delta.tolist()
    truth = oracle.truth_of(lambda y: simulate(delta, dfa.start, dfa.accepting, y), n, dfa.n_values)
    c = compile_automaton(dfa, n, cache=False)
    assert (c.n_vars, c.n_values) == (n, dfa.n_values)
    c.check()
    assert c.dag.is_false() == (not truth.any())
    assert_matches_oracle(c, [truth], random_log_weights(seed, 3, n, dfa.n_values, normalised=seed % 2 == 0))


@given(st.integers(2, 3).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.lists(st.integers(0, k - 1), min_size=1, max_size=3), min_size=1, max_size=4))),
    st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_forbidden_words_match_oracle(k_words, n, seed):
    k, words = k_words
    truth = oracle.truth_of(lambda y: not any(occurs(w, y) for w in words), n, k)
    dfa = forbidden_sequences_dfa(words, k)
    for y in oracle.assignments(n, k)[:50]:
        assert dfa.accepts(y) == (not any(occurs(w, y) for w in words))
    c = compile_automaton(dfa, n, cache=False)
    c.check()
    assert_matches_oracle(c, [truth], random_log_weights(seed, 2, n, k, normalised=True))


def test_aho_corasick_overlaps():
    a, b = 0, 1
    dfa = forbidden_sequences_dfa([[a, b], [b, a, b]], n_values=3)
    assert not dfa.accepts([b, a, b])  # contains "ab" too, caught at the same step
    dfa = forbidden_sequences_dfa([[b, a, b], [a, a]], n_values=3)
    assert not dfa.accepts([b, b, a, b])  # failure link from "bb" back to "b"
    assert dfa.accepts([b, a, 2, b, a, 2])
    assert not dfa.accepts([2, a, a])
    dfa = forbidden_sequences_dfa([[a, b, a, b, 2], [b, a, b, b]], n_values=3)
    assert not dfa.accepts([a, b, a, b, b])  # "babb" inside a failed attempt at "abab2"
    assert dfa.accepts([a, b, a, b, a])
    # a long word containing a short forbidden one adds no live state beyond the short one
    dfa = forbidden_sequences_dfa([[a], [b, a, b]], n_values=3)
    assert not dfa.accepts([b, a]) and dfa.accepts([b, b, 2])


def test_catch_all_value_folding():
    # values 2..9 occur in no word: fold them into one value and the circuit is exact
    words = [[0, 1], [1, 1, 0]]
    full = compile_automaton(forbidden_sequences_dfa(words, 10), 4, cache=False)
    folded = compile_automaton(forbidden_sequences_dfa(words, 3), 4, cache=False)
    x = random_log_weights(3, 2, 4, 10, normalised=True)
    x_folded = torch.cat([x[..., :2], x[..., 2:].logsumexp(-1, keepdim=True)], -1)
    torch.testing.assert_close(full.log_prob(x), folded.log_prob(x_folded), atol=ATOL64, rtol=0)


def test_unsat_automaton_gives_false_root():
    dfa = DFA(2, 2, 0, {1}, np.array([[0, 0], [1, 1]]))  # never reaches state 1
    c = compile_automaton(dfa, 3, cache=False)
    assert c.dag.is_false()


def test_from_transitions_adds_dead_state():
    dfa = DFA.from_transitions(2, 3, 0, {1}, [(0, [0, 1], 1), (1, 2, 0)])
    assert dfa.n_states == 3 and dfa.delta[0, 2] == 2 and (dfa.delta[2] == 2).all()
    assert dfa.accepts([0]) and dfa.accepts([1, 2, 0]) and not dfa.accepts([2, 0])
    full = DFA.from_transitions(1, 2, 0, {0}, [(0, [0, 1], 0)])
    assert full.n_states == 1


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(n_states=0), ValueError, "n_states must be >= 1"),
    (dict(n_values=1, delta=np.zeros((2, 1), int)), ValueError, "catch-all"),
    (dict(start=2), ValueError, "start state 2"),
    (dict(accepting={5}), ValueError, "accepting state 5"),
    (dict(delta=np.zeros((2, 3), int)), ValueError, r"shape \(n_states, n_values\) = \(2, 2\)"),
    (dict(delta=np.array([[0, 1], [2, 0]])), ValueError, r"delta\[1, 0\] = 2"),
    (dict(delta=np.array([[0, -1], [0, 0]])), ValueError, r"delta\[0, 1\] = -1"),
    (dict(delta=np.zeros((2, 2))), TypeError, "integer"),
    (dict(start=True), TypeError, "start"),
])
def test_dfa_validation(kwargs, err, match):
    args = dict(n_states=2, n_values=2, start=0, accepting={0}, delta=np.zeros((2, 2), int))
    args.update(kwargs)
    with pytest.raises(err, match=match):
        DFA(**args)


def test_transition_and_word_errors():
    with pytest.raises(ValueError, match="deterministic"):
        DFA.from_transitions(2, 2, 0, {0}, [(0, 0, 0), (0, [0, 1], 1)])
    with pytest.raises(ValueError, match="value 2 is out of range"):
        DFA.from_transitions(2, 2, 0, {0}, [(0, 2, 0)])
    with pytest.raises(ValueError, match="dst state 3"):
        DFA.from_transitions(2, 2, 0, {0}, [(0, 1, 3)])
    with pytest.raises(ValueError, match="empty"):
        forbidden_sequences_dfa([[0], []], 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        forbidden_sequences_dfa([[0, 2]], 2)
    with pytest.raises(TypeError, match="DFA"):
        compile_automaton("not a dfa", 3)
    with pytest.raises(ValueError, match="n_positions"):
        compile_automaton(forbidden_sequences_dfa([[0]], 2), 0, cache=False)


def test_the_removed_shims_are_gone_and_the_changelog_names_their_replacements():
    """The deprecation shims of 0.1.0 were removed (pre-1.0); CHANGELOG.md says what replaced each."""
    import importlib
    from pathlib import Path

    import pseudosl.compile
    import pseudosl.logic.automaton as automaton

    assert not hasattr(pseudosl.compile, "no_forbidden_words")
    assert not hasattr(automaton, "forbidden_words_dfa") and not hasattr(automaton, "forbidden_words_sparse_dfa")
    for module in ("inputs", "_validation"):  # (not spelled pseudosl.<name>: test_public_api reads that as a use)
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"pseudosl.{module}")
    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text()
    for old, new in [("pseudosl.compile.no_forbidden_words", "pseudosl.no_forbidden_sequences"),
                     ("forbidden_words_dfa", "forbidden_sequences_dfa"),
                     ("forbidden_words_sparse_dfa", "forbidden_sequences_sparse_dfa"),
                     (".inputs`", "checks"), ("._validation`", "checks")]:
        assert old in changelog and new in changelog, old
