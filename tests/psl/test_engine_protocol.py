"""Bring your own model: ``pseudosl.as_engine`` on a user-written GRU / LSTM decoder, a tiny GPT-2 built from a
config and a bare ``log_joint``, against float64 brute force; prefix reuse counted in token-steps; training under
the PSL; ``log_prob`` of whole candidate sequences (importance weights); example ids that chunks cannot mix;
named errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import oracle
from tolerances import ATOL64, RTOL64, ATOL64_FEW_OPS
import pseudosl
from tiny_models import circuit_from_truth, tiny_gpt2
from pseudosl.logic.categorical import all_of

TOL = dict(atol=ATOL64, rtol=RTOL64)


pytestmark = pytest.mark.usefixtures("float64_default")


@pytest.fixture
def one_thread():
    """Tiny models train on one thread (two threads on a loaded 2-core machine made a step 20x slower)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class UserDecoder(nn.Module):
    """A decoder as a user writes it: an embedding of the previous value (value ``k`` = start), an RNN, a head.
    ``forward`` is the user's own teacher-forced ``log p(y)``: the independent scorer the engine is checked against."""

    def __init__(self, k: int, hidden: int = 8, layers: int = 2, cell: type = nn.GRU, batch_first: bool = True):
        super().__init__()
        self.k = k
        self.embed = nn.Embedding(k + 1, hidden)
        self.rnn = cell(hidden, hidden, num_layers=layers, batch_first=batch_first, dropout=0.3 if layers > 1 else 0.0)
        self.out = nn.Linear(hidden, k)
        with torch.no_grad():
            self.out.weight.mul_(6.0)  # peaky: conditionals far from uniform

    def forward(self, y: torch.Tensor, state=None) -> torch.Tensor:
        prev = torch.cat([torch.full_like(y[:, :1], self.k), y[:, :-1]], 1)
        x = self.embed(prev)
        out, _ = self.rnn(x if self.rnn.batch_first else x.transpose(0, 1), state)
        out = out if self.rnn.batch_first else out.transpose(0, 1)
        return self.out(out).log_softmax(-1).gather(-1, y[..., None]).squeeze(-1).sum(-1)

    def engine(self, **kw) -> pseudosl.Engine:
        return pseudosl.as_engine(self, rnn=self.rnn, embed=self.embed, head=self.out, start=self.k, **kw)


