"""The detox constraint: no forbidden word occurs in a window of ``L`` generated tokens.

Each word ``w`` of the list becomes two token sequences, ``tokenize(w)`` and ``tokenize(" " + w)``
(GPT-2's BPE spells a word differently at the start of a text and after a space).  The constraint
over token positions ``y_1 .. y_L`` is

    alpha(y) = NOT  OR_{s in S}  OR_{t}  [ y_t .. y_{t+|s|-1} = s ]

built by the library in one call, :func:`pseudosl.no_forbidden_sequences`: the Aho--Corasick automaton
of the sequences unrolled over ``L`` positions, every token outside them folded into one catch-all value
(:class:`pseudosl.ValueMap`), so the circuit has ``D + 1`` values per position, ``O(n_states * L)`` nodes,
whatever the vocabulary size.  The folding is exact.  What is the experiment's own: the word list, the two
spellings, and keeping every sequence (:attr:`ForbiddenWords.sequences`, longer ones included) for the
lexical check of whole texts.

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.no_forbidden_sequences([[3, 4], [5]], n_positions=4, vocab_size=10)
    >>> c.satisfied(torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2]])).tolist()    # the first holds "3 4"
    [False, True]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pseudosl

__all__ = ["ForbiddenWords", "contains_forbidden", "forbidden_sequences", "forbidden_words_constraint"]


@dataclass(frozen=True)
class ForbiddenWords(pseudosl.Constraint):
    """The compiled constraint (:class:`pseudosl.Constraint`: ``circuit``, ``value_map``, ``stats``) and the words'
    token sequences.

    Attributes:
        sequences: every forbidden token sequence (both spellings of each word), longer ones included.
        stats: :func:`pseudosl.no_forbidden_sequences`'s (``n_sequences``, ``n_too_long``, ``n_tokens`` (``D``),
            ``n_states``, ``nodes``, ``edges``, ``compile_s``) and ``n_words``.
    """

    sequences: list[list[int]] = field(default_factory=list)

    @property
    def window(self) -> int:
        """``L``, the number of token positions."""
        return self.circuit.n_vars


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
    sequences = forbidden_sequences(tokenizer, words)
    c = pseudosl.no_forbidden_sequences(sequences, window, vocab_size, cache=cache)
    return ForbiddenWords(c.circuit, c.value_map, {**c.stats, "n_words": len(words)}, sequences=sequences)


def contains_forbidden(token_ids: Sequence[int], sequences: Sequence[Sequence[int]]) -> bool:
    """Direct check: does any of ``sequences`` occur contiguously in ``token_ids``?"""
    ids = [int(t) for t in token_ids]
    by_len: dict[int, set[tuple[int, ...]]] = {}
    for s in sequences:
        if len(s) == 0:
            raise ValueError("sequences must be non-empty (an empty sequence occurs everywhere)")
        by_len.setdefault(len(s), set()).add(tuple(int(t) for t in s))
    return any(tuple(ids[i:i + n]) in group for n, group in by_len.items() for i in range(len(ids) - n + 1))
