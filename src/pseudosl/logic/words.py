"""Forbidden words in text, as an automaton over the text's UTF-8 bytes (no torch, no tokenizer).

A text *contains* a word ``w`` when the regular expression :func:`word_pattern` finds it:

    (?i)(?<![A-Za-z0-9])W(?![A-Za-z0-9])          W = re.escape(w); no (?i) when ignore_case=False

The ASCII letters and digits are the word characters; the text's start and end are boundaries (a text that
ends in a listed word contains it).  With ``(?i)`` Python's ``re`` lets four non-ASCII characters match too:
``U+0130 'İ'`` and ``U+0131 'ı'`` match ``i``, ``U+017F 'ſ'`` matches ``s``, ``U+212A 'K'`` (Kelvin) matches ``k``,
and all four match the class ``[A-Za-z0-9]``; the automaton reads them as those letters.  Every other non-ASCII
character is a non-word character.  Words are ASCII (spaces and punctuation allowed: phrases).

:func:`words_byte_automaton` builds the automaton in two layers:

* characters -- Aho--Corasick over the words, with matches started only at a boundary.  A state is the longest
  prefix of a listed word that the text ends with and that started after a non-word character (or at the start);
  the two roots "after a boundary" and "inside a word that matches nothing"; a *pending* state has just read a
  whole word (a non-word character or the end of the text makes it a match, a word character may continue into a
  longer word or cancel it); and one dead state (a match).  Accepting: not dead and not pending.
* bytes -- each character state is paired with the UTF-8 bytes read of a character not yet complete (only the
  prefixes of the four characters above matter; any other non-ASCII byte is a non-word character), decoded as
  ``bytes.decode("utf-8", errors="replace")`` does (an invalid byte is a non-word ``U+FFFD``).

Every state also names a *reference* state that behaves like it on almost every byte string (a root, or a
pending root: "after a whole word"): :func:`pseudosl.logic.lift.lift_to_tokens` keeps one default row per
reference and lists only where a state differs from it.

Example:
    >>> a = words_byte_automaton(["bad", "so bad"], ignore_case=True)
    >>> [a.accepts(t.encode()) for t in ("BAD!", "badge", "not bad", "a-bad", "xbad")]
    [False, True, False, False, True]
"""

from __future__ import annotations

import operator
import re
import string
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["WORD_CHARACTERS", "ByteAutomaton", "check_words", "contains_word", "word_pattern",
           "words_byte_automaton"]

WORD_CHARACTERS = frozenset(string.ascii_letters + string.digits)
#: the non-ASCII characters that (?i) matches to an ASCII letter, by their UTF-8 bytes
_FOLDED = {b"\xc4\xb0": "i", b"\xc4\xb1": "i", b"\xc5\xbf": "s", b"\xe2\x84\xaa": "k"}
_NON_WORD = 128  # the character event of a non-ASCII non-word character (no listed word holds one)


def word_pattern(word: str, *, ignore_case: bool = True) -> re.Pattern:
    """The specification: the regular expression that finds ``word`` in a text."""
    return re.compile(("(?i)" if ignore_case else "") + r"(?<![A-Za-z0-9])" + re.escape(word) + r"(?![A-Za-z0-9])")


def contains_word(text: str, words: Sequence[str], *, ignore_case: bool = True) -> bool:
    """Does ``text`` contain one of ``words`` (:func:`word_pattern`)?  The reference the automaton is tested against."""
    return any(word_pattern(w, ignore_case=ignore_case).search(text) for w in check_words(words))


def check_words(words: Sequence[str]) -> list[str]:
    """The words as a list, refused (naming the word and the fix) unless each is a non-empty ASCII string."""
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise TypeError(f"words must be a list of strings, got {type(words).__name__}"
                        + (" (wrap a single word in a list)" if isinstance(words, str) else ""))
    for i, w in enumerate(words):
        if not isinstance(w, str):
            raise TypeError(f"words[{i}] must be a str, got {type(w).__name__}")
        if not w:
            raise ValueError(f"words[{i}] is empty; an empty word occurs in every text")
        if not w.isascii():
            raise ValueError(f"words[{i}] = {w!r} has non-ASCII characters; only ASCII words and phrases are "
                             "supported (their case folding is what the automaton knows): transliterate it")
    return list(words)


@dataclass(frozen=True, eq=False)
class ByteAutomaton:
    """A complete DFA over bytes: ``delta (n_states, 256)``, ``accepting (n_states,)`` bool, ``reference (n_states,)``
    (a state behaving like each on most byte strings: a reference state refers to itself) and ``start``."""

    delta: np.ndarray
    accepting: np.ndarray
    reference: np.ndarray
    start: int

    @property
    def n_states(self) -> int:
        return int(self.delta.shape[0])

    def run(self, data: bytes, state: int | None = None) -> int:
        """The state after reading ``data`` from ``state`` (default ``start``)."""
        s = self.start if state is None else operator.index(state)
        for b in data:
            s = int(self.delta[s, b])
        return s

    def accepts(self, data: bytes) -> bool:
        """Does the text whose UTF-8 bytes are ``data`` contain none of the words?"""
        return bool(self.accepting[self.run(data)])


def words_byte_automaton(words: Sequence[str], *, ignore_case: bool = True) -> ByteAutomaton:
    """The minimal byte automaton accepting the UTF-8 texts that contain none of ``words`` (module docs)."""
    chars = _CharAutomaton(check_words(words), ignore_case)
    return _minimal(_bytes(chars, ignore_case))


