"""``pseudosl.Constraint`` and ``pseudosl.no_forbidden_sequences``: the folded automaton agrees with a direct
substring check on every window of tiny alphabets; the loss checks the engine's value map against the constraint's."""

from __future__ import annotations

import itertools

import pytest
import torch

import pseudosl
from tiny_models import tiny_gpt2


def _occurs(window: list[int], sequences: list[list[int]]) -> bool:
    return any(window[i:i + len(s)] == s for s in sequences for i in range(len(window) - len(s) + 1))


def test_folded_circuit_matches_every_window():
    # overlapping sequences (a suffix of one is a prefix of another), a repeated token, a single token
    seqs = [[0, 1], [1, 2, 0], [2, 2], [3], [0, 2, 1, 0, 2, 1]]  # the last is longer than the window
    c = pseudosl.no_forbidden_sequences(seqs, n_positions=5, vocab_size=6, cache=False)
    assert c.stats["n_too_long"] == 1 and c.stats["n_tokens"] == 4 and c.value_map.n_values == 5 == c.n_values
    assert c.vocab_size == 6 and c.n_positions == 5 and c.stats["nodes"] == c.circuit.n_nodes
    windows = torch.tensor(list(itertools.product(range(6), repeat=5)))  # 6^5 windows, tokens 4 and 5 fold
    direct = torch.tensor([not _occurs(w, seqs) for w in windows.tolist()])
    assert torch.equal(c.satisfied(windows), direct)
    values = c.values(windows)
    x = torch.log(torch.nn.functional.one_hot(values, c.n_values).double())
    assert torch.equal(c.circuit.log_prob(x) == 0, direct)  # the circuit itself, through the value map
    assert 0 < direct.sum() < len(direct)


def test_every_token_used_needs_no_folding():
    seqs = [[0, 1], [2], [1, 1]]
    c = pseudosl.no_forbidden_sequences(seqs, n_positions=4, vocab_size=3, cache=False)
    assert c.value_map is None and c.n_values == 3
    windows = torch.tensor(list(itertools.product(range(3), repeat=4)))
    assert torch.equal(c.satisfied(windows), torch.tensor([not _occurs(w, seqs) for w in windows.tolist()]))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="n_positions"):
        pseudosl.no_forbidden_sequences([[1, 2, 3]], n_positions=2, vocab_size=5)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        pseudosl.no_forbidden_sequences([[7]], n_positions=2, vocab_size=5)
    with pytest.raises(ValueError, match="empty"):
        pseudosl.no_forbidden_sequences([[]], n_positions=2, vocab_size=5)
    with pytest.raises(ValueError, match="n_positions must be >= 1"):
        pseudosl.no_forbidden_sequences([[1]], n_positions=0, vocab_size=5)
    with pytest.raises(TypeError, match="list of token-id lists"):
        pseudosl.no_forbidden_sequences("darn", n_positions=3, vocab_size=5)
    c = pseudosl.no_forbidden_sequences([[3]], n_positions=2, vocab_size=5, cache=False)
    with pytest.raises(ValueError, match="the value map gives 2 values but the circuit reads 3"):
        pseudosl.Constraint(pseudosl.compile_automaton(pseudosl.DFA.from_transitions(1, 3, 0, {0}, [(0, [0, 1, 2], 0)]),
                                                       2), c.value_map)
    with pytest.raises(ValueError, match=r"tokens values must lie in 0\.\.4"):
        c.satisfied(torch.tensor([[5, 0]]))


def test_the_loss_checks_the_engines_value_map():
    pytest.importorskip("transformers")
    model = tiny_gpt2(n_embd=16, vocab_size=12, n_positions=16).eval()
    c = pseudosl.no_forbidden_sequences([[3, 4], [5]], n_positions=3, vocab_size=12, cache=False)
    bos = torch.zeros(2, 1, dtype=torch.long)
    y = torch.tensor([[3, 4, 1], [1, 2, 6]])
    engine = pseudosl.as_engine(model, prompt_ids=bos, value_map=c.value_map, top_k=8)
    loss, d = pseudosl.pseudo_semantic_loss(engine, c, y, return_diagnostics=True)
    assert d.satisfied.tolist() == [False, True] == c.satisfied(y).tolist()
    torch.testing.assert_close(loss, pseudosl.pseudo_semantic_loss(engine, c.circuit, y))
    other = pseudosl.as_engine(model, prompt_ids=bos, value_map=pseudosl.ValueMap([3, 4, 6], 12), top_k=8)
    with pytest.raises(ValueError, match="build the engine with value_map=constraint.value_map"):
        pseudosl.pseudo_semantic_loss(other, c, y)
    with pytest.raises(ValueError, match="build the engine with value_map=constraint.value_map"):
        pseudosl.pseudo_semantic_loss(pseudosl.as_engine(model, prompt_ids=bos, n_values=4), c, y)


def test_both_kinds_share_the_value_map_half():
    """A circuit's Constraint and an AutomatonConstraint read tokens through one TokenConstraint: the same value
    map check (naming what reads the values), vocab_size and values; and a window of the automaton agrees with it."""
    from pseudosl.logic.automaton import forbidden_sequences_sparse_dfa
    from pseudosl.tokens import AutomatonConstraint, TokenConstraint

    vm = pseudosl.ValueMap([3, 4], vocab_size=7)
    dfa = forbidden_sequences_sparse_dfa([[0, 1]], 3)
    auto = AutomatonConstraint(dfa, vm)
    window = auto.window(3, cache=False)
    assert isinstance(auto, TokenConstraint) and isinstance(window, TokenConstraint)
    assert auto.vocab_size == window.vocab_size == 7 and auto.n_values == window.n_values == 3
    tokens = torch.tensor(list(itertools.product(range(7), repeat=3)))
    assert torch.equal(auto.values(tokens), window.values(tokens)) and auto.values(tokens).max() == 2
    assert torch.equal(auto.satisfied(tokens), window.satisfied(tokens))
    assert torch.equal(auto.satisfied(tokens), torch.tensor([not _occurs(w, [[3, 4]]) for w in tokens.tolist()]))
    assert AutomatonConstraint(dfa).vocab_size == 3 and torch.equal(AutomatonConstraint(dfa).values(tokens), tokens)
    with pytest.raises(ValueError, match="the value map gives 4 values but the automaton reads 3"):
        AutomatonConstraint(dfa, pseudosl.ValueMap([1, 2, 3], vocab_size=7))
    with pytest.raises(ValueError, match="the value map gives 4 values but the circuit reads 3"):
        pseudosl.Constraint(window.circuit, pseudosl.ValueMap([1, 2, 3], vocab_size=7))
    for make, first in ((AutomatonConstraint, dfa), (pseudosl.Constraint, window.circuit)):
        with pytest.raises(TypeError, match="value_map must be a pseudosl.ValueMap or None, got list"):
            make(first, [3, 4])
