"""Constrained generation: the logits processor against ``bad_words_ids``, and resampling against plain sampling.

    python benchmarks/decoding.py [--part processor|resample|all] [--case words|dead-end|paper-scale ...]
                                  [--rows 32] [--reps 3] [--threads 1] [--device cpu]

**processor** (``pseudosl.ConstraintLogitsProcessor`` vs Hugging Face's ``generate(bad_words_ids=...)``, the same
token sequences): a GPT-2 (2 layers, width 64) trained for ``--train-steps`` Adam steps on random text salted with
the forbidden words (a word starts at 30 % of the positions, so the model likes to write them) generates ``n``
tokens after ``P = 8``-token prompts, greedy / sampling / beam search (4 beams), with nothing, with ``bad_words_ids`` and with the processor.
Per setting: the fraction of rows whose ``n`` generated tokens violate the constraint ("no forbidden sequence
in the window"), occurrences of multi-token words inside the window, words split across the window's start
(begun in the prompt, completed in the window: ``bad_words_ids`` bans them, the constraint does not mention
them), rows that emitted the end-of-sequence token 0 inside the window (``min_new_tokens=n`` bans it, so only
when every other token was banned too; such rows are padded with 0, as ``generate`` pads finished rows), whether
``generate`` failed (sampling from a row with every token banned), and the time per generated token (median of
``--reps`` calls after a warm-up, divided by rows x the tokens generated: fewer when every row ended early),
with the ratios to ``bad_words_ids`` and to nothing.  A quarter of the prompts end in the first token of a
multi-token word.  Cases: ``words`` (150 random words of 1-3 tokens over a 2,000-token vocabulary, window 10),
``dead-end`` (64 tokens; after token 7 every token completes a word, so banning the last token leaves nothing
to choose, while the processor's look-ahead never emits a 7 that must be continued), ``paper-scale`` (GPT-2's
50,257 tokens, 250 random words, about 500 distinct tokens: a circuit of the detox experiment's size).

**resample** (``pseudosl.constrained_sample`` with Gen-C's ``LocalProposal()`` vs ``engine.sample`` and the PSL's log-prob pass): a
``RecurrentDecoder`` (LSTM, hidden 64, ``k = 4`` values, ``n = 12`` positions, untrained, its head scaled by 8 so
that positions depend on each other) and "no two adjacent positions equal", batch ``--rows``.  Work is counted, not measured: token-steps of the recurrence (the anchor's
``B n``, the conditionals' ``B n + B k n (n - 1) / 2`` suffix steps, the weights' ``B K n``) and circuit edge-rows
(``E B`` bottom-up, ``E B K`` top-down for ``K`` samples).  Printed: median ms, the work, the satisfied fraction,
the mean effective sample size, and the time relative to plain sampling and to the PSL pass.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from circuits import timeit  # noqa: E402

import pseudosl  # noqa: E402
from pseudosl.generation import LocalProposal  # noqa: E402
from pseudosl.logic.categorical import all_of  # noqa: E402

PROMPT = 8


# -- processor vs bad_words_ids --------------------------------------------------------------------------
def case_words(name: str, rng: np.random.Generator) -> tuple[int, int, list[list[int]]]:
    """``(vocab, window, words)`` of a case (token 0 is BOS/EOS/pad and in no word)."""
    if name == "words":
        vocab = 2000
        return vocab, 10, [list(rng.integers(1, vocab, size=1 + i % 3)) for i in range(150)]
    if name == "dead-end":
        vocab = 64
        return vocab, 10, [[3], [5, 9], [11, 12, 13]] + [[7, t] for t in range(vocab)]
    if name == "paper-scale":
        vocab = 50257
        return vocab, 10, [list(rng.integers(1, vocab, size=1 + i % 3)) for i in range(250)]
    raise SystemExit(f"unknown case {name!r}: words, dead-end or paper-scale")


def occurrences(ids: list[int], words: list[list[int]], start: int, stop: int) -> tuple[int, int, int]:
    """In the tokens ``ids``: words inside ``[start, stop)``, multi-token ones among them, and words begun before
    ``start`` and completed inside."""
    inside = multi = split = 0
    for w in words:
        for i in range(max(0, start - len(w) + 1), stop - len(w) + 1):
            if ids[i:i + len(w)] == w:
                if i >= start:
                    inside += 1
                    multi += len(w) > 1
                else:
                    split += 1
    return inside, multi, split


def salted_text(words: list[list[int]], vocab: int, rows: int, length: int, rng: np.random.Generator) -> torch.Tensor:
    """``(rows, length)`` random tokens ``1 .. vocab-1`` where a forbidden word starts at 30 % of the positions."""
    out = []
    for _ in range(rows):
        seq: list[int] = []
        while len(seq) < length:
            seq += words[rng.integers(len(words))] if rng.random() < 0.3 else [int(rng.integers(1, vocab))]
        out.append(seq[:length])
    return torch.tensor(out)


def train(model: torch.nn.Module, words: list[list[int]], vocab: int, steps: int, device: str) -> float:
    """Adam on salted text (next-token cross-entropy); returns the last loss."""
    rng = np.random.default_rng(1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = salted_text(words, vocab, 32, 24, rng).to(device)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return loss.item()


def run_processor(case: str, rows: int, reps: int, device: str, train_steps: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList

    rng = np.random.default_rng(0)
    vocab, n, words = case_words(case, rng)
    words = [[int(t) for t in w] for w in words]
    t0 = time.perf_counter()
    constraint = pseudosl.no_forbidden_sequences(words, n_positions=n, vocab_size=vocab)
    constraint.circuit.to(device)
    compile_s = time.perf_counter() - t0
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=vocab, n_positions=64, bos_token_id=0,
                        eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config).to(device)
    t0 = time.perf_counter()
    last = train(model, words, vocab, train_steps, device)
    train_s = time.perf_counter() - t0
    prompts = torch.as_tensor(rng.integers(1, vocab, size=(rows, PROMPT)), device=device)
    starts = [w for w in words if len(w) > 1]
    for r in range(0, rows, 4):  # a quarter of the prompts end in the first token of a multi-token word
        prompts[r, -1] = starts[r % len(starts)][0]
    print(f"\n### case {case}: vocabulary {vocab}, window n = {n}, {len(words)} token sequences, "
          f"D + 1 = {constraint.n_values} circuit values, circuit {constraint.circuit.n_edges:,} edges "
          f"({compile_s:.1f} s to compile or load), {rows} prompts of {PROMPT} tokens; the model trained "
          f"{train_steps} steps on salted text ({train_s:.0f} s, last loss {last:.2f})\n")
    print("| decoding | method | violates alpha | multi-token words in window | words split across the window start "
          "| rows with EOS | failed | ms per token | / bad_words_ids | / nothing |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    settings = {"greedy": dict(do_sample=False), "sampling": dict(do_sample=True, top_k=0),
                "beam 4": dict(do_sample=False, num_beams=4)}
    for setting, kw in settings.items():
        kw = dict(kw, max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
        methods = {"nothing": dict, "bad_words_ids": lambda: dict(bad_words_ids=words),  # fresh per generate call:
                   "processor": lambda: dict(logits_processor=LogitsProcessorList(  # a processor follows one call
                       [pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=PROMPT)]))}
        results: dict[str, str] = {}
        ms: dict[str, float] = {}
        for method, extra in methods.items():
            def generate(extra=extra):
                torch.manual_seed(0)
                return model.generate(prompts, attention_mask=torch.ones_like(prompts), **kw, **extra())
            try:
                out = generate()
            except (RuntimeError, ValueError) as e:  # sampling from a row with every token banned
                results[method] = f"— | — | — | — | yes ({type(e).__name__}: {str(e)[:50]})"
                ms[method] = float("nan")
                continue
            ms[method] = timeit(generate, reps, device) / (rows * (out.shape[1] - PROMPT))  # per generated token
            out = torch.nn.functional.pad(out, (0, PROMPT + n - out.shape[1]), value=0)  # all rows ended: pad (EOS)
            window = out[:, PROMPT:PROMPT + n]
            early = int((window == 0).any(1).sum())
            violates = 1.0 - constraint.satisfied(window.cpu()).float().mean().item()
            counts = np.array([occurrences(r, words, PROMPT, PROMPT + n) for r in out.tolist()])
            results[method] = f"{violates:.3f} | {counts[:, 1].sum()} | {counts[:, 2].sum()} | {early} | no"
        for method in methods:
            print(f"| {setting} | {method} | {results[method]} | {ms[method]:.3f} | "
                  f"{ms[method] / ms['bad_words_ids']:.2f} | {ms[method] / ms['nothing']:.2f} |")


# -- resampling vs sampling and the PSL pass -------------------------------------------------------------
def run_resample(rows: int, reps: int, device: str) -> None:
    k, n, hidden = 4, 12, 64
    torch.manual_seed(0)
    y = pseudosl.positions(n, k)
    circuit = pseudosl.compile_categorical(all_of(y[i] != y[i + 1] for i in range(n - 1))).to(device)
    decoder = pseudosl.RecurrentDecoder(n_values=k, length=n, hidden_size=hidden).to(device).eval()
    with torch.no_grad():
        decoder.head.weight.mul_(8.0)  # peaky: the local distribution differs from p, the weights are unequal
    engine = pseudosl.as_engine(decoder)
    e = circuit.n_edges
    gen = torch.Generator(device).manual_seed(0)
    anchors = engine.sample(batch_size=rows, generator=gen)
    base_steps = rows * n
    cond_steps = rows * n + rows * k * n * (n - 1) // 2

    def psl():
        with torch.no_grad():
            circuit.log_prob(engine.local_conditionals(anchors))

    cases = {"engine.sample": (lambda: engine.sample(batch_size=rows, generator=gen), base_steps, 0),
             "PSL log-prob pass": (psl, cond_steps, e * rows)}
    for kk in (1, 10, 100):
        cases[f"resample K={kk}"] = (
            lambda kk=kk: pseudosl.constrained_sample(engine, circuit, batch_size=rows, num_candidates=kk, generator=gen,
                                                  proposal=LocalProposal()),
            base_steps + cond_steps + rows * kk * n, e * rows * (1 + kk))
    cases["mpe"] = (lambda: pseudosl.constrained_sample(engine, circuit, batch_size=rows, mode="mpe", generator=gen),
                    base_steps + cond_steps + rows * n, 2 * e * rows)
    print(f"\n### resample: RecurrentDecoder (LSTM, hidden {hidden}), k = {k}, n = {n}, 'no two adjacent equal' "
          f"({e} edges), batch {rows}\n")
    print("| what | ms | token-steps | edge-rows | satisfied | mean ESS | / engine.sample | / PSL pass |")
    print("|---|---|---|---|---|---|---|---|")
    ms = {name: timeit(fn, reps, device) for name, (fn, _, _) in cases.items()}
    for name, (fn, steps, edge_rows) in cases.items():
        if name.startswith("resample"):
            kk = int(name.split("=")[1])
            out, diag = pseudosl.constrained_sample(engine, circuit, batch_size=rows, num_candidates=kk, generator=gen,
                                                    proposal=LocalProposal(),
                                                    return_diagnostics=True)
            sat, ess = pseudosl.sample_satisfies(circuit, out).float().mean().item(), f"{diag.ess.mean().item():.2f}"
        elif name == "mpe":
            sat, ess = pseudosl.sample_satisfies(circuit, fn()).float().mean().item(), "—"
        elif name == "engine.sample":
            sat, ess = pseudosl.sample_satisfies(circuit, fn()).float().mean().item(), "—"
        else:
            sat, ess = float("nan"), "—"
        print(f"| {name} | {ms[name]:.2f} | {steps:,} | {edge_rows:,} | {sat:.3f} | {ess} | "
              f"{ms[name] / ms['engine.sample']:.2f} | {ms[name] / ms['PSL log-prob pass']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["processor", "resample", "all"], default="all")
    ap.add_argument("--case", nargs="+", default=["words", "dead-end"],
                    help="processor cases: words, dead-end, paper-scale (slow: a detox-sized circuit)")
    ap.add_argument("--rows", type=int, default=32, help="prompts (processor) or examples (resample)")
    ap.add_argument("--train-steps", type=int, default=150, help="Adam steps of the GPT-2 on salted text (processor)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    transformers.logging.set_verbosity_error()
    print(f"# machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, device "
          f"{args.device}, torch {torch.__version__}, transformers {transformers.__version__}, median of {args.reps}")
    if args.part in ("processor", "all"):
        for case in args.case:
            run_processor(case, args.rows, args.reps, args.device, args.train_steps)
    if args.part in ("resample", "all"):
        run_resample(args.rows, args.reps, args.device)


if __name__ == "__main__":
    main()
