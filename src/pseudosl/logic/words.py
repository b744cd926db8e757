"""Forbidden words in text, as an automaton over the text's UTF-8 bytes (no torch, no tokenizer).

A text *contains* a word ``w`` when the regular expression :func:`word_pattern` finds it:

    (?i)(?<![A-Za-z0-9])W(?![A-Za-z0-9])          W = re.escape(w); no (?i) when ignore_case=False
    (?i)W                                         word_boundaries=False: any occurrence counts

With boundaries the ASCII letters and digits are the word characters; the text's start and end are boundaries (a
text that ends in a listed word contains it).  With ``(?i)`` Python's ``re`` lets four non-ASCII characters into
the class ``[A-Za-z0-9]`` too (``U+0130 'İ'``, ``U+0131 'ı'``, ``U+017F 'ſ'``, ``U+212A 'K'``, the Kelvin sign),
and matches each of them to an ASCII letter (i, i, s, k).  The boundary rule lets glued letters through: a word
followed by a letter is another word (" bitchK" holds no "bitch": the Kelvin sign is the letter k); with
``word_boundaries=False`` every occurrence counts, inside longer words too ("scunthorpe" holds "cunt").

A word may hold any characters (a lone surrogate and ``U+FFFD``, the character invalid bytes decode to, excepted).
A listed character matches the text characters ``re`` matches to it, found by asking ``re`` itself (every code
point is tried once per character, :func:`matching_characters`): itself, and under ``(?i)`` the characters of the
same simple case folding (``é`` and ``É``; ``k``, ``K`` and the Kelvin sign).

:func:`words_byte_automaton` builds the automaton in two layers:

* characters -- Aho--Corasick over the words, with matches started only at a boundary.  The characters are read as
  *events*: the characters that act alike (the same listed characters match them, both word characters or not);
  a listed character that matches characters of several events is spelled once per event.  A state is the
  longest prefix of a listed word that the text ends with and that started after a non-word character (or at the
  start); the two roots "after a boundary" and "inside a word that matches nothing"; a *pending* state has just
  read a whole word (a non-word character or the end of the text makes it a match, a word character may continue
  into a longer word or cancel it); and one dead state (a match).  Accepting: not dead and not pending.  Without
  boundaries no character is a word character, so a pending state is a match.
* bytes -- each character state is paired with the UTF-8 bytes read of a character not yet complete (only the
  prefixes of the characters some event names matter; any other non-ASCII character matches nothing and is a
  non-word character), decoded as ``bytes.decode("utf-8", errors="replace")`` does (invalid bytes are non-word
  ``U+FFFD`` characters; a run of characters that match nothing acts as one).

Every state also names a *reference* state that behaves like it on almost every byte string (a root, or a
pending root: "after a whole word"): :func:`pseudosl.logic.lift.lift_to_tokens` keeps one default row per
reference and lists only where a state differs from it.  The automaton is minimal (:func:`equivalent_states`).

Example:
    >>> a = words_byte_automaton(["bad", "so bad"], ignore_case=True)
    >>> [a.accepts(t.encode()) for t in ("BAD!", "badge", "not bad", "a-bad", "xbad")]
    [False, True, False, False, True]
    >>> a = words_byte_automaton(["bad", "caf\\u00e9"], word_boundaries=False)
    >>> [a.accepts(t.encode()) for t in ("xBADx", "CAF\\u00c9s", "cafe")]
    [False, False, True]
"""

from __future__ import annotations

import itertools
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

__all__ = ["ByteAutomaton", "check_words", "contains_word", "equivalent_states", "matching_characters",
           "word_characters", "word_pattern", "words_byte_automaton"]

_BOUNDARY = "[A-Za-z0-9]"  # the word characters of the boundary rule (and what (?i) adds to them)
_MAX_SPELLINGS = 100_000   # spellings of one word over the events (a product over its characters)


def word_pattern(word: str, *, ignore_case: bool = True, word_boundaries: bool = True) -> re.Pattern:
    """The specification: the regular expression that finds ``word`` in a text."""
    flags, body = "(?i)" if ignore_case else "", re.escape(word)
    return re.compile(flags + (rf"(?<!{_BOUNDARY}){body}(?!{_BOUNDARY})" if word_boundaries else body))


