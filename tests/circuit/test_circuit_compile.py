"""The circuit runtime without host synchronisation: meta tensors, ``torch.compile``, CUDA graphs.

Values and gradients are compared with the brute-force oracle.  Compiled tests use the
``aot_eager`` backend (Dynamo + AOTAutograd: proves one graph and traces the backward, without
the minutes of C++ code generation Inductor needs on a CPU; ``benchmarks/circuits.py --compile``
runs Inductor and checks its values).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

import oracle
from tolerances import ATOL64, ATOL32, P_VALUE_MIN
from pseudosl import Circuit, semantic_loss
from pseudosl.losses import log_probs_from_logits, product_log_prob
from random_circuits import random_circuit


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def satisfiable_circuit(seed: int, n: int = 3, k: int = 3, roots: int = 1):
    """A random circuit with at least one model per root (so values and gradients are finite)."""
    while True:
        circuit, preds = random_circuit(seed, n, k, roots)
        truths = [oracle.truth_of(p, n, k) for p in preds]
        if all(t.any() for t in truths):
            return circuit, truths
        seed += 1000


def oracle_log_prob(truths, x: torch.Tensor) -> torch.Tensor:
    return torch.stack([oracle.log_wmc(t, x) for t in truths], 1).squeeze(1)


def test_meta_tensors_prove_no_host_reads():
    """Meta tensors have no data: any ``.item()`` / ``bool(tensor)`` on the hot path would raise."""
    circuit, _ = satisfiable_circuit(1, roots=2)
    meta = circuit.to("meta")
    logits = torch.empty(4, 3, 3, device="meta", requires_grad=True)
    loss = semantic_loss(meta, logits, allowed=torch.empty(4, 3, 3, dtype=torch.bool, device="meta"))
    loss.backward()
    assert logits.grad.shape == (4, 3, 3) and logits.grad.device.type == "meta"
    boolean = Circuit(random_circuit(2, 3, 2)[0].dag).to("meta")
    boolean.log_prob(torch.empty(5, 3, device="meta")).sum()


def test_validate_inputs_switch():
    circuit, _ = satisfiable_circuit(3)
    bad = torch.full((2, 3, 3), float("nan"))
    with pytest.raises(ValueError, match="NaN"):  # default: checked on CPU
        circuit.log_prob(bad)
    circuit.validate_inputs = False
    assert torch.isnan(circuit.log_prob(bad)).all()  # unchecked: NaN in, NaN out
    assert torch.isnan(log_probs_from_logits(circuit, bad)).all()
    circuit.validate_inputs = True
    with pytest.raises(ValueError, match=r"\+inf"):
        circuit.log_prob(torch.full((2, 3, 3), float("inf")))
    with pytest.raises(ValueError, match="all -inf"):
        log_probs_from_logits(circuit, torch.full((2, 3, 3), float("-inf")))
    assert circuit.validates(torch.empty(1, device="meta"))  # True asks for checks on every device
    circuit.validate_inputs = None
    assert not circuit.validates(torch.empty(1, device="meta"))


def test_fullgraph_compile_matches_oracle():
    circuit, truths = satisfiable_circuit(0, n=3, k=3, roots=2)
    circuit = circuit.double()
    f = circuit.compiled(backend="aot_eager")
    for batch in (4, 9):  # the second batch size recompiles once, with a dynamic batch dimension
        x = (torch.randn(batch, 3, 3, dtype=torch.float64) * 2).requires_grad_()
        out = f(x)
        expect = oracle_log_prob(truths, x)
        assert torch.allclose(out, expect, atol=ATOL64)
        w = torch.randn_like(expect)
        g_out, = torch.autograd.grad((out * w).sum(), x)
        g_exp, = torch.autograd.grad((expect * w).sum(), x)
        assert torch.allclose(g_out, g_exp, atol=ATOL64)


def test_compiled_boolean_input_and_no_grad():
    circuit, truths = satisfiable_circuit(4, n=3, k=2)
    circuit = circuit.double()
    p = torch.rand(5, 3, dtype=torch.float64).clamp(0.05, 0.95)
    with torch.no_grad():
        out = circuit.compiled(backend="aot_eager")(p.log())
    expect = oracle.log_wmc(truths[0], torch.stack([(1 - p).log(), p.log()], -1))
    assert torch.allclose(out, expect, atol=ATOL64)


def test_semantic_loss_forward_backward_compiles_fullgraph():
    circuit, truths = satisfiable_circuit(5, n=3, k=3, roots=2)
    circuit = circuit.double()
    allowed = torch.ones(4, 3, 3, dtype=torch.bool)
    allowed[:, 0, 0] = False

    def step(logits: torch.Tensor) -> torch.Tensor:
        return semantic_loss(circuit, logits, allowed=allowed)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    logits = torch.randn(4, 3, 3, dtype=torch.float64, requires_grad=True)
    loss = compiled(logits)
    g, = torch.autograd.grad(loss, logits)
    lp = logits.log_softmax(-1).masked_fill(~allowed, float("-inf"))
    log_allowed = lp.logsumexp(-1).sum(-1, keepdim=True)
    expect = -(log_allowed.squeeze(-1) + (torch.stack([oracle.log_wmc(t, lp) for t in truths], 1)
                                          - log_allowed).sum(-1)).mean()
    g_exp, = torch.autograd.grad(expect, logits)
    assert torch.allclose(loss, expect, atol=ATOL64)
    assert torch.allclose(g, g_exp, atol=ATOL64)
    eager = product_log_prob(circuit, log_probs_from_logits(circuit, logits), allowed)
    assert torch.allclose(-eager.mean(), loss, atol=ATOL64)


def test_infinite_logits_compile_branch_free():
    circuit, _ = satisfiable_circuit(6, n=3, k=3)
    logits = torch.randn(3, 3, 3, dtype=torch.float64)
    logits[0, 1, 2] = float("inf")
    logits[1, 0, :2] = float("inf")
    logits[2, 2, 0] = float("-inf")
    f = torch.compile(lambda z: log_probs_from_logits(circuit, z), fullgraph=True, backend="aot_eager")
    assert torch.equal(f(logits), log_probs_from_logits(circuit, logits))  # eager CPU takes the checked path


def test_many_circuits_stay_under_the_recompile_limit():
    """Each circuit's compiled function has its own cache: 10 circuits, limit 1, no fallback."""
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        for seed in range(10):
            circuit, truths = satisfiable_circuit(10 + seed, n=2 + seed % 3, k=2 + seed % 2)
            x = torch.randn(3, circuit.n_vars, circuit.n_values, dtype=torch.float64)
            out = circuit.double().compiled(backend="eager")(x)
            assert torch.allclose(out, oracle_log_prob(truths, x), atol=ATOL64)


