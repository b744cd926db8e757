"""Warcraft's constrained decoders against brute force on a 3x3 grid (12 edges, 4096 edge vectors, float64).

The ResNet's ``constrained`` output is the brute-force argmax over simple paths of its edge probabilities and its
``resample`` draws follow the model conditioned on the constraint; the CNN-LSTM's ``constrained`` output is the
argmax of its local distribution around the greedy decode, and its ``resample`` draws follow the exact
distribution of resampling with K candidates (``oracle.resampling_output``); every output is a simple path; the
harness rows appear with ``decoders`` and through ``eval --decoders``; the same seed gives the same output;
unknown decoders are named errors.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import oracle
from tolerances import ATOL64, P_VALUE_MIN
import pseudosl
from assertions import sample_fit
from pseudosl.cli import main as cli
from pseudosl.constraints import is_simple_path
from pseudosl.experiments.config import ConfigError
from pseudosl.experiments.harness import check_decoders
from pseudosl.experiments.warcraft.config import WarcraftConfig
from pseudosl.experiments.warcraft.data import generate
from pseudosl.experiments.warcraft.decoding import decode
from pseudosl.experiments.warcraft.models import CNNLSTM, EdgeResNet
from pseudosl.experiments.warcraft.train import WarcraftExperiment, evaluate, path_circuit, prepare

K_GRID, N_EDGES = 3, 12
EDGES = torch.as_tensor(oracle.assignments(N_EDGES, 2))                       # (4096, 12) every edge vector
PATHS = np.array([is_simple_path(e.tolist(), K_GRID, K_GRID) for e in EDGES])  # the constraint, by enumeration


pytestmark = pytest.mark.usefixtures("one_thread")  # decoding is many small calls


def maps(n: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(generate(n, K_GRID, seed=seed)[0].maps)           # (n, 24, 24, 3) uint8


def index(values: torch.Tensor) -> torch.Tensor:
    return oracle.assignment_index(values, 2)


def test_the_circuit_is_the_simple_paths():
    circuit = path_circuit(K_GRID)
    assert torch.equal(pseudosl.sample_satisfies(circuit, EDGES), torch.as_tensor(PATHS)) and PATHS.sum() == 12


# -- the ResNet: argmax and exact draws of its independent edges ------------------------------------
def test_resnet_constrained_is_the_brute_force_argmax(float64_default):
    torch.manual_seed(0)
    model = EdgeResNet(N_EDGES, width=0.0625).eval()
    m = maps(6)
    out = decode(model, m, path_circuit(K_GRID), "constrained", num_candidates=16)
    assert out.ess is None
    with torch.no_grad():
        x = oracle.boolean_to_categorical(F.logsigmoid(model(m)))            # (6, 12, 2) log q(edge value)
    w = oracle.log_weights(x).masked_fill(~torch.as_tensor(PATHS), float("-inf"))  # (6, 4096)
    assert torch.equal(index(out.values), w.argmax(1))


def test_resnet_resample_draws_from_the_model_given_the_constraint(float64_default):
    torch.manual_seed(1)
    model = EdgeResNet(N_EDGES, width=0.0625).eval()
    with torch.no_grad():
        model.head.bias.normal_(0.0, 1.5)                                     # edges of varied probability
    m = maps(1, seed=1).repeat(3000, 1, 1, 1)
    out = decode(model, m[:3000], path_circuit(K_GRID), "resample", num_candidates=16,
                 generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x = oracle.boolean_to_categorical(F.logsigmoid(model(m[:1])))
    want = oracle.conditional(PATHS, x)[0]                                    # q(. | simple path), (4096,)
    assert torch.as_tensor(PATHS)[index(out.values)].all()
    l1, bound, p_value = sample_fit(torch.bincount(index(out.values), minlength=4096), want)
    assert l1 <= bound and p_value > P_VALUE_MIN


# -- the CNN-LSTM: the local distribution around its greedy decode -------------------------------------
def _lstm(seed: int) -> CNNLSTM:
    torch.manual_seed(seed)
    model = CNNLSTM(N_EDGES, width=0.0625, embed=8, hidden=8, pos_dim=3).eval()
    with torch.no_grad():
        model.decoder.head.weight.mul_(8.0)                                   # peaky: p~ far from p
    return model


@torch.no_grad()
def _log_p(model: CNNLSTM, m: torch.Tensor) -> torch.Tensor:
    """``(4096,)`` ``log p(y | map)`` of every edge vector (the oracle's joint table)."""
    ctx, steps = model.conditioning(m[:1])
    return model.decoder.log_joint(EDGES, ctx.expand(4096, -1), steps.expand(4096, -1, -1))


def _local(log_p: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """``(12, 2)`` ``log p(y_i = c | anchor_-i)``, sliced off the joint table."""
    rows = []
    for i in range(N_EDGES):
        ys = anchor.repeat(2, 1)
        ys[:, i] = torch.arange(2)
        rows.append(log_p[index(ys)].log_softmax(0))
    return torch.stack(rows)


def test_lstm_constrained_is_the_argmax_of_its_local_distribution(float64_default):
    model = _lstm(2)
    m = maps(5, seed=2)
    out = decode(model, m, path_circuit(K_GRID), "constrained", num_candidates=16)
    anchors = model.generate(m, greedy=True)
    for b in range(5):
        cond = _local(_log_p(model, m[b:b + 1]), anchors[b])
        w = oracle.log_weights(cond[None])[0].masked_fill(~torch.as_tensor(PATHS), float("-inf"))
        assert index(out.values[b]) == w.argmax()


def test_lstm_resample_follows_the_exact_resampling_distribution(float64_default):
    model = _lstm(3)
    m = maps(1, seed=3)
    log_p = _log_p(model, m)
    anchor = model.generate(m, greedy=True)[0]
    q = oracle.conditional(PATHS, _local(log_p, anchor)[None])[0]             # the proposal p~(. | path)
    k = 2
    want = oracle.resampling_output(q, log_p, k)
    assert 0.5 * (want - q).abs().sum() > 0.02, "K = 2 should move the output off the proposal (else no test)"
    out = decode(model, m.repeat(3000, 1, 1, 1), path_circuit(K_GRID), "resample", num_candidates=k,
                 generator=torch.Generator().manual_seed(0))
    assert ((out.ess >= 1 - ATOL64) & (out.ess <= k + ATOL64)).all()
    assert torch.as_tensor(PATHS)[index(out.values)].all()
    l1, bound, p_value = sample_fit(torch.bincount(index(out.values), minlength=4096), want)
    assert l1 <= bound and p_value > P_VALUE_MIN


# -- the harness: rows, eval, seeds, errors -----------------------------------------------------------------
TINY = dict(grid=4, n_train=12, n_val=4, n_test=16, batch_size=6, psl_examples=2, width=0.0625, embed_dim=8,
            lstm_hidden=16, pos_dim=4, threads=1, jobs=1)


def _argv(tmp_path, out: str, *extra: str) -> list[str]:
    return (["warcraft", "train", "--quick", "--epochs", "1", "--out", str(tmp_path / out), "--data-dir",
             str(tmp_path / "data"), "--models", "resnet", "lstm", "--seeds", "0", *extra]
            + [x for k, v in TINY.items() for x in ("--" + k.replace("_", "-"), str(v))])


def test_decoder_rows_appear_in_tables_and_through_eval(tmp_path, capsys):
    cli(_argv(tmp_path, "o", "--decoders", "constrained", "resample", "--resample-candidates", "4"))
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    rows = {f"{m}|{d}" for m in ("resnet", "lstm") for d in ("constrained", "resample")}
    assert set(res["summary"]) == {"resnet", "lstm"} | rows
    for row in rows:
        assert res["summary"][row]["consistent_mean"] == 100.0 and res["summary"][row]["cost_ratio_mean"] >= 1.0
    table = (tmp_path / "o" / "table.txt").read_text()
    assert "CNN-LSTM + resample 4" in table and "ResNet-18 + constrained vs ResNet-18  " in table
    (run,) = [r for r in res["runs"] if r["model"] == "lstm"]
    assert 1 <= run["decoded"]["resample"]["ess"] <= 4
    cli(_argv(tmp_path, "plain"))
    capsys.readouterr()
    cli(["warcraft", "eval", "--out", str(tmp_path / "plain"), "--decoders", "constrained", "resample"])
    printed = capsys.readouterr().out
    assert "CNN-LSTM + resample 16" in printed and "ResNet-18 + constrained" in printed


def test_same_seed_same_output(tmp_path):
    cfg = WarcraftConfig(preset="test", **{**TINY, "grid": 3}, resample_candidates=4)
    exp, acc = WarcraftExperiment(), Accelerator(cpu=True)
    d, _, _ = generate(40, 3, seed=4)
    test = prepare(d)
    for name in ("resnet", "lstm"):
        torch.manual_seed(0)
        model = exp.build_model(name, cfg).eval()
        preds = {}
        for seed in (0, 0, 1):
            torch.manual_seed(seed)                                           # as the harness does per decoder
            metrics, pred = exp.evaluate(model, test, cfg, acc, decoder="resample")
            preds.setdefault(seed, []).append(pred)
            assert metrics["consistent"] == 100.0
        assert np.array_equal(preds[0][0], preds[0][1]) and not np.array_equal(preds[0][0], preds[1][0])
        assert exp.evaluate(model, test, cfg, acc, decoder="constrained")[0]["consistent"] == 100.0


def test_unknown_decoder_is_a_named_error():
    with pytest.raises(ConfigError, match="decoders: warcraft has no decoder 'beam'; known: constrained, resample"):
        check_decoders(WarcraftExperiment(), ["beam"])
    model = EdgeResNet(N_EDGES, width=0.0625).eval()
    with pytest.raises(ValueError, match="decoder = 'beam': expected one of constrained, resample"):
        decode(model, maps(2), path_circuit(K_GRID), "beam", num_candidates=4)
    d, _, _ = generate(2, 3, seed=0)
    with pytest.raises(ValueError, match="needs the simple-path circuit"):
        evaluate(model, prepare(d), Accelerator(cpu=True), decoder="constrained")
    with pytest.raises(ValueError, match="resample_candidates = 0: must be >= 1"):
        WarcraftConfig(resample_candidates=0)
