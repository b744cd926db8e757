"""The 27-rooted Sudoku circuit agrees with a direct checker; the loss surrogate behaves."""

import torch

import pseudosl

from pseudosl.experiments.sudoku.constraint import (givens_mask, is_consistent, one_hot_log, sudoku_circuit)
from pseudosl.experiments.sudoku.data import generate


def _direct(grid) -> bool:
    g = grid.reshape(9, 9).tolist()
    units = g + [list(c) for c in zip(*g)] + [
        [g[3 * br + i][3 * bc + j] for i in range(3) for j in range(3)] for br in range(3) for bc in range(3)]
    return all(sorted(u) == list(range(1, 10)) for u in units)


def test_circuit_agrees_with_direct_checker():
    circuit = sudoku_circuit()
    assert circuit.n_roots == 27 and circuit.n_vars == 81 and circuit.n_values == 9
    sols = generate(6, seed=5).solutions
    g = torch.Generator().manual_seed(0)
    grids = [sols]
    for _ in range(3):  # valid grids with a few random cells changed (some stay valid by chance: none do)
        bad = sols.clone()
        idx = torch.randint(0, 81, (6, 2), generator=g)
        bad.scatter_(1, idx, torch.randint(1, 10, (6, 2), generator=g))
        grids.append(bad)
    grids.append(torch.randint(1, 10, (6, 81), generator=g))
    grids = torch.cat(grids)
    lp = circuit.log_prob(one_hot_log(grids))                              # (B, 27)
    circuit_ok = (lp == 0).all(1)
    assert ((lp == 0) | torch.isneginf(lp)).all()
    direct = torch.tensor([_direct(x) for x in grids])
    assert torch.equal(circuit_ok, direct) and torch.equal(is_consistent(grids), direct)
    assert direct[:6].all() and not direct[-6:].any()


def test_givens_are_unit_constraints():
    d = generate(4, seed=6)
    circuit = sudoku_circuit()
    other = d.solutions[[1, 2, 3, 0]]                                      # valid grids, wrong for these givens
    lp = circuit.log_prob(one_hot_log(other).masked_fill(~givens_mask(d.puzzles), float("-inf")))
    assert torch.isneginf(lp).all()
    assert not is_consistent(other, d.puzzles).any() and is_consistent(d.solutions, d.puzzles).all()


def test_semantic_loss_counts_the_givens_once():
    d = generate(3, seed=7)
    circuit = sudoku_circuit()
    logits = torch.randn(3, 81, 9, requires_grad=True)
    loss = pseudosl.semantic_loss(circuit, logits, reduction="none", allowed=givens_mask(d.puzzles))
    lp = logits.log_softmax(-1)
    given = d.puzzles > 0
    log_givens = lp.gather(-1, (d.puzzles - 1).clamp(min=0)[..., None])[..., 0].masked_fill(~given, 0).sum(1)
    per_group = circuit.log_prob(lp.masked_fill(~givens_mask(d.puzzles), float("-inf")))
    assert torch.allclose(loss, -(log_givens + (per_group - log_givens[:, None]).sum(1)), atol=1e-3)
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # a confident correct prediction has (nearly) zero loss
    sure = one_hot_log(d.solutions).clamp(min=-30.0)
    assert pseudosl.semantic_loss(circuit, sure, reduction="none", allowed=givens_mask(d.puzzles)).max() < 1e-6
