"""The forbidden word list: one entry per line (the LDNOOBW format), or the default list of a package.

The paper constrains GPT-2 with the English "List of Dirty, Naughty, Obscene and Otherwise Bad
Words" (LDNOOBW, published by Shutterstock; about 400 entries, multi-word phrases included).  The
default list here is the one shipped by the PyPI package ``leoprofanity`` 0.0.4 (MIT licence): its
``dictionary/default.json``, the "Shutterstock dictionary" its README names, 252 single-word entries
derived from LDNOOBW's English list.  Any list in the LDNOOBW
layout -- one entry per line, ``#`` comment lines and blank lines ignored -- can be passed instead
(``--bad-words FILE``); a ``.json`` file holding a list of strings is read as well.

Example:
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "words.txt"
    >>> _ = p.write_text("# comment\\nfoo\\n\\n bar \\nfoo\\n")
    >>> load_words(p)
    ['foo', 'bar']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

__all__ = ["DEFAULT_WORDS_PACKAGE", "default_words_path", "load_words", "select_words"]

DEFAULT_WORDS_PACKAGE = "leoprofanity"  # ships dictionary/default.json (LDNOOBW English, single words)


def default_words_path() -> Path:
    """Path of the default word list, ``leoprofanity/dictionary/default.json`` (install ``pseudosl[detox]``)."""
    from importlib.resources import files

    try:
        path = Path(str(files(DEFAULT_WORDS_PACKAGE) / "dictionary" / "default.json"))
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"the default forbidden-word list comes from the package {DEFAULT_WORDS_PACKAGE!r}, which is not "
            f"installed; install it with `pip install 'pseudosl[detox]'` or pass a word list (--bad-words FILE)"
        ) from None
    if not path.is_file():
        raise FileNotFoundError(f"{DEFAULT_WORDS_PACKAGE} is installed but has no word list at {path}; "
                                f"reinstall it or pass a word list (--bad-words FILE)")
    return path


def load_words(path: str | Path | None = None) -> list[str]:
    """The entries of a word list: stripped, blanks and ``#`` comments dropped, duplicates removed (order kept).

    Args:
        path: a text file with one entry per line (LDNOOBW layout) or a ``.json`` list of strings;
            ``None`` reads :func:`default_words_path`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not UTF-8, a ``.json`` file is not a list of strings, or no entry is left.
    """
    if path is None:
        path = default_words_path()
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or pathlib.Path (or None for the default list), got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word list {str(path)!r} does not exist; pass a file with one entry per line")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"word list {str(path)!r} is not UTF-8 text ({e})") from None
    if path.suffix.lower() == ".json":
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"word list {str(path)!r} is not valid JSON ({e})") from None
        if not isinstance(entries, list) or not all(isinstance(w, str) for w in entries):
            raise ValueError(f"word list {str(path)!r} must hold a JSON list of strings")
    else:
        entries = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    words = list(dict.fromkeys(w.strip() for w in entries if w.strip()))
    if not words:
        raise ValueError(f"word list {str(path)!r} holds no entry (one word or phrase per line)")
    return words


def select_words(listed: list[str], subset: Sequence[str] = ()) -> list[str]:
    """``subset`` (in its order) after checking that every entry is one of ``listed``; ``listed`` when it is empty.

    Raises:
        ValueError: an entry of ``subset`` is not on the list (the message names them).
    """
    if not subset:
        return list(listed)
    known = set(listed)
    missing = [w for w in subset if w not in known]
    if missing:
        raise ValueError(f"{missing} {'is' if len(missing) == 1 else 'are'} not on the word list ({len(listed)} entries); "
                         f"give entries of the list (--bad-words) or drop them")
    return list(subset)
