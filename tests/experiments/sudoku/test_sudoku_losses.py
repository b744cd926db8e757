"""The Sudoku SL and PSL of the whole puzzle constraint (``constraint = "puzzle"``) against brute force (float64).

The PSL term of the training objective is ``-log p~(every row, column and box all different AND givens)`` (with
``givens``: conjoin, condition on, or ignore the givens), ``p~`` the product of the model's own conditionals
``p(y_i | y_-i, x)`` around the anchor, here from teacher-forced log-likelihoods of every neighbour of the anchor;
the sum runs over every completion of the puzzle (enumerated).  On 4x4 boards the whole-board circuit scores it,
on 6x6 each puzzle's own circuit (one per example); the SL of the ConvNet likewise.  The whole-board circuit under a
puzzle's givens mask has exactly the puzzle's completions, as the per-puzzle circuit.  The groups variant stays the
product over the groups.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import pseudosl
from tolerances import ATOL64, RTOL64
from pseudosl.experiments.config import ConfigError
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.constraint import (board_circuit, givens_mask, is_consistent, puzzle_circuit,
                                                    puzzle_circuits, sudoku_circuit, sudoku_groups)
from pseudosl.experiments.sudoku.data import generate
from pseudosl.experiments.sudoku.models import build_model
from pseudosl.experiments.sudoku.train import Objective

pytestmark = pytest.mark.usefixtures("one_thread")


def completions(puzzle: list[int], size: int) -> torch.Tensor:
    """``(C, size**2)`` digits: every valid grid that keeps the puzzle's givens (rows as permutations that keep the
    row's givens, then every row, column and box checked)."""
    rows = []
    for r in range(size):
        row = puzzle[r * size:(r + 1) * size]
        rows.append([p for p in itertools.permutations(range(1, size + 1))
                     if all(g in (0, d) for g, d in zip(row, p))])
    grids = torch.tensor([sum(choice, ()) for choice in itertools.product(*rows)])
    return grids[is_consistent(grids, torch.tensor(puzzle).expand(len(grids), -1))]


def blanked(size: int, blanks: int, n: int, seed: int) -> torch.Tensor:
    """``(n, size**2)`` puzzles: generated solutions with ``blanks`` random cells blanked (several completions
    allowed)."""
    out = generate(n, 1, seed=seed, size=size).solutions.clone()
    g = torch.Generator().manual_seed(seed)
    for row in out:
        row[torch.randperm(size * size, generator=g)[:blanks]] = 0
    return out


def brute_force(log_cond: torch.Tensor, puzzles: torch.Tensor, givens: str) -> torch.Tensor:
    """``(B,)`` ``-log p(alpha AND givens)`` (conjoin), ``-log p(alpha | givens)`` (condition) or ``-log p(alpha)``
    (ignore) of the fully-factorized ``log_cond (B, n, k)`` (classes = digits - 1), by enumeration."""
    size = log_cond.shape[-1]
    out = []
    for lc, p in zip(log_cond, puzzles.tolist()):
        grids = completions([0] * len(p) if givens == "ignore" else p, size) - 1      # (C, n)
        log_alpha = lc.gather(1, grids.T).sum(0).logsumexp(0)                          # log p(alpha AND givens)
        given = torch.tensor(p) > 0
        log_givens = lc[given].gather(1, (torch.tensor(p)[given] - 1)[:, None]).sum()
        out.append(-(log_alpha - log_givens) if givens == "condition" else -log_alpha)
    return torch.stack(out)


