"""Fast engines (RecurrentEngine, CausalLMEngine) vs the generic path and brute force (float64)."""


import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import oracle
from tolerances import ATOL64, ATOL64_FEW_OPS, ATOL32_FEW_OPS, RTOL32
from assertions import assert_no_host_sync
from tiny_models import circuit_from_truth, tiny_gpt2
from pseudosl.psl import (CausalLMEngine, RecurrentDecoder, as_engine, local_conditionals, pseudo_semantic_loss,
                          sample_autoregressive, sample_from_logits)
from pseudosl.tokens import Constraint, ValueMap

TOL = dict(atol=ATOL32_FEW_OPS, rtol=RTOL32)


pytestmark = pytest.mark.usefixtures("float64_default")


def _grads(loss, module):
    params = [p for p in module.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True)


def _assert_grads_close(a, b):
    for x, y in zip(a, b):
        if x is None or y is None:
            assert (x is None or not x.abs().any()) and (y is None or not y.abs().any())
        else:
            torch.testing.assert_close(x, y, **TOL)


def _decoder(cell, context=True, steps=True, **kw):
    torch.manual_seed(3)
    return RecurrentDecoder(3, 5, 6, num_layers=2, cell=cell, dropout=0.3, context_dim=4 if context else None,
                            step_dim=2 if steps else 0, **kw)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("train", [False, True])
def test_recurrent_engine_matches_generic_values_and_gradients(cell, train):
    dec = _decoder(cell).train(train)
    ctx, steps = torch.randn(2, 4), torch.randn(2, 5, 2)
    y = dec.sample(ctx, steps)
    eng = dec.engine(ctx, steps)
    truth = np.random.default_rng(0).random(3 ** 5) < 0.5
    circuit = circuit_from_truth(truth, 5, 3)
    fast = pseudo_semantic_loss(eng, circuit, y, chunk_size=7)
    slow = pseudo_semantic_loss(as_engine(eng.log_joint, n_values=3), circuit, y)
    torch.testing.assert_close(fast, slow, **TOL)
    _assert_grads_close(_grads(fast, dec), _grads(slow, dec))
    assert dec.training == train  # the engine restores the mode


def test_recurrent_decoder_vs_brute_force_enumeration():
    dec = _decoder("lstm", context=False, steps=False).eval()
    n, k = 5, 3
    ys = torch.as_tensor(oracle.assignments(n, k))
    joint = dec.log_joint(ys)
    torch.testing.assert_close(joint.logsumexp(0), torch.tensor(0.0), atol=ATOL64, rtol=0)  # normalised
    table = joint.view((k,) * n)
    y = dec.sample(batch_size=3)
    want = torch.stack([torch.stack([table[tuple(list(r[:i]) + [slice(None)] + list(r[i + 1:]))].log_softmax(-1)
                                     for i in range(n)]) for r in y.tolist()])
    torch.testing.assert_close(dec.engine().local_conditionals(y), want, **TOL)


def test_recurrent_engine_candidates_and_dropout_flag():
    dec = _decoder("gru", context=False, steps=False)
    y = dec.sample(batch_size=2)
    cand = torch.tensor([[0, 2]] * 5)
    eng = dec.engine()
    torch.testing.assert_close(eng.local_conditionals(y, candidates=cand),
                               local_conditionals(eng.log_joint, y, candidates=cand), **TOL)
    dec.train()
    torch.manual_seed(1)
    a = dec.engine(dropout=True).local_conditionals(y)
    b = dec.engine(dropout=True).local_conditionals(y)
    assert not torch.allclose(a, b)  # stochastic in train mode when asked to keep dropout


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_samples_come_from_the_eval_mode_model_the_conditionals_are_of(cell):
    """A decoder with dropout, in train mode, samples as in eval mode (the distribution whose conditionals the engine
    computes): the same generator seed gives the same draws, by decoder.sample and engine.sample alike, fixed
    positions kept; every submodule's train mode is restored.  With dropout=True the engine keeps train mode."""
    torch.manual_seed(0)
    dec = RecurrentDecoder(3, 6, 16, num_layers=3, cell=cell, dropout=0.5, context_dim=4, step_dim=2)
    ctx, steps = torch.randn(64, 4), torch.randn(64, 6, 2)
    fixed = torch.full((64, 6), -1).index_fill_(1, torch.tensor([1, 4]), 2)

    def seed() -> torch.Generator:
        return torch.Generator().manual_seed(5)
    want = dec.eval().sample(ctx, steps, generator=seed(), fixed=fixed)
    dec.train()
    got = dec.sample(ctx, steps, generator=seed(), fixed=fixed)
    engine = dec.engine(ctx, steps)
    by_engine = engine.sample(generator=seed(), fixed=fixed)
    assert torch.equal(got, want) and torch.equal(by_engine, want) and (want[:, [1, 4]] == 2).all()
    assert all(m.training for m in dec.modules())
    stochastic = dec.engine(ctx, steps, dropout=True).sample(generator=seed(), fixed=fixed)
    assert not torch.equal(stochastic, want) and all(m.training for m in dec.modules())
    with pytest.raises(ValueError, match=r"fixed must be a long tensor of shape \(64, 6\)"):
        engine.sample(fixed=fixed[:, :5])


