"""local_fidelity against an independent float64 enumeration; Monte-Carlo within its standard errors."""

import math

import numpy as np
import pytest
import torch

import oracle
from tolerances import ATOL64, RTOL64
from tiny_models import TableModel, tiny_gpt2
from pseudosl.psl import CausalLMEngine, RecurrentDecoder, SamplerRequiredError, as_engine, local_fidelity
from pseudosl.tokens import ValueMap

BITS = 1 / math.log(2)
SE = 4.0  # Monte-Carlo estimates must fall within SE standard errors of the exact values (fixed seeds)


def _reference(log_table: np.ndarray, sample: np.ndarray) -> dict[str, np.ndarray]:
    """H(p), H(p~_y), KL(p~_y || p), H(Y_i | Y_<i), H(p(. | y_-i)) in bits, from the definitions (float64 numpy)."""
    n, k = log_table.ndim, log_table.shape[0]
    p = np.exp(log_table)
    ys = oracle.assignments(n, k)
    xlogx = lambda q: np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0.0)  # noqa: E731
    h_model = -xlogx(p).sum()
    h_pos = []
    for i in range(n):  # H(Y_i | Y_<i) = sum over prefixes of P(prefix) H(Y_i | prefix)
        total = 0.0
        for prefix in oracle.assignments(i, k) if i else [()]:
            block = p[tuple(prefix)].reshape(k, -1).sum(1)  # P(prefix, Y_i = c)
            mass = block.sum()
            if mass > 0:
                total += -xlogx(block / mass).sum() * mass
        h_pos.append(total)
    out = {k_: [] for k_ in ("entropy_model", "entropy_local", "kl_local_model", "model_pos", "local_pos")}
    for y in sample:
        cond = []
        for i in range(n):  # p(y_i = c | y_-i) = p(y with y_i := c) / sum_c'
            idx = list(y)
            idx[i] = slice(None)
            row = p[tuple(idx)]
            cond.append(row / row.sum())
        q = np.prod([np.array(cond)[i, ys[:, i]] for i in range(n)], axis=0)  # p~_y over all assignments
        logp = log_table[tuple(ys.T)]
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.where(q > 0, q * (np.log(np.where(q > 0, q, 1)) - logp), 0.0).sum()
        out["entropy_model"].append(h_model)
        out["entropy_local"].append(-xlogx(q).sum())
        out["kl_local_model"].append(kl)
        out["model_pos"].append(h_pos)
        out["local_pos"].append([-xlogx(c).sum() for c in cond])
    return {k_: np.array(v) * BITS for k_, v in out.items()}


def _check_exact(f, ref):
    assert f.method == "exact" and f.n_mc == 0
    for name in ("entropy_model", "entropy_local", "kl_local_model"):
        torch.testing.assert_close(getattr(f, name), torch.as_tensor(ref[name]), atol=ATOL64, rtol=RTOL64)
        assert (getattr(f, name + "_se") == 0).all()
    torch.testing.assert_close(f.entropy_model_positions, torch.as_tensor(ref["model_pos"]), atol=ATOL64, rtol=RTOL64)
    torch.testing.assert_close(f.entropy_local_positions, torch.as_tensor(ref["local_pos"]), atol=ATOL64, rtol=RTOL64)


def _draw_table(table: torch.Tensor, b: int, seed: int):
    """A sampler of the table model: (B, m, n) draws of p (the same p for every example)."""
    g = torch.Generator().manual_seed(seed)
    k, n = table.shape[0], table.dim()
    ys = torch.as_tensor(oracle.assignments(n, k))
    return lambda m: ys[torch.multinomial(table.exp().flatten(), b * m, replacement=True, generator=g)].view(b, m, n)


def _within(f, exact, names=("entropy_model", "kl_local_model")):
    for name in names:
        est, se, want = getattr(f, name), getattr(f, name + "_se"), getattr(exact, name)
        assert (se > 0).all(), name
        assert ((est - want).abs() <= SE * se).all(), (name, est, want, se)


