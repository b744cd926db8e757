"""Sudoku's constrained decoders against brute force on 4x4 puzzles (float64).

The per-puzzle circuit's models are the enumerated completions (unique and non-unique puzzles); the ConvNet's
``constrained`` output is the brute-force argmax over completions of its factorized probability and its
``resample`` draws follow the model conditioned on the puzzle; the RNN's ``constrained`` output is the argmax of
its local distribution around the greedy decode, and its ``resample`` draws follow the exact distribution of
resampling with K candidates (``oracle.resampling_output``); every output keeps the givens and satisfies the
rules; the harness rows appear with ``decoders`` and through ``eval --decoders``; the same seed gives the same
output; unknown decoders, unsolvable and oversized puzzles are named errors.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from accelerate import Accelerator

import oracle
from tolerances import ATOL64, ATOL32_FEW_OPS, P_VALUE_MIN
import pseudosl
from assertions import sample_fit
from pseudosl.cli import main as cli
from pseudosl.experiments.config import ConfigError
from pseudosl.experiments.harness import check_decoders, evaluate_checkpoints
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.constraint import givens_mask, is_consistent, puzzle_circuit, sudoku_groups
from pseudosl.experiments.sudoku.data import SudokuData, count_solutions, generate, save_csv
from pseudosl.experiments.sudoku.decoding import decode
from pseudosl.experiments.sudoku.models import ConvNet, SudokuRNN
from pseudosl.experiments.sudoku.train import SudokuExperiment, evaluate
from pseudosl.logic import SizeLimitError
from pseudosl.logic.errors import UnsatisfiableError


def fillings(puzzle: list[int], digits: list[list[int]] | None = None) -> torch.Tensor:
    """``(A, 16)`` the puzzle with its blanks filled in every way: each blank from ``digits[j]`` (default 1..4)."""
    blanks = [i for i, v in enumerate(puzzle) if v == 0]
    choices = digits or [[1, 2, 3, 4]] * len(blanks)
    grids = torch.tensor(puzzle).repeat(int(np.prod([len(c) for c in choices])), 1)
    grids[:, blanks] = torch.tensor(list(itertools.product(*choices))).view(len(grids), len(blanks))
    return grids


def completions(puzzle: list[int]) -> torch.Tensor:
    """``(C, 16)`` every completion of a 4x4 puzzle: enumerate each blank's digits that no given of its row,
    column or box holds, keep the valid grids."""
    peers = [{j for g in sudoku_groups(4) if i in g for j in g} for i in range(16)]
    digits = [[d for d in range(1, 5) if d not in {puzzle[j] for j in peers[i]}]
              for i, v in enumerate(puzzle) if v == 0]
    grids = fillings(puzzle, digits)
    return grids[is_consistent(grids)]


def puzzles_with_blanks(n: int, blanks: int, seed: int) -> torch.Tensor:
    """``(n, 16)`` 4x4 puzzles: generated solutions with ``blanks`` random cells blanked (not always unique)."""
    sol = generate(n, 4, seed=seed, size=4).solutions
    rng = np.random.default_rng(seed)
    out = sol.clone()
    for row in out:
        row[rng.choice(16, blanks, replace=False)] = 0
    return out


def several(min_completions: int, blanks: int = 11, seed: int = 0) -> list[int]:
    """The first 4x4 puzzle with at least ``min_completions`` completions."""
    for p in puzzles_with_blanks(40, blanks, seed).tolist():
        if count_solutions(p, limit=min_completions)[0] >= min_completions:
            return p
    raise AssertionError("no such puzzle")


pytestmark = pytest.mark.usefixtures("one_thread")  # decoding is many small calls


# -- the per-puzzle circuit -------------------------------------------------------------------------
def test_puzzle_circuit_models_are_the_completions():
    puzzles = (puzzles_with_blanks(8, 12, seed=1).tolist() + puzzles_with_blanks(4, 7, seed=2).tolist()
               + generate(4, 10, seed=2, size=4).puzzles.tolist())
    counts = []
    for p in puzzles:
        circuit = puzzle_circuit(p)
        allowed = givens_mask(torch.tensor([p]))
        want = completions(p)
        counts.append(len(want))
        n_models = circuit.log_prob(torch.zeros(1, 16, 4, dtype=torch.float64), allowed).exp()
        torch.testing.assert_close(n_models, torch.tensor([float(len(want))], dtype=torch.float64), atol=ATOL64, rtol=0)
        on = pseudosl.sample_satisfies(circuit, want - 1, allowed.expand(len(want), -1, -1))
        assert on.all() and len(want.unique(dim=0)) == len(want)
        assert puzzle_circuit(p) is circuit                                     # compiled once per process
        if p.count(0) <= 7:  # every filling of the blanks: a model of circuit AND givens iff a completion
            grids = fillings(p)
            sat = pseudosl.sample_satisfies(circuit, grids - 1, allowed.expand(len(grids), -1, -1))
            assert torch.equal(sat, is_consistent(grids, torch.tensor([p]).expand(len(grids), -1)))
    assert 1 in counts and max(counts[:8]) >= 8                                 # unique puzzles and several
    empty = puzzle_circuit([0] * 16).log_prob(torch.zeros(1, 16, 4, dtype=torch.float64),
                                              givens_mask(torch.zeros(1, 16, dtype=torch.long)))
    assert round(empty.exp().item()) == 288 == count_solutions([0] * 16, limit=1000)[0]  # the 4x4 grids
    big = generate(2, 10, seed=3).puzzles                                       # 9x9, 10 blanks: one completion
    for p in big:
        n_models = puzzle_circuit(p).log_prob(torch.zeros(1, 81, 9, dtype=torch.float64), givens_mask(p[None])).exp()
        assert round(n_models.item()) == 1


def test_puzzle_circuit_named_errors():
    clash = [1, 1] + [0] * 14
    with pytest.raises(UnsatisfiableError, match="puzzle 1100000000000000 has no completion"):
        puzzle_circuit(clash)
    no_digit = [1, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]               # cell 2 sees 1, 2 (row) and 3 (box)
    no_digit[10] = 4                                                            # and 4 in its column: no digit left
    with pytest.raises(UnsatisfiableError, match="no completion"):
        puzzle_circuit(no_digit)
    with pytest.raises(SizeLimitError, match=r"\(36 blanks\) exceeds max_nodes = 300 nodes: the puzzle has too many"):
        puzzle_circuit([0] * 36, max_nodes=300)
    with pytest.raises(ValueError, match="a cell holds 0 \\(blank\\) or a digit 1..4"):
        puzzle_circuit([0] * 15 + [5])
    with pytest.raises(ValueError, match="17 cells is not a Sudoku board"):
        puzzle_circuit([0] * 17)


# -- the ConvNet: argmax and exact draws of its factorized distribution ---------------------------------
def test_convnet_constrained_is_the_brute_force_argmax(float64_default):
    torch.manual_seed(0)
    model = ConvNet(channels=8, layers=1, size=4).eval()
    puzzles = puzzles_with_blanks(10, 8, seed=4)
    out = decode(model, puzzles, "constrained", num_candidates=16)
    assert out.ess is None and torch.equal(out.values[puzzles > 0], puzzles[puzzles > 0])
    with torch.no_grad():
        logp = model(puzzles).log_softmax(-1)
    several_seen = 0
    for b, p in enumerate(puzzles.tolist()):
        grids = completions(p)                                                  # (C, 16)
        score = logp[b].gather(1, (grids - 1).t()).sum(0)                       # (C,) log q(completion)
        assert torch.equal(out.values[b], grids[score.argmax()])
        several_seen += len(grids) > 1
    assert several_seen >= 3


def test_convnet_resample_draws_from_the_model_given_the_puzzle(float64_default):
    torch.manual_seed(1)
    model = ConvNet(channels=8, layers=1, size=4).eval()
    p = several(4)
    grids = completions(p)
    draws = decode(model, torch.tensor([p]).repeat(1500, 1), "resample", num_candidates=16,
                   generator=torch.Generator().manual_seed(0)).values
    with torch.no_grad():
        logp = model(torch.tensor([p])).log_softmax(-1)[0]
    q = logp.gather(1, (grids - 1).t()).sum(0).softmax(0)                      # q(completion | puzzle)
    index = (draws[:, None, :] == grids[None]).all(-1).long().argmax(1)
    assert is_consistent(draws, torch.tensor([p]).expand(1500, -1)).all()
    l1, bound, p_value = sample_fit(torch.bincount(index, minlength=len(grids)), q)
    assert l1 <= bound and p_value > P_VALUE_MIN


# -- the RNN: the local distribution around its greedy decode -------------------------------------------
@torch.no_grad()
def _local_conditionals(model: SudokuRNN, puzzle: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """``(16, 4)`` ``log p(y_i = c | anchor_-i)`` by scoring every single-cell change with ``log_joint``."""
    ctx, steps = model.conditioning(puzzle[None])
    rows = []
    for i in range(16):
        ys = anchor.repeat(4, 1)
        ys[:, i] = torch.arange(4)
        rows.append(model.decoder.log_joint(ys, ctx.expand(4, -1), steps.expand(4, -1, -1)).log_softmax(0))
    return torch.stack(rows)


def test_rnn_constrained_is_the_argmax_of_its_local_distribution(float64_default):
    torch.manual_seed(2)
    model = SudokuRNN(hidden=8, layers=1, dropout=0.0, size=4).eval()
    puzzles = puzzles_with_blanks(20, 11, seed=5)
    out = decode(model, puzzles, "constrained", num_candidates=16)
    anchor = model.generate(puzzles, greedy=True) - 1
    for b, p in enumerate(puzzles.tolist()):
        grids = completions(p)
        cond = _local_conditionals(model, puzzles[b], anchor[b])
        score = cond.gather(1, (grids - 1).t()).sum(0)
        assert torch.equal(out.values[b], grids[score.argmax()])


def test_rnn_resample_follows_the_exact_resampling_distribution(float64_default):
    torch.manual_seed(3)
    model = SudokuRNN(hidden=8, layers=1, dropout=0.0, size=4).eval()
    with torch.no_grad():
        model.decoder.head.weight.mul_(6.0)                                     # peaky: p~ far from p
    p = several(3, seed=1)
    puzzle = torch.tensor(p)
    grids = completions(p)
    anchor = model.generate(puzzle[None], greedy=True)[0] - 1
    cond = _local_conditionals(model, puzzle, anchor)
    q = cond.gather(1, (grids - 1).t()).sum(0).softmax(0)                      # the proposal over completions
    with torch.no_grad():
        ctx, steps = model.conditioning(puzzle[None])
        log_p = model.decoder.log_joint(grids - 1, ctx.expand(len(grids), -1), steps.expand(len(grids), -1, -1))
    k = 2
    want = oracle.resampling_output(q, log_p, k)
    assert 0.5 * (want - q).abs().sum() > 0.02, "K = 2 should move the output off the proposal (else no test)"
    out = decode(model, puzzle[None].repeat(800, 1), "resample", num_candidates=k,
                 generator=torch.Generator().manual_seed(0))
    assert ((out.ess >= 1 - ATOL64) & (out.ess <= k + ATOL64)).all()
    index = (out.values[:, None, :] == grids[None]).all(-1).long().argmax(1)
    assert is_consistent(out.values, puzzle[None].expand(800, -1)).all()
    l1, bound, p_value = sample_fit(torch.bincount(index, minlength=len(grids)), want)
    assert l1 <= bound and p_value > P_VALUE_MIN


# -- the harness: rows, eval, seeds, errors -----------------------------------------------------------------
TINY = ["--size", "4", "--n-missing", "6", "--n-train", "32", "--n-val", "8", "--n-test", "24", "--epochs", "1",
        "--batch-size", "16", "--conv-channels", "4", "--conv-layers", "1", "--rnn-hidden", "8", "--rnn-layers", "1",
        "--threads", "1", "--jobs", "1", "--models", "convnet", "rnn", "--seeds", "0", "1"]


def test_decoder_rows_appear_in_tables_and_through_eval(tmp_path, capsys):
    out = tmp_path / "o"
    cli(["sudoku", "train", "--quick", *TINY, "--data-dir", str(tmp_path / "d"), "--out", str(out),
         "--decoders", "constrained", "resample", "--resample-candidates", "4"])
    res = json.loads((out / "results.json").read_text())
    rows = {f"{m}|{d}" for m in ("convnet", "rnn") for d in ("constrained", "resample")}
    assert set(res["summary"]) == {"convnet", "rnn"} | rows
    for row in rows:
        assert res["summary"][row]["consistent_mean"] == 100.0 and res["summary"][row]["exact_mean"] == 100.0
    table = (out / "table.txt").read_text()
    assert "RNN + resample 4" in table and "ConvNet + constrained" in table
    assert "RNN + resample 4 vs RNN  " in table
    lines = {line.split("  ")[0]: line for line in table.splitlines()}
    assert "22.40" in lines["RNN"] and "22.40" not in lines["RNN + resample 4"]  # the paper decodes greedily
    selection = next(line for line in table.splitlines() if line.startswith("Checkpoints selected"))
    assert "RNN: " in selection and "+ constrained" not in selection          # one checkpoint per model
    ess = [r["decoded"]["resample"]["ess"] for r in res["runs"] if r["model"] == "rnn"]
    assert len(ess) == 2 and all(1 - ATOL32_FEW_OPS <= e <= 4 + ATOL32_FEW_OPS for e in ess)  # float32 weights
    assert res["content_key"] == SudokuConfig(**{**res["config"], "resample_candidates": 16,
                                                 "decoders": []}).content_key()
    plain = tmp_path / "plain"
    cli(["sudoku", "train", "--quick", *TINY[:-1], "--data-dir", str(tmp_path / "d"), "--out", str(plain)])
    assert set(json.loads((plain / "results.json").read_text())["summary"]) == {"convnet", "rnn"}
    capsys.readouterr()
    cli(["sudoku", "eval", "--out", str(plain), "--decoders", "constrained", "resample"])
    printed = capsys.readouterr().out
    assert "RNN + resample 16" in printed and "ConvNet + constrained" in printed
    cli(["sudoku", "eval", "--out", str(plain), "--decoders", "resample", "--resample-candidates", "3"])
    printed = capsys.readouterr().out
    assert "RNN + resample 3" in printed and "resample 16" not in printed  # K set at eval time, labelled so
    with pytest.raises(ValueError, match=r"resample_candidates must be >= 1, got 0 \(a number of candidates K\)"):
        evaluate_checkpoints(SudokuExperiment(), plain, ["resample"], resample_candidates=0)
    with pytest.raises(TypeError, match="resample_candidates must be an int, got the bool True"):
        evaluate_checkpoints(SudokuExperiment(), plain, ["resample"], resample_candidates=True)


def test_same_seed_same_output_on_puzzles_with_several_completions(tmp_path):
    puzzles = puzzles_with_blanks(40, 9, seed=6)
    solutions = generate(40, 4, seed=6, size=4).solutions
    save_csv(SudokuData(puzzles, solutions), tmp_path / "p.csv")
    cfg = SudokuConfig(preset="test", data=f"csv:{tmp_path / 'p.csv'}", size=4, n_train=8, n_test=32, conv_channels=4,
                       conv_layers=1, rnn_hidden=8, rnn_layers=1, resample_candidates=4)
    exp, acc = SudokuExperiment(), Accelerator(cpu=True)
    test = exp.load_data(cfg).test
    assert sum(count_solutions(p)[0] > 1 for p in test.puzzles.tolist()) > 10
    for name in ("convnet", "rnn"):
        torch.manual_seed(0)
        model = exp.build_model(name, cfg).eval()
        runs = {}
        for seed in (0, 0, 1):
            torch.manual_seed(seed)                                             # as the harness does per decoder
            metrics, pred = exp.evaluate(model, test, cfg, acc, decoder="resample")
            runs.setdefault(seed, []).append(pred)
            assert metrics["consistent"] == 100.0 and is_consistent(pred, test.puzzles).all()
        assert torch.equal(runs[0][0], runs[0][1]) and not torch.equal(runs[0][0], runs[1][0])
        greedy = evaluate(model, test, acc)[0]
        constrained = exp.evaluate(model, test, cfg, acc, decoder="constrained")[0]
        assert constrained["consistent"] == 100.0 and greedy["consistent"] < 100.0
        assert constrained["exact"] < 100.0                                     # several completions: Exact differs


def test_unknown_decoder_is_a_named_error():
    with pytest.raises(ConfigError, match="decoders: sudoku has no decoder 'beam'; known: constrained, resample"):
        check_decoders(SudokuExperiment(), ["beam"])
    model = ConvNet(channels=4, layers=1, size=4).eval()
    puzzles = generate(2, 6, seed=0, size=4).puzzles
    with pytest.raises(ValueError, match="decoder = 'beam': expected one of constrained, resample"):
        decode(model, puzzles, "beam", num_candidates=4)
    with pytest.raises(ValueError, match="resample_candidates = 0: must be >= 1"):
        SudokuConfig(resample_candidates=0)
    with pytest.raises(ValueError, match="'resample_candidates' is the same for every run"):
        SudokuConfig(models=["rnn@resample_candidates=4"])


def test_the_harness_seeds_each_decoder_with_the_run_seed(tmp_path):
    """Train-time decoder rows and a later ``eval`` of the same checkpoints agree exactly, on puzzles with several
    completions (where a draw from another RNG state would pick other completions)."""
    puzzles = puzzles_with_blanks(64, 10, seed=7)
    save_csv(SudokuData(puzzles, generate(64, 4, seed=7, size=4).solutions), tmp_path / "p.csv")
    out = tmp_path / "o"
    argv = [a for a in TINY if a not in ("--n-missing", "6")]
    cli(["sudoku", "train", "--quick", *argv, "--data", f"csv:{tmp_path / 'p.csv'}", "--split", "random",  # loaded data
         "--out", str(out), "--decoders", "resample", "constrained", "--resample-candidates", "4"])
    trained = {(r["model"], r["seed"]): r["decoded"] for r in json.loads((out / "results.json").read_text())["runs"]}
    (table,) = evaluate_checkpoints(SudokuExperiment(), out, ["constrained", "resample"])["tables"]
    again = {(r["model"], r["seed"]): r["decoded"] for r in table["runs"]}
    assert again == trained
    exact = {k: v["resample"]["exact"] for k, v in trained.items()}
    assert all(v < 100.0 for v in exact.values()) and len(set(exact.values())) > 1  # draws differ across seeds