def test_an_anchor_the_fast_engine_cannot_produce_is_named_not_nan():
    """A head that gives value 1 probability 0 (bias -inf): an anchor holding 1 makes every neighbour of the other
    positions impossible; the PSL names the engine and the position instead of the circuit's "x contains NaN"."""
    dec = _decoder("gru", context=False, steps=False)
    with torch.no_grad():
        dec.head.bias[1] = float("-inf")
    circuit = circuit_from_truth(np.random.default_rng(2).random(3 ** 5) < 0.5, 5, 3)
    fine = torch.tensor([[0, 2, 2, 0, 2]])
    assert torch.isfinite(pseudo_semantic_loss(dec.engine(), circuit, fine))
    with pytest.raises(ValueError, match="RecurrentEngine.local_conditionals is NaN at position 0 of sample 1 .3 such "
                                         "positions.: the model gives every candidate there probability 0"):
        pseudo_semantic_loss(dec.engine(), circuit, torch.tensor([[0, 2, 2, 0, 2], [2, 0, 0, 1, 2]]))


def test_decoder_interface_shapes_and_sampling():
    dec = RecurrentDecoder(9, 81, 16, num_layers=5, cell="rnn", dropout=0.2).eval()  # no dropout randomness
    g = torch.Generator().manual_seed(0)
    y = dec.sample(batch_size=2, generator=g)
    assert y.shape == (2, 81) and y.dtype == torch.long and not y.requires_grad
    assert dec.step_logits(y).shape == (2, 81, 9)
    torch.testing.assert_close(dec.sample(batch_size=2, generator=torch.Generator().manual_seed(0)), y)
    greedy = dec.sample(batch_size=2, greedy=True)
    torch.testing.assert_close(greedy, dec.step_logits(greedy).argmax(-1))  # greedy is consistent with teacher forcing
    torch.testing.assert_close(dec.engine().sample(batch_size=2, greedy=True), greedy)
    step_fn = lambda prefix: torch.zeros(prefix.shape[0], 4).index_fill(1, torch.tensor([2]), 50.0)  # noqa: E731
    assert (sample_autoregressive(step_fn, 6, batch_size=3, top_p=0.5) == 2).all()
    with pytest.raises(ValueError, match="context"):
        RecurrentDecoder(3, 4, 5, context_dim=2).sample(batch_size=1)



def test_sample_from_logits_is_multinomial_without_host_reads():
    torch.manual_seed(0)
    logits = torch.randn(4000, 5) * 2
    logits[:, 4] = float("-inf")  # probability 0: never drawn
    draw = sample_from_logits(logits, generator=torch.Generator().manual_seed(1))
    ref = torch.multinomial(logits.softmax(-1), 1, generator=torch.Generator().manual_seed(1)).squeeze(-1)
    assert torch.equal(draw, ref)  # the same random numbers, the same values
    one = torch.tensor([[0.0, 1.0, 2.0, float("-inf")]])
    freq = torch.bincount(sample_from_logits(one.expand(40000, 4), generator=torch.Generator().manual_seed(2)),
                          minlength=4) / 40000
    p = one[0].softmax(-1)
    assert freq[3] == 0 and ((freq - p).abs() < 4 * (p * (1 - p) / 40000).sqrt() + 1e-9).all()
    with pytest.raises(ValueError, match="all -inf"):
        sample_from_logits(torch.full((2, 3), float("-inf")))


class _HostTraffic(TorchDispatchMode):
    """Records the ops that would make a GPU wait: reading values on the host (``multinomial`` checks its
    probabilities on the host inside its kernel, below this mode, so it is named here), and ops that take a
    host tensor together with device tensors (an implicit host-to-device copy, synchronous from pageable memory)."""
    READS = ("_local_scalar_dense", "nonzero", "equal", "is_nonzero", "item", "multinomial")

    def __init__(self, device: str):
        super().__init__()
        self.device, self.seen = device, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        out = func(*args, **(kwargs or {}))
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        copy = func.__name__.startswith(("_to_copy", "copy_"))  # an explicit copy, 0-dim tensors too
        host = any(t.device.type == "cpu" and (t.dim() > 0 or copy) for t in tensors)
        if func.__name__.split(".")[0] in self.READS or (
                host and any(t.device.type == self.device for t in tensors + outs) and self.device != "cpu"):
            self.seen.append(func.__name__)
        return out