def contains_word(text: str, words: Sequence[str], *, ignore_case: bool = True, word_boundaries: bool = True) -> bool:
    """Does ``text`` contain one of ``words`` (:func:`word_pattern`)?  The reference the automaton is tested against."""
    return any(word_pattern(w, ignore_case=ignore_case, word_boundaries=word_boundaries).search(text)
               for w in check_words(words))


def check_words(words: Sequence[str]) -> list[str]:
    """The words as a list, refused (naming the word and the fix) unless each is a non-empty string that decoded
    text can hold (no lone surrogate, no ``U+FFFD``)."""
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise TypeError(f"words must be a list of strings, got {type(words).__name__}"
                        + (" (wrap a single word in a list)" if isinstance(words, str) else ""))
    for i, w in enumerate(words):
        if not isinstance(w, str):
            raise TypeError(f"words[{i}] must be a str, got {type(w).__name__}")
        if not w:
            raise ValueError(f"words[{i}] is empty; an empty word occurs in every text")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in w):
            raise ValueError(f"words[{i}] = {w!r} holds a lone surrogate, which no decoded text holds; fix the "
                             "string's encoding (read the list as UTF-8)")
        if "\ufffd" in w:
            raise ValueError(f"words[{i}] = {w!r} holds U+FFFD, the character invalid bytes decode to, which the "
                             "automaton reads as 'no character of a word'; drop it or replace it")
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


