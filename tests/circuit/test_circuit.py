"""The circuit runtime against brute-force enumeration: values, gradients, edge cases, errors."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
import pseudosl.memory
from oracle import log_prob_reference
from tolerances import ATOL32, ATOL64
from pseudosl import Circuit, CircuitBuilder
from random_circuits import LargeAllocations, random_circuit
from pseudosl.logic.dag import CircuitError, Dag
from pseudosl.logic.dag import FALSE, TRUE


@given(seed=st.integers(0, 10**6), n=st.integers(1, 5), k=st.integers(2, 4), roots=st.integers(1, 3))
def test_random_circuits_match_enumeration(seed, n, k, roots):
    circuit, preds = random_circuit(seed, n, k, roots)
    circuit.check()
    x = (torch.randn(3, n, k, dtype=torch.float64) * 2).requires_grad_()  # unnormalised weights too
    out = circuit(x)
    assert out.shape == (3, roots)
    expect = torch.stack([oracle.log_wmc(oracle.truth_of(p, n, k), x) for p in preds], 1)
    finite = torch.isfinite(expect)
    assert torch.equal(finite, torch.isfinite(out))
    assert torch.allclose(out[finite], expect[finite], atol=ATOL64)
    w = torch.randn_like(expect)
    g_out, = torch.autograd.grad((out.masked_fill(~finite, 0) * w).sum(), x)
    g_exp, = torch.autograd.grad((expect.masked_fill(~finite, 0) * w).sum(), x)
    assert torch.allclose(g_out, g_exp, atol=ATOL64)


@given(seed=st.integers(0, 10**6), n=st.integers(1, 5), k=st.integers(2, 3))
def test_reference_evaluation_agrees_and_double_backward(seed, n, k):
    circuit, _ = random_circuit(seed, n, k, 2)
    x = torch.randn(2, n, k, dtype=torch.float64).log_softmax(-1).requires_grad_()
    fast, ref = circuit(x), log_prob_reference(circuit, x)
    assert torch.allclose(fast, ref, atol=ATOL64) or torch.equal(torch.isinf(fast), torch.isinf(ref))
    finite = torch.isfinite(ref)
    g, = torch.autograd.grad(ref.masked_fill(~finite, 0).sum(), x, create_graph=True)
    if g.requires_grad:  # constant roots have a constant gradient
        g.square().sum().backward()  # second order through the reference path
        assert not torch.isnan(x.grad).any()


def test_gradcheck_float64():
    circuit = next(c for seed in range(100) if not any((c := random_circuit(seed, 4, 3, 2)[0]).dag.is_false(r)
                                                       for r in range(2)) and c.n_nodes > 20)
    x = torch.randn(2, 4, 3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(circuit, (x,))


def test_boolean_inputs_are_equivalent():
    circuit, (pred,) = random_circuit(11, 5, 2)
    p = torch.rand(4, 5, dtype=torch.float64)
    a = circuit.log_prob(p.log())
    b = circuit.log_prob(oracle.boolean_to_categorical(p.log()))
    assert torch.allclose(a, b, atol=ATOL64)
    assert torch.allclose(a, oracle.log_wmc(oracle.truth_of(pred, 5, 2), oracle.boolean_to_categorical(p.log())),
                          atol=ATOL64)


def test_float32_close_to_float64():
    circuit, _ = random_circuit(5, 5, 3, 2)
    x = torch.randn(8, 5, 3, dtype=torch.float64).log_softmax(-1)
    assert torch.allclose(circuit(x.float()).double(), circuit(x), atol=ATOL32)


def test_neg_inf_inputs_give_finite_gradients():
    b = CircuitBuilder(3, 3)
    root = b.or_(b.and_(b.literal(0, 0), b.literal(1, 1)), b.and_(b.literal(0, 1), b.in_set(2, [0, 2])))
    circuit = Circuit(b.build(root))
    x = torch.randn(4, 3, 3, dtype=torch.float64).log_softmax(-1)
    x[0, 0, :2] = float("-inf")           # both arms impossible: log P = -inf
    x[1] = float("-inf")                  # every input -inf
    x[2, 1, 1] = float("-inf")            # one arm impossible
    x.requires_grad_()
    out = circuit.log_prob(x)
    assert torch.isneginf(out[:2]).all() and torch.isfinite(out[2:]).all()
    g, = torch.autograd.grad(out[2:].sum(), x)
    assert torch.isfinite(g).all()
    g_all, = torch.autograd.grad(circuit.log_prob(x).sum(), x)  # -inf outputs: zero, not NaN, gradient
    assert not torch.isnan(g_all).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_logits_finite(dtype):
    circuit, _ = random_circuit(7, 5, 2)
    logits = torch.tensor([[1e4, -1e4, 0.0, 1e4, -1e4]], dtype=dtype).repeat(2, 1)
    logits[1] *= -1
    logits.requires_grad_()
    out = circuit.log_prob(torch.nn.functional.logsigmoid(logits))
    g, = torch.autograd.grad(out[torch.isfinite(out)].sum(), logits)
    assert torch.isfinite(g).all()


def test_unsatisfiable_root_is_neg_inf_with_zero_gradient():
    b = CircuitBuilder(2, 2)
    contradiction = b.and_(b.literal(0, 1), b.literal(0, 0))  # X_0 = 1 and X_0 = 0: folds to FALSE
    circuit = Circuit(b.build([contradiction, b.literal(1, 1)]))
    assert contradiction == FALSE
    assert circuit.dag.is_false(0) and not circuit.dag.is_false(1)
    x = torch.randn(3, 2, 2, dtype=torch.float64).requires_grad_()
    out = circuit(x)
    assert torch.isneginf(out[:, 0]).all()
    g, = torch.autograd.grad(out[:, 0].sum(), x)
    assert torch.equal(g, torch.zeros_like(g))


def test_builder_folds_and_hash_conses():
    b = CircuitBuilder(3, 2)
    a = b.and_(b.literal(0), b.literal(1))
    assert b.and_(b.literal(1), b.literal(0)) == a
    assert b.and_(a, TRUE) == a and b.and_(a, FALSE) == FALSE
    assert b.or_(a, FALSE) == a and b.or_(a, TRUE) == TRUE
    assert b.in_set(2, [0, 1]) == TRUE


def test_smoothing_covers_all_variables():
    b = CircuitBuilder(4, 3)
    root = b.or_(b.literal(0, 0), b.and_(b.literal(0, 1), b.literal(2, 2)))  # unsmooth on purpose
    dag = b.build(root)
    dag.check_smooth()
    dag.check_decomposable()
    dag.check_deterministic()
    x = torch.randn(2, 4, 3, dtype=torch.float64)  # unnormalised: missing variables must sum out
    truth = oracle.truth_of(lambda a: a[0] == 0 or (a[0] == 1 and a[2] == 2), 4, 3)
    assert torch.allclose(Circuit(dag).log_prob(x), oracle.log_wmc(truth, x), atol=ATOL64)


def _raw_dag(kinds, var, value, children, roots, n_vars=2):
    offsets = np.cumsum([0] + [len(c) for c in children])
    return Dag(n_vars, 2, np.array(kinds, np.int8), np.array(var), np.array(value), offsets,
               np.array([c for cs in children for c in cs], dtype=np.int64), np.array(roots))


def test_checks_reject_invalid_circuits():
    # nodes: 0 F, 1 T, 2 x0, 3 ~x0, 4 x1, 5 ~x1, 6 AND(x0, x0 | x1) ...
    lits = dict(kinds=[3, 3, 0, 0, 0, 0], var=[0, 0, 0, 0, 1, 1], value=[0, 1, 1, 0, 1, 0])
    with pytest.raises(CircuitError, match="decomposable"):  # a Dag validates itself when it is made
        _raw_dag(lits["kinds"] + [1], lits["var"] + [0], lits["value"] + [0], [[], [], [], [], [], [], [2, 3]], [6])
    # OR(AND(x0, x1), AND(x0 | ~x0 ..)) overlapping: smooth and decomposable, not deterministic
    overlapping = _raw_dag(lits["kinds"] + [2, 1, 1, 2], lits["var"] + [0] * 4, lits["value"] + [0] * 4,
                           [[], [], [], [], [], [], [2, 3], [2, 4], [6, 4], [7, 8]], [9])
    with pytest.raises(CircuitError, match="deterministic"):
        overlapping.check_deterministic()
    with pytest.raises(CircuitError, match="smooth"):
        _raw_dag(lits["kinds"] + [2], lits["var"] + [0], lits["value"] + [0], [[], [], [], [], [], [], [2, 4]], [6])


def test_save_load_roundtrip(tmp_path):
    circuit, _ = random_circuit(13, 4, 3, 2)
    assert circuit.save(tmp_path / "c") == tmp_path / "c.npz"
    loaded = Circuit.load(tmp_path / "c")
    assert loaded.fingerprint() == circuit.fingerprint()
    x = torch.randn(3, 4, 3, dtype=torch.float64)
    assert torch.equal(loaded(x), circuit(x))
    (tmp_path / "bad.npz").write_bytes(b"not a circuit")
    with pytest.raises(ValueError, match="not a saved pseudosl circuit"):
        Circuit.load(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        Circuit.load(tmp_path / "missing.npz")


def test_module_moves_with_to():
    circuit, _ = random_circuit(17, 3, 2)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    x = torch.randn(2, 3, 2, dtype=torch.float64)
    ref = circuit(x)
    for d in devices:
        moved = circuit.to(d)
        assert moved.root_rows.device.type == d
        assert torch.allclose(moved(x.to(d)).cpu(), ref, atol=ATOL64)


def test_bad_inputs_raise_clear_errors():
    circuit, _ = random_circuit(19, 3, 3)
    with pytest.raises(ValueError, match=r"shape \(B, 3, 3\)"):
        circuit(torch.zeros(2, 3, 2))
    with pytest.raises(TypeError, match="floating-point"):
        circuit(torch.zeros(2, 3, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        circuit(np.zeros((2, 3, 3)))
    nan = torch.zeros(2, 3, 3)
    nan[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        circuit(nan)
    with pytest.raises(ValueError, match=r"\+inf"):
        circuit(torch.full((1, 3, 3), float("inf")))
    boolean, _ = random_circuit(19, 3, 2)
    with pytest.raises(ValueError, match="logsigmoid"):
        boolean(torch.ones(2, 3))
    b = CircuitBuilder(2, 3)
    with pytest.raises(ValueError, match="out of range"):
        b.literal(2, 0)
    with pytest.raises(ValueError, match="out of range"):
        b.literal(0, 3)
    with pytest.raises(ValueError, match="not a node"):
        b.and_(99)
    with pytest.raises(ValueError, match="n_values"):
        CircuitBuilder(2, 1)


# -- issue 19: subnormal inputs, batches too large for memory ----------------------------------------
def test_log1mexp_of_subnormal_inputs():
    """log(1 - exp(x)) for x between float32's smallest subnormal and 0 (it used to clamp at -tiny: -87.34)."""
    from pseudosl.numerics import log1mexp
    for dtype, xs in ((torch.float32, [-1e-45, -1e-40, -1.1e-38, -1.2e-38, -1e-30, -1e-8, -0.3, -0.7, -1.0, -60.0]),
                      (torch.float64, [-5e-324, -1e-310, -2.3e-308, -1e-200, -1e-17, -0.5, -3.0, -800.0])):
        x = torch.tensor(xs, dtype=dtype)
        expect = torch.tensor([math.log(-math.expm1(v)) if v > -0.7 else math.log1p(-math.exp(v)) for v in x.tolist()],
                              dtype=torch.float64)
        torch.testing.assert_close(log1mexp(x).double(), expect, rtol=2 * torch.finfo(dtype).eps, atol=0)
    assert log1mexp(torch.tensor([-1e-45])).item() == pytest.approx(-103.2789, abs=1e-4)
    assert torch.isneginf(log1mexp(torch.tensor([0.0, -0.0]))).all()
    b = CircuitBuilder(1, 2)
    circuit = Circuit(b.build(b.literal(0, 0)))  # "X_0 is false": log P = log1mexp(log P(true))
    x = torch.tensor([[-1e-45], [-1e-30], [0.0]], requires_grad=True)
    out = circuit.log_prob(x)
    assert out[0].item() == pytest.approx(-103.2789, abs=1e-4) and out[1].item() == pytest.approx(-69.0776, abs=1e-4)
    assert torch.isneginf(out[2])
    g, = torch.autograd.grad(out[:2].sum(), x)
    assert torch.isfinite(g).all()


