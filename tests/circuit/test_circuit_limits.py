"""Bounded cost and named errors of the circuit's queries (issue 29).

Sizes that can explode (samples per example, batch x samples) are checked before any work: a result that
cannot fit (``(S, B, n)`` itself) is a ``MemoryError`` naming its size, a legitimate large request runs in
chunks of ``memory_budget`` into one result.  ``memory_budget`` is checked when assigned; a sparse, nested,
integer or misplaced input is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pseudosl.memory
from tolerances import ATOL64
from pseudosl import Circuit, semantic_loss
from pseudosl.memory import Chunks
from random_circuits import LargeAllocations, random_circuit


# -- sizes: samples, batch x samples, the results of mpe and marginals ----------------------------------------
@pytest.mark.parametrize("num_samples, batch", [(2**31, 1), (10**30, 1), (5 * 10**8, 3), (2**40, 2)])
def test_a_sample_whose_result_cannot_fit_is_refused_before_any_work(monkeypatch, num_samples, batch):
    circuit, _ = random_circuit(31, 3, 2)
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 8 << 30)
    x = torch.randn(batch, 3, 2).log_softmax(-1)
    with LargeAllocations(1024) as seen, pytest.raises(MemoryError) as err:
        circuit.sample(x, num_samples)
    assert seen.large == []  # nothing was made
    message = str(err.value)
    assert f"sample of {num_samples} draws for each of {batch} rows" in message
    assert "draw fewer samples per call (num_samples" in message
    if num_samples * batch * 3 > 2**63 - 1:
        assert f"asks for a result of {num_samples * batch * 3:.3g} values, more than any tensor can hold" in message
    else:
        assert f"for its result values ({num_samples}, {batch}, 3) int64" in message
        assert "more than the 8.0 GiB free on cpu" in message


def test_many_samples_run_in_chunks_into_one_result():
    """2**31 samples on the meta device (no memory): no intermediate exceeds memory_budget, the result is whole."""
    circuit = random_circuit(31, 3, 2)[0].to("meta")
    circuit.memory_budget = 1 << 32  # 4 GiB: 72 chunks (the results take 16 and 96 GiB)
    x = torch.empty(2, 3, 2, device="meta")
    with LargeAllocations(circuit.memory_budget) as seen:
        s = circuit.sample(x, 2**31)
    assert s.values.shape == (2**31, 2, 3) and s.log_prob.shape == (2**31, 2)
    assert sorted(shape for _, shape in seen.large) == [(2**31, 2), (2**31, 2, 3)], seen.large  # the results only


@pytest.mark.parametrize("num_samples", [2**31, 10**18])
def test_many_samples_of_an_empty_batch_are_one_empty_chunk(num_samples):
    circuit, _ = random_circuit(31, 3, 2)
    circuit.memory_budget = 1  # one sample per chunk, were the samples of an empty batch to cost anything
    with LargeAllocations(1024) as seen:
        s = circuit.sample(torch.zeros(0, 3), num_samples)
    assert s.values.shape == (num_samples, 0, 3) and s.log_prob.shape == (num_samples, 0) and seen.large == []


@pytest.mark.parametrize("memory_budget", [1, 700, 2000])
def test_chunked_samples_mpe_and_marginals_equal_one_pass(memory_budget):
    """Filling one preallocated result chunk by chunk: the same as one pass (samples: the same distribution)."""
    circuit, _ = random_circuit(4, 4, 3)  # 33 nodes, satisfiable
    x = torch.randn(7, 4, 3, dtype=torch.float64).log_softmax(-1)
    assert torch.isfinite(circuit.log_prob(x)).all()
    whole = Circuit(circuit.dag)
    circuit.memory_budget = memory_budget
    assert len(circuit.condition(x).chunks) > 1
    assert torch.equal(circuit.mpe(x).values, whole.mpe(x).values)
    torch.testing.assert_close(circuit.mpe(x).log_prob, whole.mpe(x).log_prob, atol=ATOL64, rtol=0)
    torch.testing.assert_close(circuit.marginals(x), whole.marginals(x), atol=ATOL64, rtol=0)
    s = circuit.sample(x, 50, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(s.log_partition, whole.log_prob(x), atol=ATOL64, rtol=0)
    scored = x.unsqueeze(0).expand(50, *x.shape).gather(3, s.values.unsqueeze(3)).squeeze(3).sum(2)
    torch.testing.assert_close(s.log_prob, scored, atol=ATOL64, rtol=0)  # every cell was filled, and consistently


@pytest.mark.parametrize("query", ["mpe", "marginals"])
def test_mpe_and_marginals_of_a_batch_whose_result_cannot_fit(monkeypatch, query):
    circuit = random_circuit(31, 3, 2)[0].to("meta")
    circuit.memory_budget = 1 << 26
    x = torch.empty(300_000_000, 3, 2, device="meta")
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 1 << 30)
    with pytest.raises(MemoryError, match=rf"{query} of a batch of 300000000 rows needs about \d+\.\d GiB for its "
                                          rf"result .* more than the 1\.0 GiB free on meta: pass smaller batches"):
        getattr(circuit, query)(x)
    monkeypatch.setattr(pseudosl.memory, "free_bytes", lambda device: 64 << 30)
    result = getattr(circuit, query)(x)
    assert (result if query == "marginals" else result.values).shape[0] == 300_000_000  # fits: filled chunk by chunk


@pytest.mark.parametrize("total, step", [(10**30, 7), (0, 3), (10, 3), (2**63, 2**20)])
def test_chunks_are_made_when_indexed(total, step):
    chunks = Chunks(total, step)
    assert chunks.count == max(1, -(-total // step))
    assert chunks[0] == slice(0, min(step, total)) and chunks[-1].stop == total
    if total:
        assert chunks[1].start == step and chunks[-1].stop - chunks[-1].start == total - (chunks.count - 1) * step
    if chunks.count < 100:
        assert [c.stop - c.start for c in chunks] == [min(step, total - i) for i in range(0, max(total, 1), step)]


# -- memory_budget, sparse, integer and misplaced inputs ----------------------------------------------------------
@pytest.mark.parametrize("bad", [1e6, "64MB", 2.5, True, None.__class__, [64]])
def test_memory_budget_of_the_wrong_type_is_refused_when_assigned(bad):
    circuit, _ = random_circuit(1, 2, 2)
    with pytest.raises(TypeError, match=r"memory_budget must be an int, got .* write an int, e\.g\. "
                                        r"circuit\.memory_budget = 64 \* 2\*\*20"):
        circuit.memory_budget = bad
    assert circuit.memory_budget is None  # unchanged


@pytest.mark.parametrize("bad", [0, -1, -(2**40)])
def test_memory_budget_below_one_is_refused_when_assigned(bad):
    circuit, _ = random_circuit(1, 2, 2)
    with pytest.raises(ValueError, match=rf"memory_budget must be >= 1, got {bad} \(circuit\.memory_budget is a "
                                         r"number of bytes, or None for the default: 64 MiB on a CPU"):
        circuit.memory_budget = bad


@pytest.mark.parametrize("good", [1, 4096, np.int64(1 << 20), None])
def test_memory_budget_takes_ints_and_none(good):
    circuit, _ = random_circuit(1, 2, 2)
    circuit.memory_budget = good
    assert circuit.memory_budget == (None if good is None else int(good))
    assert circuit.memory_budget is None or type(circuit.memory_budget) is int
    x = torch.randn(5, 2, 2).log_softmax(-1)
    torch.testing.assert_close(circuit.log_prob(x), Circuit(circuit.dag).log_prob(x))


QUERIES = {
    "log_prob": lambda c, x: c.log_prob(x),
    "forward": lambda c, x: c(x),
    "mpe": lambda c, x: c.mpe(x),
    "sample": lambda c, x: c.sample(x, 3),
    "marginals": lambda c, x: c.marginals(x),
    "semantic_loss": lambda c, x: semantic_loss(c, x),
}


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.filterwarnings("ignore:.*(beta|prototype):UserWarning")
@pytest.mark.parametrize("layout", ["coo", "csr", "nested"])
def test_a_sparse_or_nested_input_is_refused_by_name(query, layout):
    circuit, _ = random_circuit(2, 3, 2)
    dense = torch.randn(4, 3, 2).log_softmax(-1)
    x = {"coo": lambda: dense.to_sparse(), "csr": lambda: dense[:, :, 1].to_sparse_csr(),
         "nested": lambda: torch.nested.nested_tensor(list(dense))}[layout]()
    name = "logits" if query == "semantic_loss" else "x"
    with pytest.raises(TypeError, match=rf"{name} must be a dense \(strided\) tensor, got .*: "
                                        rf"pass {name}\.to_dense\(\)"):
        QUERIES[query](circuit, x)


def test_a_sparse_mask_is_refused_by_name():
    circuit, _ = random_circuit(2, 3, 3)
    x = torch.randn(2, 3, 3).log_softmax(-1)
    allowed = torch.ones(2, 3, 3, dtype=torch.bool).to_sparse()
    for call in (lambda: circuit.log_prob(x, allowed), lambda: circuit.mpe(x, allowed),
                 lambda: circuit.sample(x, allowed=allowed), lambda: semantic_loss(circuit, x, allowed=allowed)):
        with pytest.raises(TypeError, match=r"allowed must be a dense \(strided\) tensor, got layout "
                                            r"torch\.sparse_coo"):
            call()


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_an_input_that_is_not_floating_point_is_refused_by_name(query, dtype):
    circuit, _ = random_circuit(2, 3, 3)
    name = "logits" if query == "semantic_loss" else "x"
    with pytest.raises(TypeError, match=rf"{name} must be (a )?floating[ -]point.*{dtype}"):
        QUERIES[query](circuit, torch.zeros(2, 3, 3, dtype=dtype))


@pytest.mark.parametrize("query", QUERIES)
def test_an_input_on_another_device_is_refused_by_name(query):
    circuit = random_circuit(2, 3, 3)[0].to("meta")
    with pytest.raises(ValueError, match=r"x is on cpu but the circuit is on meta: move one to the other"):
        QUERIES[query](circuit, torch.zeros(2, 3, 3))
    on_cpu, _ = random_circuit(2, 3, 3)
    with pytest.raises(ValueError, match=r"allowed is on meta but the circuit is on cpu"):
        on_cpu.log_prob(torch.zeros(2, 3, 3), torch.ones(2, 3, 3, dtype=torch.bool, device="meta"))
