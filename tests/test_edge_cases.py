"""Edge cases a user hits first (issue 12): empty batches, infinite logits, mismatched shapes and values,
low precision, foreign files and oversized compilations each give a correct result or a named error."""

from __future__ import annotations

import os

import pytest
import torch

import pseudosl
from pseudosl import Circuit, CircuitBuilder
from pseudosl.logic.sdd import SddFormatError
from tests.oracle import log_wmc, truth_of


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
