"""The byte automaton of a word list (pseudosl.logic.words) against the regular expression on the decoded text (the
specification), written out here: ASCII and non-ASCII words, both boundary modes, both case modes, valid and
invalid UTF-8; its minimisation against Moore's algorithm."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pseudosl.logic.words import (contains_word, equivalent_states, matching_characters, word_characters,
                                  word_pattern, words_byte_automaton)

SPECIAL_LETTERS = ["\u0130", "\u0131", "\u017f", "\u212a"]  # İ ı ſ K: (?i) matches them to i, i, s, k


def regex_contains(text: str, words: list[str], ignore_case: bool, word_boundaries: bool = True) -> bool:
    """The specification, written out here: (?i)(?<![a-z0-9])WORD(?![a-z0-9]) (A-Z too without (?i)), or (?i)WORD."""
    flags = "(?i)" if ignore_case else ""
    before, after = (r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])") if word_boundaries else ("", "")
    return any(re.search(flags + before + re.escape(w) + after, text) for w in words)


# -- ASCII words ----------------------------------------------------------------------------------------------------
WORD_ALPHABET = "abiskAB -&"
TEXT_ALPHABET = list("abiskABISK -&.x0") + SPECIAL_LETTERS + ["\u00e9", "\u2160", "\ufffd"]
words_lists = st.lists(st.text(WORD_ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4)


@given(words_lists, st.lists(st.text(st.sampled_from(TEXT_ALPHABET), max_size=10), min_size=1, max_size=20),
       st.booleans(), st.booleans())
def test_byte_automaton_matches_the_regex_on_texts(words, texts, ignore_case, word_boundaries):
    automaton = words_byte_automaton(words, ignore_case=ignore_case, word_boundaries=word_boundaries)
    for text in texts:
        want = not regex_contains(text, words, ignore_case, word_boundaries)
        assert automaton.accepts(text.encode()) == want, (words, text)


PIECES = [b"a", b"b", b"i", b"s", b"k", b"A", b" ", b"-", b"&", b"\xc4", b"\xb0", b"\xb1", b"\xc5", b"\xbf", b"\xe2",
          b"\x84", b"\xaa", b"\x80", b"\xc3\xa9", b"\xf0\x9f"]


@given(words_lists, st.lists(st.lists(st.sampled_from(PIECES), max_size=12), min_size=1, max_size=20), st.booleans(),
       st.booleans())
def test_byte_automaton_matches_the_regex_on_any_bytes(words, byte_strings, ignore_case, word_boundaries):
    """Invalid UTF-8 included: the text is the bytes decoded with U+FFFD for what is invalid, as decode does."""
    automaton = words_byte_automaton(words, ignore_case=ignore_case, word_boundaries=word_boundaries)
    for pieces in byte_strings:
        data = b"".join(pieces)
        text = data.decode("utf-8", errors="replace")
        assert automaton.accepts(data) == (not regex_contains(text, words, ignore_case, word_boundaries)), (words, data)


def test_the_four_non_ascii_letters_are_word_characters_and_letters_under_ignore_case():
    a = words_byte_automaton(["kiss"], ignore_case=True)
    assert not a.accepts("\u212a\u0130\u017f\u017f!".encode())  # "KİſſS": k i s s
    assert a.accepts("\u0131kiss".encode())  # ı is a word character: no boundary before "kiss"
    assert words_byte_automaton(["kiss"], ignore_case=False).accepts("\u212aiss".encode())
    assert not words_byte_automaton(["kiss"], ignore_case=False).accepts("\u0131kiss".encode())
    assert word_characters(True) == frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              + "".join(SPECIAL_LETTERS))
    assert word_characters(False) == word_characters(True) - set(SPECIAL_LETTERS)


def test_phrases_pending_words_and_boundaries():
    a = words_byte_automaton(["son", "son of a", "bad"], ignore_case=True)
    for text, ok in [("sonny", True), ("son", False), ("son of", False), ("Sonof", True), ("a son!", False),
                     ("xbad", True), ("bad_", False), ("badly bad", False), ("badly", True), ("", True)]:
        assert a.accepts(text.encode()) == ok == (not regex_contains(text, ["son", "son of a", "bad"], True)), text


def test_glued_letters_pass_the_boundary_rule_and_are_caught_by_the_substring_mode():
    """SmolLM2 wrote " bitchK" (the Kelvin sign): a word character after the word, so no match at a boundary."""
    text = " bitch\u212a".encode()
    assert words_byte_automaton(["bitch"]).accepts(text)
    assert not words_byte_automaton(["bitch"], word_boundaries=False).accepts(text)
    for t in ("Scunthorpe", "xBITCHy", "bitc", "b itch"):
        assert words_byte_automaton(["cunt", "bitch"], word_boundaries=False).accepts(t.encode()) == (
            not regex_contains(t, ["cunt", "bitch"], True, False)), t
    assert word_pattern("bitch", word_boundaries=False).pattern == "(?i)bitch"


@pytest.mark.parametrize("words, match", [("bad", "wrap a single word"), ([""], "empty"), ([3], "must be a str"),
                                          (["a\ud800"], "lone surrogate"), (["b\ufffdd"], "U\\+FFFD")])
def test_bad_words_are_refused(words, match):
    with pytest.raises((TypeError, ValueError), match=match):
        words_byte_automaton(words)


@pytest.mark.parametrize("flag", ["ignore_case", "word_boundaries"])
def test_flags_must_be_bools(flag):
    with pytest.raises(TypeError, match=f"{flag} must be a bool, got str"):
        words_byte_automaton(["a"], **{flag: "False"})


# -- non-ASCII words ------------------------------------------------------------------------------------------------
# é/É, ß/ẞ, Greek sigma (σ ς Σ), micro sign and mu (µ μ Μ), Omega and the Ohm sign, an emoji, a full-width "!"
UNICODE_WORD = list("abks\u00e9 -") + ["\u00df", "\u1e9e", "\U0001f595", "\uff01", "\u03c3", "\u03c2", "\u00b5",
                                         "\u212a", "\u017f", "\u03a9", "\u2126", "\u0416"]
UNICODE_TEXT = list("abksABKS -.x0!\u00e9\u00c9") + SPECIAL_LETTERS + [
    "\u00df", "\u1e9e", "\U0001f595", "\U0001f596", "\uff01", "\u03c3", "\u03c2", "\u03a3", "\u00b5", "\u03bc",
    "\u039c", "\u03a9", "\u03c9", "\u2126", "\u0416", "\u0436", "\ufffd", "\u20ac"]
unicode_words = st.lists(st.text(st.sampled_from(UNICODE_WORD), min_size=1, max_size=3), min_size=1, max_size=4)


@given(unicode_words, st.lists(st.lists(st.sampled_from(UNICODE_TEXT), max_size=6), min_size=1, max_size=20),
       st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_non_ascii_words_match_the_regex(words, texts, ignore_case, word_boundaries, seed):
    """Texts of the listed characters, their case variants and the words themselves, a few of them with a byte
    dropped or inserted (invalid UTF-8 inside and between multi-byte characters)."""
    automaton = words_byte_automaton(words, ignore_case=ignore_case, word_boundaries=word_boundaries)
    rng = random.Random(seed)
    for chars in texts:
        data = "".join(c if rng.random() < 0.7 else rng.choice(words) for c in chars).encode()
        if data and rng.random() < 0.3:
            i = rng.randrange(len(data))
            data = data[:i] + data[i + 1:] if rng.random() < 0.5 else data[:i] + bytes([rng.choice(data)]) + data[i:]
        text = data.decode("utf-8", errors="replace")
        want = not regex_contains(text, words, ignore_case, word_boundaries)
        assert automaton.accepts(data) == want, (words, ignore_case, word_boundaries, data)


def test_a_non_ascii_word_matches_its_exact_text_and_its_simple_case_folding():
    a = words_byte_automaton(["caf\u00e9", "\U0001f595", "b\uff01tch"])
    for text, ok in [("CAF\u00c9!", False), ("cafe", True), ("caf\u00e9s", True), ("x\U0001f595", True),
                     ("\u00e9\U0001f595", False), ("B\uff01TCH", False), ("b!tch", True)]:
        assert a.accepts(text.encode()) == ok == (not regex_contains(text, ["caf\u00e9", "\U0001f595", "b\uff01tch"],
                                                                     True)), text
    assert words_byte_automaton(["caf\u00e9"], ignore_case=False).accepts("CAF\u00c9".encode())


def test_matching_characters_is_what_re_matches_over_every_code_point():
    """The one scan over a class of the characters finds what a scan per literal finds (ASCII and non-ASCII)."""
    chars = ["a", "k", "s", "i", "1", "-", " ", "\u00e9", "\u00df", "\u1e9e", "\u03c3", "\u00b5", "\u2126",
             "\U0001f595", "\uff01"]
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    got = matching_characters(chars)
    for c in chars:
        assert got[c] == frozenset(m.group() for m in re.finditer("(?i)" + re.escape(c), every)), c
    assert matching_characters(["k"], ignore_case=False) == {"k": frozenset("k")}
    assert got["k"] == frozenset("kK\u212a") and got["\U0001f595"] == frozenset(["\U0001f595"])


# -- minimisation ---------------------------------------------------------------------------------------------------
def moore(delta: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Moore's partition refinement, every state every round, blocks numbered by their first state."""
    block = np.unique(accepting, return_inverse=True)[1].reshape(-1)
    while True:
        ids: dict[bytes, int] = {}
        signatures = np.column_stack([block, block[delta]]).astype(np.int64)
        new = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in signatures])
        if len(ids) == len(np.unique(block)):
            return new
        block = new


