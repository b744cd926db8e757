"""The detox constraint: no forbidden word occurs in a window of ``L`` generated tokens.

Each word ``w`` of the list becomes two token sequences, ``tokenize(w)`` and ``tokenize(" " + w)``
(GPT-2's BPE spells a word differently at the start of a text and after a space).  The constraint
over token positions ``y_1 .. y_L`` is

    alpha(y) = NOT  OR_{s in S}  OR_{t}  [ y_t .. y_{t+|s|-1} = s ]

the language of the Aho--Corasick automaton :func:`pseudosl.forbidden_words_dfa` unrolled over
``L`` positions (:func:`pseudosl.compile_automaton`).  Only the ``D`` distinct tokens that occur in
some sequence matter: every other token sends the automaton back to its start, so all of them are
folded into one catch-all value (:class:`pseudosl.ValueMap`) and the circuit has ``D + 1`` values
per position, ``O(n_states * L)`` nodes, whatever the vocabulary size.  The folding is exact.

A sequence longer than ``L`` tokens cannot occur in the window; it is kept in
:attr:`ForbiddenWords.sequences` (the lexical check of whole texts still uses it) and counted in
``stats["n_too_long"]``, but it adds nothing to the circuit.

Example:
    >>> import torch
    >>> fw = forbidden_sequences_constraint([[3, 4], [5]], vocab_size=10, window=4)
    >>> y = torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2]])            # token ids (B, L)
    >>> x = torch.log(torch.nn.functional.one_hot(fw.value_map.to_values(y), fw.value_map.n_values).double())
    >>> fw.circuit.log_prob(x).exp().tolist()                   # the first holds "3 4"
    [0.0, 1.0]
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import pseudosl
from pseudosl.logic.errors import check_int

__all__ = ["ForbiddenWords", "contains_forbidden", "forbidden_sequences", "forbidden_sequences_constraint",
           "forbidden_words_constraint"]


@dataclass(frozen=True)
class ForbiddenWords:
    """The compiled constraint and what it was built from.

    Attributes:
        circuit: over ``window`` positions with ``value_map.n_values`` values each; ``log_prob`` is
            ``log P(no forbidden sequence in the window)``.
        value_map: distinguished token ids -> values ``0 .. D-1``, every other token -> catch-all ``D``.
        sequences: every forbidden token sequence (both spellings of each word), longer ones included.
        window: ``L``, the number of token positions.
        stats: ``n_words``, ``n_sequences``, ``n_too_long`` (sequences longer than ``window``),
            ``n_tokens`` (``D``), ``n_states`` (automaton), ``nodes``, ``edges``, ``compile_s`` (seconds to
            build the automaton and the circuit; a load from the disk cache when it was cached).
    """

    circuit: pseudosl.Circuit
    value_map: pseudosl.ValueMap
    sequences: list[list[int]]
    window: int
    stats: dict[str, Any] = field(default_factory=dict)


def forbidden_sequences(tokenizer: Any, words: Sequence[str]) -> list[list[int]]:
    """Token sequences of ``words``, each tokenized without and with a leading space, deduplicated (order kept).

    Args:
        tokenizer: a Hugging Face tokenizer (``tokenizer.encode(text, add_special_tokens=False)``).
        words: non-empty strings (see :func:`~pseudosl.experiments.detox.words.load_words`).
    """
    if isinstance(words, str) or not isinstance(words, Sequence) or not words:
        raise TypeError(f"words must be a non-empty list of strings, got {words!r:.80}")
    seqs: dict[tuple[int, ...], None] = {}
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w.strip():
            raise ValueError(f"word {i} must be a non-empty string, got {w!r}")
        for variant in (w, " " + w):
            ids = tuple(int(t) for t in tokenizer.encode(variant, add_special_tokens=False))
            if not ids:
                raise ValueError(f"word {i} ({variant!r}) tokenizes to no token; remove it from the list")
            seqs[ids] = None
    return [list(s) for s in seqs]


def forbidden_sequences_constraint(sequences: Sequence[Sequence[int]], vocab_size: int, window: int = 10, *,
                                   cache: bool = True) -> ForbiddenWords:
    """Compile "no sequence of ``sequences`` occurs" over ``window`` token positions (see module docs).

    Args:
        sequences: non-empty token-id sequences, ids in ``0 .. vocab_size-1``.
        vocab_size: the model's vocabulary size (the value map's domain).
        window: ``L >= 1`` token positions.
        cache: use the on-disk circuit cache (:func:`pseudosl.cached_circuit`).
    """
    vocab_size = check_int("vocab_size", vocab_size, low=2)
    window = check_int("window", window, low=1)
    seqs = [[check_int(f"sequences[{i}] token", t, low=0) for t in s] for i, s in enumerate(sequences)]
    for i, s in enumerate(seqs):
        if not s:
            raise ValueError(f"sequences[{i}] is empty; an empty sequence occurs in every window")
        if max(s) >= vocab_size:
            raise ValueError(f"sequences[{i}] = {s} has token {max(s)} outside the vocabulary 0..{vocab_size - 1}")
    fits = [s for s in seqs if len(s) <= window]
    if not fits:
        raise ValueError(f"no forbidden sequence fits in window={window} tokens (the shortest has "
                         f"{min(map(len, seqs)) if seqs else 0}); increase window")
    tokens = sorted({t for s in fits for t in s})
    if len(tokens) >= vocab_size:
        raise ValueError(f"the sequences use all {vocab_size} tokens of the vocabulary; the folded circuit "
                         f"needs one token outside them (pass the model's full vocab_size)")
    value_map = pseudosl.ValueMap(tokens, vocab_size)
    index = {t: v for v, t in enumerate(tokens)}
    folded = [[index[t] for t in s] for s in fits]
    start = time.perf_counter()
    dfa = pseudosl.forbidden_words_dfa(folded, value_map.n_values)
    circuit = pseudosl.compile_automaton(dfa, window, cache=cache)
    compile_s = time.perf_counter() - start
    stats = dict(n_sequences=len(seqs), n_too_long=len(seqs) - len(fits), n_tokens=len(tokens),
                 n_states=dfa.n_states, nodes=circuit.n_nodes, edges=circuit.n_edges, compile_s=compile_s)
    return ForbiddenWords(circuit, value_map, seqs, window, stats)


def forbidden_words_constraint(tokenizer: Any, words: Sequence[str], window: int = 10, *, cache: bool = True,
                               vocab_size: int | None = None) -> ForbiddenWords:
    """The constraint "no word of ``words`` occurs in ``window`` generated tokens" for ``tokenizer``'s model.

    Args:
        tokenizer: a Hugging Face tokenizer.
        words: the forbidden words (:func:`~pseudosl.experiments.detox.words.load_words`).
        window: ``L``, the paper uses 10.
        cache: use the on-disk circuit cache.
        vocab_size: the model's vocabulary size when it differs from ``len(tokenizer)`` (padded embeddings).

    Usage (``tokenizer``: GPT-2's; see docs/detox.md for the sizes)::

        fw = forbidden_words_constraint(tokenizer, load_words(), window=10)
        fw.stats["n_tokens"], fw.circuit.n_nodes
    """
    vocab_size = len(tokenizer) if vocab_size is None else vocab_size
    fw = forbidden_sequences_constraint(forbidden_sequences(tokenizer, words), vocab_size, window, cache=cache)
    fw.stats["n_words"] = len(words)
    return fw


def contains_forbidden(token_ids: Sequence[int], sequences: Sequence[Sequence[int]]) -> bool:
    """Direct check: does any of ``sequences`` occur contiguously in ``token_ids``?"""
    ids = [int(t) for t in token_ids]
    by_len: dict[int, set[tuple[int, ...]]] = {}
    for s in sequences:
        if len(s) == 0:
            raise ValueError("sequences must be non-empty (an empty sequence occurs everywhere)")
        by_len.setdefault(len(s), set()).add(tuple(int(t) for t in s))
    return any(tuple(ids[i:i + n]) in group for n, group in by_len.items() for i in range(len(ids) - n + 1))
