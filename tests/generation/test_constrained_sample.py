"""``pseudosl.constrained_sample`` (locally constrained resampling) against brute force in float64.

A user-written GRU (and a tiny GPT-2 over a folded vocabulary) over ``k**n`` sequences: the model's own
teacher-forced ``log p(y)`` gives the joint table; the local conditionals are slices of it; the exact output
distribution of resampling with ``K`` candidates is enumerated (``oracle.resampling_output``).  Checked: every
output satisfies the constraint; the draws follow the exact output distribution for small ``K`` (an L1 bound
that holds with probability 1 - 1e-9, which the wrong distributions fail; satisfying anchors kept or, with
``keep_satisfying=False``, resampled: tests/generation/test_resample_kept.py covers the kept ones); the exact total-variation distance to
``p(. | alpha)`` falls with ``K`` and large ``K`` gets close; ``mode="mpe"`` is the brute-force argmax of the
proposal; the effective sample size lies in ``[1, K]`` and is ``K`` for a model without dependencies; named errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import oracle
from tolerances import ATOL64, ATOL64_FEW_OPS
import pseudosl
from assertions import sample_fit
from tiny_models import circuit_from_truth, tiny_gpt2
from pseudosl import Circuit, CircuitBuilder
from pseudosl.generation import LocalProposal, UnsatisfiableError

N, K_VALUES = 4, 3  # sequences of 4 values in 0..2: 81 of them


pytestmark = pytest.mark.usefixtures("float64_default")


class GRU(nn.Module):
    """A decoder as a user writes it; ``forward`` is its own teacher-forced ``log p(y)`` (the oracle's table).
    ``independent``: the head ignores the state, so positions are independent (p~_y = p)."""

    def __init__(self, k: int = K_VALUES, hidden: int = 8, seed: int = 0, independent: bool = False):
        super().__init__()
        torch.manual_seed(seed)
        self.k = k
        self.embed = nn.Embedding(k + 1, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, k)
        with torch.no_grad():
            self.out.weight.mul_(0.0 if independent else 5.0)  # peaky: the local distribution is far from p
            self.out.bias.mul_(3.0)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        prev = torch.cat([torch.full_like(y[:, :1], self.k), y[:, :-1]], 1)
        out, _ = self.rnn(self.embed(prev))
        return self.out(out).log_softmax(-1).gather(-1, y[..., None]).squeeze(-1).sum(-1)

    def engine(self, n: int = N) -> pseudosl.Engine:
        return pseudosl.as_engine(self, rnn=self.rnn, embed=self.embed, head=self.out, start=self.k, length=n)


def local_sample(*args, **kwargs):
    """``pseudosl.constrained_sample`` with Gen-C's proposal, ``LocalProposal()`` (this file's subject; the default for
    an autoregressive engine is ``RestartProposal``, tests/generation/test_proposals.py)."""
    kwargs.setdefault("proposal", LocalProposal())
    return pseudosl.constrained_sample(*args, **kwargs)


def random_truth(seed: int, n: int = N, k: int = K_VALUES, density: float = 0.3) -> np.ndarray:
    truth = np.random.default_rng(seed).random(k ** n) < density
    truth[np.random.default_rng(seed).integers(k ** n)] = True  # at least one model
    return truth


def local_table(log_table: torch.Tensor, anchor: tuple[int, ...]) -> torch.Tensor:
    """``(n, k)`` the local conditionals ``log p(y_i = c | y_-i)`` of ``anchor``, sliced off the joint table ``(k,)*n``."""
    rows = []
    for i in range(log_table.dim()):
        idx = list(anchor)
        idx[i] = slice(None)
        rows.append(log_table[tuple(idx)].log_softmax(-1))
    return torch.stack(rows)


def local_proposal(log_table: torch.Tensor, anchor: tuple[int, ...], truth: np.ndarray) -> torch.Tensor:
    """``(A,)`` ``p~_y(. | alpha)`` over :func:`oracle.assignments`."""
    return oracle.conditional(truth, local_table(log_table, anchor)[None])[0]


def exact_output(log_p: torch.Tensor, truth: np.ndarray, k: int, anchors: torch.Tensor | None = None, *,
                 keep: bool = False) -> torch.Tensor:
    """``(A,)`` the exact output distribution of ``constrained_sample`` with ``k`` candidates, anchors ``y ~ p``
    (or the one anchor given); ``keep``: a satisfying anchor is the output as it is (``keep_satisfying``)."""
    n = round(np.log(len(log_p)) / np.log(K_VALUES))
    table = log_p.view((K_VALUES,) * n)
    ys = oracle.assignments(n, K_VALUES)

    def output(a: int, y: tuple[int, ...]) -> torch.Tensor:
        if keep and truth[a]:
            return torch.nn.functional.one_hot(torch.tensor(a), len(log_p)).double()
        return oracle.resampling_output(local_proposal(table, y, truth), log_p, k)
    if anchors is not None:
        return output(int(oracle.assignment_index(anchors[None], K_VALUES)[0]), tuple(anchors.tolist()))
    return sum(log_p[a].exp() * output(a, tuple(y)) for a, y in enumerate(ys))


def target(log_p: torch.Tensor, truth: np.ndarray) -> torch.Tensor:
    """``(A,)`` ``p(. | alpha)``."""
    w = log_p.masked_fill(~torch.as_tensor(truth), float("-inf"))
    return (w - w.logsumexp(0)).exp()


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def counts(values: torch.Tensor, k: int = K_VALUES) -> torch.Tensor:
    return torch.bincount(oracle.assignment_index(values, k), minlength=k ** values.shape[1]).double()


def table_of(model: GRU, n: int = N) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.as_tensor(oracle.assignments(n, model.k)))


# -- (a) every output satisfies the constraint ---------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["resample", "mpe"])
def test_every_output_satisfies_the_constraint(seed, mode):
    model, truth = GRU(seed=seed), random_truth(seed, density=0.1)
    circuit = circuit_from_truth(truth, N, K_VALUES)
    allowed = torch.rand(64, N, K_VALUES, generator=torch.Generator().manual_seed(seed)) > 0.15
    ys = torch.as_tensor(oracle.assignments(N, K_VALUES))
    sat = [bool((truth & allowed[b].gather(1, ys.t()).all(0).numpy()).any()) for b in range(64)]
    allowed[torch.tensor(sat).logical_not()] = True  # keep every example satisfiable
    g = torch.Generator().manual_seed(seed)
    kw = dict(num_candidates=5) if mode == "resample" else {}
    y = local_sample(model.engine(), circuit, batch_size=64, mode=mode, allowed=allowed,
                                    generator=g, **kw)
    assert y.shape == (64, N) and y.dtype == torch.long
    assert pseudosl.sample_satisfies(circuit, y, allowed).all()
    unconstrained = model.engine().sample(batch_size=64, generator=torch.Generator().manual_seed(seed))
    assert not pseudosl.sample_satisfies(circuit, unconstrained, allowed).all()  # the model alone violates it


# -- (b) the output distribution: exact for small K, converging to p(. | alpha) -----------------------------
@pytest.mark.parametrize("seed", range(6))
def test_total_variation_to_the_target_falls_with_k(seed):
    model, truth = GRU(seed=seed), random_truth(seed)
    log_p = table_of(model)
    want = target(log_p, truth)
    dist = [tv(exact_output(log_p, truth, k), want) for k in (1, 2, 3)]
    assert dist[0] > 0.005, "the proposal alone should be off the target (else the test shows nothing)"
    assert dist[0] > dist[1] > dist[2], dist


@pytest.mark.parametrize("k", [1, 2, 3])
def test_draws_follow_the_exact_output_distribution(k):
    model, truth = GRU(seed=1), random_truth(1)
    circuit, log_p = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    anchor = torch.tensor([[2, 0, 1, 1]])
    draws = 20_000
    y = local_sample(model.engine(), circuit, anchor.expand(draws, N), num_candidates=k,
                                    generator=torch.Generator().manual_seed(k))
    got = counts(y)
    want = exact_output(log_p, truth, k, anchor[0])
    l1, bound, _ = sample_fit(got, want)
    assert l1 <= bound, (l1, bound)
    # the check has power: the distributions of the other K and the target itself are outside the bound
    for other in [exact_output(log_p, truth, j, anchor[0]) for j in (1, 2, 3) if j != k] + [target(log_p, truth)]:
        assert sample_fit(got, other)[0] > bound


@pytest.mark.parametrize("mode", ["resample", "mpe"])
def test_positions_fixed_by_allowed_are_not_computed_and_the_output_stays_exact(mode):
    """``allowed`` leaving one value at a position (a Sudoku's givens): its conditional is skipped (it cancels in
    q), and the outputs follow the exact output distribution for ``alpha AND allowed`` (argmax for ``mpe``)."""
    model, truth = GRU(seed=2), random_truth(2, density=0.5)
    circuit, log_p = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    ys = oracle.assignments(N, K_VALUES)
    allowed = torch.ones(1, N, K_VALUES, dtype=torch.bool)
    allowed[0, 1] = False
    allowed[0, 1, 2] = True      # position 1 fixed to 2
    allowed[0, 3, 0] = False     # position 3 in {1, 2}
    fits = allowed[0].numpy()[np.arange(N), ys].all(1)
    both = truth & fits
    assert both.sum() > 2
    anchor = torch.tensor([[0, 2, 1, 1]])
    engine = model.engine()
    seen = []
    real = engine.local_conditionals
    engine.local_conditionals = lambda *a, **kw: seen.append(kw.get("positions")) or real(*a, **kw)
    draws = 20_000 if mode == "resample" else 1
    y = local_sample(engine, circuit, anchor.expand(draws, N), mode=mode,
                                    num_candidates=2 if mode == "resample" else None,
                                    allowed=allowed.expand(draws, N, K_VALUES),
                                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(seen[0], torch.tensor([[True, False, True, True]]).expand(draws, N))
    q = local_proposal(log_p.view((K_VALUES,) * N), tuple(anchor[0].tolist()), both)
    if mode == "mpe":
        assert torch.equal(y[0], torch.as_tensor(ys[q.argmax()]))
        return
    got, want = counts(y), oracle.resampling_output(q, log_p, 2)
    assert got[torch.as_tensor(~both)].sum() == 0
    l1, bound, _ = sample_fit(got, want)
    assert l1 <= bound, (l1, bound)
    assert sample_fit(got, oracle.resampling_output(q, log_p, 1))[0] > bound  # the check has power


def test_anchors_drawn_from_the_model_and_large_k_approach_the_target():
    model, truth = GRU(seed=3), random_truth(3)
    circuit, log_p = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    engine, want = model.engine(), target(log_p, truth)
    y2 = local_sample(engine, circuit, batch_size=20_000, num_candidates=2,
                                     generator=torch.Generator().manual_seed(0))
    l1, bound, _ = sample_fit(counts(y2), exact_output(log_p, truth, 2, keep=True))  # anchors y ~ p, averaged
    assert l1 <= bound, (l1, bound)
    y16 = local_sample(engine, circuit, batch_size=40_000, num_candidates=16,
                                      generator=torch.Generator().manual_seed(1))
    l1, bound, _ = sample_fit(counts(y16), want)
    # with probability >= 1 - 1e-9, TV(K=16) <= l1 / 2 + bound / 2, which lies below the exact TV(K=2)
    tv_2 = tv(exact_output(log_p, truth, 2, keep=True), want)
    assert l1 / 2 + bound / 2 < tv_2, (l1 / 2 + bound / 2, tv_2)


# -- (c) mode="mpe" ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_mpe_is_the_argmax_of_the_local_distribution(seed):
    model, truth = GRU(seed=seed), random_truth(seed, density=0.2)
    circuit, table = circuit_from_truth(truth, N, K_VALUES), table_of(model).view((K_VALUES,) * N)
    anchors = model.engine().sample(batch_size=16, generator=torch.Generator().manual_seed(seed))
    y, diag = local_sample(model.engine(), circuit, anchors, mode="mpe", return_diagnostics=True,
                                          keep_satisfying=False)
    ys = torch.as_tensor(oracle.assignments(N, K_VALUES))
    for b in range(16):
        q = local_proposal(table, tuple(anchors[b].tolist()), truth)
        assert torch.equal(y[b], ys[q.argmax()])
        torch.testing.assert_close(diag.log_q[b, 0], q.max().log())
    torch.testing.assert_close(diag.log_p[:, 0], model(y))
    assert torch.equal(diag.anchor, anchors) and (diag.ess == 1).all() and (diag.chosen == 0).all()


# -- (d) the effective sample size ---------------------------------------------------------------------
def test_ess_lies_in_one_to_k_and_the_weights_are_p_over_q():
    model, truth = GRU(seed=0), random_truth(0)
    circuit, table = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    y, diag = local_sample(model.engine(), circuit, batch_size=32, num_candidates=8,
                                          generator=torch.Generator().manual_seed(0), return_diagnostics=True,
                                          keep_satisfying=False)
    assert diag.candidates.shape == (32, 8, N) and diag.log_weights.shape == (32, 8)
    assert ((diag.ess >= 1 - ATOL64) & (diag.ess <= 8 + ATOL64)).all() and (diag.ess < 7.9).any()
    assert torch.equal(y, diag.candidates[torch.arange(32), diag.chosen])
    idx = oracle.assignment_index(diag.candidates, K_VALUES)
    torch.testing.assert_close(diag.log_p, table[idx])
    for b in range(4):
        anchor = tuple(diag.anchor[b].tolist())
        q = local_proposal(table.view((K_VALUES,) * N), anchor, truth)
        torch.testing.assert_close(diag.log_q[b], q[idx[b]].log())
        local = local_table(table.view((K_VALUES,) * N), anchor)
        torch.testing.assert_close(diag.log_p_constraint[b], oracle.log_wmc(truth, local[None])[0])


def test_without_dependencies_the_weights_are_equal_and_one_candidate_is_exact():
    model, truth = GRU(seed=3, independent=True), random_truth(3)
    circuit, log_p = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    _, diag = local_sample(model.engine(), circuit, batch_size=16, num_candidates=6,
                                          generator=torch.Generator().manual_seed(0), return_diagnostics=True)
    torch.testing.assert_close(diag.ess, torch.full((16,), 6.0))  # p~_y = p: every weight is p(alpha)
    assert tv(exact_output(log_p, truth, 1), target(log_p, truth)) < ATOL64_FEW_OPS


# -- a folded vocabulary (a causal LM with a value map) ---------------------------------------------------
V, N_LM = 6, 3  # tokens 0..5 (0 = BOS), folded into 3 circuit values
VALUE_MAPS = {
    "catch_all": lambda: pseudosl.ValueMap([1, 2], V),  # tokens 1 and 2 distinguished: values 0, 1; the rest 2
    "classes": lambda: pseudosl.ValueMap.from_classes([2, 0, 1, 1, 2, 2]),  # {1}, {2, 3}, {0, 4, 5}
}


def lm_setup(map_name: str, seed: int = 0):
    """A tiny GPT-2, a random constraint over the 3 folded values with the value map, the engine (every token scored
    exactly), every token sequence ``(A, n)``, their ``log p`` ``(A,)`` and the next-token log-probabilities
    ``(A, n, V)`` after each prefix."""
    gpt2 = tiny_gpt2(16, V, 8).eval()  # the oracle's table without dropout (the engine evaluates so too)
    with torch.no_grad():
        gpt2.transformer.ln_f.weight.mul_(4.0)  # peaky logits: the proposal visibly off the target
    vm = VALUE_MAPS[map_name]()
    truth = random_truth(seed, N_LM, 3, density=0.4)
    constraint = pseudosl.Constraint(circuit_from_truth(truth, N_LM, 3), vm)
    largest = int(torch.bincount(vm.lookup).max())
    engine = pseudosl.as_engine(gpt2, prompt_ids=torch.tensor([[0]]), value_map=vm, top_k=largest - 1)  # exact
    ys = torch.as_tensor(oracle.assignments(N_LM, V))
    with torch.no_grad():
        logits = gpt2(torch.cat([torch.zeros(len(ys), 1, dtype=torch.long), ys], 1)).logits[:, :-1].log_softmax(-1)
    log_p = logits.gather(-1, ys[..., None]).squeeze(-1).sum(-1)
    return constraint, truth, engine, ys, log_p, logits


def lm_proposal(vm: pseudosl.ValueMap, truth: np.ndarray, ys: torch.Tensor, log_p: torch.Tensor,
                logits: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """``(A,)`` the proposal over token sequences by brute force: ``p~_y(v(y~) | alpha)`` over the folded values,
    the folded conditionals summed off the joint table, times ``r_i(y~_i)`` at every position (the model's next
    token after the anchor's prefix, within the class of ``y~_i``; 1 for a class of one token)."""
    values = vm.to_values(ys)  # (A, n)
    ok = torch.as_tensor(truth)[oracle.assignment_index(values, 3)]
    folded = torch.empty(N_LM, 3)
    for i in range(N_LM):
        rest = [j for j in range(N_LM) if j != i]
        same = (ys[:, rest] == anchor[rest]).all(1)
        folded[i] = torch.stack([log_p[same & (values[:, i] == v)].logsumexp(0) for v in range(3)]).log_softmax(0)
    log_z = oracle.log_wmc(truth, folded[None])[0]
    prefix = logits[oracle.assignment_index(anchor[None], V)[0]]  # (n, V): log p(. | BOS, anchor_<i)
    r = torch.stack([prefix.masked_fill(vm.lookup != vm.lookup[t], float("-inf")).log_softmax(-1)[:, t]
                     for t in range(V)], 1)  # (n, V): log r_i(t) within t's class
    log_r = r.gather(1, ys.t()).t()
    log_q = folded.gather(1, values.t()).t().sum(1) - log_z + log_r.sum(1)
    return log_q.masked_fill(~ok, float("-inf")).exp()


@pytest.mark.parametrize("map_name", list(VALUE_MAPS))
@pytest.mark.parametrize("mode", ["resample", "mpe"])
def test_folded_vocabulary_outputs_are_tokens_that_satisfy_the_constraint(mode, map_name):
    constraint, _, engine, *_ = lm_setup(map_name)
    kw = dict(num_candidates=4) if mode == "resample" else {}
    y = local_sample(engine, constraint, batch_size=64, mode=mode,
                                    generator=torch.Generator().manual_seed(0), **kw)
    assert y.shape == (64, N_LM) and constraint.satisfied(y).all()
    values = constraint.values(y)
    assert any(len(set(y[values == v].tolist())) > 1 for v in range(3))  # a class's value becomes several tokens
    assert not constraint.satisfied(engine.sample(batch_size=64, length=N_LM)).all()


@pytest.mark.parametrize("map_name", list(VALUE_MAPS))
@pytest.mark.parametrize("k", [1, 2])
def test_folded_vocabulary_draws_follow_the_exact_output_distribution(k, map_name):
    constraint, truth, engine, ys, log_p, logits = lm_setup(map_name)
    anchor = torch.tensor([1, 4, 2])
    q = lm_proposal(constraint.value_map, truth, ys, log_p, logits, anchor)
    torch.testing.assert_close(q.sum(), torch.tensor(1.0))
    y = local_sample(engine, constraint, anchor[None].expand(10_000, N_LM), num_candidates=k,
                                    generator=torch.Generator().manual_seed(k))
    got = torch.bincount(oracle.assignment_index(y, V), minlength=V ** N_LM).double()
    want = oracle.resampling_output(q, log_p, k)
    l1, bound, _ = sample_fit(got, want)
    assert l1 <= bound, (l1, bound)
    other = oracle.resampling_output(q, log_p, 3 - k)
    assert sample_fit(got, other)[0] > bound  # the check tells K = 1 from K = 2
    want_target = (log_p.masked_fill(q == 0, float("-inf")) - log_p.masked_fill(q == 0, float("-inf")).logsumexp(0)).exp()
    dist = [tv(oracle.resampling_output(q, log_p, j), want_target) for j in (1, 2, 3)]
    assert dist[0] > dist[1] > dist[2], dist


@pytest.mark.parametrize("map_name", list(VALUE_MAPS))
def test_folded_vocabulary_mpe_is_the_argmax_of_the_proposal(map_name):
    constraint, truth, engine, ys, log_p, logits = lm_setup(map_name)
    anchors = engine.sample(batch_size=12, length=N_LM, generator=torch.Generator().manual_seed(0))
    y, diag = local_sample(engine, constraint, anchors, mode="mpe", return_diagnostics=True,
                                          keep_satisfying=False)
    for b in range(12):
        q = lm_proposal(constraint.value_map, truth, ys, log_p, logits, anchors[b])
        assert torch.equal(y[b], ys[q.argmax()])
        torch.testing.assert_close(diag.log_q[b, 0], q.max().log())


def test_folded_vocabulary_weights_are_p_over_the_proposal_of_the_tokens():
    """The diagnostics' ``log_q`` of every candidate is the brute-force proposal of its token sequence, ``log_p`` its
    model probability: the importance weights use the concrete tokens."""
    constraint, truth, engine, ys, log_p, logits = lm_setup("classes")
    anchor = torch.tensor([5, 3, 0])
    q = lm_proposal(constraint.value_map, truth, ys, log_p, logits, anchor)
    _, diag = local_sample(engine, constraint, anchor[None].expand(8, N_LM), num_candidates=5,
                                          generator=torch.Generator().manual_seed(0), return_diagnostics=True)
    index = oracle.assignment_index(diag.candidates.reshape(-1, N_LM), V).view(8, 5)
    torch.testing.assert_close(diag.log_q, q[index].log())
    torch.testing.assert_close(diag.log_p, log_p[index])


# -- named errors --------------------------------------------------------------------------------------
def test_one_unsatisfiable_error_class():
    """``pseudosl.generation.UnsatisfiableError`` is the library's one class (``pseudosl.logic.errors``): an
    ``except`` of
    either name catches the compilers' errors and the sampler's."""
    assert UnsatisfiableError is pseudosl.logic.errors.UnsatisfiableError
    engine = pseudosl.as_engine(_never_called, n_values=3)
    b = CircuitBuilder(N, 3)
    with pytest.raises(pseudosl.logic.errors.UnsatisfiableError, match="no satisfying assignment"):
        local_sample(engine, Circuit(b.build(b.false())), torch.zeros(1, N, dtype=torch.long))
    with pytest.raises(UnsatisfiableError, match="the CNF is unsatisfiable"):
        pseudosl.compile_cnf([[1], [-1]], cache=False)

def _never_called(y, example):
    raise AssertionError("the model ran")


def test_errors_are_named_before_the_model_runs():
    engine = pseudosl.as_engine(_never_called, n_values=3)
    b = CircuitBuilder(N, 3)
    never = Circuit(b.build(b.false()))  # no model
    anchors = torch.zeros(2, N, dtype=torch.long)
    with pytest.raises(UnsatisfiableError, match="no satisfying assignment"):
        local_sample(engine, never, anchors)
    some = circuit_from_truth(random_truth(0), N, 3)
    allowed = torch.ones(2, N, 3, dtype=torch.bool)
    allowed[1] = False
    with pytest.raises(UnsatisfiableError, match=r"examples \[1\]"):
        local_sample(engine, some, anchors, allowed=allowed)
    with pytest.raises(ValueError, match="num_candidates=4 applies to mode='resample'"):
        local_sample(engine, some, anchors, mode="mpe", num_candidates=4)
    with pytest.raises(ValueError, match="mode must be"):
        local_sample(engine, some, anchors, mode="greedy")
    with pytest.raises(ValueError, match="num_candidates must be >= 1"):
        local_sample(engine, some, anchors, num_candidates=0)
    with pytest.raises(ValueError, match="length 3 but the circuit has 4"):
        local_sample(engine, some, anchors[:, :3])
    with pytest.raises(ValueError, match="batch_size applies"):
        local_sample(engine, some, anchors, batch_size=2)
    with pytest.raises(ValueError, match=r"allowed must have shape \(B, 4, 3\)"):
        local_sample(engine, some, anchors, allowed=allowed[:, :, :2])
    with pytest.raises(ValueError, match="model has 2 values per position but the circuit has 3"):
        local_sample(pseudosl.as_engine(_never_called, n_values=2), some, anchors)
    two = Circuit.from_dag(_two_roots())
    with pytest.raises(ValueError, match="2 roots.*pass root=r.*conjunction"):
        local_sample(engine, two, anchors)
    with pytest.raises(ValueError, match=r"root must be an int in 0..1 \(a root of the circuit\), got 2"):
        local_sample(engine, two, anchors, root=2)
    with pytest.raises(TypeError, match="root must be an int, got float 1.0"):
        local_sample(engine, two, anchors, root=1.0)
    with pytest.raises(TypeError, match="as_engine"):
        local_sample(_never_called, some, anchors)


def _two_roots():
    b = CircuitBuilder(N, 3)
    return b.build([b.or_(*(b.literal(0, c) for c in range(2))), b.or_(b.literal(1, 0), b.literal(1, 1))])


def test_a_multi_rooted_circuit_with_root_satisfies_that_root():
    model = GRU(seed=0)
    two = Circuit.from_dag(_two_roots())
    y = local_sample(model.engine(), two, batch_size=32, num_candidates=3, root=1,
                                    generator=torch.Generator().manual_seed(0))
    assert (y[:, 1] <= 1).all()


def test_zero_probability_everywhere_on_the_constraint_is_named():
    table = torch.full((K_VALUES,) * N, -1.0)
    table[:, :, :, 2] = float("-inf")  # the model never puts a 2 last
    table = table - table.logsumexp(tuple(range(N)))
    engine = pseudosl.as_engine(lambda y, example: table[tuple(y.t())], n_values=K_VALUES)
    b = CircuitBuilder(N, K_VALUES)
    last_is_two = Circuit(b.build(b.literal(N - 1, 2)))
    with pytest.raises(UnsatisfiableError, match="probability 0 to every assignment"):
        local_sample(engine, last_is_two, torch.zeros(3, N, dtype=torch.long))


def test_an_empty_batch_gives_empty_outputs():
    model = GRU()
    circuit = circuit_from_truth(random_truth(0), N, K_VALUES)
    y, diag = local_sample(model.engine(), circuit, torch.zeros(0, N, dtype=torch.long),
                                          return_diagnostics=True)
    assert y.shape == (0, N) and diag.candidates.shape == (0, 16, N)