def _table_conditionals(log_table: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """``(n, k)`` conditionals of one anchor read off a joint table ``(k,)*n`` by slicing."""
    rows = []
    for i in range(log_table.dim()):
        idx = list(sample.tolist())
        idx[i] = slice(None)
        rows.append(log_table[tuple(idx)].log_softmax(-1))
    return torch.stack(rows)


def _brute_force(log_joint_of_all, n: int, k: int, sample: torch.Tensor) -> torch.Tensor:
    """``(B, n, k)``: for each anchor ``b``, the table of example ``b`` (``log_joint_of_all(ys, b)``) sliced."""
    ys = torch.as_tensor(oracle.assignments(n, k))
    out = []
    for b in range(sample.shape[0]):
        table = log_joint_of_all(ys, b).view((k,) * n)
        torch.testing.assert_close(table.logsumexp(tuple(range(n))), torch.tensor(0.0), **TOL)  # normalised
        out.append(_table_conditionals(table, sample[b]))
    return torch.stack(out)


class _StepCounter(TorchDispatchMode):
    """Token-steps of a recurrent layer: the rows of every matmul against its ``weight_hh`` (one row = one step of
    one sequence), whatever path runs it (fused ``nn.GRU`` call, ``gru_cell``, per-layer ``torch.gru``)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.ptr, self.steps = weight.untyped_storage().data_ptr(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in ("mm", "addmm"):
            mats = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2]
            if any(m.untyped_storage().data_ptr() == self.ptr for m in mats):
                self.steps += mats[0].shape[0]  # the input rows
        return func(*args, **(kwargs or {}))


# -- a user-written GRU / LSTM decoder ---------------------------------------------------------------------
@pytest.mark.parametrize("cell,batch_first,layers", [(nn.GRU, True, 2), (nn.LSTM, False, 2), (nn.RNN, True, 1)])
def test_user_decoder_conditionals_loss_and_gradients_vs_brute_force(cell, batch_first, layers):
    torch.manual_seed(0)
    n, k = 4, 3
    model = UserDecoder(k, cell=cell, batch_first=batch_first, layers=layers).train()  # the engine runs it in eval mode
    engine = model.engine(length=n)
    assert isinstance(engine, pseudosl.RecurrentEngine) and engine.n_values == k
    y = engine.sample(batch_size=3, generator=torch.Generator().manual_seed(1))
    model.eval()
    want = _brute_force(lambda ys, b: model(ys).detach(), n, k, y)
    torch.testing.assert_close(engine.local_conditionals(y).detach(), want, **TOL)
    truth = np.random.default_rng(0).random(k ** n) < 0.5
    circuit = circuit_from_truth(truth, n, k)
    model.train()
    loss = pseudosl.pseudo_semantic_loss(engine, circuit, y, reduction="sum")
    assert model.training  # the mode is restored
    model.eval()
    ref = -oracle.log_wmc(truth, pseudosl.as_engine(lambda s, e: model(s), n_values=k).local_conditionals(y)).sum()
    torch.testing.assert_close(loss, ref, **TOL)
    params = list(model.parameters())
    for a, b in zip(torch.autograd.grad(loss, params), torch.autograd.grad(ref, params)):
        torch.testing.assert_close(a, b, atol=ATOL64, rtol=RTOL64)


def test_user_decoder_bound_to_initial_states_scores_each_example_under_its_own():
    torch.manual_seed(1)
    n, k = 3, 3
    model = UserDecoder(k, cell=nn.LSTM).eval()
    state = (torch.randn(2, 2, 8), torch.randn(2, 2, 8))  # (layers, E = 2 examples, hidden)
    engine = model.engine(length=n, state=state)
    assert engine.n_examples == 2
    y = engine.sample(generator=torch.Generator().manual_seed(0))  # one per bound example
    assert y.shape == (2, n)
    want = _brute_force(lambda ys, b: model(ys, tuple(s[:, b:b + 1].expand(-1, len(ys), -1).contiguous()
                                                      for s in state)), n, k, y)
    torch.testing.assert_close(engine.local_conditionals(y), want, **TOL)
    for chunk in (1, 5, 7):  # any chunk of neighbour rows: every row carries its example id
        torch.testing.assert_close(engine.local_conditionals(y, chunk_size=chunk), want, **TOL)


def test_prefix_reuse_counted_in_token_steps():
    """A user-written GRU gets the prefix-reusing engine: the sample once plus K n (n-1) / 2 suffix steps per anchor,
    against the K n^2 of scoring every neighbour whole (the generic path)."""
    torch.manual_seed(2)
    n, k, b = 6, 3, 4
    model = UserDecoder(k, layers=1).eval()
    engine = model.engine(length=n, fused=False)
    y = engine.sample(batch_size=b)
    with _StepCounter(model.rnn.weight_hh_l0) as fast:
        cond = engine.local_conditionals(y)
    generic = pseudosl.as_engine(lambda s, e: model(s), n_values=k)
    with _StepCounter(model.rnn.weight_hh_l0) as slow:
        ref = generic.local_conditionals(y)
    torch.testing.assert_close(cond, ref, **TOL)
    assert fast.steps == b * n + b * k * n * (n - 1) // 2  # 24 + 180
    assert slow.steps == b * n * k * n  # 432
    with _StepCounter(model.rnn.weight_hh_l0) as fused:
        torch.testing.assert_close(model.engine(length=n, fused=True).local_conditionals(y), ref, **TOL)
    assert fused.steps == b * n + b * k * (n - 1) * (n - 1)  # suffixes padded to the longest in one call


def test_user_gru_learns_a_constraint_under_the_psl(one_thread):
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    n, k = 4, 3
    y_ = pseudosl.positions(n, k)
    circuit = pseudosl.compile_categorical(all_of(y_[i] != y_[i + 1] for i in range(n - 1)))  # 24 of 81
    model = UserDecoder(k, hidden=16, layers=1)
    engine = model.engine(length=n)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(1)

    def satisfied() -> float:
        return pseudosl.sample_satisfies(circuit, engine.sample(batch_size=1000, generator=g)).float().mean().item()

    before = satisfied()
    for _ in range(60):
        loss = pseudosl.pseudo_semantic_loss(engine, circuit, engine.sample(batch_size=32))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert before < 0.6 and satisfied() > 0.9


# -- a Hugging Face GPT-2 from a config ----------------------------------------------------------------------
def _gpt2(k: int):
    """A tiny GPT-2 over ``k`` values plus a BOS token ``k``, peaky."""
    model = tiny_gpt2(n_embd=16, vocab_size=k + 1, n_positions=8).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # tied with the input embeddings
    return model


def _lm_scorer(model, prompt: torch.Tensor):
    """``log p(ys | prompt)`` token by token without a cache (independent of the engine)."""
    def score(ys: torch.Tensor) -> torch.Tensor:
        p = prompt.expand(len(ys), -1)
        total = torch.zeros(len(ys))
        for t in range(ys.shape[1]):
            last = model(input_ids=torch.cat([p, ys[:, :t]], 1)).logits[:, -1].log_softmax(-1)
            total = total + last.gather(-1, ys[:, t:t + 1]).squeeze(-1)
        return total.detach()
    return score


def test_gpt2_conditionals_vs_brute_force_and_prefix_reuse():
    pytest.importorskip("transformers")
    n, k = 3, 3
    model = _gpt2(k)
    prompts = torch.tensor([[3], [1]])  # two examples: BOS, and a value as context
    engine = pseudosl.as_engine(model, prompt_ids=prompts)  # all 4 tokens are values
    assert isinstance(engine, pseudosl.CausalLMEngine) and engine.n_values == k + 1 and engine.n_examples == 2
    y = torch.tensor([[0, 3, 1], [2, 2, 0]])
    want = _brute_force(lambda ys, b: _lm_scorer(model, prompts[b:b + 1])(ys), n, k + 1, y)
    tokens = []
    model.transformer.register_forward_pre_hook(
        lambda m, a, kw: tokens.append((kw["input_ids"] if "input_ids" in kw else a[0]).numel()), with_kwargs=True)
    torch.testing.assert_close(engine.local_conditionals(y), want, atol=ATOL64, rtol=RTOL64)
    b, K, P = 2, k + 1, 1
    assert sum(tokens) == b * (P + n) + b * K * n * (n - 1) // 2  # the prefix is cached: suffixes only
    tokens.clear()
    generic = pseudosl.as_engine(engine.log_joint, n_values=K)
    torch.testing.assert_close(generic.local_conditionals(y), want, atol=ATOL64, rtol=RTOL64)
    assert sum(tokens) == b * n * K * (P + n)


def test_gpt2_with_a_bos_token_outside_the_values():
    """``n_values=k``: the circuit's values are tokens 0..k-1 of a vocabulary that adds BOS = k; conditionals are
    normalised over the values, samples never hold BOS, and the loss needs no circuit value for it."""
    pytest.importorskip("transformers")
    n, k = 3, 3
    model = _gpt2(k)
    bos = torch.tensor([[k]])
    engine = pseudosl.as_engine(model, prompt_ids=bos, n_values=k)
    assert engine.n_values == k and engine.vocab_size == k + 1
    y = engine.sample(batch_size=400, length=n, generator=torch.Generator().manual_seed(0))
    assert y.shape == (400, n) and y.max() < k
    ys = torch.as_tensor(oracle.assignments(n, k + 1))
    table = _lm_scorer(model, bos)(ys).view((k + 1,) * n)[:k, :k, :k]  # sequences of values only
    want = torch.stack([_table_conditionals(table, s) for s in y[:5]])
    torch.testing.assert_close(engine.local_conditionals(y[:5]), want, atol=ATOL64, rtol=RTOL64)
    circuit = pseudosl.compile_categorical(all_of(v != w for v, w in zip(pseudosl.positions(n, k), pseudosl.positions(n, k)[1:])))
    loss = pseudosl.pseudo_semantic_loss(engine, circuit, y[:8])
    loss.backward()
    assert torch.isfinite(loss)


def test_gpt2_samples_are_exact_ancestral_samples():
    pytest.importorskip("transformers")
    n, k, draws = 2, 3, 20000
    model = _gpt2(k)
    prompts = torch.tensor([[3], [0]])
    engine = pseudosl.as_engine(model, prompt_ids=prompts)
    ids = torch.tensor([0, 1]).repeat_interleave(draws)
    y = engine.sample(ids, length=n, generator=torch.Generator().manual_seed(3))
    ys = torch.as_tensor(oracle.assignments(n, k + 1))
    for b in range(2):
        p = _lm_scorer(model, prompts[b:b + 1])(ys).exp()
        code = y[ids == b] @ torch.tensor([k + 1, 1])
        freq = torch.bincount(code, minlength=len(ys)).double() / draws
        assert ((freq - p).abs() <= 4.5 * (p * (1 - p) / draws).sqrt() + 1e-4).all()  # no token banned, none ended early


def test_gpt2_learns_a_constraint_under_the_psl(one_thread):
    pytest.importorskip("transformers")
    torch.set_default_dtype(torch.float32)
    n, k = 4, 3
    model = tiny_gpt2(n_embd=32, vocab_size=k + 1, n_positions=8).float().train()
    engine = pseudosl.as_engine(model, prompt_ids=torch.tensor([[k]]), n_values=k)
    y_ = pseudosl.positions(n, k)
    circuit = pseudosl.compile_categorical(all_of(y_[i] != y_[i + 1] for i in range(n - 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)

    def satisfied() -> float:
        return pseudosl.sample_satisfies(circuit, engine.sample(batch_size=1000, length=n, generator=g)).float().mean().item()

    before = satisfied()
    for _ in range(80):
        loss = pseudosl.pseudo_semantic_loss(engine, circuit, engine.sample(batch_size=32, length=n))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert before < 0.6 and satisfied() > 0.8


def test_gpt2_refuses_a_sequence_longer_than_its_context_before_running():
    pytest.importorskip("transformers")
    model = _gpt2(3)  # n_positions = 8
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    model.transformer.register_forward_pre_hook(lambda *a: calls.append(1))
    engine = pseudosl.as_engine(model, prompt_ids=torch.tensor([[3, 3]]))
    too_long = torch.zeros(1, 7, dtype=torch.long)
    for call in (lambda: engine.local_conditionals(too_long), lambda: engine.sample(length=7),
                 lambda: engine.log_joint(too_long, torch.zeros(1, dtype=torch.long)),
                 lambda: engine.log_prob(too_long[None])):
        with pytest.raises(ValueError, match=r"need 9 positions but the model has 8 \(config.n_positions"):
            call()
    assert not calls
    assert engine.sample(length=6).shape == (1, 6)  # 2 + 6 = 8 fits


# -- log_prob: exact scores of whole candidate sequences (importance weights) -----------------------------------
def test_log_prob_scores_arbitrary_candidates_per_example():
    torch.manual_seed(4)
    n, k, K = 4, 3, 5
    dec = pseudosl.RecurrentDecoder(k, n, 6, num_layers=2, cell="gru", context_dim=2).eval()
    ctx = torch.randn(3, 2)
    cands = torch.randint(0, k, (3, K, n), generator=torch.Generator().manual_seed(0))
    got = pseudosl.as_engine(dec, context=ctx).log_prob(cands)
    want = torch.stack([dec.log_joint(cands[b], ctx[b:b + 1].expand(K, -1)) for b in range(3)])
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(pseudosl.as_engine(dec, context=ctx).log_prob(cands, chunk_size=4), want, **TOL)
    user = UserDecoder(k).eval()
    state = torch.randn(2, 3, 8)
    got = user.engine(length=n, state=state).log_prob(cands)
    want = torch.stack([user(cands[b], state[:, b:b + 1].expand(-1, K, -1).contiguous()) for b in range(3)])
    torch.testing.assert_close(got, want, **TOL)
    table = torch.randn(k ** n).log_softmax(0).view((k,) * n)
    bare = pseudosl.as_engine(lambda s, e: table[tuple(s.t())], n_values=k)
    torch.testing.assert_close(bare.log_prob(cands), table[tuple(cands.reshape(-1, n).t())].view(3, K), **TOL)


def test_log_prob_of_gpt2_candidates():
    pytest.importorskip("transformers")
    model = _gpt2(3)
    prompts = torch.tensor([[3, 1], [0, 2]])
    engine = pseudosl.as_engine(model, prompt_ids=prompts)
    cands = torch.randint(0, 4, (2, 6, 3), generator=torch.Generator().manual_seed(0))
    want = torch.stack([_lm_scorer(model, prompts[b:b + 1])(cands[b]) for b in range(2)])
    torch.testing.assert_close(engine.log_prob(cands, chunk_size=5), want, atol=ATOL64, rtol=RTOL64)


# -- example ids: a context-bound log_joint, chunked anywhere ----------------------------------------------------
def test_a_bare_log_joint_with_contexts_is_chunked_by_example_ids():
    """The generic path gives each row its example id: chunks that straddle examples score each row under its
    own context (before, rows were grouped by position in the batch, and such chunks mixed contexts)."""
    torch.manual_seed(5)
    dec = pseudosl.RecurrentDecoder(3, 4, 6, context_dim=2).eval()
    ctx = torch.randn(3, 2)
    y = dec.sample(ctx)
    want = dec.engine(ctx).local_conditionals(y)
    bare = pseudosl.as_engine(lambda s, example: dec.log_joint(s, ctx[example]), n_values=3)
    for chunk in (None, 1, 7, 13):
        torch.testing.assert_close(bare.local_conditionals(y, chunk_size=chunk), want, atol=ATOL64_FEW_OPS, rtol=0)
    pos = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])
    part = bare.local_conditionals(y, positions=pos, fill=-3.0, chunk_size=5)
    torch.testing.assert_close(part[pos], want[pos], atol=ATOL64_FEW_OPS, rtol=0)
    assert (part[~pos] == -3.0).all()


# -- named errors --------------------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    dec = pseudosl.RecurrentDecoder(3, 4, 6, context_dim=2)
    with pytest.raises(ValueError, match="batch_size must be >= 0, got -1"):
        dec.sample(batch_size=-1)
    with pytest.raises(ValueError, match="batch_size must be >= 0, got -1"):
        UserDecoder(3).engine(length=4).sample(batch_size=-1)
    with pytest.raises(ValueError, match="pass length=n"):
        UserDecoder(3).engine().sample(batch_size=2)
    engine = dec.engine(torch.randn(2, 2))
    with pytest.raises(ValueError, match="a batch of 3 sequences for an engine bound to 2 examples"):
        engine.local_conditionals(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="bound to 2 examples: pass example="):
        engine.sample(batch_size=5)
    with pytest.raises(ValueError, match=r"example ids must lie in 0\.\.1"):
        engine.log_joint(torch.zeros(2, 4, dtype=torch.long), torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="step_inputs= do.* not apply to a RecurrentDecoder|prompt_ids= do"):
        pseudosl.as_engine(dec, prompt_ids=torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="needs n_values=k"):
        pseudosl.as_engine(lambda y, e: y.sum(1).double())
    with pytest.raises(ValueError, match="needs embed=, start="):
        m = UserDecoder(3)
        pseudosl.as_engine(m, rnn=m.rnn, head=m.out)
    with pytest.raises(TypeError, match="cannot make an engine of a int"):
        pseudosl.as_engine(3)
    with pytest.raises(ValueError, match=r"n_values= do\(es\) not apply to an engine"):
        pseudosl.as_engine(engine, n_values=3)
    assert pseudosl.as_engine(engine) is engine
    one_arg = pseudosl.as_engine(lambda y: y.sum(1).double(), n_values=3)
    with pytest.raises(TypeError, match=r"takes the rows y \(N, n\) and their example ids"):
        one_arg.local_conditionals(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(NotImplementedError, match="cannot sample"):
        one_arg.sample(batch_size=2)


def test_every_engine_checks_candidates_before_its_model_runs_and_agrees_with_the_generic_path():
    """Out-of-range and too wide candidates are refused by name before any forward pass of a user GRU, a GPT-2
    (values = tokens 0..2 of 4) or a bare log_joint; valid narrow candidates give the generic path's PSL."""
    pytest.importorskip("transformers")
    n, k = 3, 3
    gru, lm = UserDecoder(k), _gpt2(k)
    lm_engine = pseudosl.as_engine(lm, prompt_ids=torch.tensor([[k]]), n_values=k)
    y = torch.tensor([[2, 0, 1], [1, 1, 0]])
    circuit = pseudosl.compile_categorical(all_of(v != 1 for v in pseudosl.positions(n, k)))
    for module, engine in ((gru, gru.engine(length=n)), (lm, lm_engine)):
        runs = []
        module.register_forward_pre_hook(lambda *a: runs.append(1))
        for bad, match in ((torch.tensor([[0, 3]] * n), r"candidates must be values 0\.\.2 .*got range 0\.\.3"),
                           (torch.tensor([[0, 1, 2, 0]] * n), r"candidates must hold 1\.\.3 values per position")):
            with pytest.raises(ValueError, match=match):
                pseudosl.pseudo_semantic_loss(engine, circuit, y, candidates=bad)
            with pytest.raises(ValueError, match=match):
                engine.local_conditionals(y, candidates=bad)
        assert runs == [], type(engine).__name__
        cand = torch.tensor([[[2, 0], [1, 0], [0, 2]], [[1, 2], [0, 1], [2, 1]]])
        fast = pseudosl.pseudo_semantic_loss(engine, circuit, y, reduction="none", candidates=cand)
        bound = engine.example_ids(len(y))  # the generic path's example of a row is its anchor's
        generic = pseudosl.as_engine(lambda ys, e, engine=engine: engine.log_joint(ys, bound[e]), n_values=k)
        slow = pseudosl.pseudo_semantic_loss(generic, circuit, y, reduction="none", candidates=cand)
        torch.testing.assert_close(fast, slow, **TOL)


def test_the_kv_cache_goes_by_the_name_the_model_takes():
    """transformers 5.2x takes ``cache=`` and returns ``.cache``; earlier versions ``past_key_values``."""
    from types import SimpleNamespace

    from pseudosl.psl.causal_lm import _cache_kwarg, _kv_cache

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None):
            return input_ids

    assert _cache_kwarg(Old(), "kv") == {"past_key_values": "kv"} and _cache_kwarg(New(), "kv") == {"cache": "kv"}
    assert _kv_cache(SimpleNamespace(past_key_values="old")) == "old"
    assert _kv_cache(SimpleNamespace(cache="new", past_key_values="old")) == "new"
