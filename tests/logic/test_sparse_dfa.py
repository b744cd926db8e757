"""SparseDFA (one default row plus exceptions) against the dense DFA it stands for."""

import numpy as np
import pytest

from pseudosl.logic.automaton import DFA, SparseDFA, forbidden_sequences_dfa


def _random_dfa(rng: np.random.Generator) -> DFA:
    n_states, n_values = int(rng.integers(1, 6)), int(rng.integers(2, 5))
    delta = rng.integers(0, n_states, size=(n_states, n_values))
    accepting = set(np.flatnonzero(rng.random(n_states) < 0.3).tolist())
    return DFA(n_states, n_values, 0, accepting, delta)


def _live_by_brute_force(dfa: DFA) -> np.ndarray:
    live = np.zeros(dfa.n_states, dtype=bool)
    live[list(dfa.accepting)] = True
    for _ in range(dfa.n_states + 1):
        live = live | np.array([live[dfa.delta[s]].any() for s in range(dfa.n_states)])
    return live


def _with_random_rows(dfa: DFA, rng: np.random.Generator) -> SparseDFA:
    """The same automaton with 1-3 random default rows and whatever exceptions they need."""
    n_rows = int(rng.integers(1, 4))
    default = rng.integers(0, dfa.n_states, size=(n_rows, dfa.n_values))
    row_of = rng.integers(0, n_rows, size=dfa.n_states)
    s, c = np.nonzero(dfa.delta != default[row_of])
    return SparseDFA(dfa.n_states, dfa.n_values, dfa.start, dfa.accepting, default,
                     np.stack([s, c, dfa.delta[s, c]], axis=1)[::-1], row_of=row_of)


@pytest.mark.parametrize("seed", range(200))
@pytest.mark.parametrize("several_rows", [False, True])
def test_sparse_dfa_steps_and_live_states_match_the_dense_table(seed, several_rows):
    rng = np.random.default_rng(seed)
    dfa = _random_dfa(rng)
    sparse = _with_random_rows(dfa, rng) if several_rows else SparseDFA.from_dense(dfa)
    assert np.array_equal(sparse.to_dense().delta, dfa.delta)
    s, c = np.meshgrid(np.arange(dfa.n_states), np.arange(dfa.n_values), indexing="ij")
    assert np.array_equal(sparse.step(s, c), dfa.delta)
    assert np.array_equal(sparse.live_states(), _live_by_brute_force(dfa))
    word = np.random.default_rng(seed).integers(0, dfa.n_values, size=7).tolist()
    assert sparse.run(word) == dfa.run(word) and sparse.accepts(word) == dfa.accepts(word)


def test_aho_corasick_rows_mostly_agree():
    dfa = forbidden_sequences_dfa([[0, 1], [2], [1, 1, 3]], n_values=5)
    sparse = SparseDFA.from_dense(dfa)
    assert sparse.n_exceptions < dfa.n_states * dfa.n_values // 2
    assert sparse.live_states().tolist() == [True] * (dfa.n_states - 1) + [False]  # only the dead state is dead


@pytest.mark.parametrize("kwargs, match", [
    (dict(default=[0, 5]), r"default holds 5, outside 0..1"),
    (dict(default=[0]), r"default must have shape \(rows, 2\)"),
    (dict(default=[0.0, 1.0]), r"default must hold integers"),
    (dict(exceptions=[(0, 1, 1), (0, 1, 0)]), r"\(state 0, value 1\) twice"),
    (dict(exceptions=[(2, 1, 1)]), r"exceptions\[:, 0\] \(states\) holds 2"),
    (dict(exceptions=[(0, 1)]), r"exceptions must have shape \(rows, 3\)"),
    (dict(row_of=[0, 1]), r"row_of holds 1, outside 0..0"),
    (dict(row_of=[0]), r"row_of must have shape \(2,\)"),
])
def test_bad_sparse_dfa_is_refused_by_name(kwargs, match):
    args = dict(n_states=2, n_values=2, start=0, accepting={0}, default=[0, 1], exceptions=[]) | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        SparseDFA(**args)


def test_automaton_constraint_window_and_streaming_check_agree_with_the_words():
    import torch

    from pseudosl import ValueMap
    from pseudosl.tokens import AutomatonConstraint

    tokens = [3, 4, 5]  # values 0, 1, 2; every other token of 8 is value 3
    dfa = SparseDFA.from_dense(forbidden_sequences_dfa([[0, 1], [2]], n_values=4))
    c = AutomatonConstraint(dfa, ValueMap(tokens, vocab_size=8))
    rows = torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2], [0, 0, 5, 0], [3, 3, 3, 3]])
    assert c.satisfied(rows).tolist() == [False, True, False, True]
    assert c.window(4, cache=False).satisfied(rows).tolist() == [False, True, False, True]
    with pytest.raises(ValueError, match="value map gives 4 values but the automaton reads 3"):
        AutomatonConstraint(SparseDFA(1, 3, 0, {0}, [0, 0, 0], []), ValueMap(tokens, vocab_size=8))


@pytest.mark.parametrize("default, match", [
    ([[0, 1, 1], [1, 0]], "default must be a rectangular array; got rows of different lengths"),
    ([[0], [1, 1, 0]], "default must be a rectangular array"),
    ([[0, 1, 0], [1, 0]], "default must be a rectangular array")])
def test_a_ragged_default_is_refused_by_name(default, match):
    with pytest.raises(ValueError, match=match):
        SparseDFA(2, 3, 0, {0}, default=default, exceptions=[])


@pytest.mark.parametrize("n_states", [2**31, 3 * 10**11, 10**25])
def test_an_absurd_number_of_states_is_refused_before_anything_is_allocated(n_states):
    with pytest.raises(ValueError, match=rf"n_states must be <= 2,147,483,647, got {n_states:,} \(the states"):
        SparseDFA(n_states, 2, 0, {0}, default=[0, 0], exceptions=[])
    with pytest.raises(ValueError, match="n_states must be <= 2,147,483,647"):
        DFA.from_transitions(n_states, 2, 0, {0}, [])


@pytest.mark.parametrize("states, values", [([0, 1, 0], [1, 0]), ([[0, 1]], [[1, 0, 1]]), ([[0], [1]], [[1, 1, 0],
                                                                                                        [0, 1, 1],
                                                                                                        [1, 0, 0]])])
def test_step_shapes_that_do_not_broadcast_are_refused_by_name(states, values):
    dfa = SparseDFA(2, 2, 0, {0}, default=[0, 1], exceptions=[(1, 1, 0)])
    with pytest.raises(ValueError, match=r"states \(.*\) and values \(.*\) must broadcast to one shape"):
        dfa.step(np.array(states), np.array(values))
    assert dfa.step(np.array([[0], [1]]), np.array([0, 1])).tolist() == [[0, 1], [0, 0]]  # broadcasting shapes do