def neighbour_conditionals(model, puzzles: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """``(B, n, k)`` ``log p(y_i = c | y_-i, x)`` from the eval-mode model's teacher-forced log-likelihood of every
    Hamming-1 neighbour of ``sample``, normalised over ``c``."""
    b, n = sample.shape
    k = model.size
    ctx, steps = model.conditioning(puzzles)
    nb = sample[:, None, None, :].repeat(1, n, k, 1)                                   # (B, n, k, n)
    idx = torch.arange(n)
    nb[:, idx, :, idx] = torch.arange(k).expand(b, n, k).permute(1, 0, 2)
    was = model.training
    model.eval()
    with torch.no_grad():
        lj = model.decoder.log_joint(nb.reshape(-1, n), ctx.repeat_interleave(n * k, 0),
                                     steps.repeat_interleave(n * k, 0)).view(b, n, k)
    model.train(was)
    return lj.log_softmax(-1)


def _cfg(**kw) -> SudokuConfig:
    base = dict(preset="test", rnn_hidden=12, rnn_layers=2, rnn_dropout=0.3, conv_channels=6, conv_layers=1)
    return SudokuConfig(**{**base, **kw})


CASES = [(4, "conjoin"), (4, "condition"), (4, "ignore"), (6, "conjoin"), (6, "condition")]


@pytest.mark.parametrize("size, givens", CASES)
def test_psl_is_the_whole_constraint(size, givens):
    """The objective's PSL (the RNN in train mode, with dropout) = -log p~(alpha ...) by enumeration."""
    torch.manual_seed(0)
    cfg = _cfg(size=size, givens=givens)
    puzzles = blanked(size, 5 if size == 4 else 4, 3, seed=size)
    model = build_model("rnn_psl", cfg).double()
    objective = Objective(model, "rnn_psl", cfg)
    seen = _record_anchors(model)
    _, parts = objective(puzzles, generate(3, 1, seed=0, size=size).solutions)
    sample = seen["sample"]
    assert model.training and ((sample + 1 == puzzles) | (puzzles == 0)).all()         # the givens kept
    want = brute_force(neighbour_conditionals(model, puzzles, sample), puzzles, givens).mean()
    torch.testing.assert_close(parts["psl"], want, atol=ATOL64, rtol=RTOL64)


@pytest.mark.parametrize("size, givens", CASES)
def test_sl_is_the_whole_constraint(size, givens):
    """The objective's SL of the ConvNet = -log q(alpha ...) of its factorized distribution, by enumeration."""
    torch.manual_seed(1)
    cfg = _cfg(size=size, givens=givens)
    puzzles = blanked(size, 6 if size == 4 else 4, 3, seed=size + 1)
    model = build_model("convnet_sl", cfg).double().eval()
    _, parts = Objective(model, "convnet_sl", cfg)(puzzles, generate(3, 1, seed=0, size=size).solutions)
    want = brute_force(model(puzzles).log_softmax(-1), puzzles, givens).mean()
    torch.testing.assert_close(parts["sl"], want, atol=ATOL64, rtol=RTOL64)


def test_board_circuit_under_givens_is_the_puzzle_circuit():
    """With a puzzle's givens mask the whole-board circuit's models are the puzzle's completions (counted, and the
    same log-probability as the puzzle's circuit on random conditionals, equal to enumeration)."""
    board = board_circuit(4)
    assert board.n_roots == 1 and board.n_vars == 16 and board.n_values == 4
    puzzles = torch.cat([blanked(4, 6, 4, seed=3), blanked(4, 10, 2, seed=4), generate(2, 8, seed=5, size=4).puzzles])
    allowed = givens_mask(puzzles)
    counts = board.log_prob(torch.zeros(len(puzzles), 16, 4, dtype=torch.float64), allowed).exp()
    want = torch.tensor([float(len(completions(p, 4))) for p in puzzles.tolist()], dtype=torch.float64)
    torch.testing.assert_close(counts, want, atol=ATOL64, rtol=0)
    assert want.max() > 1 and want.min() == 1                                         # several completions and one
    x = torch.randn(len(puzzles), 16, 4, dtype=torch.float64).log_softmax(-1)
    per_puzzle = torch.cat([puzzle_circuit(p).log_prob(x[b:b + 1], allowed[b:b + 1]) for b, p in enumerate(puzzles)])
    torch.testing.assert_close(board.log_prob(x, allowed), per_puzzle, atol=ATOL64, rtol=RTOL64)
    torch.testing.assert_close(per_puzzle, -brute_force(x, puzzles, "conjoin"), atol=ATOL64, rtol=RTOL64)
    # the losses with one circuit per example: the same values, example by example
    sl = pseudosl.semantic_loss(puzzle_circuits(puzzles), x, reduction="none", allowed=allowed, condition=True)
    torch.testing.assert_close(sl, pseudosl.semantic_loss(board, x, reduction="none", allowed=allowed,
                                                          condition=True), atol=ATOL64, rtol=RTOL64)
    with pytest.raises(ValueError, match="size = 6: the whole-board circuit"):
        board_circuit(6)


def test_per_example_circuits_group_and_refuse():
    """Examples that share a circuit are scored together, results in the examples' order; a wrong number of circuits
    or mixed shapes are named errors."""
    puzzles = blanked(4, 6, 2, seed=7)
    a, b = puzzle_circuits(puzzles)
    x = torch.randn(4, 16, 4, dtype=torch.float64)
    allowed = givens_mask(puzzles[[0, 1, 0, 1]])
    calls = []

    def score(c, lp, al):
        calls.append(len(lp))
        return c.log_prob(lp, al)
    got = pseudosl.losses.per_example([a, b, a, b], score, x, allowed)
    assert calls == [2, 2]
    want = torch.cat([[a, b][i % 2].log_prob(x[i:i + 1], allowed[i:i + 1]) for i in range(4)])
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with pytest.raises(ValueError, match="3 circuits for a batch of 4"):
        pseudosl.semantic_loss([a, b, a], x, allowed=allowed)
    with pytest.raises(ValueError, match=r"circuit\[1\] has 16 variables x 4 values and 12 roots"):
        pseudosl.semantic_loss([a, sudoku_circuit(4), a, b], x, allowed=allowed)


def test_groups_variant_is_the_product_over_the_groups():
    """constraint = "groups": -log q(givens) - sum_g log q(g | givens) (each group by enumeration over its cells)."""
    torch.manual_seed(2)
    cfg = _cfg(size=4, givens="conjoin", constraint="groups")
    puzzles = blanked(4, 6, 2, seed=8)
    model = build_model("convnet_sl", cfg).double().eval()
    _, parts = Objective(model, "convnet_sl", cfg)(puzzles, generate(2, 1, seed=0, size=4).solutions)
    lq = model(puzzles).log_softmax(-1)
    want = []
    for lc, p in zip(lq, puzzles.tolist()):
        given = torch.tensor(p) > 0
        log_givens = lc[given].gather(1, (torch.tensor(p)[given] - 1)[:, None]).sum()
        total = log_givens
        for group in sudoku_groups(4):
            perms = torch.tensor(list(itertools.permutations(range(4))))                  # (24, 4) classes
            keep = torch.tensor([all(p[c] in (0, d + 1) for c, d in zip(group, perm)) for perm in perms.tolist()])
            log_g = lc[group].gather(1, perms[keep].T).sum(0).logsumexp(0)              # q(group AND its givens)
            own = lc[group][given[group]].gather(1, (torch.tensor(p)[group][given[group]] - 1)[:, None]).sum()
            total = total + log_g - own                                                  # log q(g | givens)
        want.append(-total)
    torch.testing.assert_close(parts["sl"], torch.stack(want).mean(), atol=ATOL64, rtol=RTOL64)


def test_the_psl_anchor_is_drawn_from_the_eval_mode_model():
    """The RNN in train mode (dropout 0.5) draws its PSL anchor as the eval-mode model does with the same seed (the
    distribution of the conditionals), the givens kept; its train mode is restored."""
    torch.manual_seed(3)
    model = build_model("rnn_psl", _cfg(size=4, rnn_dropout=0.5, rnn_layers=3, rnn_hidden=32)).train()
    data = blanked(4, 10, 32, seed=9)
    fit = model.fit(data, generate(32, 1, seed=0, size=4).solutions)
    torch.manual_seed(4)
    anchor, _ = model.psl_inputs(fit, 32)
    assert all(m.training for m in model.modules()) and ((anchor + 1 == data) | (data == 0)).all()
    torch.manual_seed(4)
    assert torch.equal(anchor, model.eval().generate(data, greedy=False) - 1)


def test_puzzle_constraint_needs_the_givens_beyond_4x4():
    with pytest.raises(ConfigError, match="givens = 'ignore' on 9x9 boards"):
        SudokuConfig(preset="test", givens="ignore")
    assert SudokuConfig(preset="test", givens="ignore", constraint="groups").constraint == "groups"
    a, b = (SudokuConfig(preset="test", constraint=c) for c in ("puzzle", "groups"))
    assert a.content_key() != b.content_key()                                         # a training field


def prefix_conditionals(model, puzzles: torch.Tensor, prefix: torch.Tensor, positions: list[int]) -> torch.Tensor:
    """``(B, len(positions), k)`` ``log p(y_i = c | prefix_<i, x)`` of the eval-mode model by enumeration: the
    joint of every sequence that starts with ``prefix_<i, c``, summed over every suffix, normalised over ``c``."""
    k, n = model.size, prefix.shape[1]
    ctx, steps = model.conditioning(puzzles)
    out = torch.empty(len(prefix), len(positions), k, dtype=torch.float64)
    with torch.no_grad():
        for b in range(len(prefix)):
            for j, i in enumerate(positions):
                tails = torch.tensor(list(itertools.product(range(k), repeat=n - i - 1)),
                                     dtype=torch.long).reshape(k ** (n - i - 1), n - i - 1)
                for c in range(k):
                    z = torch.cat([prefix[b, :i].expand(len(tails), -1), torch.full((len(tails), 1), c), tails], 1)
                    out[b, j, c] = model.decoder.log_joint(z, ctx[b:b + 1].expand(len(z), -1),
                                                           steps[b:b + 1].expand(len(z), -1, -1)).logsumexp(0)
    return out.log_softmax(-1)


@pytest.mark.parametrize("givens", ["condition", "conjoin"])
def test_the_own_sample_control_is_the_label_after_the_models_sample(givens):
    """``rnn_own``: ``-sum_i log p(solution_i | y_<i, x)`` over the blanks (condition) or every cell (conjoin), ``y``
    the PSL's anchor (eval mode, givens kept), against enumeration of every suffix of ``y_<i, c`` (float64); the last
    three cells blank so that the sums over suffixes stay small."""
    torch.manual_seed(5)
    cfg = _cfg(size=4, givens=givens, rnn_dropout=0.0)
    solutions = generate(3, 1, seed=7, size=4).solutions
    puzzles = solutions.clone()
    puzzles[:, -3:] = 0
    model = build_model("rnn_own", cfg).double().eval()
    objective = Objective(model, "rnn_own", cfg)
    assert objective.circuit is None and objective.term.loss == "own" and objective.term.weight == cfg.psl_weight
    seen = _record_anchors(model)
    loss, parts = objective(puzzles, solutions)
    sample = seen["sample"]
    assert ((sample + 1 == puzzles) | (puzzles == 0)).all()
    scored = [13, 14, 15] if givens == "condition" else list(range(13, 16))
    cond = prefix_conditionals(model, puzzles, sample, scored)
    want = -cond.gather(2, (solutions[:, scored] - 1)[..., None]).squeeze(-1).sum(1)
    if givens == "conjoin":  # every cell scored: the first 13, given, after a prefix that is the solution's own
        teacher = model(puzzles, solutions).log_softmax(-1)[:, :13].gather(2, (solutions[:, :13] - 1)[..., None])
        want = want - teacher.squeeze(-1).sum(1)
    torch.testing.assert_close(parts["own"], want.mean(), atol=ATOL64, rtol=RTOL64)
    torch.testing.assert_close(loss, parts["data"] + cfg.psl_weight * parts["own"], atol=ATOL64, rtol=RTOL64)


def test_the_own_sample_control_needs_an_autoregressive_model():
    from pseudosl.experiments.objective import ConstrainedObjective, ConstraintTerm
    cfg = _cfg(size=4)
    with pytest.raises(ValueError, match="loss = 'own' on a factorized ConvNet"):
        ConstrainedObjective(build_model("convnet", cfg), ConstraintTerm("own", 0.1))
    with pytest.raises(ValueError, match="the term 'own' takes no circuit"):
        ConstrainedObjective(build_model("rnn", cfg), ConstraintTerm("own", 0.1), board_circuit(4))
    with pytest.raises(ValueError, match="loss = 'rules'"):
        ConstraintTerm("rules", 0.1)


def _record_anchors(model):
    """``model.psl_inputs`` wrapped: each call's sampled anchors are kept in the returned dict (``"sample"``)."""
    seen, draw = {}, model.psl_inputs

    def spy(fit, m):
        seen["sample"], engine = draw(fit, m)
        return seen["sample"], engine
    model.psl_inputs = spy
    return seen
