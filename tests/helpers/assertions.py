"""Shared test checks: a compiled circuit against the brute-force oracle (float64); no host synchronisation on CUDA;
lenient spellings of numbers and values that are not ints, for the strict int checks."""

from __future__ import annotations

import math
import unicodedata
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

import oracle
from tolerances import ATOL64, P_VALUE_MIN


def random_log_weights(seed: int, batch: int, n: int, k: int, normalised: bool) -> torch.Tensor:
    """``(B, n, k)`` float64 log-weights: log-softmax of random logits, or raw (unnormalised) ones."""
    g = torch.Generator().manual_seed(seed)
    x = 2.0 * torch.randn(batch, n, k, generator=g, dtype=torch.float64)
    return x.log_softmax(-1) if normalised else x


@st.composite
def lenient_spellings(draw, n: int, signs: bool = False) -> str:
    """A token Python's ``int()`` reads as ``n`` (or ``-n``) that a strict parser must refuse: ``_`` between
    digits, a leading ``+``, or non-ASCII decimal digits (any script); with ``signs``, also ``-`` before ``n >= 0``
    (for fields without negatives).  Asserts that ``int()`` does take it, so the test targets the leniency."""
    digits = str(n)
    kind = draw(st.sampled_from(["underscore", "plus", "unicode"] + (["minus"] if signs else [])))
    if kind == "underscore":
        at = draw(st.integers(1, len(digits) - 1)) if len(digits) > 1 else 0
        token = digits[:at] + "_" + digits[at:] if at else "0_" + digits
    elif kind == "plus":
        token = "+" + digits
    elif kind == "minus":
        token = "-" + digits
    else:
        digit = draw(st.characters(categories=("Nd",)).filter(lambda c: not c.isascii()))
        zero = ord(digit) - unicodedata.decimal(digit)
        swap = draw(st.lists(st.booleans(), min_size=len(digits), max_size=len(digits)).filter(any))
        token = "".join(chr(zero + int(d)) if s else d for d, s in zip(digits, swap))
    assert int(token) == (-n if kind == "minus" else n)
    return token


NOT_INTS = st.one_of(
    st.floats(), st.floats().map(np.float64), st.floats(width=32).map(np.float32), st.booleans(),
    st.sampled_from([np.True_, np.False_, 1j, "1", "", b"1"]), st.integers(-3, 3).map(str),
    st.floats(-3, 3).map(torch.tensor), st.booleans().map(torch.tensor),
    st.integers(0, 3).map(lambda i: np.array([i])), st.integers(0, 3).map(lambda i: torch.tensor([i])),
    st.integers(0, 3).map(lambda i: np.array(float(i))))
"""Values an int argument must refuse (floats, whole ones included; bools; strings; arrays of one element);
not None, which the limits (``max_nodes=None``) take."""


def _as_columns(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 2 else out[:, None]


def assert_matches_oracle(circuit, truths: Sequence[np.ndarray], x: torch.Tensor) -> None:
    """Values and gradients of ``circuit.log_prob(x)`` (``(B, n, k)``) vs :func:`oracle.log_wmc`, per root."""
    assert circuit.n_roots == len(truths)
    x1 = x.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    got = _as_columns(circuit.log_prob(x1))
    want = torch.stack([oracle.log_wmc(t, x2) for t in truths], dim=1)
    assert got.shape == want.shape
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=ATOL64, rtol=0)
    cot = torch.rand(got.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (got * cot).masked_fill(~finite, 0.0).sum().backward()
    assert torch.isfinite(x1.grad).all()
    if finite.any():
        (want * cot).masked_fill(~finite, 0.0).sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad, atol=ATOL64, rtol=0)
    else:
        assert (x1.grad == 0).all()


def assert_boolean_matches_oracle(circuit, truths: Sequence[np.ndarray], logits: torch.Tensor) -> None:
    """Same for the Boolean ``(B, n)`` input ``logsigmoid(logits)``, gradients w.r.t. the logits."""
    l1 = logits.detach().clone().requires_grad_()
    l2 = logits.detach().clone().requires_grad_()
    got = _as_columns(circuit.log_prob(F.logsigmoid(l1)))
    x2 = torch.stack([F.logsigmoid(-l2), F.logsigmoid(l2)], dim=-1)
    want = torch.stack([oracle.log_wmc(t, x2) for t in truths], dim=1)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=ATOL64, rtol=0)
    if finite.all():
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(l1.grad, l2.grad, atol=ATOL64, rtol=0)