def test_huge_batch_runs_in_chunks_without_gradients():
    """4e8 rows on the meta device (no memory): without autograd no intermediate exceeds memory_budget."""
    circuit, _ = random_circuit(31, 3, 2, 2)
    circuit = circuit.to("meta")
    circuit.memory_budget = 1 << 26
    rows = 400_000_000
    for x in (torch.empty(rows, 3, device="meta"), torch.empty(rows, 3, 2, device="meta")):
        with torch.no_grad(), LargeAllocations(circuit.memory_budget) as seen:
            out = circuit.log_prob(x)
        assert out.shape == (rows, 2)
        assert all(shape == (rows, 2) for _, shape in seen.large), seen.large  # the result only
    small = random_circuit(31, 3, 2, 2)[0].double()
    x = torch.randn(300, 3, 2, dtype=torch.float64).log_softmax(-1)
    whole = small.log_prob(x)
    small.memory_budget = 1000  # a few rows per chunk
    assert len(pseudosl.memory.chunks(300, small._memory.row_bytes(x, keep=False), small.memory_budget)) > 10
    assert torch.equal(small.log_prob(x), whole)


def test_huge_batch_with_gradients_is_refused_by_name(monkeypatch):
    import pseudosl.memory
    circuit, _ = random_circuit(31, 3, 2, 2)
    x = torch.empty(400_000_000, 3, 2, device="meta", requires_grad=True)
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 4 << 30)
    with pytest.raises(MemoryError, match=r"batch of 400000000 rows with gradients needs about .* GiB .*"
                                          r"more than the 4.0 GiB free on meta: pass smaller batches.*torch.no_grad"):
        Circuit(circuit.dag).to("meta").log_prob(x)
    cpu = torch.zeros(64, 3, 2, requires_grad=True)
    circuit.memory_budget = 1
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 1000)
    with pytest.raises(MemoryError, match="rows with gradients"):
        circuit.log_prob(cpu)
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 1 << 40)
    circuit.log_prob(cpu).sum().backward()  # fits: runs as before


