"""The Sudoku circuit (27 roots on 9x9, 3 x size on smaller boards) agrees with a direct checker; the loss surrogate behaves."""

import pytest
import torch

import pseudosl

from pseudosl.experiments.sudoku.constraint import (givens_mask, is_consistent, one_hot_log, sudoku_circuit)
from pseudosl.experiments.sudoku.data import generate
from tolerances import ATOL32_BOARD, ATOL32_FEW_OPS, RTOL32


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
    assert torch.allclose(loss, -(log_givens + (per_group - log_givens[:, None]).sum(1)), atol=ATOL32_BOARD)
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # a confident correct prediction has (nearly) zero loss
    sure = one_hot_log(d.solutions).clamp(min=-30.0)
    assert pseudosl.semantic_loss(circuit, sure, reduction="none", allowed=givens_mask(d.puzzles)).max() < 1e-6


def _direct_any(grid, size) -> bool:
    from pseudosl.experiments.sudoku.data import box_shape
    br, bc = box_shape(size)
    g = grid.reshape(size, size).tolist()
    boxes = [[g[br * i + a][bc * j + b] for a in range(br) for b in range(bc)]
             for i in range(size // br) for j in range(size // bc)]
    return all(sorted(u) == list(range(1, size + 1)) for u in g + [list(c) for c in zip(*g)] + boxes)


@pytest.mark.parametrize("size", [4, 6])
def test_small_board_circuit_agrees_with_checker_and_enumeration(size):
    """Every root of the 4x4 / 6x6 circuit: 0 on valid grids and -inf on broken ones (direct checker), and under a
    random fully-factorized distribution the probability that its group is all-different, by enumeration."""
    from oracle import log_wmc, truth_of

    from pseudosl.experiments.sudoku.constraint import sudoku_groups
    circuit = sudoku_circuit(size)
    assert circuit.n_roots == 3 * size and circuit.n_vars == size * size and circuit.n_values == size
    sols = generate(4, n_missing=1, seed=5, size=size).solutions
    g = torch.Generator().manual_seed(0)
    bad = sols.clone()
    bad.scatter_(1, torch.randint(0, size * size, (4, 2), generator=g), torch.randint(1, size + 1, (4, 2), generator=g))
    grids = torch.cat([sols, bad, torch.randint(1, size + 1, (4, size * size), generator=g)])
    lp = circuit.log_prob(one_hot_log(grids))
    direct = torch.tensor([_direct_any(x, size) for x in grids])
    assert torch.equal((lp == 0).all(1), direct) and torch.equal(is_consistent(grids), direct)
    assert direct[:4].all() and not direct[-4:].any()
    # each root against enumeration over its group's cells (the other cells are smoothed away: they sum to 1)
    x = torch.randn(3, size * size, size, dtype=torch.float64).log_softmax(-1)
    roots = circuit.log_prob(x)                                                   # (3, 3 size)
    distinct = truth_of(lambda a: len(set(a)) == size, size, size)                # size**size assignments
    for r, group in enumerate(sudoku_groups(size)):                               # rows, columns, boxes
        torch.testing.assert_close(roots[:, r].double(), log_wmc(distinct, x[:, group]), atol=ATOL32_FEW_OPS, rtol=RTOL32)
