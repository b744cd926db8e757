"""Constrained generation on CUDA (issue 17): the circuit queries, ``constrained_sample`` and the logits processor.

Each test runs the same inputs on the CPU and on the GPU and compares: MPE values and log-probabilities,
marginals, the samples' log-partition (and that every sample satisfies the constraint), resampled and MPE
outputs of a user-written GRU in train and eval mode, and ``generate`` with the processor on a tiny GPT-2.
The circuit queries must not synchronise with the host once warm.  Skipped without a CUDA device (``scripts/gpu.sh
tests`` runs them on a GPU).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import pseudosl
from tolerances import ATOL32_FEW_OPS, RTOL32
from assertions import assert_no_host_sync
from tiny_models import circuit_from_truth, tiny_gpt2
from random_circuits import random_circuit
from test_constrained_sample import GRU, K_VALUES, N, random_truth

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TOL = dict(atol=ATOL32_FEW_OPS, rtol=RTOL32)


def _inputs(seed: int, batch: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, k, generator=g, dtype=torch.float64), torch.rand(batch, n, k, generator=g) > 0.2


@pytest.mark.parametrize("seed", range(3))
def test_queries_on_cuda_match_the_cpu(seed):
    circuit, _ = random_circuit(seed, 5, 3)
    x, allowed = _inputs(seed, 16, 5, 3)
    gpu, xg, ag = copy.deepcopy(circuit).to("cuda"), x.cuda(), allowed.cuda()  # .to moves a module in place
    mpe, mpe_gpu = circuit.mpe(x, allowed), gpu.mpe(xg, ag)
    torch.testing.assert_close(mpe_gpu.log_prob.cpu(), mpe.log_prob, **TOL)
    assert torch.equal(mpe_gpu.values.cpu(), mpe.values)  # float64: no near-ties to break differently
    has_model = mpe.values[:, 0] >= 0
    torch.testing.assert_close(gpu.marginals(xg, ag).cpu(), circuit.marginals(x, allowed), **TOL)
    draws = gpu.sample(xg, 64, allowed=ag, generator=torch.Generator("cuda").manual_seed(seed))
    torch.testing.assert_close(draws.log_partition.cpu(), circuit.log_prob(x, allowed), **TOL)
    values = draws.values.cpu()[:, has_model]
    assert pseudosl.sample_satisfies(circuit, values.reshape(-1, 5), allowed[has_model].repeat(64, 1, 1)).all()


def test_queries_do_not_synchronise_once_warm():
    circuit = circuit_from_truth(np.random.default_rng(0).random(3 ** 5) < 0.5, 5, 3).to("cuda")
    x = torch.randn(32, 5, 3, device="cuda")
    g = torch.Generator("cuda").manual_seed(0)

    assert_no_host_sync(lambda: (circuit.mpe(x), circuit.marginals(x), circuit.sample(x, 8, generator=g)))


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("mode", ["resample", "mpe"])
def test_constrained_sample_on_cuda(train, mode):
    torch.set_default_dtype(torch.float32)
    model, truth = GRU(seed=1).float().train(train), random_truth(1, density=0.1)
    circuit = circuit_from_truth(truth, N, K_VALUES)
    anchors = model.engine().sample(batch_size=32, generator=torch.Generator().manual_seed(0))
    kw = dict(num_candidates=6) if mode == "resample" else {}
    gpu_model, gpu_circuit = copy.deepcopy(model).cuda(), copy.deepcopy(circuit).to("cuda")
    with torch.no_grad():
        y = pseudosl.constrained_sample(gpu_model.engine(), gpu_circuit, anchors.cuda(), mode=mode,
                                        generator=torch.Generator("cuda").manual_seed(0), **kw)
    assert y.device.type == "cuda" and y.shape == (32, N)
    assert pseudosl.sample_satisfies(circuit, y.cpu()).all()
    if mode == "mpe":  # deterministic given the anchors: the CPU gives the same outputs
        cpu = pseudosl.constrained_sample(model.engine(), circuit, anchors, mode="mpe")
        assert torch.equal(y.cpu(), cpu)


def test_logits_processor_on_cuda_ends_in_the_constraint():
    vocab, n = 8, 6
    model = tiny_gpt2(16, vocab, 32).float().eval().cuda()
    constraint = pseudosl.no_forbidden_sequences([[3], [4, 5], [6, 2, 6]], n_positions=n, vocab_size=vocab,
                                                 cache=False)
    prompts = torch.randint(1, vocab, (12, 3), generator=torch.Generator().manual_seed(0)).cuda()
    from transformers import LogitsProcessorList
    masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=3)])
    torch.manual_seed(0)
    out = model.generate(prompts, logits_processor=masks, do_sample=True, top_k=0, max_new_tokens=n,
                         min_new_tokens=n, pad_token_id=0)
    assert out.device.type == "cuda"
    assert constraint.satisfied(out[:, -n:].cpu()).all()


@pytest.mark.parametrize("dense", [True, False], ids=["dense tables", "exceptions per call"])
def test_streaming_processor_on_cuda_matches_the_cpu(dense, monkeypatch):
    """Rows copied and shuffled between calls (as beam search does), an EOS and a token budget: the masks on the GPU
    equal the CPU's.  (The processor reads each call's rows to tell a continuation from a new ``generate`` call:
    one synchronisation per call, by design.)"""
    from pseudosl.generation import automaton_mask
    from test_streaming_processor import EOS, V, Automaton
    if not dense:
        monkeypatch.setattr(automaton_mask, "DENSE_ENTRIES", 0)
    constraint, rng, steps = Automaton(1).constraint, np.random.default_rng(0), 6
    rows = [torch.randint(1, V, (3, 2), generator=torch.Generator().manual_seed(0)).repeat_interleave(2, 0)]
    for _ in range(steps - 1):
        parents = np.arange(6) // 2 * 2 + rng.integers(0, 2, 6)
        rows.append(torch.cat([rows[-1][parents], torch.from_numpy(rng.integers(1, V, (6, 1)))], 1))
    scores = torch.randn(6, V, generator=torch.Generator().manual_seed(0))

    def run(processor, device):
        processor.reset()
        return [processor(r.to(device), scores.to(device)) for r in rows]

    cpu = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=EOS, max_new_tokens=steps)
    gpu = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=EOS, max_new_tokens=steps)
    for want, got in zip(run(cpu, "cpu"), run(gpu, "cuda")):
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("decoding", [dict(do_sample=True, top_k=0), dict(num_beams=3, num_return_sequences=2)],
                         ids=["sampling", "beam search"])
def test_streaming_processor_on_cuda_never_writes_a_rejected_text(decoding):
    from test_streaming_processor import EOS, V, parity_and_no_4_4, texts
    model = tiny_gpt2(16, V, 32).float().eval().cuda()
    constraint = parity_and_no_4_4()
    prompts = torch.randint(1, V, (12, 3), generator=torch.Generator().manual_seed(0)).cuda()
    from transformers import LogitsProcessorList
    masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=EOS, max_new_tokens=7)])
    torch.manual_seed(0)
    out = model.generate(prompts, logits_processor=masks, max_new_tokens=7, pad_token_id=0, eos_token_id=EOS,
                         **decoding)
    assert out.device.type == "cuda"
    assert all(constraint.satisfied(t[None]) for t in texts(out.cpu(), 3, EOS))
