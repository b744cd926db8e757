"""The paper's top-k construction (issue 27): error and cost of ``CausalLMEngine(top_k=, top_k_distinguished=)``.

A scratch GPT-2 (random weights, final layer norm scaled for peakier next-token distributions), a word-list-like
constraint (``pseudosl.no_forbidden_sequences``: random "words" of 1-3 tokens; their tokens are the distinguished
values, every other token the catch-all) over a window of ``n`` tokens, anchors sampled from the model.  For each
setting: the PSL (mean over the anchors) and its gradient against the exact one (``top_k`` = the catch-all's size - 1,
every distinguished token scored), and the time and peak memory of one PSL step (loss + backward) against one
cross-entropy step (teacher-forced ``log p(y)`` + backward) on the same tokens.

Run: ``python benchmarks/psl_top_k.py`` (``--help`` for the sizes).  Memory: CPU, the peak of the running sum of the
CPU allocations the torch profiler records (``profile_memory=True``) during the step; CUDA,
``torch.cuda.max_memory_allocated`` growth.  Time: median of ``--reps`` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

import torch

import pseudosl


def peak_bytes(step, device: torch.device) -> int:
    """Peak memory of ``step()`` (module docs)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    deltas = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    peak = total = 0
    for _, d in deltas:
        total += d
        peak = max(peak, total)
    return peak


def seconds(step, device: torch.device, reps: int) -> float:
    step()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--words", type=int, default=150, help="forbidden 'words' (random token sequences of 1-3)")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="anchors")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    from transformers import GPT2Config, GPT2LMHeadModel, logging
    logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=4, vocab_size=args.vocab, n_positions=64,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).to(device).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(4.0)
    rng = random.Random(0)
    words = [[rng.randrange(1, args.vocab) for _ in range(rng.randint(1, 3))] for _ in range(args.words)]
    constraint = pseudosl.no_forbidden_sequences(words, args.window, args.vocab, cache=False)
    circuit, vm = constraint.circuit.to(device), constraint.value_map
    n_dist, n_other = vm.n_values - 1, args.vocab - (vm.n_values - 1)
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    anchors = pseudosl.CausalLMEngine(model, prompt).sample(batch_size=args.batch, length=args.window,
                                                             generator=torch.Generator(device).manual_seed(0))
    params = [p for p in model.parameters()]

    def psl_step(engine):
        model.zero_grad(set_to_none=True)
        loss = pseudosl.pseudo_semantic_loss(engine, constraint, anchors)
        loss.backward()
        return loss.detach(), torch.cat([p.grad.flatten() for p in params])

    def ce_step():
        model.zero_grad(set_to_none=True)
        ids = torch.cat([prompt.expand(args.batch, 1), anchors], 1)
        logits = model(input_ids=ids).logits[:, :-1]
        torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), anchors.flatten()).backward()

    t_ce, m_ce = seconds(ce_step, device, args.reps), peak_bytes(ce_step, device)
    settings = ([(n_other - 1, None)] + [(k, None) for k in (0, 10, 100)]
                + [(10, kd) for kd in (0, 8, 32, 128) if kd < n_dist] + [(0, 32), (100, 32)])
    rows, exact = [], None
    for top_k, kd in settings:
        engine = pseudosl.as_engine(model, prompt_ids=prompt, value_map=vm, top_k=top_k, top_k_distinguished=kd)
        loss, grad = psl_step(engine)
        if exact is None:
            exact = loss, grad
        rel_loss = float((loss - exact[0]).abs() / exact[0].abs())
        cos = float(torch.nn.functional.cosine_similarity(grad, exact[1], dim=0))
        rel_grad = float((grad - exact[1]).norm() / exact[1].norm())
        t = seconds(lambda: psl_step(engine), device, args.reps)
        m = peak_bytes(lambda: psl_step(engine), device)
        rows.append((top_k, "all" if kd is None else kd, engine.n_candidates, float(loss), rel_loss, cos, rel_grad,
                     t, m))
    print(f"GPT-2 {args.layers} layers, n_embd {args.embd}, vocab {args.vocab}; {args.words} words -> {n_dist} "
          f"distinguished tokens + a catch-all of {n_other}; window {args.window}, {args.batch} anchors, float32, "
          f"{args.device}, {args.threads} thread(s), {platform.processor() or platform.machine()}")
    print(f"cross-entropy step: {t_ce * 1e3:.1f} ms, peak {m_ce / 2**20:.1f} MiB\n")
    print("| top_k | top_k_distinguished | rows / position | PSL | rel. error PSL | grad cosine | rel. error grad "
          "| ms / step | × CE | peak MiB | × CE |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for top_k, kd, rows_pp, loss, rel_loss, cos, rel_grad, t, m in rows:
        print(f"| {top_k} | {kd} | {rows_pp} | {loss:.4f} | {rel_loss:.2e} | {cos:.4f} | {rel_grad:.2e} | "
              f"{t * 1e3:.0f} | {t / t_ce:.0f} | {m / 2**20:.1f} | {m / max(m_ce, 1):.0f} |")


if __name__ == "__main__":
    main()