def test_compiled_validation_is_a_device_side_assert():
    circuit, _ = satisfiable_circuit(7)
    circuit.validate_inputs = True
    f = circuit.compiled(backend="aot_eager")
    x = torch.randn(2, 3, 3).log_softmax(-1)
    assert torch.allclose(f(x), circuit.log_prob(x))
    with pytest.raises(RuntimeError):
        f(torch.full((2, 3, 3), float("nan")))


def test_compiled_cache_is_not_copied():
    import copy
    circuit, _ = satisfiable_circuit(8)
    f = circuit.compiled(backend="eager")
    assert circuit.compiled(backend="eager") is f and circuit.compiled(backend="aot_eager") is not f
    assert circuit.compiled(backend="eager", options={}) is circuit.compiled(backend="eager", options={})
    clone = copy.deepcopy(circuit)
    assert clone.compiled(backend="eager") is not f


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_capture_and_replay():
    circuit, truths = satisfiable_circuit(9, n=3, k=3, roots=2)
    circuit = circuit.cuda()
    static_x = torch.randn(8, 3, 3, device="cuda").log_softmax(-1).requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")  # any implicit host synchronisation in an op raises
    try:
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for _ in range(3):
                torch.autograd.grad(circuit.log_prob(static_x).sum(), static_x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture fails on any synchronisation
        static_out = circuit.log_prob(static_x)
        static_grad, = torch.autograd.grad(static_out.sum(), static_x)
    for _ in range(3):
        new = torch.randn(8, 3, 3, device="cuda").log_softmax(-1)
        with torch.no_grad():
            static_x.copy_(new)
        graph.replay()
        x64 = new.double().cpu().requires_grad_()
        expect = oracle_log_prob(truths, x64)
        g_exp, = torch.autograd.grad(expect.sum(), x64)
        assert torch.allclose(static_out.double().cpu(), expect, atol=ATOL32)
        assert torch.allclose(static_grad.double().cpu(), g_exp, atol=ATOL32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_reduce_overhead_mode_on_cuda():
    circuit, truths = satisfiable_circuit(11, n=3, k=3)
    f = circuit.cuda().compiled(mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(8, 3, 3, device="cuda").log_softmax(-1).requires_grad_()
        out = f(x)
        g, = torch.autograd.grad(out.sum(), x)
        x64 = x.detach().double().cpu().requires_grad_()
        expect = oracle_log_prob(truths, x64)
        g_exp, = torch.autograd.grad(expect.sum(), x64)
        assert torch.allclose(out.double().cpu(), expect, atol=ATOL32)
        assert torch.allclose(g.double().cpu(), g_exp, atol=ATOL32)


class _HostReads(TorchDispatchMode):
    """Records ops that read tensor values on the host (a GPU would wait for them)."""
    READS = ("_local_scalar_dense", "nonzero", "equal", "is_nonzero", "item")

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in self.READS:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_queries_never_read_values_on_the_host(monkeypatch):
    """MPE, samples, marginals and the max semiring on ``meta`` tensors (no data: a host read raises),
    then on CPU with the value checks off (as on a GPU), recording any op that reads values."""
    circuit, _ = satisfiable_circuit(12, roots=2)
    meta = Circuit(circuit.dag).to("meta")
    x = torch.empty(4, 3, 3, device="meta")
    allowed = torch.empty(4, 3, 3, dtype=torch.bool, device="meta")
    assert meta.mpe(x, allowed, root=1).values.shape == (4, 3)
    s = meta.sample(x, 5, allowed=allowed, root=0)
    assert s.values.shape == (5, 4, 3) and s.log_prob.shape == (5, 4) and s.log_partition.shape == (4,)
    assert meta.marginals(x, allowed, root=1).shape == (4, 3, 3)
    assert meta(x, semiring="max").shape == (4, 2)
    boolean = Circuit(random_circuit(2, 3, 2)[0].dag).to("meta")
    assert boolean.sample(torch.empty(6, 3, device="meta"), 2).values.shape == (2, 6, 3)
    import pseudosl.checks
    monkeypatch.setattr(pseudosl.checks, "reads_values", lambda t: False)
    x = torch.randn(4, 3, 3).log_softmax(-1)
    allowed = torch.rand(4, 3, 3) > 0.2
    with _HostReads() as reads:
        circuit.mpe(x, allowed, root=1)
        circuit.sample(x, 5, allowed=allowed, root=0, generator=torch.Generator().manual_seed(0))
        circuit.marginals(x, allowed, root=1)
        circuit(x.requires_grad_(), semiring="max").sum().backward()
    assert reads.seen == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_queries_on_cuda_match_cpu_without_synchronising():
    circuit, truths = satisfiable_circuit(13, n=3, k=3, roots=2)
    x = torch.randn(6, 3, 3, dtype=torch.float64).log_softmax(-1)
    allowed = torch.rand(6, 3, 3, generator=torch.Generator().manual_seed(0)) > 0.2
    gpu = Circuit(circuit.dag).cuda()
    xc, ac = x.cuda(), allowed.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any implicit host synchronisation raises
    try:
        mpe = gpu.mpe(xc, ac, root=1)
        mu = gpu.marginals(xc, ac, root=0)
        s = gpu.sample(xc, 20000, allowed=ac, root=0, generator=torch.Generator("cuda").manual_seed(0))
        best = gpu(xc, semiring="max")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    cpu_mpe = circuit.mpe(x, allowed, root=1)
    torch.testing.assert_close(mpe.log_prob.cpu(), cpu_mpe.log_prob, atol=ATOL64, rtol=0)
    torch.testing.assert_close(mu.cpu(), circuit.marginals(x, allowed, root=0), atol=ATOL64, rtol=0)
    torch.testing.assert_close(best.cpu(), circuit(x, semiring="max"), atol=ATOL64, rtol=0)
    from assertions import sample_fit
    xa = x.masked_fill(~allowed, float("-inf"))
    p = oracle.conditional(truths[0], xa)
    for b in range(6):
        if p[b].sum() > 0:
            idx = oracle.assignment_index(s.values[:, b].cpu(), 3)
            l1, bound, p_value = sample_fit(torch.bincount(idx, minlength=p.shape[1]), p[b])
            assert l1 <= bound and p_value > P_VALUE_MIN
        else:
            assert (s.values[:, b] == -1).all()
