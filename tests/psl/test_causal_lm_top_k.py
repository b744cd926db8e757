"""The paper's top-k construction (``CausalLMEngine(top_k_distinguished=...)``, issue 27) against brute force (float64).

Per position the engine scores exactly the sample, the ``top_k_distinguished`` most likely tokens of the small classes
and the ``top_k`` most likely of each large class; every rest is estimated (:mod:`pseudosl.psl.folded_neighbours`).
Checked: with every token selected the conditionals, the PSL and its gradients equal brute force; with fewer, the
engine computes the documented estimator from brute-force neighbour probabilities (so each exactly scored neighbour
is the brute-force one), the PSL stays finite and differentiable; the row count; bad values refused by name.
"""

import numpy as np
import pytest
import torch

import oracle
from tolerances import ATOL64_FEW_OPS
from tiny_models import circuit_from_truth, tiny_gpt2
from pseudosl.psl import CausalLMEngine, as_engine, local_conditionals, pseudo_semantic_loss
from pseudosl.tokens import Constraint, ValueMap

pytestmark = pytest.mark.usefixtures("float64_default", "one_thread")

V = 12
CLASSES = [3, 0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3]   # classes of 1, 2, 3 and 6 tokens
WORDS = [7, 0, 1, 2, 7, 3, 4, 7, 5, 7, 6, 7]     # a word list's shape: 7 distinguished tokens, one catch-all of 5
PROMPT = torch.tensor([[5, 2], [9, 0], [1, 1]])
Y = torch.tensor([[1, 3, 8, 0], [7, 7, 4, 11], [2, 10, 5, 1]])  # distinguished and ordinary tokens as samples


@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(n_embd=32, vocab_size=V, n_positions=64).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(3.0)  # peakier outputs: the estimates visibly off the exact values
    return model


def _brute_force(model, prompt, y):
    """``(B, n, V)`` token conditionals ``log p(y_i = c | y_-i)`` (every neighbour scored whole, token by token) and
    ``(B, n, V)`` next-token log-probabilities ``log p(c | x, y_<i)``."""
    def log_joint(seq, example):
        ids = torch.cat([prompt[example], seq], 1)
        logp = model(input_ids=ids).logits[:, prompt.shape[1] - 1:-1].log_softmax(-1)
        return logp.gather(-1, seq[..., None]).squeeze(-1).sum(-1)
    cond = local_conditionals(log_joint, y, n_values=V)
    prefix = model(input_ids=torch.cat([prompt, y], 1)).logits[:, prompt.shape[1] - 1:-1].log_softmax(-1)
    return cond, prefix


def _documented(cond, prefix, y, lookup, top_k, max_class_size, top_k_distinguished):
    """The folded conditionals as :mod:`pseudosl.psl.folded_neighbours` states them, token by token: exact scores for
    the sample, the ``top_k_distinguished`` most likely distinguished tokens and the ``top_k`` most likely of each
    large class; each rest ``log p(R | x, y_<i) + log p(y_>i | r)`` with ``r`` the most likely unscored token of the
    distinguished tokens (a small class's rest) or of the class (a large class's rest)."""
    lookup = torch.as_tensor(lookup)
    n_classes = int(lookup.max()) + 1
    sizes = torch.bincount(lookup, minlength=n_classes)
    small = {t for t in range(len(lookup)) if sizes[lookup[t]] <= max_class_size}
    out = torch.empty(*y.shape, n_classes)
    for b in range(y.shape[0]):
        for i in range(y.shape[1]):
            c, pre, s = cond[b, i], prefix[b, i], int(y[b, i])
            by_p = sorted((t for t in range(len(lookup)) if t != s), key=lambda t: -float(pre[t]))
            dist = [t for t in by_p if t in small]
            exact_dist, rest_dist = dist[:top_k_distinguished], dist[top_k_distinguished:]
            for j in range(n_classes):
                members = [t for t in by_p if lookup[t] == j]
                if sizes[j] <= max_class_size:
                    exact, rest, rep = [t for t in exact_dist if lookup[t] == j], [t for t in rest_dist if lookup[t] == j], rest_dist[:1]
                else:
                    exact, rest = members[:top_k], members[top_k:]
                    rep = rest[:1]
                terms = [c[t] for t in exact + [s] * (int(lookup[s]) == j)]
                if rest:
                    terms.append(c[rep[0]] - pre[rep[0]] + pre[rest].logsumexp(0))
                out[b, i, j] = torch.stack(terms).logsumexp(0)
    return out.log_softmax(-1)


def _grads(loss, model):
    return torch.autograd.grad(loss, [p for p in model.parameters()], allow_unused=True)


def _n_distinguished(lookup, max_class_size):
    sizes = torch.bincount(torch.as_tensor(lookup))
    return int((sizes[torch.as_tensor(lookup)] <= max_class_size).sum())


