"""The causal-LM engine's memory plan (:mod:`pseudosl.psl.lm_memory`, issue 27 item 1).

Checked: whatever the budget picks (chunks of one row, recomputation or not) the conditionals and their gradients
equal those of the engine run all at once (float64, exact against brute force elsewhere: tests/psl/test_psl_engines.py);
the plan recomputes exactly when keeping every row's activations would exceed the budget, keeps each chunk within
it, keeps what the caller fixes, and says what it chose; a smaller budget measurably lowers the step's peak
memory; bad knobs are refused by name.
"""

import pytest
import torch

from tiny_models import tiny_gpt2
from pseudosl.psl import CausalLMEngine, as_engine
from pseudosl.tokens import ValueMap
from pseudosl.psl.lm_memory import LMShape, plan_neighbours

pytestmark = pytest.mark.usefixtures("float64_default", "one_thread")

V = 16
PROMPT = torch.tensor([[5, 2], [9, 0]])
Y = torch.tensor([[1, 3, 8, 0, 12], [7, 7, 4, 11, 2]])


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(n_embd=32, vocab_size=V, n_positions=64).eval()


def _conditionals_and_grads(model, **kw):
    engine = CausalLMEngine(model, PROMPT, value_map=ValueMap([0, 1, 2, 3], V), top_k=3, **kw)
    model.zero_grad(set_to_none=True)
    out = engine.local_conditionals(Y)
    (out.exp() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()], engine


@pytest.mark.parametrize("budget", [1, 20_000, 1 << 30])
def test_every_plan_computes_the_same_values_and_gradients(gpt2, budget):
    ref, ref_grads, _ = _conditionals_and_grads(gpt2, chunk_size=10_000, recompute=False)
    out, grads, engine = _conditionals_and_grads(gpt2, memory_budget=budget)
    plan = engine.memory_plan(2, Y.shape[1])
    if budget == 1:
        assert plan.recompute and set(plan.chunks) == {1}
    if budget == 1 << 30:
        assert not plan.recompute and set(plan.chunks) == {plan.rows}
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)


def test_the_plan_recomputes_only_when_the_activations_exceed_the_budget():
    shape = LMShape(layers=2, hidden=8, mlp=32, heads=2, kv=8, itemsize=4)
    kept = sum(10 * shape.active_bytes(5 - 1 - i, 3 + i) for i in range(4))
    fits = plan_neighbours(shape, rows=10, prompt=3, length=5, grad=True, budget=kept + shape.cache_bytes(7) * 10)
    over = plan_neighbours(shape, rows=10, prompt=3, length=5, grad=True, budget=kept - 1)
    assert not fits.recompute and over.recompute
    assert fits.peak <= fits.budget and over.peak <= over.budget
    assert not plan_neighbours(shape, rows=10, prompt=3, length=5, grad=False, budget=1).recompute
    fixed = plan_neighbours(shape, rows=10, prompt=3, length=5, grad=True, budget=1, chunk=4, recompute=False)
    assert fixed.chunks == (4, 4, 4, 4) and not fixed.recompute
    assert "chunks of 4 rows" in str(fixed) and "no recomputation" in str(fixed)
    assert "recomputation on" in str(over)


def test_the_shape_is_read_from_the_config(gpt2):
    shape = LMShape.of(gpt2, gpt2.get_output_embeddings())
    cfg = gpt2.config
    assert (shape.layers, shape.hidden, shape.heads, shape.kv, shape.mlp) == (
        cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_embd, 4 * cfg.n_embd)
    assert shape.itemsize == 8


def _cpu_peak(step) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    total = peak = 0
    for _, d in sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage):
        total += d
        peak = max(peak, total)
    return peak


def test_a_smaller_budget_lowers_the_peak(gpt2):
    y = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(0))
    shape = LMShape.of(gpt2, gpt2.get_output_embeddings())
    row = shape.cache_bytes(PROMPT.shape[1] + 7) + shape.active_bytes(7, PROMPT.shape[1])
    peaks = {}
    for budget in (1 << 30, 4 * row):  # everything at once, kept for backward / chunks of 4 rows, recomputed
        engine = as_engine(gpt2, prompt_ids=PROMPT, memory_budget=budget)
        plan = engine.memory_plan(2, 8)
        assert plan.recompute == (budget < 1 << 30) and plan.chunks[0] == (4 if budget < 1 << 30 else 2 * V)

        def step():
            gpt2.zero_grad(set_to_none=True)
            engine.local_conditionals(y).logsumexp(-1).sum().backward()
        peaks[budget < 1 << 30] = _cpu_peak(step)
    assert peaks[True] < peaks[False] / 2, peaks


@pytest.mark.parametrize("kw, match", [
    (dict(memory_budget=0), "memory_budget"), (dict(memory_budget=1.5), "memory_budget"),
    (dict(chunk_size=0), "chunk_size"), (dict(recompute="yes"), "recompute"),
    (dict(top_k=5), "top_k=5 applies with a value_map")])