@given(st.integers(1, 40), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_equivalent_states_is_moores_partition_on_random_automata(n, k, seed):
    rng = np.random.default_rng(seed)
    delta = rng.integers(0, n, size=(n, k))
    if rng.random() < 0.5:  # chains and duplicated columns: the shapes words give
        delta[np.arange(n - 1), 0] = np.arange(1, n)
        delta = np.concatenate([delta, delta[:, :1]], axis=1)
    accepting = rng.random(n) < rng.random()
    assert equivalent_states(delta, accepting).tolist() == moore(delta, accepting).tolist()


@pytest.mark.parametrize("word", ["ab" * 150, "".join(random.Random(0).choice("abcdefg ") for _ in range(300))])
def test_a_long_word_gives_moores_minimal_automaton(word):
    from pseudosl.logic.words import _Alphabet, _bytes, _CharAutomaton

    alphabet = _Alphabet([word, word[:7]], True, True)
    full = _bytes(_CharAutomaton(alphabet), alphabet)
    assert equivalent_states(full.delta, full.accepting).tolist() == moore(full.delta, full.accepting).tolist()
    a = words_byte_automaton([word, word[:7]])
    for text in (word, word.upper() + "!", word[:-1], "x" + word, word[:7], word[:7] + "x"):
        assert a.accepts(text.encode()) == (not contains_word(text, [word, word[:7]])), text