@pytest.mark.parametrize("lookup, max_class_size", [(CLASSES, 1), (CLASSES, 3), (WORDS, 1)])
def test_every_token_selected_equals_the_exact_psl_and_its_gradient(gpt2, lookup, max_class_size):
    """``top_k_distinguished = |D| - 1`` and ``top_k`` = the largest large class - 1: every rest holds at most one
    token, so the conditionals, the PSL and its gradients are the brute-force ones."""
    vm = ValueMap.from_classes(lookup)
    sizes = torch.bincount(torch.as_tensor(lookup))
    largest = int(sizes[sizes > max_class_size].max())
    n, C = Y.shape[1], vm.n_values
    eng = as_engine(gpt2, prompt_ids=PROMPT, value_map=vm, top_k=largest - 1, max_class_size=max_class_size,
                    top_k_distinguished=_n_distinguished(lookup, max_class_size) - 1, chunk_size=7)
    cond, _ = _brute_force(gpt2, PROMPT, Y)
    torch.testing.assert_close(eng.local_conditionals(Y), vm.fold(cond), atol=ATOL64_FEW_OPS, rtol=0)
    truth = np.random.default_rng(2).random(C ** n) < 0.4
    token_truth = truth[oracle.assignment_index(vm.to_values(torch.as_tensor(oracle.assignments(n, V))), C).numpy()]
    want = -oracle.log_wmc(token_truth, cond)
    psl = pseudo_semantic_loss(eng, Constraint(circuit_from_truth(truth, n, C), vm), Y, reduction="none")
    torch.testing.assert_close(psl, want, atol=ATOL64_FEW_OPS, rtol=0)
    for got, exp in zip(_grads(psl.sum(), gpt2), _grads(want.sum(), gpt2)):
        torch.testing.assert_close(got, exp, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("lookup, top_k, max_class_size, top_k_distinguished", [
    (WORDS, 0, 1, 0), (WORDS, 2, 1, 2), (WORDS, 4, 1, 3), (CLASSES, 1, 1, 0), (CLASSES, 2, 3, 2), (CLASSES, 0, 3, 4)])
def test_fewer_tokens_give_the_documented_estimate_finite_and_differentiable(gpt2, lookup, top_k, max_class_size,
                                                                            top_k_distinguished):
    """With real estimates the engine computes the documented estimator from the brute-force neighbours (each
    exactly scored neighbour is the brute-force one); the error to the exact conditionals is real but bounded; the PSL
    is finite with finite gradients."""
    vm = ValueMap.from_classes(lookup)
    eng = as_engine(gpt2, prompt_ids=PROMPT, value_map=vm, top_k=top_k, max_class_size=max_class_size,
                    top_k_distinguished=top_k_distinguished)
    with torch.no_grad():
        cond, prefix = _brute_force(gpt2, PROMPT, Y)
        got = eng.local_conditionals(Y)
    want = _documented(cond, prefix, Y, lookup, top_k, max_class_size, top_k_distinguished)
    torch.testing.assert_close(got, want, atol=ATOL64_FEW_OPS, rtol=0)
    error = (got.exp() - vm.fold(cond).exp()).abs()
    assert torch.isfinite(got).all() and 1e-6 < error.max() < 0.5
    C, n = vm.n_values, Y.shape[1]
    truth = np.random.default_rng(3).random(C ** n) < 0.5
    psl = pseudo_semantic_loss(eng, Constraint(circuit_from_truth(truth, n, C), vm), Y)
    grads = [g for g in _grads(psl, gpt2) if g is not None]
    assert torch.isfinite(psl) and grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().max() > 0 for g in grads)


def test_neighbour_rows_per_position_are_the_documented_count(gpt2):
    vm = ValueMap.from_classes(WORDS)  # 7 distinguished tokens; one large class of 5
    eng = CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=vm, top_k=2, top_k_distinguished=3)
    assert eng.n_candidates == 3 + 2 + (2 + 1)  # k_D, the sample and r_D; top_k and r_j of the one large class
    assert CausalLMEngine(gpt2, torch.tensor([[5]]), value_map=vm, top_k=2).n_candidates == 7 + 1 + (2 + 1)
    rows = []
    hook = gpt2.transformer.register_forward_hook(lambda m, args, kw, out: rows.append(kw["input_ids"].shape[0]),
                                                  with_kwargs=True)
    try:
        with torch.no_grad():
            eng.local_conditionals(Y[:1])
    finally:
        hook.remove()
    assert rows == [1] + [eng.n_candidates] * 3  # the base run, then positions 0 .. n-2


@pytest.mark.parametrize("kw, error, match", [
    (dict(top_k_distinguished=7), ValueError, r"top_k_distinguished must lie in 0..6 \(the value map has 7 tokens"),
    (dict(top_k_distinguished=-1), ValueError, "top_k_distinguished"),
    (dict(top_k_distinguished=1.0), TypeError, "top_k_distinguished must be an int"),
    (dict(value_map=ValueMap.from_classes([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]), top_k_distinguished=1), ValueError,
     "top_k_distinguished=1 applies to the tokens of the classes of at most max_class_size=1 tokens, and this value "
     "map has none"),
    (dict(value_map=None, top_k_distinguished=2), ValueError, "top_k_distinguished=2 applies with a value_map"),
])
def test_bad_top_k_distinguished_is_refused_by_name(gpt2, kw, error, match):
    kw = dict(dict(value_map=ValueMap.from_classes(WORDS)), **kw)
    with pytest.raises(error, match=match):
        CausalLMEngine(gpt2, torch.tensor([[5]]), **kw)
    with pytest.raises(error, match=match):
        as_engine(gpt2, prompt_ids=torch.tensor([[5]]), **kw)


@pytest.mark.parametrize("max_class_size", [V, 2**63, 2**64 + 7, 10**40])
def test_a_max_class_size_past_the_vocabulary_makes_every_class_small_and_the_psl_exact(gpt2, max_class_size):
    """Any ``max_class_size`` at least the largest class means every token is distinguished, so the conditionals
    are the brute-force ones (issue 39 item 3: ``2**63`` used to wrap to ``-2**63`` against int64 class sizes and give
    the estimate; a larger int was a raw ``OverflowError``)."""
    vm = ValueMap.from_classes(CLASSES)
    eng = as_engine(gpt2, prompt_ids=PROMPT, value_map=vm, max_class_size=max_class_size)
    assert eng.n_candidates == V + 1  # every token and the sample's row: nothing estimated
    cond, _ = _brute_force(gpt2, PROMPT, Y)
    torch.testing.assert_close(eng.local_conditionals(Y), vm.fold(cond), atol=ATOL64_FEW_OPS, rtol=0)