def test_bad_knobs_are_refused_by_name(gpt2, kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        CausalLMEngine(gpt2, PROMPT, **kw)


@pytest.mark.parametrize("kw, error, match", [
    (dict(max_logits=None), TypeError, "max_logits must be an int, got NoneType"),
    (dict(max_logits="8M"), TypeError, "max_logits must be an int, got str '8M'"),
    (dict(max_logits=0), ValueError, r"max_logits must be >= 1, got 0 \(the most logits held at once\)"),
    (dict(memory_budget=2.0**30), TypeError, r"memory_budget must be an int.*CausalLMEngine\(memory_budget=\)"),
    (dict(chunk_size=-5), ValueError, r"chunk_size must be >= 1, got -5 \(rows per model call"),
    (dict(chunk_size=3.0), TypeError, "chunk_size must be an int, got float 3.0")])
def test_bad_sizes_are_refused_by_name(gpt2, kw, error, match):
    with pytest.raises(error, match=match):
        CausalLMEngine(gpt2, PROMPT, **kw)


@pytest.mark.parametrize("args, kw, error, match", [
    ((-2, 5), {}, ValueError, "batch_size must be >= 0, got -2"),
    ((2, 2.5), {}, TypeError, "length must be an int, got float 2.5"),
    ((2, 0), {}, ValueError, "length must be >= 1, got 0"),
    ((2, 10**9), {}, ValueError, "length must be <= 1,048,576, got 1,000,000,000"),
    ((2, 100), {}, ValueError, r"need 102 positions but the model has 64"),
    ((2, 5), dict(chunk_size=0), ValueError, "chunk_size must be >= 1, got 0"),
    ((2, 5), dict(chunk_size=-8), ValueError, "chunk_size must be >= 1, got -8"),
    ((2, 5), dict(candidates=0), ValueError, "candidates must be >= 1, got 0"),
    ((2, 5), dict(candidates=V + 1), ValueError, f"candidates must be <= {V}, got {V + 1}")])
def test_the_memory_plan_checks_its_arguments(gpt2, args, kw, error, match):
    """No negative, fractional or zero-as-default plan, and no plan of a length the model cannot take (nor a hang
    making one for 10**9 positions)."""
    engine = CausalLMEngine(gpt2, PROMPT)
    with pytest.raises(error, match=match):
        engine.memory_plan(*args, **kw)
    assert engine.memory_plan(2, 5, chunk_size=3).chunks == (3, 3, 3, 3)


@pytest.mark.parametrize("chunk_size", [-1, 0, 1.5, "4"])
def test_local_conditionals_refuses_a_bad_chunk_size_before_the_model_runs(gpt2, chunk_size, monkeypatch):
    engine = CausalLMEngine(gpt2, PROMPT)
    monkeypatch.setattr(engine, "base", None)  # any model call would fail differently
    with pytest.raises((TypeError, ValueError), match="^chunk_size must be"):
        engine.local_conditionals(Y, chunk_size=chunk_size)


def test_log_prob_runs_in_the_chunks_the_planner_makes(gpt2, monkeypatch):
    """``CausalLMEngine.log_prob`` takes its rows per call from :func:`lm_memory.plan_rows` (not planned inline); the
    values do not depend on the chunks."""
    from pseudosl.psl import causal_lm
    engine = CausalLMEngine(gpt2, PROMPT, memory_budget=1)  # one row per call
    seqs = torch.randint(0, V, (2, 3, 4), generator=torch.Generator().manual_seed(1))
    calls = []
    monkeypatch.setattr(causal_lm, "plan_rows", lambda shape, tokens, budget: calls.append((tokens, budget)) or 2)
    sizes = []
    real = engine.log_joint
    monkeypatch.setattr(engine, "log_joint", lambda y, e: sizes.append(y.shape[0]) or real(y, e))
    out = engine.log_prob(seqs)
    assert calls == [(PROMPT.shape[1] + 4, 1)] and sizes == [2, 2, 2]
    torch.testing.assert_close(out, CausalLMEngine(gpt2, PROMPT).log_prob(seqs), rtol=0, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_planned_step_on_cuda_matches_the_cpu(gpt2):
    """On a GPU the default budget reads the device's free memory; chunks of one row with recomputation give the
    CPU's values and gradients (float64)."""
    ref, ref_grads, _ = _conditionals_and_grads(gpt2, chunk_size=10_000, recompute=False)
    model = gpt2.to("cuda")
    try:
        engine = CausalLMEngine(model, PROMPT.cuda(), value_map=ValueMap([0, 1, 2, 3], V), top_k=3, memory_budget=1)
        assert engine.memory_plan(2, Y.shape[1]).recompute
        model.zero_grad(set_to_none=True)
        out = engine.local_conditionals(Y.cuda())
        (out.exp() * torch.linspace(-1, 1, out.numel(), device="cuda").view_as(out)).sum().backward()
        torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=1e-10)
        for p, r in zip(model.parameters(), ref_grads):
            torch.testing.assert_close(p.grad.cpu(), r, rtol=0, atol=1e-10)
        assert CausalLMEngine(model, PROMPT.cuda()).memory_plan(2, Y.shape[1]).budget > 0
    finally:
        gpt2.to("cpu")