class _CharAutomaton:
    """Aho--Corasick over character events (ASCII codes, case-folded with ``ignore_case``; ``_NON_WORD``) with
    matches started at boundaries.  States: the trie nodes (node 0 is the root "after a boundary"), then
    ``ROOT_W`` (inside a word), ``PEND_B``/``PEND_W`` (a virtual "just read a whole word" after a non-word /
    word character: reference states only) and ``DEAD``."""

    def __init__(self, words: list[str], ignore_case: bool) -> None:
        n_events = _NON_WORD + 1
        is_word = np.zeros(n_events, dtype=bool)
        is_word[[ord(c) for c in WORD_CHARACTERS]] = True
        goto: list[dict[int, int]] = [{}]
        last: list[int] = [-1]  # the event each trie node ends with
        terminal = [False]
        for w in words:
            s = 0
            for ch in (w.lower() if ignore_case else w):
                e = ord(ch)
                if e not in goto[s]:
                    goto[s][e] = len(goto)
                    goto.append({})
                    last.append(e)
                    terminal.append(False)
                s = goto[s][e]
            terminal[s] = True
        n_trie = len(goto)
        root_w, pend_b, pend_w, dead = n_trie, n_trie + 1, n_trie + 2, n_trie + 3
        n = n_trie + 4
        # the transitions without the pending rule: follow trie edges, else the failure links' transitions
        table = np.empty((n, n_events), dtype=np.int64)
        table[root_w] = np.where(is_word, root_w, 0)
        fail = np.zeros(n, dtype=np.int64)
        pending = np.zeros(n, dtype=bool)
        fail[0] = root_w
        order = [0]
        for p in order:  # breadth-first: a node's failure link is shallower than the node
            table[p] = table[fail[p]]
            for e, t in goto[p].items():
                table[p, e] = t
                fail[t] = table[fail[p], e]  # the longest active match the text ends with, short of t
                pending[t] = terminal[t] or pending[fail[t]]
                order.append(t)
        table[pend_b], table[pend_w], table[dead] = table[0], table[root_w], dead
        pending[[pend_b, pend_w]] = True
        # a pending state followed by a non-word character has matched a word
        self.delta = np.where(pending[:, None] & ~is_word[None, :], dead, table)
        word_before = np.zeros(n, dtype=bool)  # is the last character read a word character?
        word_before[1:n_trie] = is_word[last[1:]]
        word_before[[root_w, pend_w]] = True
        self.accepting = ~pending
        self.accepting[dead] = False
        self.reference = np.where(pending, np.where(word_before, pend_w, pend_b), np.where(word_before, root_w, 0))
        self.reference[dead] = dead
        self.dead = dead


def _bytes(chars: _CharAutomaton, ignore_case: bool) -> ByteAutomaton:
    """Pair each character state with the UTF-8 prefix read so far (``u``): byte state ``c * U + u``."""
    prefixes = [b""] + (sorted({k[:i] for k in _FOLDED for i in range(1, len(k))}) if ignore_case else [])
    U = len(prefixes)
    delta_c, n_chars = chars.delta, chars.delta.shape[0]
    events = np.array([ord(chr(b).lower()) if ignore_case else b for b in range(128)] + [_NON_WORD] * 128)
    nw = delta_c[:, _NON_WORD]  # (C,) after a non-word character
    fresh = delta_c[:, events] * U  # (C, 256): byte b read with no UTF-8 prefix pending
    for u, prefix in enumerate(prefixes):
        if len(prefix) == 1:  # a lead byte of one of the four characters
            fresh[:, prefix[0]] = np.arange(n_chars) * U + u
    delta = np.empty((n_chars * U, 256), dtype=np.int64)
    delta[0::U] = fresh
    continuation = np.arange(0x80, 0xC0)
    for u, prefix in enumerate(prefixes[1:], 1):
        rows = delta[u::U]
        rows[:] = fresh[nw]  # an unexpected byte: U+FFFD for the prefix, then the byte afresh
        rows[:, continuation] = (nw * U)[:, None]  # a character other than the four: non-word
        for b in range(0x80, 0xC0):
            longer = prefix + bytes([b])
            if longer in _FOLDED:
                rows[:, b] = delta_c[:, ord(_FOLDED[longer])] * U
            elif longer in prefixes:
                rows[:, b] = np.arange(n_chars) * U + prefixes.index(longer)
    delta[chars.dead * U:(chars.dead + 1) * U] = chars.dead * U
    # at the end of the text a pending UTF-8 prefix is a U+FFFD: a non-word character, accepted as c is
    accepting = np.repeat(chars.accepting, U)
    reference = (chars.reference[:, None] * U + np.arange(U)[None, :]).reshape(-1)
    reference[chars.dead * U:(chars.dead + 1) * U] = chars.dead * U
    return ByteAutomaton(delta, accepting, reference, 0)


def _minimal(a: ByteAutomaton) -> ByteAutomaton:
    """Merge equivalent states (Moore's partition refinement); each reference state refers to itself."""
    block = np.unique(a.accepting, return_inverse=True)[1].reshape(-1)
    n = int(block.max()) + 1
    while True:
        ids: dict[bytes, int] = {}
        signatures = np.column_stack([block, block[a.delta]]).astype(np.int32)
        block = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in signatures], dtype=np.int64)
        n_before, n = n, len(ids)
        if n == n_before:
            break
    rep = np.zeros(n, dtype=np.int64)
    rep[block] = np.arange(a.n_states)  # one state of each block
    reference = block[a.reference[rep]]
    rows = np.unique(reference)
    reference[rows] = rows
    return ByteAutomaton(block[a.delta[rep]], a.accepting[rep], reference, int(block[a.start]))