def words_byte_automaton(words: Sequence[str], *, ignore_case: bool = True,
                         word_boundaries: bool = True) -> ByteAutomaton:
    """The minimal byte automaton accepting the UTF-8 texts that contain none of ``words`` (module docs)."""
    for name, flag in (("ignore_case", ignore_case), ("word_boundaries", word_boundaries)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    alphabet = _Alphabet(check_words(words), ignore_case, word_boundaries)
    return _minimal(_bytes(_CharAutomaton(alphabet), alphabet))


# -- what re matches ------------------------------------------------------------------------------------------------
_MATCHES: dict[tuple[str, bool], frozenset[str]] = {}  # (character, ignore_case) -> the characters it matches


@lru_cache(maxsize=1)
def _code_points() -> str:
    """Every Unicode scalar value, in one string."""
    values = np.arange(0x110000, dtype=np.uint32)
    return values[(values < 0xD800) | (values > 0xDFFF)].tobytes().decode("utf-32-le")


def matching_characters(chars: Sequence[str], *, ignore_case: bool = True) -> dict[str, frozenset[str]]:
    """The text characters that ``re`` matches to each of ``chars`` as a literal (``(?i)`` with ``ignore_case``).

    One scan of every code point finds those some character of ``chars`` matches (a class of them), then each
    literal is tried on them; results are kept for the process.

    Example:
        >>> [hex(ord(c)) for c in sorted(matching_characters(["k"])["k"])]
        ['0x4b', '0x6b', '0x212a']
    """
    todo = sorted({c for c in chars if (c, ignore_case) not in _MATCHES})
    if todo and not ignore_case:
        _MATCHES.update({(c, False): frozenset(c) for c in todo})
    elif todo:
        found = "".join(m.group() for m in re.finditer("(?i)[" + "".join(map(re.escape, todo)) + "]", _code_points()))
        for c in todo:
            literal = re.compile("(?i)" + re.escape(c))
            _MATCHES[c, True] = frozenset(x for x in found if literal.fullmatch(x))
    return {c: _MATCHES[c, ignore_case] for c in chars}


@lru_cache(maxsize=2)
def word_characters(ignore_case: bool = True) -> frozenset[str]:
    """The characters the boundary class ``[A-Za-z0-9]`` matches (62 ASCII ones, and four more under ``(?i)``)."""
    return frozenset(m.group() for m in re.finditer(("(?i)" if ignore_case else "") + _BOUNDARY, _code_points()))


class _Alphabet:
    """The character events: the characters that act alike for ``words``.  A character's event is fixed by whether
    it is a word character and which listed characters match it; every character that is no word character and
    matches none is the event ``rest`` (``U+FFFD`` included).  ``ascii (128,)``: the event of each ASCII character;
    ``non_ascii``: the event of each other character that has one of its own; ``spellings``: each word as event
    sequences (usually one)."""

    def __init__(self, words: list[str], ignore_case: bool, word_boundaries: bool) -> None:
        listed = list(dict.fromkeys(c for w in words for c in w))
        matches = matching_characters(listed, ignore_case=ignore_case)
        word_chars = word_characters(ignore_case) if word_boundaries else frozenset()
        groups = list(dict.fromkeys(matches.values()))  # listed characters that match the same characters are one
        member: dict[str, list[int]] = {chr(b): [] for b in range(128)} | {x: [] for x in word_chars}
        for g, m in enumerate(groups):
            for x in m:
                member.setdefault(x, []).append(g)
        events: dict[tuple, int] = {}
        event_of = {x: events.setdefault((x in word_chars, tuple(member[x])), len(events)) for x in sorted(member)}
        self.rest = events.setdefault((False, ()), len(events))
        self.is_word = np.array([w for w, _ in events], dtype=bool)
        self.ascii = np.array([event_of[chr(b)] for b in range(128)], dtype=np.int64)
        self.non_ascii = {x: e for x, e in event_of.items() if ord(x) >= 128}
        options = {c: sorted({event_of[x] for x in matches[c]}) for c in listed}
        self.spellings: list[tuple[int, ...]] = []
        for i, w in enumerate(words):
            n = int(np.prod([len(options[c]) for c in w], dtype=np.float64))
            if n > _MAX_SPELLINGS:
                raise ValueError(f"words[{i}] = {w!r} has {n} spellings over the characters' case classes (more than "
                                 f"{_MAX_SPELLINGS}); pass ignore_case=False or shorten it")
            self.spellings += itertools.product(*(options[c] for c in w))


# -- the character layer --------------------------------------------------------------------------------------------
class _CharAutomaton:
    """Aho--Corasick over character events with matches started at boundaries.  States: the trie nodes (node 0 is
    the root "after a boundary"), then ``ROOT_W`` (inside a word), ``PEND_B``/``PEND_W`` (a virtual "just read a
    whole word" after a non-word / word character: reference states only) and ``DEAD``."""

    def __init__(self, alphabet: _Alphabet) -> None:
        is_word = alphabet.is_word
        goto: list[dict[int, int]] = [{}]
        last: list[int] = [-1]  # the event each trie node ends with
        terminal = [False]
        for spelling in alphabet.spellings:
            s = 0
            for e in spelling:
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
        table = np.empty((n, len(is_word)), dtype=np.int64)
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


# -- the byte layer -------------------------------------------------------------------------------------------------
def _bytes(chars: _CharAutomaton, alphabet: _Alphabet) -> ByteAutomaton:
    """Pair each character state with the UTF-8 prefix read so far (``u``): byte state ``c * U + u``."""
    encoded = {x.encode(): e for x, e in alphabet.non_ascii.items()}  # the multi-byte characters with an event
    prefixes = [b""] + sorted({k[:i] for k in encoded for i in range(1, len(k))})
    index = {p: u for u, p in enumerate(prefixes)}
    U = len(prefixes)
    delta_c, n_chars = chars.delta, chars.delta.shape[0]
    events = np.concatenate([alphabet.ascii, np.full(128, alphabet.rest)])
    nw = delta_c[:, alphabet.rest]  # (C,) after a character that matches nothing (U+FFFD included)
    fresh = delta_c[:, events] * U  # (C, 256): byte b read with no UTF-8 prefix pending
    for u, prefix in enumerate(prefixes):
        if len(prefix) == 1:  # a lead byte of a character with an event
            fresh[:, prefix[0]] = np.arange(n_chars) * U + u
    delta = np.empty((n_chars * U, 256), dtype=np.int64)
    delta[0::U] = fresh
    for u, prefix in enumerate(prefixes[1:], 1):
        rows = delta[u::U]
        rows[:] = fresh[nw]  # an unexpected byte: U+FFFD for the prefix, then the byte afresh
        rows[:, 0x80:0xC0] = (nw * U)[:, None]  # another character (or U+FFFD): one that matches nothing
        for b in range(0x80, 0xC0):
            longer = prefix + bytes([b])
            if longer in encoded:
                rows[:, b] = delta_c[:, encoded[longer]] * U
            elif longer in index:
                rows[:, b] = np.arange(n_chars) * U + index[longer]
    delta[chars.dead * U:(chars.dead + 1) * U] = chars.dead * U
    # at the end of the text a pending UTF-8 prefix is a U+FFFD: a character that matches nothing, accepted as c is
    accepting = np.repeat(chars.accepting, U)
    reference = (chars.reference[:, None] * U + np.arange(U)[None, :]).reshape(-1)
    reference[chars.dead * U:(chars.dead + 1) * U] = chars.dead * U
    return ByteAutomaton(delta, accepting, reference, 0)


# -- minimisation ---------------------------------------------------------------------------------------------------
def equivalent_states(delta: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """``(n,)`` the block of each state in the coarsest partition that separates accepting from rejecting states and
    that every symbol respects (Moore's), blocks numbered in the order of their first state.

    Moore refines every state once per round, and a chain of ``L`` states (a long word) takes ``L`` rounds.  Here a
    round looks only at the predecessors of the states that changed block in the round before (the others keep their
    signature), and of a block's parts the one holding its unexamined states keeps its number (or the largest part):
    the same partition, at a cost that follows the splits.  Symbols with identical columns are one symbol.
    """
    n = delta.shape[0]
    kinds: dict[bytes, int] = {}  # a column per kind of symbol
    succ = delta[:, sorted({kinds.setdefault(c.tobytes(), b) for b, c in enumerate(np.ascontiguousarray(delta.T))})]
    k = succ.shape[1]
    row = np.dtype((np.void, 8 * (k + 1)))
    order = np.argsort(succ.reshape(-1), kind="stable")
    pred = order // k  # predecessors grouped by successor
    pred_start = np.concatenate([[0], np.cumsum(np.bincount(succ.reshape(-1), minlength=n))])
    block = np.unique(accepting, return_inverse=True)[1].reshape(-1).astype(np.int64)  # int64: rows of 8-byte ids
    size = np.zeros(n, dtype=np.int64)  # the states of each block (at most n blocks)
    n_blocks = int(block.max()) + 1
    size[:n_blocks] = np.bincount(block)
    dirty = np.arange(n)  # the first round examines every state
    while len(dirty):
        signature = np.empty((len(dirty), k + 1), dtype=np.int64)
        signature[:, 0], signature[:, 1:] = block[dirty], block[succ[dirty]]
        _, first, group, count = np.unique(signature.view(row).reshape(-1), return_index=True, return_inverse=True,
                                           return_counts=True)  # rows compared as byte strings
        owner = signature[first, 0]  # each group's block
        whole = np.bincount(owner, weights=count, minlength=n_blocks)[owner] == size[owner]  # no unexamined state
        keeps = np.zeros(len(count), dtype=bool)  # the number of a block without unexamined states: its largest group
        if whole.any():
            by_size = np.flatnonzero(whole)
            by_size = by_size[np.lexsort((-count[by_size], owner[by_size]))]
            keeps[by_size[np.r_[True, owner[by_size][1:] != owner[by_size][:-1]]]] = True
        new = np.flatnonzero(~keeps)
        if not len(new):
            break
        number = np.full(len(count), -1)
        number[new] = n_blocks + np.arange(len(new))
        np.subtract.at(size, owner[new], count[new])
        size[n_blocks:n_blocks + len(new)] = count[new]
        n_blocks += len(new)
        moved = ~keeps[group.reshape(-1)]
        block[dirty[moved]] = number[group.reshape(-1)[moved]]
        moved = dirty[moved]
        n_pred = pred_start[moved + 1] - pred_start[moved]  # the predecessors of the moved states
        at = np.repeat(pred_start[moved] - np.cumsum(n_pred) + n_pred, n_pred) + np.arange(int(n_pred.sum()))
        dirty = np.unique(pred[at])
    first_state = np.unique(block, return_index=True)[1]  # every number in 0 .. max is used
    rank = np.empty(len(first_state), dtype=np.int64)
    rank[np.argsort(first_state)] = np.arange(len(first_state))
    return rank[block]


def _minimal(a: ByteAutomaton) -> ByteAutomaton:
    """Merge equivalent states (:func:`equivalent_states`); each reference state refers to itself."""
    block = equivalent_states(a.delta, a.accepting)
    n = int(block.max()) + 1
    rep = np.zeros(n, dtype=np.int64)
    rep[block] = np.arange(a.n_states)  # one state of each block
    reference = block[a.reference[rep]]
    rows = np.unique(reference)
    reference[rows] = rows
    return ByteAutomaton(block[a.delta[rep]], a.accepting[rep], reference, int(block[a.start]))
