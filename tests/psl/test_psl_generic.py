"""The generic local conditionals and the pseudo-semantic loss vs brute-force enumeration."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import oracle
from tolerances import ATOL64, RTOL64, RTOL64_FEW_OPS
from tiny_models import TableModel, circuit_from_truth
from pseudosl import Circuit, CircuitBuilder
from pseudosl.psl import as_engine, local_conditionals, pseudo_semantic_loss
from pseudosl.tokens import sample_satisfies


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
    torch.testing.assert_close(loss, want, atol=ATOL64, rtol=RTOL64)
    torch.testing.assert_close(g, g_want, atol=ATOL64, rtol=RTOL64)


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


def test_psl_candidates_restrict_p_tilde_to_them_vs_enumeration():
    """PSL ``candidates`` of any width ``1..k`` in any order: ``p~`` over the candidates renormalised, probability 0
    elsewhere (brute force: the table's conditionals with non-candidates at -inf)."""
    n, k = 3, 4
    m = TableModel(n, k, seed=7)
    y = _sample(n, k, b=2, seed=4)
    truth = oracle.truth_of(lambda a: a.count(3) >= 1, n, k)  # some y_i = 3
    circuit = circuit_from_truth(truth, n, k)
    full = m.oracle_conditionals(y)
    narrow, permuted, single = [[3, 1], [0, 3], [2, 0]], [[3, 0, 2, 1]] * n, [[1], [3], [2]]
    for cand in (torch.tensor(narrow), torch.tensor(permuted), torch.tensor(single)):
        keep = torch.zeros(2, n, k, dtype=torch.bool).scatter(-1, cand[None].expand(2, -1, -1), True)
        want = full.masked_fill(~keep, float("-inf")).log_softmax(-1)
        got = pseudo_semantic_loss(m.engine(), circuit, y, reduction="none", candidates=cand)
        torch.testing.assert_close(got, -oracle.log_wmc(truth, want), atol=ATOL64, rtol=0)
    every = torch.tensor([[2, 0, 3, 1]] * n)  # all values in another order: the plain loss
    torch.testing.assert_close(pseudo_semantic_loss(m.engine(), circuit, y, candidates=every),
                               pseudo_semantic_loss(m.engine(), circuit, y), atol=ATOL64, rtol=0)


def _counting(log_joint):
    """``log_joint`` and the list of the row counts it was called with."""
    calls = []

    def counted(y, example):
        calls.append(len(y))
        return log_joint(y, example)
    return counted, calls


@pytest.mark.parametrize("cand, error, match", [
    (torch.tensor([[0, 4]] * 3), ValueError, r"candidates must be values 0\.\.3 .*; got range 0\.\.4"),
    (torch.tensor([[-2, 1]] * 3), ValueError, r"candidates must be values 0\.\.3 .*; got range -2\.\.1"),
    (torch.tensor([[0, 1, 2, 3, 0]] * 3), ValueError, r"candidates must hold 1\.\.4 values per position .*K=5"),
    (torch.zeros(3, 0, dtype=torch.long), ValueError, r"candidates must hold 1\.\.4 values per position .*K=0"),
    (torch.tensor([[0, 1]] * 2), ValueError, r"candidates must have shape \(3, K\)"),
    (torch.tensor([[0.0, 1.0]] * 3), TypeError, "candidates must be a long tensor .*got torch.float"),
])
def test_bad_candidates_are_refused_by_name_before_the_model_runs(cand, error, match):
    m = TableModel(3, 4)
    log_joint, calls = _counting(m.log_joint)
    circuit = circuit_from_truth(np.ones(4 ** 3, dtype=bool), 3, 4)
    with pytest.raises(error, match=match):
        pseudo_semantic_loss(as_engine(log_joint, n_values=4), circuit, _sample(3, 4), candidates=cand)
    with pytest.raises(error, match=match):
        local_conditionals(log_joint, _sample(3, 4), n_values=4, candidates=cand)
    assert calls == []


@pytest.mark.parametrize("value, name", [(float("inf"), r"\+inf"), (float("nan"), "NaN")])
def test_a_log_joint_returning_nan_or_plus_inf_is_named(value, name):
    """Whether on every row or on one, NaN and +inf are named (not "x contains NaN" from the circuit)."""
    m = TableModel(3, 3)
    circuit = circuit_from_truth(np.ones(27, dtype=bool), 3, 3)
    y = torch.tensor([[0, 1, 2]])
    everywhere = as_engine(lambda ys, e: torch.full((len(ys),), value), n_values=3)
    with pytest.raises(ValueError, match=f"log_joint returned {name} for 9 of 9 sequences .the first: row 0.; it must "
                                         "return finite log-probabilities, or -inf for impossible sequences"):
        pseudo_semantic_loss(everywhere, circuit, y)
    one = as_engine(lambda ys, e: torch.where(ys[:, 1] == 2, value, m.log_joint(ys, e)), n_values=3)
    with pytest.raises(ValueError, match=f"log_joint returned {name} for 1 of 9 sequences .the first: row 5."):
        pseudo_semantic_loss(one, circuit, y)
    with pytest.raises(ValueError, match=f"log_joint returned {name} for 1 of 1 sequences"):
        one.log_prob(torch.tensor([[[0, 2, 2]]]))  # importance weights take the same check


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_a_log_joint_returning_integers_is_refused_by_name(dtype):
    engine = as_engine(lambda ys, e: (-ys.sum(1)).to(dtype), n_values=3)
    with pytest.raises(TypeError, match=f"log_joint returned {dtype} values; it must return floating log-probab"):
        engine.local_conditionals(torch.tensor([[0, 1, 2]]))


def test_minus_inf_is_legal_unless_every_candidate_of_a_position_has_it():
    """-inf marks impossible sequences: fine for some neighbours (probability 0, brute force agrees); where every
    neighbour of a position is impossible the conditional is 0/0, named with its position and sample."""
    n, k = 3, 3
    m = TableModel(n, k, seed=2)
    lj = lambda ys, e: m.log_joint(ys, e).masked_fill(ys[:, 2] == 1, float("-inf"))  # y_2 = 1 is impossible
    y = torch.tensor([[0, 2, 0], [1, 1, 2]])
    table = m.table().masked_fill(torch.arange(k) == 1, float("-inf"))
    want = torch.stack([_slices(table, s) for s in y])
    torch.testing.assert_close(as_engine(lj, n_values=k).local_conditionals(y), want, atol=ATOL64, rtol=0)
    assert (want[:, 2, 1] == float("-inf")).all()
    anchored = torch.tensor([[0, 2, 0], [2, 0, 1]])  # row 1 has y_2 = 1: positions 0 and 1 see only -inf
    with pytest.raises(ValueError, match="log_joint returned -inf for every candidate at position 0 of sample 1 "
                                         ".2 such positions.* the sample itself has probability 0"):
        as_engine(lj, n_values=k).local_conditionals(anchored)
    only_last = torch.tensor([[False, False, True]] * 2)  # positions left out are not scored, so not refused
    part = local_conditionals(lj, anchored, n_values=k, positions=only_last, fill=-7.0)
    assert (part[:, :2] == -7.0).all() and torch.isfinite(part[1, 2, 0])


def _slices(log_table, sample):
    rows = []
    for i in range(log_table.dim()):
        idx = list(sample.tolist())
        idx[i] = slice(None)
        rows.append(log_table[tuple(idx)].log_softmax(-1))
    return torch.stack(rows)


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
    assert math.isclose(loss.item(), -math.log(p_alpha), rel_tol=RTOL64_FEW_OPS)
    assert math.isclose(diag.p_constraint.item(), p_alpha, rel_tol=RTOL64_FEW_OPS)
    assert diag.satisfied.tolist() == [True]
    ent = -sum(q * math.log(q) + (1 - q) * math.log(1 - q) for q in (qc, qd, qa))
    assert math.isclose(diag.entropy.item(), ent, rel_tol=RTOL64_FEW_OPS)


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
    torch.testing.assert_close(a, b, atol=ATOL64, rtol=RTOL64)
    torch.testing.assert_close(ga, gb, atol=ATOL64, rtol=RTOL64)
    # and the oracle: -log p~(not alpha and allowed)
    cond = m.oracle_conditionals(y)
    if allowed is not None:
        cond = cond.masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(a, -oracle.log_wmc(~truth, cond), atol=ATOL64, rtol=RTOL64)


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


@given(n=st.integers(1, 4), k=st.integers(2, 3), seed=st.integers(0, 10_000), data=st.data())
def test_the_psl_of_a_fully_factorized_model_is_the_semantic_loss_of_its_marginals(n, k, seed, data):
    """STYLE's identity: when p(y) = prod_i q_i(y_i), every conditional p(y_i | y_-i) is q_i(y_i) whatever the sample,
    so p~_y = q and the PSL is the semantic loss of q -- value and gradient, for any sample and any circuit."""
    from pseudosl import semantic_loss

    truth = np.array(data.draw(st.lists(st.booleans(), min_size=k ** n, max_size=k ** n)))
    truth[data.draw(st.integers(0, k ** n - 1))] = True
    circuit = circuit_from_truth(truth, n, k)
    logits = torch.randn(3, n, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64,
                         requires_grad=True)

    def log_joint(y, example):  # a fully-factorized model: a sum of per-position log-probabilities
        logq = logits.log_softmax(-1)[example]  # (N, n, k)
        return logq.gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(-1)

    psl = pseudo_semantic_loss(as_engine(log_joint, n_values=k), circuit, _sample(n, k, seed=seed), reduction="sum")
    (g_psl,) = torch.autograd.grad(psl, logits)
    sl = semantic_loss(circuit, logits, reduction="sum")
    (g_sl,) = torch.autograd.grad(sl, logits)
    torch.testing.assert_close(psl, sl, atol=ATOL64, rtol=0)
    torch.testing.assert_close(g_psl, g_sl, atol=ATOL64, rtol=0)
