"""The detox constraint: no forbidden word occurs in the generated tokens.

Each word ``w`` of the list becomes two token sequences, ``tokenize(w)`` and ``tokenize(" " + w)``
(GPT-2's BPE spells a word differently at the start of a text and after a space).  The constraint
over token positions ``y_1 .. y_L`` is

    alpha(y) = NOT  OR_{s in S}  OR_{t}  [ y_t .. y_{t+|s|-1} = s ]

built by the library: :func:`pseudosl.no_forbidden_sequences` over a window of ``L`` positions (the Aho--Corasick
automaton of the sequences unrolled, every token outside them folded into one catch-all value of a
:class:`pseudosl.ValueMap`, so the circuit has ``D + 1`` values per position whatever the vocabulary), and the same
automaton unrolled over no window for the streaming logits processor.  The folding is exact.

A pretrained model (``model`` other than ``"scratch"``) is constrained on its decoded text instead
(:func:`pseudosl.no_forbidden_words`: a word is forbidden whichever tokens spell it, any case, at word
boundaries).  :class:`DetoxWords` holds either level behind one interface: the windows the PSL and resampling use,
the automaton the streaming processor follows, the check of a whole continuation, and the two spellings' token
sequences that word banning bans (Hugging Face's ``bad_words_ids`` can only ban token sequences), gathered for the
shared decoders as one :class:`~pseudosl.experiments.decoders.Target`.

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.no_forbidden_sequences([[3, 4], [5]], n_positions=4, vocab_size=10)
    >>> c.satisfied(torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2]])).tolist()    # the first holds "3 4"
    [False, True]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

import pseudosl
from pseudosl.logic.automaton import forbidden_sequences_sparse_dfa
from pseudosl.tokens import AutomatonConstraint

from ..decoders import Target

__all__ = ["DetoxWords", "contains_forbidden", "forbidden_sequences"]


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


def contains_forbidden(token_ids: Sequence[int], sequences: Sequence[Sequence[int]]) -> bool:
    """Direct check: does any of ``sequences`` occur contiguously in ``token_ids``?"""
    ids = [int(t) for t in token_ids]
    by_len: dict[int, set[tuple[int, ...]]] = {}
    for s in sequences:
        if len(s) == 0:
            raise ValueError("sequences must be non-empty (an empty sequence occurs everywhere)")
        by_len.setdefault(len(s), set()).add(tuple(int(t) for t in s))
    return any(tuple(ids[i:i + n]) in group for n, group in by_len.items() for i in range(len(ids) - n + 1))


def _sequences_automaton(sequences: Sequence[Sequence[int]], vocab_size: int) -> AutomatonConstraint:
    """"No sequence of ``sequences`` occurs", for any length: the automaton :func:`pseudosl.no_forbidden_sequences`
    unrolls over a window, over the same folded values (the sequences' tokens, then one catch-all)."""
    tokens = sorted({int(t) for s in sequences for t in s})
    value_map = pseudosl.ValueMap(tokens, vocab_size)
    index = {t: v for v, t in enumerate(tokens)}
    dfa = forbidden_sequences_sparse_dfa([[index[int(t)] for t in s] for s in sequences], value_map.n_values)
    return AutomatonConstraint(dfa, value_map, {"n_sequences": len(sequences), "n_tokens": len(tokens)})


@dataclass
class DetoxWords:
    """The experiment's forbidden words over one tokenizer, at the token-sequence level or at the text level.

    Attributes:
        words: the forbidden words.
        sequences: their token sequences, both spellings (:func:`forbidden_sequences`): what word banning bans and
            what the SGEAT windows of the token level are centred on.
        vocab_size: the model's vocabulary.
        text: ``None``: the constraint is "no sequence of ``sequences`` occurs"; else
            :func:`pseudosl.no_forbidden_words` over the tokenizer: "the decoded text holds none of ``words``".
    """

    words: list[str]
    sequences: list[list[int]]
    vocab_size: int
    text: Any = None  # pseudosl.tokens.AutomatonConstraint
    windows: dict[int, pseudosl.Constraint] = field(default_factory=dict, repr=False)
    streamed: list[AutomatonConstraint] = field(default_factory=list, repr=False)
    dead: set[int] = field(default_factory=set, repr=False)

    @classmethod
    def build(cls, tokenizer: Any, words: Sequence[str], vocab_size: int, *, text_level: bool) -> DetoxWords:
        """The words over ``tokenizer``; ``text_level``: constrain the decoded text (a byte-level BPE tokenizer only;
        another is refused with the reason, see :func:`pseudosl.no_forbidden_words`)."""
        text = pseudosl.no_forbidden_words(list(words), tokenizer, vocab_size=vocab_size) if text_level else None
        return cls(list(words), forbidden_sequences(tokenizer, words), vocab_size, text)

    @property
    def level(self) -> str:
        return "text" if self.text is not None else "token sequences"

    @property
    def automaton(self) -> AutomatonConstraint:
        """The constraint for any number of tokens (the streaming processor follows it token by token)."""
        if self.text is not None:
            return self.text
        if not self.streamed:
            self.streamed.append(_sequences_automaton(self.sequences, self.vocab_size))
        return self.streamed[0]

    def window(self, n: int) -> pseudosl.Constraint:
        """The constraint over ``n`` generated positions (compiled once per ``n``, cached on disk by the library)."""
        if n not in self.windows:
            self.windows[n] = (self.text.window(n) if self.text is not None else
                               pseudosl.no_forbidden_sequences(self.sequences, n, self.vocab_size))
        return self.windows[n]

    def target(self, n: int) -> Target:
        """What the shared decoders keep ``n`` generated tokens inside: the window over them (resampling, only the
        continuations that hold a word), the automaton (the streaming processor), the banned sequences (word
        banning)."""
        return Target([self.window(n)], automaton=self.automaton, banned=self.sequences, violators_only=True)

    def holds_word(self, ids: Sequence[int]) -> bool:
        """Does the continuation ``ids`` (token ids, any length) break the constraint: hold a forbidden word?"""
        ids = [int(t) for t in ids]
        if self.text is None:
            return contains_forbidden(ids, self.sequences)
        return bool(ids) and not bool(self.text.satisfied(torch.tensor([ids], dtype=torch.long))[0])

    def first_violation(self, ids: Sequence[int]) -> tuple[int, int] | None:
        """``(start, length)`` of the tokens where the first forbidden word of ``ids`` is found, or ``None``: at the
        token level the first occurrence of a sequence; at the text level the token after which a listed word is
        certain (the automaton's dead state; a word ending the text: the last token), length 1."""
        ids = [int(t) for t in ids]
        if self.text is None:
            from .generation import first_occurrence
            return first_occurrence(ids, self.sequences)
        dfa = self.text.dfa
        if not self.dead:
            self.dead.update(_dead_states(dfa))
        state = np.array([dfa.start])
        for t, v in enumerate(self.text.values(torch.tensor(ids, dtype=torch.long)).tolist()):
            state = dfa.step(state, np.array([v]))
            if int(state[0]) in self.dead:
                return t, 1
        return None if int(state[0]) in dfa.accepting else (len(ids) - 1, 1)


def _dead_states(dfa: Any) -> set[int]:
    """The rejecting states that every value leaves where they are (a listed word has been read)."""
    values = np.arange(dfa.n_values)
    return {s for s in range(dfa.n_states) if s not in dfa.accepting
            and bool((dfa.step(np.full(dfa.n_values, s), values) == s).all())}