@pytest.mark.parametrize("n,k,seed", [(3, 2, 0), (4, 3, 1), (2, 5, 2), (5, 2, 3)])
def test_exact_matches_independent_enumeration(n, k, seed):
    model = TableModel(n, k, seed)
    if seed == 3:  # some sequences impossible: 0 log 0 terms, possibly KL = inf
        with torch.no_grad():
            model.logits[torch.randperm(k ** n, generator=torch.Generator().manual_seed(0))[: k ** n // 4]] = -math.inf
    table = model.table().detach()
    ys = torch.as_tensor(oracle.assignments(n, k))
    g = torch.Generator().manual_seed(seed)
    sample = ys[torch.multinomial(table.exp().flatten(), 4, replacement=True, generator=g)]
    ref = _reference(table.numpy(), sample.numpy())
    _check_exact(local_fidelity(model.engine(), sample), ref)
    _check_exact(local_fidelity(model.engine(), sample, chunk_size=7), ref)  # chunked
    f = local_fidelity(model.engine(), sample)
    assert (f.kl_local_model >= 0).all()
    torch.testing.assert_close(f.entropy_model_positions.sum(1), f.entropy_model)  # chain rule


def test_monte_carlo_with_a_sampler_within_standard_errors():
    model = TableModel(5, 3, seed=4)
    table = model.table().detach()
    sample = torch.tensor([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0], [1, 0, 0, 2, 2]])
    exact = local_fidelity(model.engine(), sample)
    mc = local_fidelity(model.engine(), sample, exact=False, n_mc=3000, sampler=_draw_table(table, 3, 0),
                        generator=torch.Generator().manual_seed(1), chunk_size=500)
    assert mc.method == "monte-carlo" and mc.n_mc == 3000 and mc.entropy_model_positions is None
    _within(mc, exact)
    torch.testing.assert_close(mc.entropy_local, exact.entropy_local)  # closed form in both methods
    summary = mc.summary()
    assert set(summary) == {"entropy_model", "entropy_local", "kl_local_model"}
    assert summary["entropy_local"]["mean"] == pytest.approx(exact.entropy_local.mean().item())


def _peaky_decoder(**kw):
    torch.manual_seed(5)
    dec = RecurrentDecoder(3, 5, 8, num_layers=2, cell="gru", dropout=0.3, **kw).double().eval()
    with torch.no_grad():
        dec.head.weight.mul_(40.0)  # far from uniform, so the approximation is not trivially exact
    return dec


def test_recurrent_decoder_exact_vs_monte_carlo_and_contexts():
    torch.set_default_dtype(torch.float64)
    try:
        dec = _peaky_decoder(context_dim=4, step_dim=2).train()  # the engine evaluates in eval mode
        ctx, steps = torch.randn(3, 4), torch.randn(3, 5, 2)
        eng = dec.engine(ctx, steps)
        sample = dec.eval().sample(ctx, steps, generator=torch.Generator().manual_seed(0))
        dec.train()
        exact = local_fidelity(eng, sample, chunk_size=100)
        ys = torch.as_tensor(oracle.assignments(5, 3))
        for b in range(3):  # rows are scored under their own context: the table of example b alone
            with torch.no_grad():
                table = dec.engine(ctx[b:b + 1], steps[b:b + 1]).log_prob(ys[None])[0].view(3, 3, 3, 3, 3)
            ref = _reference(table.numpy(), sample[b:b + 1].numpy())
            torch.testing.assert_close(exact.entropy_model[b:b + 1], torch.as_tensor(ref["entropy_model"]))
            torch.testing.assert_close(exact.kl_local_model[b:b + 1], torch.as_tensor(ref["kl_local_model"]))
            torch.testing.assert_close(exact.entropy_model_positions[b:b + 1], torch.as_tensor(ref["model_pos"]))
        assert (exact.kl_local_model > 0).all() and exact.kl_local_model.max() > 0.05  # not trivially exact
        mc = local_fidelity(eng, sample, exact=False, n_mc=2000, generator=torch.Generator().manual_seed(2),
                            chunk_size=3000)  # draws in chunks of 1000 per example
        _within(mc, exact)
        assert dec.training  # the mode is restored
        torch.testing.assert_close(mc.entropy_model_positions.sum(1), mc.entropy_model)  # chain rule
        assert (mc.entropy_model_positions - exact.entropy_model_positions).abs().max() < 0.1
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(n_embd=16, vocab_size=6, n_positions=16).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # tied with the input embeddings: a peaky model
    return model


def test_causal_lm_exact_vs_monte_carlo(gpt2):
    prompt = torch.tensor([[0], [3]])
    eng = CausalLMEngine(gpt2, prompt)
    sample = torch.tensor([[1, 2, 0], [5, 0, 4]])
    exact = local_fidelity(eng, sample)
    assert exact.method == "exact" and (exact.kl_local_model > 0.01).all()
    ys = torch.as_tensor(oracle.assignments(3, 6))
    for b in range(2):
        table = CausalLMEngine(gpt2, prompt[b]).log_prob(ys[None])[0].view(6, 6, 6).detach()
        ref = _reference(table.numpy(), sample[b:b + 1].numpy())
        torch.testing.assert_close(exact.kl_local_model[b:b + 1], torch.as_tensor(ref["kl_local_model"]))
        torch.testing.assert_close(exact.entropy_model[b:b + 1], torch.as_tensor(ref["entropy_model"]))
    torch.manual_seed(0)
    mc = local_fidelity(eng, sample, exact=False, n_mc=1500, generator=torch.Generator().manual_seed(3))
    _within(mc, exact)
    shared = local_fidelity(CausalLMEngine(gpt2, prompt[:1]), sample, exact=False, n_mc=200,
                            generator=torch.Generator().manual_seed(4))  # one prompt for both anchors
    exact0 = local_fidelity(CausalLMEngine(gpt2, prompt[:1]), sample)
    _within(shared, exact0)
    with pytest.raises(ValueError, match="value_map"):
        local_fidelity(CausalLMEngine(gpt2, prompt, value_map=ValueMap([1, 2], 6)), sample)
    with pytest.raises(ValueError, match="n_values below the vocabulary"):
        local_fidelity(CausalLMEngine(gpt2, prompt, n_values=5), sample)


def test_errors():
    model = TableModel(3, 2, seed=0).engine()
    y = torch.tensor([[0, 1, 1]])
    with pytest.raises(SamplerRequiredError, match="sampler="):
        local_fidelity(model, y, exact=False)
    with pytest.raises(ValueError, match=r"n_mc must be >= 2, got 1 \(draws per example\)"):
        local_fidelity(model, y, n_mc=1)
    with pytest.raises(ValueError, match="exact=True would enumerate"):
        local_fidelity(as_engine(lambda s, e: s.sum(1).double(), n_values=9), torch.zeros(1, 81, dtype=torch.long),
                       exact=True)
    with pytest.raises(ValueError, match=r"sampler\(4\) must return a long tensor of shape \(1, 4, 3\)"):
        local_fidelity(model, y, exact=False, n_mc=4, sampler=lambda m: torch.zeros(m, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="not normalised"):
        local_fidelity(as_engine(lambda s, e: torch.zeros(s.shape[0], dtype=torch.float64), n_values=2), y)
    with pytest.raises(TypeError, match="pseudosl.as_engine"):
        local_fidelity(TableModel(3, 2, seed=0), y)
    with pytest.raises(ValueError, match="shape \\(B, n\\)"):
        local_fidelity(model, y[0])
    with pytest.raises(ValueError, match="dropout=True"):
        local_fidelity(RecurrentDecoder(2, 3, 4).engine(dropout=True), y)
    impossible = TableModel(2, 2, seed=0)
    with torch.no_grad():
        impossible.logits[[0, 1, 2]] = -math.inf  # only (1, 1) is possible
    with pytest.raises(ValueError, match="position 0 of sample 0 .* the sample itself has probability 0"):
        local_fidelity(impossible.engine(), torch.tensor([[0, 0]]))
