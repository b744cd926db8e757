"""Edge cases a user hits first (issue 12): empty batches, infinite logits, mismatched shapes and values,
low precision, foreign files and oversized compilations each give a correct result or a named error."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import pseudosl
from pseudosl import Circuit, CircuitBuilder
from pseudosl.logic.sdd import SddFormatError
from oracle import log_wmc, truth_of


def permutation_circuit(n: int = 4) -> Circuit:
    b = CircuitBuilder(n, n)
    return Circuit(b.build(pseudosl.constraints.all_different(b, range(n))))


def test_empty_batches_give_empty_results():
    c = permutation_circuit()
    assert c.log_prob(torch.zeros(0, 4, 4)).shape == (0,)
    logits = torch.zeros(0, 4, 4, requires_grad=True)
    loss = pseudosl.semantic_loss(c, logits)
    loss.backward()  # a mean over no examples is 0, and it backpropagates
    assert loss.item() == 0.0 and logits.grad.shape == (0, 4, 4)
    assert pseudosl.semantic_loss(c, logits, reduction="none").shape == (0,)
    dec = pseudosl.RecurrentDecoder(n_values=4, length=4, hidden_size=8)
    empty = torch.zeros(0, 4, dtype=torch.long)
    psl = pseudosl.pseudo_semantic_loss(dec.engine(), c, empty)
    psl.backward()
    assert psl.item() == 0.0
    bare = pseudosl.as_engine(lambda y, example: dec.log_joint(y), n_values=4)
    assert pseudosl.pseudo_semantic_loss(bare, c, empty, reduction="none").shape == (0,)
    assert bare.local_conditionals(empty).shape == (0, 4, 4)


def test_infinite_logits_are_the_one_hot_limit():
    c = permutation_circuit(3)
    truth = truth_of(lambda y: len(set(y)) == 3, 3, 3)
    logits = torch.randn(2, 3, 3, dtype=torch.float64)
    logits[0, 0] = torch.tensor([float("inf"), -float("inf"), 0.3])   # position 0 of example 0 is value 0
    logits[1, 2, 1] = float("-inf")                                     # value 1 impossible at position 2
    logits = logits.requires_grad_()
    loss = pseudosl.semantic_loss(c, logits, reduction="none")
    limit = logits.detach().clone()
    limit[0, 0] = torch.tensor([0.0, -float("inf"), -float("inf")])
    want = -log_wmc(truth, limit.masked_fill(torch.isinf(limit) & (limit > 0), 0.0).log_softmax(-1))
    torch.testing.assert_close(loss.detach(), want)
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad[0, 0] == 0).all()
    two = torch.zeros(1, 3, 3)
    two[0, 1, :2] = float("inf")  # two +inf values share the mass equally
    lp = pseudosl.losses.log_probs_from_logits(c, two)
    torch.testing.assert_close(lp[0, 1].exp(), torch.tensor([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match=r"logits\[0, 1\] are all -inf"):
        pseudosl.semantic_loss(c, torch.zeros(1, 3, 3).index_fill(1, torch.tensor([1]), float("-inf")))
    with pytest.raises(ValueError, match="logits contain NaN"):
        pseudosl.semantic_loss(c, torch.full((1, 3, 3), float("nan")))


def test_psl_names_mismatches_before_running_the_model():
    c = permutation_circuit()
    calls = []
    dec = pseudosl.RecurrentDecoder(n_values=4, length=4, hidden_size=8)
    dec.register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="sample has length 5 but the circuit has 4 positions"):
        pseudosl.pseudo_semantic_loss(dec.engine(), c, torch.zeros(2, 5, dtype=torch.long))
    dec5 = pseudosl.RecurrentDecoder(n_values=5, length=4, hidden_size=8)
    with pytest.raises(ValueError, match="the model has 5 values per position but the circuit has 4"):
        pseudosl.pseudo_semantic_loss(dec5.engine(), c, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"sample values must lie in 0\.\.3"):
        pseudosl.pseudo_semantic_loss(pseudosl.as_engine(lambda y, example: dec.log_joint(y), n_values=4), c,
                                      torch.full((2, 4), 4, dtype=torch.long))
    assert not calls
    with pytest.raises(ValueError, match=r"values must lie in 0\.\.3; got range -1\.\.-1"):
        dec.engine().local_conditionals(torch.full((1, 4), -1, dtype=torch.long))


def test_a_bare_log_joint_gives_the_engines_loss():
    c = permutation_circuit()
    dec = pseudosl.RecurrentDecoder(n_values=4, length=4, hidden_size=8)
    y = dec.sample(batch_size=3)
    bare = pseudosl.as_engine(lambda seqs, example: dec.log_joint(seqs), n_values=4)
    torch.testing.assert_close(pseudosl.pseudo_semantic_loss(bare, c, y),
                               pseudosl.pseudo_semantic_loss(dec.engine(), c, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_evaluated_in_float32(dtype):
    c = permutation_circuit(6)
    x = torch.randn(3, 6, 6).log_softmax(-1)
    want = c.log_prob(x.to(dtype).float())
    got = c.log_prob(x.to(dtype))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)
    xr = x.to(dtype).requires_grad_()
    c.log_prob(xr).sum().backward()
    assert xr.grad.dtype == dtype and torch.isfinite(xr.grad.float()).all()


def test_foreign_sdd_files_are_named(tmp_path, bench_circuits):
    junk = tmp_path / "junk.sdd"
    junk.write_bytes(os.urandom(64) + b"\x90\xff")
    with pytest.raises(SddFormatError, match="junk.sdd: not a text SDD"):
        Circuit.from_sdd_file(junk)
    with pytest.raises(SddFormatError, match="is the vtree the one this SDD was saved with"):
        Circuit.from_sdd_file(bench_circuits / "sudoku_4.sdd", bench_circuits / "4-grid.vtree")


def test_oversized_all_different_is_refused_at_once():
    with pytest.raises(ValueError, match=r"needs 10,485,760 circuit edges .* max_edges=2,000,000"):
        pseudosl.constraints.compile_all_different(20, 20, range(20))
    assert pseudosl.constraints.all_different_size(9, 9) == 2304
    small = pseudosl.constraints.compile_all_different(3, 3, range(3), max_edges=12)
    assert small.n_vars == 3
    with pytest.raises(ValueError, match="max_edges=11"):
        pseudosl.constraints.compile_all_different(3, 3, range(3), max_edges=11)


# -- the second probe campaign (issue 29): each class of defect it found, now a named error -----------------
def test_automaton_words_are_checked_values():
    """A negative value indexed the table from its end (a silent wrong state); one too large raised IndexError."""
    from pseudosl.logic.automaton import DFA, SparseDFA
    sparse = SparseDFA(2, 2, 0, {0}, default=[0, 1], exceptions=[(1, 1, 0), (1, 0, 1)])  # an even number of 1s
    for dfa in (sparse, DFA(2, 2, 0, {0}, sparse.to_dense().delta)):
        assert dfa.accepts([1, 1]) and not dfa.accepts([1, 0])
        with pytest.raises(ValueError, match="word\\[0\\] must be >= 0, got -1"):
            dfa.run([-1])
        with pytest.raises(ValueError, match="outside the automaton's values 0..1"):
            dfa.accepts([0, 2])
        with pytest.raises(TypeError, match="word\\[0\\] must be an int, got the bool True"):
            dfa.accepts([True])
    with pytest.raises(ValueError, match="values holds 5, outside 0..1"):
        sparse.step(0, 5)
    with pytest.raises(ValueError, match="states holds -1, outside 0..1"):
        sparse.step(-1, 0)
    assert sparse.step([0, 1], [1, 1]).tolist() == [1, 0]


def test_value_map_refuses_ids_outside_the_vocabulary():
    vm = pseudosl.ValueMap([3, 1], 5)
    assert vm.to_values(torch.tensor([[1, 3, 4]])).tolist() == [[1, 0, 2]]
    for bad in (torch.tensor([5]), torch.tensor([-1])):  # -1 read the last token's value before
        with pytest.raises(ValueError, match="token_ids must hold token ids in 0..4"):
            vm.to_values(bad)
    with pytest.raises(TypeError, match="token_ids must be an integer tensor"):
        vm.to_values(torch.tensor([1.0]))


def test_decoder_and_engine_arguments_are_checked():
    with pytest.raises(ValueError, match="hidden_size must be >= 1, got 0"):  # was torch's own message
        pseudosl.RecurrentDecoder(n_values=3, length=3, hidden_size=0)
    with pytest.raises(TypeError, match="num_layers must be an int"):
        pseudosl.RecurrentDecoder(n_values=3, length=3, hidden_size=4, num_layers=1.0)
    dec = pseudosl.RecurrentDecoder(n_values=3, length=4, hidden_size=4)
    with pytest.raises(MemoryError, match="a sample of 1,000,000,000,000 rows needs about"):  # was an allocator error
        dec.sample(batch_size=10**12)
    with pytest.raises(MemoryError, match="a sample of 1,000,000,000,000 rows of 4 values"):
        pseudosl.as_engine(dec).sample(batch_size=10**12)
    fixed = torch.tensor([[-1, 2, -1, 0]])
    assert dec.sample(batch_size=1, fixed=fixed)[0, [1, 3]].tolist() == [2, 0]
    with pytest.raises(ValueError, match="fixed must hold -1 \\(free\\) or values 0..2; got range -1..3"):
        dec.sample(batch_size=1, fixed=torch.tensor([[-1, 3, 0, 0]]))
    with pytest.raises(ValueError, match="fixed must be a long tensor of shape \\(1, 4\\)"):
        dec.sample(batch_size=1, fixed=fixed[:, :3])
    lstm = torch.nn.ModuleDict(dict(embed=torch.nn.Embedding(4, 8), rnn=torch.nn.LSTM(8, 8, batch_first=True),
                                    head=torch.nn.Linear(8, 3)))
    with pytest.raises(ValueError, match="start=4 is not an id of embed, an nn.Embedding of 4 ids"):
        pseudosl.as_engine(lstm, rnn=lstm["rnn"], embed=lstm["embed"], head=lstm["head"], start=4, length=3)


def test_neighbour_and_sampling_arguments_are_checked():
    from pseudosl.psl import local_conditionals, local_fidelity, neighbours, sample_from_logits
    y = torch.tensor([[0, 1]])
    assert neighbours(y, torch.tensor([[0, 1], [0, 1]]))[0, 1].tolist() == [[0, 0], [0, 1]]
    with pytest.raises(TypeError, match="candidates must be a long tensor"):  # float sequences came back before
        neighbours(y, torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="n_values must be >= 1, got 0"):  # was "must lie in 0..-1"
        local_conditionals(lambda s, e: torch.zeros(len(s)), y, n_values=0)
    with pytest.raises(TypeError, match="chunk_size must be an int, got float 2.5"):
        local_conditionals(lambda s, e: torch.zeros(len(s)), y, n_values=2, chunk_size=2.5)
    out = local_conditionals(lambda s, e: torch.zeros(len(s)), y, n_values=2, chunk_size=np.int64(1))
    assert torch.allclose(out.exp(), torch.full((1, 2, 2), 0.5))  # a NumPy int is an int
    for t in (math.inf, math.nan, 0.0):  # inf turned a -inf logit into NaN (-inf / inf)
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            sample_from_logits(torch.tensor([[0.0, -math.inf]]), temperature=t)
    dec = pseudosl.RecurrentDecoder(n_values=2, length=2, hidden_size=4)
    with pytest.raises(TypeError, match="exact must be True, False or None"):  # "yes" ran as exact=True
        local_fidelity(pseudosl.as_engine(dec), y, exact="yes")


def test_validate_inputs_takes_a_bool_or_none():
    c = permutation_circuit(2)
    for bad in ("no", 0, 1):  # a truthy string turned the checks on
        with pytest.raises(TypeError, match="validate_inputs must be True, False or None"):
            c.validate_inputs = bad
    c.validate_inputs = False
    assert c.validate_inputs is False and not c.validates(torch.zeros(1, 2, 2))
