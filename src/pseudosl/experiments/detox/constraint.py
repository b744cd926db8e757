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

A pretrained model (``model`` other than ``"scratch"``) is constrained on its decoded text instead
(:func:`pseudosl.no_forbidden_words`: a word is forbidden whichever tokens spell it, any case, at word
boundaries).  :class:`DetoxWords` holds either level behind one interface: the windows the PSL and the
decoders use, the check of a whole continuation that the word rate counts, and the two spellings' token
sequences that word banning bans (Hugging Face's ``bad_words_ids`` can only ban token sequences).

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.no_forbidden_sequences([[3, 4], [5]], n_positions=4, vocab_size=10)
    >>> c.satisfied(torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2]])).tolist()    # the first holds "3 4"
    [False, True]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

import pseudosl

__all__ = ["ForbiddenWords", "DetoxWords", "contains_forbidden", "forbidden_sequences", "forbidden_words_constraint"]


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


@dataclass
class DetoxWords:
    """The experiment's forbidden words over one tokenizer, at the token-sequence level or at the text level.

    Attributes:
        words: the forbidden words.
        sequences: their token sequences, both spellings (:func:`forbidden_sequences`): what word banning bans and
            what the SGEAT windows are centred on.
        vocab_size: the model's vocabulary.
        text: ``None``: the constraint is "no sequence of ``sequences`` occurs" (:func:`forbidden_words_constraint`);
            else :func:`pseudosl.no_forbidden_words` over the tokenizer: "the decoded text holds none of ``words``".
    """

    words: list[str]
    sequences: list[list[int]]
    vocab_size: int
    text: Any = None  # pseudosl.tokens.AutomatonConstraint
    windows: dict[int, pseudosl.Constraint] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, tokenizer: Any, words: Sequence[str], vocab_size: int, *, text_level: bool) -> DetoxWords:
        """The words over ``tokenizer``; ``text_level``: constrain the decoded text (a byte-level BPE tokenizer only;
        another is refused with the reason, see :func:`pseudosl.no_forbidden_words`)."""
        text = pseudosl.no_forbidden_words(list(words), tokenizer, vocab_size=vocab_size) if text_level else None
        return cls(list(words), forbidden_sequences(tokenizer, words), vocab_size, text)

    @property
    def level(self) -> str:
        return "text" if self.text is not None else "token sequences"

    def window(self, n: int) -> pseudosl.Constraint:
        """The constraint over ``n`` generated positions (compiled once per ``n``, cached on disk by the library)."""
        if n not in self.windows:
            self.windows[n] = (self.text.window(n) if self.text is not None else
                               pseudosl.no_forbidden_sequences(self.sequences, n, self.vocab_size))
        return self.windows[n]

    def holds_word(self, ids: Sequence[int]) -> bool:
        """Does the continuation ``ids`` (token ids, any length) break the constraint: hold a forbidden word?"""
        ids = [int(t) for t in ids]
        if self.text is None:
            return contains_forbidden(ids, self.sequences)
        return bool(ids) and not bool(self.text.satisfied(torch.tensor([ids], dtype=torch.long))[0])