def assert_queries_match_oracle(circuit, truths: Sequence[np.ndarray], x: torch.Tensor,
                                allowed: torch.Tensor | None = None) -> None:
    """The max semiring, :meth:`~pseudosl.Circuit.mpe` and :meth:`~pseudosl.Circuit.marginals` of every
    root vs enumeration (float64): MPE values, that each returned assignment satisfies its root and
    ``allowed`` and attains the maximum (ties: any maximiser), marginals, and the no-model sentinels."""
    n, k = circuit.n_vars, circuit.n_values
    xa = x if allowed is None else x.masked_fill(~allowed, float("-inf"))
    w = oracle.log_weights(xa)  # (B, A)
    got_max = _as_columns(circuit(xa, semiring="max"))
    for r, truth in enumerate(truths):
        want = oracle.max_log_weight(truth, xa)
        unsat = torch.isneginf(want)
        assert torch.equal(torch.isneginf(got_max[:, r]), unsat)
        torch.testing.assert_close(got_max[~unsat, r], want[~unsat], atol=ATOL64, rtol=0)
        mpe = circuit.mpe(x, allowed, root=r)
        assert mpe.values.shape == (len(x), n) and mpe.values.dtype == torch.int64 and mpe.log_prob.shape == (len(x),)
        assert (mpe.values[unsat] == -1).all() and torch.isneginf(mpe.log_prob[unsat]).all()
        vals = mpe.values[~unsat]
        assert ((vals >= 0) & (vals < k)).all()
        idx = oracle.assignment_index(vals, k)
        assert torch.as_tensor(truth)[idx].all(), "an MPE assignment does not satisfy its root"
        if allowed is not None:
            assert allowed[~unsat].gather(2, vals.unsqueeze(2)).all(), "an MPE assignment breaks allowed"
        attained = w[~unsat].gather(1, idx.unsqueeze(1)).squeeze(1)
        torch.testing.assert_close(attained, want[~unsat], atol=ATOL64, rtol=0)
        torch.testing.assert_close(mpe.log_prob[~unsat], attained, atol=ATOL64, rtol=0)
        mu = circuit.marginals(x, allowed, root=r)
        assert mu.shape == (len(x), n, k) and mu.dtype == x.dtype
        torch.testing.assert_close(mu, oracle.marginals(truth, xa), atol=ATOL64, rtol=0)


def sample_fit(counts: torch.Tensor, p: torch.Tensor) -> tuple[float, float, float]:
    """How well ``counts`` ``(A,)`` of ``S`` draws fit the distribution ``p`` ``(A,)``.

    Returns ``(l1, bound, p_value)``: the L1 distance of the empirical distribution from ``p``; a bound it
    exceeds with probability below 1e-9 when the draws come from ``p`` (``E[l1] <= sum_a sqrt(p_a (1 - p_a) / S)``,
    and ``l1`` moves by at most ``2 / S`` per draw, so McDiarmid adds ``sqrt(2 ln(1e9) / S)``); and the
    chi-square goodness-of-fit p-value, categories expecting fewer than 5 draws merged into one.
    """
    p, counts = p.double(), counts.double()
    s = counts.sum()
    l1 = float((counts / s - p).abs().sum())
    bound = float((p * (1 - p) / s).sqrt().sum() + math.sqrt(2 * math.log(1e9) / s))
    expected = p * s
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if len(exp) > 1 and exp[-1] < 5:  # a small merged bin joins the smallest large one
        j = int(exp[:-1].argmin())
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = len(exp) - 1
    p_value = 1.0 if df == 0 else float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))
    return l1, bound, p_value


def assert_samples_match_oracle(circuit, truth: np.ndarray, x: torch.Tensor, n_samples: int, seed: int,
                                root: int = 0, allowed: torch.Tensor | None = None) -> None:
    """:meth:`~pseudosl.Circuit.sample` vs the exact ``q(y | truth AND allowed)`` (float64): shapes, sentinels,
    every sample a model, ``log_prob`` / ``log_partition``, and per example the L1 bound and the chi-square test."""
    n, k = circuit.n_vars, circuit.n_values
    xa = x if allowed is None else x.masked_fill(~allowed, float("-inf"))
    s = circuit.sample(x, n_samples, allowed=allowed, root=root, generator=torch.Generator().manual_seed(seed))
    batch = len(x)
    assert s.values.shape == (n_samples, batch, n) and s.values.dtype == torch.int64
    assert s.log_prob.shape == (n_samples, batch) and s.log_partition.shape == (batch,)
    want_z = oracle.log_wmc(truth, xa)
    unsat = torch.isneginf(want_z)
    assert torch.equal(torch.isneginf(s.log_partition), unsat)
    torch.testing.assert_close(s.log_partition[~unsat], want_z[~unsat], atol=ATOL64, rtol=0)
    assert (s.values[:, unsat] == -1).all() and torch.isneginf(s.log_prob[:, unsat]).all()
    p = oracle.conditional(truth, xa)  # (B, A)
    w = oracle.log_weights(xa)
    for b in torch.nonzero(~unsat).flatten().tolist():
        idx = oracle.assignment_index(s.values[:, b], k)  # (S,)
        assert (p[b, idx] > 0).all(), "a sample is not a model of the constraint and allowed"
        torch.testing.assert_close(s.log_prob[:, b], w[b, idx], atol=ATOL64, rtol=0)
        l1, bound, p_value = sample_fit(torch.bincount(idx, minlength=p.shape[1]), p[b])
        assert l1 <= bound, f"example {b}: L1 {l1:.4f} from q(. | alpha) exceeds the bound {bound:.4f}"
        assert p_value > P_VALUE_MIN, f"example {b}: chi-square p-value {p_value:.2e}"


def assert_no_host_sync(step: Callable[[], object]) -> None:
    """``step()`` runs on CUDA without synchronising with the host (after one warm-up call: lazy
    initialisation of cuDNN / cuBLAS handles may synchronise once); a synchronisation raises."""
    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