def test_sampling_and_the_loss_never_wait_for_the_device(monkeypatch):
    """A Sudoku-sized RNN + PSL step (sample, loss, backward) on the ``meta`` device, which has no data: any
    read of a value raises, and any host tensor sent to the device is recorded.  Then on CPU with the value
    checks off (as on a GPU): conditioning on the givens reads the positions mask, once."""
    from pseudosl.experiments.sudoku.constraint import givens_mask, sudoku_circuit
    from pseudosl.experiments.sudoku.data import generate
    from pseudosl.experiments.sudoku.models import SudokuRNN
    torch.set_default_dtype(torch.float32)
    model, circuit = SudokuRNN(hidden=8, layers=2).train(), sudoku_circuit()
    puzzles = generate(2, seed=0).puzzles
    for fused in (True, False):
        m, c, p = model.to("meta"), circuit.to("meta"), puzzles.to("meta")
        with _HostTraffic("meta") as traffic:
            y = m.generate(p, greedy=False) - 1
            ctx, steps = m.conditioning(p)
            loss = pseudo_semantic_loss(m.decoder.engine(ctx, steps, fused=fused), c, y, allowed=givens_mask(p))
            loss.backward()
        assert loss.device.type == "meta" and traffic.seen == []
    import pseudosl.checks
    monkeypatch.setattr(pseudosl.checks, "reads_values", lambda x: False)
    dec = _decoder("lstm").float().train()
    ctx, steps = torch.randn(3, 4), torch.randn(3, 5, 2)
    allowed = torch.ones(3, 5, 3, dtype=torch.bool)
    allowed[:, 1] = torch.tensor([False, True, False])
    circuit = circuit_from_truth(np.random.default_rng(0).random(3 ** 5) < 0.5, 5, 3)
    for fused in (True, False):
        with _HostTraffic("cpu") as traffic:
            y = dec.sample(ctx, steps)
            pseudo_semantic_loss(dec.engine(ctx, steps, fused=fused), circuit, y, allowed=allowed,
                                 condition=True).backward()
        assert traffic.seen == ["nonzero.default"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampling_and_engine_do_not_synchronise_on_cuda():
    torch.set_default_dtype(torch.float32)
    dec = _decoder("rnn").cuda().train()
    ctx, steps = torch.randn(3, 4, device="cuda"), torch.randn(3, 5, 2, device="cuda")
    circuit = circuit_from_truth(np.random.default_rng(0).random(3 ** 5) < 0.5, 5, 3).cuda()

    def step():
        y = dec.sample(ctx, steps)
        pseudo_semantic_loss(dec.engine(ctx, steps), circuit, y).backward()
    assert_no_host_sync(step)


# -- GPT-2 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(n_embd=32, vocab_size=12, n_positions=64)


def _reference_log_joint(model, prompt):
    """An independent scorer: step through the model token by token (no cache reuse, no shift arithmetic)."""
    def log_joint(y, example):
        p = prompt[example]
        total = 0
        for t in range(y.shape[1]):
            ctx = torch.cat([p, y[:, :t]], 1)
            last = model(input_ids=ctx).logits[:, -1].log_softmax(-1)  # next-token distribution
            total = total + last.gather(-1, y[:, t:t + 1]).squeeze(-1)
        return total
    return log_joint


def test_causal_lm_engine_exact_and_shift(gpt2):
    gpt2.eval()
    prompt = torch.randint(0, 12, (2, 3))
    y = torch.randint(0, 12, (2, 4))
    eng = CausalLMEngine(gpt2, prompt, chunk_size=5, max_logits=40)
    ref = _reference_log_joint(gpt2, prompt)
    example = torch.arange(2)
    torch.testing.assert_close(eng.log_joint(y, example), ref(y, example), **TOL)  # the naive scorer has the right shift
    fast = eng.local_conditionals(y)
    slow = local_conditionals(ref, y, n_values=12)
    torch.testing.assert_close(fast, slow, **TOL)
    truth = np.random.default_rng(1).random(12 ** 2) < 0.3
    circuit = circuit_from_truth(truth, 2, 12)
    y2 = y[:, :2]
    a = pseudo_semantic_loss(eng, circuit, y2)
    b = pseudo_semantic_loss(as_engine(ref, n_values=12), circuit, y2)
    torch.testing.assert_close(a, b, **TOL)
    g = _grads(b, gpt2)
    _assert_grads_close(_grads(a, gpt2), g)
    rec = CausalLMEngine(gpt2, prompt, chunk_size=7, recompute=True)
    c = pseudo_semantic_loss(rec, circuit, y2)
    torch.testing.assert_close(c, b, **TOL)
    _assert_grads_close(_grads(c, gpt2), g)


def test_causal_lm_left_padding(gpt2):
    gpt2.eval()
    prompt = torch.tensor([[0, 5, 6], [4, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    y = torch.randint(0, 12, (2, 3))
    padded = CausalLMEngine(gpt2, prompt, mask).local_conditionals(y)
    alone = CausalLMEngine(gpt2, prompt[:1, 1:]).local_conditionals(y[:1])
    torch.testing.assert_close(padded[:1], alone, **TOL)


def _table_conditionals(log_table, sample):
    """``(n, k)`` conditionals of one anchor read off a joint table ``(k,)*n`` by slicing."""
    rows = []
    for i in range(log_table.dim()):
        idx = list(sample.tolist())
        idx[i] = slice(None)
        rows.append(log_table[tuple(idx)].log_softmax(-1))
    return torch.stack(rows)


def test_causal_lm_any_padding_side_equals_the_unpadded_prompts_and_brute_force(gpt2):
    """Right (a tokenizer's default), left and mixed padding of the same prompts give the conditionals, the PSL,
    ``log_joint``, ``step_log_probs`` and greedy samples of the unpadded prompts, which equal a brute-force table
    of the model's own step-by-step forward passes (float64)."""
    gpt2.eval()
    n, V, pad = 3, 12, 10
    real = [[4, 9, 1], [8, 5], [3]]  # prompts of 3, 2 and 1 real tokens
    padded = {
        "right": ([[4, 9, 1], [8, 5, pad], [3, pad, pad]], [[1, 1, 1], [1, 1, 0], [1, 0, 0]]),
        "left": ([[4, 9, 1], [pad, 8, 5], [pad, pad, 3]], [[1, 1, 1], [0, 1, 1], [0, 0, 1]]),
        "mixed": ([[4, 9, 1], [8, pad, 5], [pad, 3, pad]], [[True] * 3, [True, False, True], [False, True, False]]),
    }
    y = torch.tensor([[7, 0, 11], [2, 2, 6], [5, 11, 3]])
    ys = torch.as_tensor(oracle.assignments(n, V))
    tables = [_reference_log_joint(gpt2, torch.tensor([p]))(ys, torch.zeros(len(ys), dtype=torch.long)).view((V,) * n)
              for p in real]
    want = torch.stack([_table_conditionals(t, s) for t, s in zip(tables, y)])  # (3, n, V) brute force
    truth = np.random.default_rng(5).random(V ** n) < 0.2
    circuit = circuit_from_truth(truth, n, V)
    want_psl = -oracle.log_wmc(truth, want)
    alone = [CausalLMEngine(gpt2, torch.tensor([p])) for p in real]
    for b, eng in enumerate(alone):
        torch.testing.assert_close(eng.local_conditionals(y[b:b + 1])[0], want[b], atol=ATOL64_FEW_OPS, rtol=0)
    greedy = torch.cat([eng.sample(batch_size=1, length=4, greedy=True) for eng in alone])
    for side, (ids, mask) in padded.items():
        eng = as_engine(gpt2, prompt_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
        torch.testing.assert_close(eng.local_conditionals(y), want, atol=ATOL64_FEW_OPS, rtol=0, msg=side)
        torch.testing.assert_close(pseudo_semantic_loss(eng, circuit, y, reduction="none"), want_psl,
                                   atol=ATOL64_FEW_OPS, rtol=0, msg=side)
        joint = torch.stack([t[tuple(s)] for t, s in zip(tables, y)])
        torch.testing.assert_close(eng.log_joint(y, torch.arange(3)), joint, atol=ATOL64_FEW_OPS, rtol=0, msg=side)
        steps = eng.step_log_probs(y, torch.arange(3))  # (3, n, V): row b, step t = table marginal after y_<t
        for b, t in enumerate(tables):
            torch.testing.assert_close(steps[b, 0], t.logsumexp((1, 2)), atol=ATOL64_FEW_OPS, rtol=0, msg=side)
            torch.testing.assert_close(steps[b, 2], t[y[b, 0], y[b, 1]].log_softmax(-1), atol=ATOL64_FEW_OPS, rtol=0, msg=side)
        assert torch.equal(eng.sample(length=4, greedy=True), greedy), side
    # the old defect: a right-padded row scored after its padding token differs from the model's value
    after_pad = CausalLMEngine(gpt2, torch.tensor([[8, 5, pad]])).local_conditionals(y[1:2])[0]
    assert (after_pad - want[1]).abs().max() > 1e-3


@pytest.mark.parametrize("mask, match", [
    ([[1, 1, 1], [1, 3, 0]], "must hold 0 .padding. or 1 .a real token.; got 3 at row 1, column 1"),
    ([[1, 1, 1], [0.25, 1, 1]], "got 0.25 at row 1, column 0"),
    ([[1, -1, 1], [1, 1, 1]], "got -1 at row 0, column 1"),
    ([[1, 1, 1], [0, 0, 0]], "attention_mask row 1 has no real token"),
    ([[1, 1, 1]], r"attention_mask must have the prompt's shape \(2, 3\), got \(1, 3\)"),
])
def test_causal_lm_refuses_a_bad_attention_mask_by_name(gpt2, mask, match):
    prompt = torch.tensor([[4, 9, 1], [8, 5, 2]])
    with pytest.raises(ValueError, match=match):
        as_engine(gpt2, prompt_ids=prompt, attention_mask=torch.tensor(mask))
    with pytest.raises(TypeError, match="attention_mask must be a bool, integer or float tensor of 0/1"):
        CausalLMEngine(gpt2, prompt, torch.ones(2, 3, dtype=torch.complex64))
    with pytest.raises(TypeError, match="got list"):
        CausalLMEngine(gpt2, prompt, [[1, 1, 1], [1, 1, 1]])


def test_value_map_fold_is_exact_when_other_is_small(gpt2):
    gpt2.eval()
    vm = ValueMap([3, 5, 7], 12)
    prompt = torch.randint(0, 12, (2, 2))
    y = torch.tensor([[3, 5, 11, 10], [10, 4, 5, 8]])  # distinguished and other tokens as samples
    exact = vm.fold(local_conditionals(CausalLMEngine(gpt2, prompt).log_joint, y, n_values=12))
    # top_k = 8: S covers the vocabulary (R empty, or R = {one token} when the sample is distinguished)
    eng = CausalLMEngine(gpt2, prompt, value_map=vm, top_k=8)
    torch.testing.assert_close(eng.local_conditionals(y), exact, **TOL)
    # top_k = 7: exact wherever the sample is not distinguished (|R| = 1); an estimate elsewhere
    approx = CausalLMEngine(gpt2, prompt, value_map=vm, top_k=7).local_conditionals(y)
    other = vm.to_values(y) == vm.other
    torch.testing.assert_close(approx[other], exact[other], **TOL)
    torch.testing.assert_close(approx.logsumexp(-1), torch.zeros(2, 4), **TOL)


def test_value_map_counts_no_token_twice(gpt2):
    """With a constant suffix (n = 1) the estimate is exact for any top_k: every token counted once."""
    gpt2.eval()
    vm = ValueMap([1, 2], 12)
    prompt = torch.randint(0, 12, (3, 2))
    y = torch.tensor([[1], [2], [9]])
    exact = vm.fold(local_conditionals(CausalLMEngine(gpt2, prompt).log_joint, y, n_values=12))
    for top_k in range(0, 10):
        got = CausalLMEngine(gpt2, prompt, value_map=vm, top_k=top_k).local_conditionals(y)
        torch.testing.assert_close(got, exact, **TOL)
    assert vm.to_values(torch.tensor([1, 2, 0, 11])).tolist() == [0, 1, 2, 2]
    with pytest.raises(ValueError, match="distinct"):
        ValueMap([1, 1], 12)


def test_causal_lm_loss_diagnostics_use_circuit_values(gpt2):
    gpt2.eval()
    vm = ValueMap([3], 12)  # circuit over values {token 3, other}
    prompt = torch.zeros(2, 1, dtype=torch.long)
    y = torch.tensor([[3, 4, 4], [4, 4, 4]])
    circuit = circuit_from_truth(np.array([0 in a for a in oracle.assignments(3, 2)]), 3, 2)  # token 3 occurs
    eng = CausalLMEngine(gpt2, prompt, value_map=vm, top_k=2)
    loss, d = pseudo_semantic_loss(eng, circuit, y, negate=True, return_diagnostics=True)
    assert d.satisfied.tolist() == [True, False]
    assert torch.isfinite(loss)
    s = eng.sample(length=3)
    assert s.shape == (2, 3) and s.dtype == torch.long


def test_chunked_head_logsumexp_with_bias_matches_torch():
    from pseudosl.psl.causal_lm import head_logsumexp
    head = torch.nn.Linear(5, 13)
    h = torch.randn(4, 3, 5, requires_grad=True)
    got = head_logsumexp(h, head, max_logits=20)  # 1 row of 13 logits per chunk
    want = head(h).logsumexp(-1)
    torch.testing.assert_close(got, want, atol=ATOL64_FEW_OPS, rtol=0)
    w = torch.randn_like(want)
    g1 = torch.autograd.grad((got * w).sum(), [h, head.weight, head.bias])
    g2 = torch.autograd.grad((want * w).sum(), [h, head.weight, head.bias])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=ATOL64_FEW_OPS, rtol=0)


# -- fused suffixes, positions, and the cuDNN-safe mode (issue 7) ------------------------------------
@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_fused_and_stepwise_suffixes_agree(cell):
    dec = _decoder(cell)
    ctx, steps = torch.randn(3, 4), torch.randn(3, 5, 2)
    y = dec.sample(ctx, steps)
    circuit = circuit_from_truth(np.random.default_rng(1).random(3 ** 5) < 0.5, 5, 3)
    losses = {fused: pseudo_semantic_loss(dec.engine(ctx, steps, fused=fused), circuit, y, chunk_size=chunk)
              for fused, chunk in ((True, None), (False, None), (True, 5))}
    torch.testing.assert_close(losses[True], losses[False], **TOL)
    _assert_grads_close(_grads(losses[True], dec), _grads(losses[False], dec))
    exact = local_conditionals(dec.engine(ctx, steps).log_joint, y, n_values=3)  # generic path through the engine's log_joint
    for fused in (True, False):
        torch.testing.assert_close(dec.engine(ctx, steps, fused=fused).local_conditionals(y, chunk_size=4), exact, **TOL)


@pytest.mark.parametrize("fused", [True, False])
def test_positions_compute_only_the_requested_conditionals(fused):
    dec = _decoder("lstm")
    ctx, steps = torch.randn(3, 4), torch.randn(3, 5, 2)
    y = dec.sample(ctx, steps)
    pos = torch.tensor([[True, False, True, False, True], [False] * 5, [False, True, True, True, False]])
    eng = dec.engine(ctx, steps, fused=fused)
    full = eng.local_conditionals(y)
    part = eng.local_conditionals(y, positions=pos, fill=-7.0, chunk_size=4)
    torch.testing.assert_close(part[pos], full[pos], **TOL)
    assert (part[~pos] == -7.0).all()
    with pytest.raises(ValueError, match=r"positions must have the sample's shape \(3, 5\)"):
        eng.local_conditionals(y, positions=pos[:, :4])


def test_conditioning_on_unit_constraints_needs_only_the_free_positions():
    """With condition=True the PSL computes conditionals only where ``allowed`` leaves a choice: same loss,
    same gradients as with every position computed."""
    dec = _decoder("rnn")
    ctx, steps = torch.randn(4, 4), torch.randn(4, 5, 2)
    fixed = torch.tensor([[0, -1, -1, 2, -1], [-1, -1, -1, -1, -1], [1, 1, -1, 0, 2], [-1, 2, -1, -1, 0]])
    y = dec.sample(ctx, steps, fixed=fixed)
    allowed = torch.ones(4, 5, 3, dtype=torch.bool)
    allowed[fixed >= 0] = torch.nn.functional.one_hot(fixed[fixed >= 0], 3).bool()
    circuit = circuit_from_truth(np.random.default_rng(2).random(3 ** 5) < 0.6, 5, 3)
    eng = dec.engine(ctx, steps)
    calls = []
    orig = eng.local_conditionals

    def spy(s, *, positions=None, **kw):
        calls.append(positions)
        return orig(s, positions=positions, **kw)
    eng.local_conditionals = spy
    fast = pseudo_semantic_loss(eng, circuit, y, allowed=allowed, condition=True, reduction="none")
    assert calls[0] is not None and (calls[0] == (allowed.sum(-1) > 1)).all()
    cond = local_conditionals(dec.engine(ctx, steps).log_joint, y, n_values=3)
    from pseudosl.losses import product_log_prob
    want = -product_log_prob(circuit, cond, allowed, condition=True)
    torch.testing.assert_close(fast, want, **TOL)
    _assert_grads_close(_grads(fast.sum(), dec), _grads(want.sum(), dec))


def test_exact_mode_runs_recurrent_layers_trainable_without_dropout():
    """cuDNN backprops an RNN only in training mode: the engine (and an eval-mode decoder's log_joint
    under autograd) run the recurrent module in training mode with dropout 0; values are those of eval mode."""
    seen = []
    for train in (False, True):
        dec = _decoder("lstm").train(train)
        dec.rnn.register_forward_pre_hook(lambda m, a: seen.append((m.training, m.dropout)))
        ctx, steps = torch.randn(2, 4), torch.randn(2, 5, 2)
        y = dec.sample(ctx, steps)
        seen.clear()
        cond = dec.engine(ctx, steps, fused=True).local_conditionals(y)
        assert seen and all(s == (True, 0.0) for s in seen)
        assert dec.training == train and dec.rnn.training == train and dec.rnn.dropout == 0.3
        with torch.no_grad():
            dec.eval()
            ref = local_conditionals(lambda s, example: dec.log_joint(s, ctx[example], steps[example]), y, n_values=3)
        torch.testing.assert_close(cond, ref, **TOL)
    dec = _decoder("rnn").eval()
    seen.clear()
    dec.rnn.register_forward_pre_hook(lambda m, a: seen.append((m.training, m.dropout)))
    dec.log_joint(dec.sample(batch_size=2, context=torch.randn(2, 4), step_inputs=torch.randn(2, 5, 2)),
                  torch.randn(2, 4), torch.randn(2, 5, 2)).sum()
    assert seen[-1] == (True, 0.0) and not dec.rnn.training


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("fused", [True, False])
def test_recurrent_engine_on_cuda_matches_cpu(train, fused):
    dec = _decoder("lstm").train(train)
    ctx, steps = torch.randn(2, 4), torch.randn(2, 5, 2)
    y = dec.sample(ctx, steps)
    circuit = circuit_from_truth(np.random.default_rng(0).random(3 ** 5) < 0.5, 5, 3)
    cpu = pseudo_semantic_loss(dec.engine(ctx, steps), circuit, y)
    g_cpu = _grads(cpu, dec)
    dec_gpu, circuit_gpu = dec.cuda(), circuit.cuda()
    gpu = pseudo_semantic_loss(dec_gpu.engine(ctx.cuda(), steps.cuda(), fused=fused), circuit_gpu, y.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, **TOL)
    for a, b in zip(_grads(gpu, dec_gpu), g_cpu):
        torch.testing.assert_close(a.cpu(), b, **TOL)
    slow = pseudo_semantic_loss(as_engine(lambda s, example: dec_gpu.log_joint(s, ctx.cuda()[example], steps.cuda()[example]),
                                          n_values=3), circuit_gpu, y.cuda())
    slow.backward()  # the generic path with the decoder's own log_joint, eval or train mode


def test_low_precision_suffixes_stay_close_to_float32():
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    dec = RecurrentDecoder(4, 12, 16, num_layers=2, cell="rnn", context_dim=3)
    ctx = torch.randn(3, 3)
    y = dec.sample(ctx)
    for fused in (True, False):
        ref = dec.engine(ctx, fused=fused).local_conditionals(y)
        low = dec.engine(ctx, fused=fused, suffix_dtype=torch.bfloat16).local_conditionals(y)
        assert low.dtype == torch.float32 and not torch.equal(low, ref)
        assert (low.exp() - ref.exp()).abs().max() < 0.02
    with pytest.raises(ValueError, match="suffix_dtype"):
        dec.engine(ctx, suffix_dtype=torch.int8)


def test_a_callers_autocast_does_not_reach_the_engine():
    """Mixed-precision training (an outer bfloat16 autocast) leaves the conditionals in float32, exactly as
    without it, in both suffix modes (the step-by-step one used to mix dtypes and fail); ``suffix_dtype``
    still lowers the suffix recurrence alone."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    dec = RecurrentDecoder(3, 6, 16, num_layers=2, cell="gru", context_dim=3).train()
    ctx = torch.randn(3, 3)
    y = dec.sample(ctx)
    circuit = circuit_from_truth(np.random.default_rng(1).random(3 ** 6) < 0.5, 6, 3)
    for fused in (True, False):
        ref = dec.engine(ctx, fused=fused).local_conditionals(y)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = dec.engine(ctx, fused=fused).local_conditionals(y)
            low = dec.engine(ctx, fused=fused, suffix_dtype=torch.bfloat16).local_conditionals(y)
        assert out.dtype == torch.float32 and torch.equal(out, ref)
        assert not torch.equal(low, ref) and (low.exp() - ref.exp()).abs().max() < 0.02
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = pseudo_semantic_loss(dec.engine(ctx, fused=fused), circuit, y)
        assert loss.dtype == torch.float32
        loss.backward()


# -- a general partition of the vocabulary (ValueMap.from_classes) -------------------------------------------------
CLASSES = [3, 0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3]  # 12 tokens in classes of 1, 2, 3 and 6 tokens
PAIRS = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def _reference_conditionals(model, prompt, y):
    """Brute force from the model's own forward passes: ``(B, n, V)`` token conditionals ``log p(y_i = c | y_-i)`` and
    ``(B, n, V)`` next-token log-probabilities ``log p(c | x, y_<i)``."""
    ref = _reference_log_joint(model, prompt)
    cond = local_conditionals(ref, y, n_values=model.config.vocab_size)
    prefix = model(input_ids=torch.cat([prompt, y], 1)).logits[:, prompt.shape[1] - 1:-1].log_softmax(-1)
    return cond, prefix


def _documented_estimate(cond, prefix, y, lookup, top_k, max_class_size):
    """The engine's folded conditionals as the module docs state them, token by token: every token of a class of at
    most ``max_class_size`` tokens, the sample and the ``top_k`` most likely tokens of each larger class exact; the
    rest ``R_j`` of a larger class ``log p(R_j | x, y_<i) + log p(y_>i | x, y_<i, r_j)``, ``r_j`` its most likely."""
    lookup = torch.as_tensor(lookup)
    n_classes = int(lookup.max()) + 1
    sizes = torch.bincount(lookup, minlength=n_classes)
    out = torch.empty(*y.shape, n_classes)
    for b in range(y.shape[0]):
        for i in range(y.shape[1]):
            c, pre = cond[b, i], prefix[b, i]
            for j in range(n_classes):
                members = [t for t in range(len(lookup)) if lookup[t] == j]
                if sizes[j] <= max_class_size:
                    out[b, i, j] = c[members].logsumexp(0)
                    continue
                others = sorted((t for t in members if t != y[b, i]), key=lambda t: -float(pre[t]))
                exact = others[:top_k] + [t for t in members if t == y[b, i]]
                rest = others[top_k:]
                terms = [c[t] for t in exact]
                if rest:  # p(y^{i<-r}) / p(r | x, y_<i) * p(R | x, y_<i)
                    terms.append(c[rest[0]] - pre[rest[0]] + pre[rest].logsumexp(0))
                out[b, i, j] = torch.stack(terms).logsumexp(0)
    return out.log_softmax(-1)


@pytest.mark.parametrize("lookup, top_k, max_class_size, max_logits", [
    (CLASSES, 5, 1, 1 << 22),  # classes 1-3 large; R of the 6-token class: one token or none
    (CLASSES, 5, 3, 30),       # only the 6-token class large; the per-class top-k one class at a time
    (CLASSES, 0, 6, 1 << 22),  # every class small: every token scored
    (PAIRS, 1, 1, 1 << 22),    # six large classes, each R_j one token (or none in the sample's)
    (PAIRS, 1, 1, 30),
])
def test_general_partition_is_exact_when_each_rest_holds_at_most_one_token(gpt2, lookup, top_k, max_class_size,
                                                                          max_logits, one_thread):
    """Conditionals, PSL and its gradients against brute force from the model's own forward passes (float64)."""
    gpt2.eval()
    vm = ValueMap.from_classes(lookup)
    n, V, C = 4, 12, vm.n_values
    prompt = torch.tensor([[5, 2], [9, 0], [1, 1]])
    y = torch.tensor([[1, 3, 8, 0], [7, 7, 4, 11], [2, 10, 5, 1]])
    cond, _ = _reference_conditionals(gpt2, prompt, y)
    eng = as_engine(gpt2, prompt_ids=prompt, value_map=vm, top_k=top_k, max_class_size=max_class_size,
                    max_logits=max_logits, chunk_size=7)
    got = eng.local_conditionals(y)
    torch.testing.assert_close(got, vm.fold(cond), atol=ATOL64_FEW_OPS, rtol=0)
    # the PSL of a constraint over the classes is the PSL over tokens of the constraint read through the classes
    truth = np.random.default_rng(2).random(C ** n) < 0.4
    token_truth = truth[oracle.assignment_index(vm.to_values(torch.as_tensor(oracle.assignments(n, V))), C).numpy()]
    want = -oracle.log_wmc(token_truth, cond)
    psl = pseudo_semantic_loss(eng, Constraint(circuit_from_truth(truth, n, C), vm), y, reduction="none")
    torch.testing.assert_close(psl, want, atol=ATOL64_FEW_OPS, rtol=0)
    _assert_grads_close(_grads(psl.sum(), gpt2), _grads(want.sum(), gpt2))


@pytest.mark.parametrize("lookup, top_k, max_class_size", [(CLASSES, 0, 1), (CLASSES, 2, 1), (CLASSES, 1, 3),
                                                            (PAIRS, 0, 1), ([0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3], 2, 1)])
def test_general_partition_estimates_are_the_documented_formula(gpt2, lookup, top_k, max_class_size):
    """With real estimates (a rest of several tokens) the engine computes the estimator the docs state; its error to
    the exact conditionals is finite, and not zero (the estimate is in use)."""
    gpt2.eval()
    vm = ValueMap.from_classes(lookup)
    prompt = torch.tensor([[5, 2], [9, 0]])
    y = torch.tensor([[1, 3, 8, 0], [7, 7, 4, 11]])
    cond, prefix = _reference_conditionals(gpt2, prompt, y)
    with torch.no_grad():
        got = as_engine(gpt2, prompt_ids=prompt, value_map=vm, top_k=top_k, max_class_size=max_class_size
                        ).local_conditionals(y)
        want = _documented_estimate(cond, prefix, y, lookup, top_k, max_class_size)
    torch.testing.assert_close(got, want, atol=ATOL64_FEW_OPS, rtol=0)
    error = (got.exp() - vm.fold(cond).exp()).abs()
    assert torch.isfinite(got).all() and 1e-6 < error.max() < 0.5


def test_neighbour_rows_per_position_are_the_documented_count(gpt2):
    gpt2.eval()
    vm = ValueMap.from_classes(CLASSES)  # small classes (<= 2 tokens): 3 tokens; large: 2 classes
    eng = CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=vm, top_k=2, max_class_size=2)
    assert eng.n_candidates == 3 + 1 + (2 + 1) * 2  # the large classes hold 3 and 6 tokens
    rows = []
    hook = gpt2.transformer.register_forward_hook(lambda m, args, kw, out: rows.append(kw["input_ids"].shape[0]),
                                                  with_kwargs=True)
    try:
        eng.local_conditionals(torch.tensor([[1, 3, 8, 0], [7, 7, 4, 11]]))
    finally:
        hook.remove()
    assert rows == [2] + [2 * eng.n_candidates] * 3  # the base run, then positions 0 .. n-2
    ragged = CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=vm, top_k=4)  # classes of 2, 3, 6 tokens: 2 + 3 + 5
    assert ragged.n_candidates == 1 + 1 + 2 + 3 + 5
    catch_all = CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=ValueMap([3, 5, 7], 12), top_k=4)
    assert catch_all.n_candidates == 3 + 4 + 2


@pytest.mark.parametrize("kw, error, match", [
    (dict(top_k=6), ValueError, r"top_k must lie in 0..5 \(the largest class over max_class_size=1 tokens has 6"),
    (dict(top_k=1, max_class_size=6), ValueError, r"top_k must lie in 0..0"),
    (dict(max_class_size=0), ValueError, "max_class_size"),
    (dict(top_k=-1), ValueError, "top_k"),
    (dict(top_k=1.0), TypeError, "top_k must be an int"),
])
def test_general_partition_settings_are_checked_by_name(gpt2, kw, error, match):
    with pytest.raises(error, match=match):
        CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=ValueMap.from_classes(CLASSES), **kw)