def test_free_memory_is_known_on_linux():
    from pseudosl.memory import free_bytes
    free = free_bytes(torch.device("cpu"))
    assert free is None or free > 0
    assert free_bytes(torch.device("meta")) is None


def test_huge_batch_without_gradients_is_refused_when_its_result_does_not_fit(monkeypatch):
    import pseudosl.memory
    circuit, _ = random_circuit(31, 3, 2, 2)
    circuit = circuit.to("meta")
    circuit.memory_budget = 1 << 26
    x = torch.empty(400_000_000, 3, 2, device="meta")
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 1 << 30)
    with torch.no_grad(), pytest.raises(MemoryError, match=r"batch of 400000000 rows needs about 3\.0 GiB for its "
                                                            r"result \(400000000, 2\) and one chunk .* more "
                                                            r"than the 1\.0 GiB free on meta: pass smaller batches"):
        circuit.log_prob(x)
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 4 << 30)
    with torch.no_grad():
        assert circuit.log_prob(x).shape == (400_000_000, 2)  # fits: one result, filled chunk by chunk


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux's /proc")
def test_free_memory_counts_the_address_space_limit(tmp_path):
    """Under ``ulimit -v`` the memory a process may still map, not the machine's, bounds a batch."""
    import resource
    import subprocess
    import sys
    code = ("import torch; from pseudosl.memory import free_bytes; "
            "print(free_bytes(torch.device('cpu')))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    limit = 3 << 30
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": src},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0 <= int(done.stdout) < limit
