"""The generic local conditionals and the pseudo-semantic loss vs brute-force enumeration."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import oracle
from conftest import ATOL64
from psl_models import TableModel, circuit_from_truth
from pseudosl import Circuit, CircuitBuilder
from pseudosl.psl import as_engine, local_conditionals, pseudo_semantic_loss, sample_satisfies


def _sample(n, k, b=3, seed=1):
    return torch.randint(0, k, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n,k", [(1, 3), (3, 2), (4, 3)])
def test_generic_conditionals_match_joint_table(n, k):
    m = TableModel(n, k)
    y = _sample(n, k)
    torch.testing.assert_close(local_conditionals(m.log_joint, y, n_values=k), m.oracle_conditionals(y), atol=ATOL64, rtol=0)
    torch.testing.assert_close(m.engine().local_conditionals(y), m.oracle_conditionals(y), atol=ATOL64, rtol=0)


@given(n=st.integers(1, 4), k=st.integers(2, 3), seed=st.integers(0, 10_000), data=st.data())
def test_loss_and_gradients_match_enumeration(n, k, seed, data):
    m = TableModel(n, k, seed)
    truth = np.array(data.draw(st.lists(st.booleans(), min_size=k ** n, max_size=k ** n)))
    if not truth.any():
        truth[0] = True
    circuit = circuit_from_truth(truth, n, k)
    y = _sample(n, k, seed=seed)
    loss = pseudo_semantic_loss(m.engine(), circuit, y, reduction="sum")
    (g,) = torch.autograd.grad(loss, m.logits)
    want = -oracle.log_wmc(truth, m.oracle_conditionals(y)).sum()
    (g_want,) = torch.autograd.grad(want, m.logits)
    torch.testing.assert_close(loss, want, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(g, g_want, atol=1e-9, rtol=1e-9)


def test_chunked_recompute_gives_same_values_and_gradients():
    m = TableModel(4, 3)
    y = _sample(4, 3, b=2)
    torch.manual_seed(0)
    full = local_conditionals(m.log_joint, y, n_values=3)
    w = torch.randn_like(full)
    (g_full,) = torch.autograd.grad((full * w).sum(), m.logits)
    for kw in [dict(chunk_size=5), dict(chunk_size=7, recompute=False)]:
        out = local_conditionals(m.log_joint, y, n_values=3, **kw)
        torch.testing.assert_close(out, full, atol=ATOL64, rtol=0)
        (g,) = torch.autograd.grad((out * w).sum(), m.logits)
        torch.testing.assert_close(g, g_full, atol=ATOL64, rtol=0)


def test_candidates_restrict_and_renormalise():
    m = TableModel(3, 4)
    y = _sample(3, 4)
    cand = torch.tensor([[0, 3], [1, 2], [3, 0]])
    got = local_conditionals(m.log_joint, y, candidates=cand)
    full = m.oracle_conditionals(y)
    want = full.gather(-1, cand[None].expand(3, -1, -1)).log_softmax(-1)
    torch.testing.assert_close(got, want, atol=ATOL64, rtol=0)
    with pytest.raises(ValueError, match="repeat"):
        local_conditionals(m.log_joint, y, candidates=torch.tensor([[0, 0]] * 3))


def test_paper_figure2_by_hand():
    """Cat, Dog, Animal; sample (cat=1, dog=0, animal=1); alpha = (Cat => Animal) and (Dog => Animal)."""
    pc1 = 0.6
    pd1 = {0: 0.3, 1: 0.2}  # p(D=1 | C)
    pa1 = {(0, 0): 0.1, (0, 1): 0.7, (1, 0): 0.8, (1, 1): 0.9}  # p(A=1 | C, D)

    def joint(c, d, a):
        return ((pc1 if c else 1 - pc1) * (pd1[c] if d else 1 - pd1[c])
                * (pa1[(c, d)] if a else 1 - pa1[(c, d)]))

    table = torch.tensor([[[joint(c, d, a) for a in (0, 1)] for d in (0, 1)] for c in (0, 1)], dtype=torch.float64)
    log_joint = lambda y, example: table.log()[y[:, 0], y[:, 1], y[:, 2]]  # noqa: E731
    # by hand: conditionals around y = (1, 0, 1)
    qc = joint(1, 0, 1) / (joint(0, 0, 1) + joint(1, 0, 1))  # p(C=1 | D=0, A=1)
    qd = joint(1, 1, 1) / (joint(1, 0, 1) + joint(1, 1, 1))  # p(D=1 | C=1, A=1)
    qa = joint(1, 0, 1) / (joint(1, 0, 0) + joint(1, 0, 1))  # p(A=1 | C=1, D=0)
    # alpha holds iff A or (not C and not D)
    p_alpha = qa + (1 - qa) * (1 - qc) * (1 - qd)
    b = CircuitBuilder(3, 2)
    circuit = Circuit(b.build(b.or_(b.literal(2, 1), b.and_(b.literal(2, 0), b.literal(0, 0), b.literal(1, 0)))))
    y = torch.tensor([[1, 0, 1]])
    loss, diag = pseudo_semantic_loss(as_engine(log_joint, n_values=2), circuit, y, return_diagnostics=True)
    assert math.isclose(loss.item(), -math.log(p_alpha), rel_tol=1e-12)
    assert math.isclose(diag.p_constraint.item(), p_alpha, rel_tol=1e-12)
    assert diag.satisfied.tolist() == [True]
    ent = -sum(q * math.log(q) + (1 - q) * math.log(1 - q) for q in (qc, qd, qa))
    assert math.isclose(diag.entropy.item(), ent, rel_tol=1e-12)


def _alpha_and_not_alpha(n, k, seed):
    rng = np.random.default_rng(seed)
    truth = rng.random(k ** n) < 0.5
    truth[0], truth[-1] = True, False
    return truth, circuit_from_truth(truth, n, k), circuit_from_truth(~truth, n, k)


@pytest.mark.parametrize("with_allowed", [False, True])
def test_negate_equals_compiling_the_negation(with_allowed):
    n, k = 3, 3
    truth, alpha, not_alpha = _alpha_and_not_alpha(n, k, 3)
    m = TableModel(n, k, 5)
    y = _sample(n, k, b=4)
    allowed = None
    if with_allowed:
        allowed = torch.rand(4, n, k, generator=torch.Generator().manual_seed(2)) < 0.7
        allowed[..., 0] = True
    a = pseudo_semantic_loss(m.engine(), alpha, y, "none", negate=True, allowed=allowed)
    (ga,) = torch.autograd.grad(a.sum(), m.logits)
    b = pseudo_semantic_loss(m.engine(), not_alpha, y, "none", allowed=allowed)
    (gb,) = torch.autograd.grad(b.sum(), m.logits)
    torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(ga, gb, atol=1e-9, rtol=1e-9)
    # and the oracle: -log p~(not alpha and allowed)
    cond = m.oracle_conditionals(y)
    if allowed is not None:
        cond = cond.masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(a, -oracle.log_wmc(~truth, cond), atol=1e-9, rtol=1e-9)


def test_diagnostics_match_enumeration():
    n, k = 3, 3
    truth, alpha, _ = _alpha_and_not_alpha(n, k, 7)
    m = TableModel(n, k, 2)
    y = torch.as_tensor(oracle.assignments(n, k)[::4])
    loss, d = pseudo_semantic_loss(m.engine(), alpha, y, return_diagnostics=True)
    index = (y * torch.tensor([k * k, k, 1])).sum(1)
    assert d.satisfied.tolist() == truth[index.numpy()].tolist()
    cond = m.oracle_conditionals(y)
    torch.testing.assert_close(d.p_constraint, oracle.log_wmc(truth, cond).exp().detach(), atol=ATOL64, rtol=0)
    torch.testing.assert_close(d.entropy, -(cond.exp() * cond).sum((1, 2)).detach(), atol=ATOL64, rtol=0)
    torch.testing.assert_close(loss, d.loss.mean())
    assert sample_satisfies(alpha, y).tolist() == truth[index.numpy()].tolist()


def test_errors_name_the_argument():
    m = TableModel(2, 2)
    with pytest.raises(TypeError, match="dtype torch.long"):
        local_conditionals(m.log_joint, torch.zeros(1, 2), n_values=2)
    with pytest.raises(ValueError, match=r"\(B, n\)"):
        local_conditionals(m.log_joint, torch.zeros(2, dtype=torch.long), n_values=2)
    with pytest.raises(ValueError, match="n_values"):
        local_conditionals(lambda y, example: y.sum(1).double(), torch.zeros(1, 2, dtype=torch.long))
    circuit = circuit_from_truth(np.ones(4, bool), 2, 2)
    with pytest.raises(TypeError, match="pseudosl.as_engine"):
        pseudo_semantic_loss(m, circuit, torch.zeros(1, 2, dtype=torch.long))  # a model, not an engine
    with pytest.raises(ValueError, match=r"unexpected argument n_values=2; the number of values comes from the engine"):
        pseudo_semantic_loss(m.engine(), circuit, torch.zeros(1, 2, dtype=torch.long), n_values=2)
    with pytest.raises(ValueError, match=r"unexpected argument chunksize=3"):
        pseudo_semantic_loss(m.engine(), circuit, torch.zeros(1, 2, dtype=torch.long), chunksize=3)


def test_multi_root_circuit_sums_per_root_losses():
    n, k = 3, 2
    m = TableModel(n, k, 9)
    y = torch.as_tensor(oracle.assignments(n, k))
    b = CircuitBuilder(n, k)
    # x0 | x1 and ~x1 | x2, each as a decision (an OR of overlapping literals is refused)
    r1 = b.or_(b.literal(0, 1), b.and_(b.literal(0, 0), b.literal(1, 1)))
    r2 = b.or_(b.literal(1, 0), b.and_(b.literal(1, 1), b.literal(2, 1)))
    both = Circuit(b.build([r1, r2]))
    singles = [Circuit(b.build(r)) for r in (r1, r2)]
    loss, d = pseudo_semantic_loss(m.engine(), both, y, "none", return_diagnostics=True)
    want = sum(pseudo_semantic_loss(m.engine(), c, y, "none") for c in singles)
    torch.testing.assert_close(loss, want, atol=ATOL64, rtol=0)
    assert d.p_constraint.shape == (len(y), 2)
    sat = [(a[0] or a[1]) and (not a[1] or a[2]) for a in y.tolist()]
    assert d.satisfied.tolist() == sat
    neg = pseudo_semantic_loss(m.engine(), both, y, "none", negate=True)
    want_neg = sum(pseudo_semantic_loss(m.engine(), c, y, "none", negate=True) for c in singles)
    torch.testing.assert_close(neg, want_neg, atol=ATOL64, rtol=0)
