"""Toxicity scorers behind one interface: ``scorer.score(texts) -> P(toxic)`` per text, in ``[0, 1]``.

Three scorers, each with a ``name`` that is recorded with every number it produces:

* ``"perspective"`` -- :class:`PerspectiveScorer`, Google's Perspective API (the scorer of Gehman et
  al. 2020 and of the paper), one HTTP request per text, rate limited, retried with exponential
  back-off on 429 / 5xx / connection errors, every score cached on disk as soon as it arrives
  (an append-only JSON-lines file), so an interrupted run resumes where it stopped.
* ``"profanity-check"`` -- :class:`ProfanityCheckScorer`, the offline linear SVM of
  ``alt-profanity-check`` (weights shipped in the package; ``pip install 'pseudosl[detox]'``).
* ``"lexical"`` -- :class:`LexicalScorer`, the constraint itself: 1.0 if a forbidden token sequence
  occurs in the tokenized text, else 0.0.

Example:
    >>> class Fixed:                              # any object with `name` and `score` is a scorer
    ...     name = "fixed"
    ...     def score(self, texts): return [0.5 for _ in texts]
    >>> isinstance(Fixed(), ToxicityScorer)
    True
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import pseudosl

from ...errors import PseudoslError, StorageError
from ...logic.checks import check_int
from .constraint import contains_forbidden, forbidden_sequences

__all__ = ["DEFAULT_ENDPOINT", "SCORERS", "LexicalScorer", "PerspectiveError", "PerspectiveScorer",
           "ProfanityCheckScorer", "ToxicityScorer", "make_scorer"]

DEFAULT_ENDPOINT = "https://commentanalyzer.googleapis.com/v1alpha1/comments:analyze"
SCORERS = ("perspective", "profanity-check", "lexical")


@runtime_checkable
class ToxicityScorer(Protocol):
    """``name`` identifies the scorer in results; ``score(texts)`` returns one ``P(toxic)`` per text."""

    name: str

    def score(self, texts: list[str]) -> list[float]: ...


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings (wrap a single text in a list), got {texts!r:.80}")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts[{bad[0]}] must be a str, got {type(texts[bad[0]]).__name__}")
    return list(texts)


class PerspectiveError(PseudoslError, RuntimeError):
    """The Perspective API refused a request, gave up after its retries, or replied in an unexpected form."""


class PerspectiveScorer:
    """Perspective API ``TOXICITY`` summary scores, cached on disk.

    Args:
        api_key_env: environment variable holding the API key (read when a request is needed).
        endpoint: the ``comments:analyze`` URL (a local fake server in tests).
        cache_dir: folder of the score cache; default ``pseudosl.cache.cache_dir() / "perspective"``.
        qps: at most this many requests per second (the API's default quota is 1).
        max_retries: retries of one text after a 429, a 5xx or a connection error, waiting
            ``backoff * 2**attempt`` seconds (at most 60; a ``Retry-After`` header is honoured).
        timeout: seconds per HTTP request.
        backoff: the first retry's wait in seconds.
        attribute: the Perspective attribute whose summary score is returned.
        languages: the texts' languages, sent with each request.

    Scores are cached under ``sha256(attribute, languages, text)`` in ``scores.jsonl``, one line per
    score, flushed and synced as soon as it arrives.  The cache folder is created and checked for writing
    when the scorer is made, before any request, so no paid-for score is lost.  Cache lines that are not
    UTF-8 JSON with a 64-hex key and a score in ``[0, 1]`` (a cut write, ``NaN``, ``7``) are skipped with one
    warning, and their texts requested again.  An empty (or blank) text scores 0.0 without a request (the
    API rejects empty comments).
    """

    name = "perspective"

    def __init__(self, *, api_key_env: str = "PERSPECTIVE_API_KEY", endpoint: str = DEFAULT_ENDPOINT,
                 cache_dir: str | Path | None = None, qps: float = 1.0, max_retries: int = 6, timeout: float = 30.0,
                 backoff: float = 1.0, attribute: str = "TOXICITY", languages: Sequence[str] = ("en",)) -> None:
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http(s) URL, got {endpoint!r}")
        for arg, value in (("qps", qps), ("timeout", timeout)):
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{arg} must be a positive number, got {value!r}")
        if not isinstance(backoff, (int, float)) or backoff < 0:
            raise ValueError(f"backoff must be a number >= 0 (seconds), got {backoff!r}")
        max_retries = check_int("max_retries", max_retries, 0)
        self.api_key_env, self.endpoint, self.attribute = api_key_env, endpoint, attribute
        self.languages = list(languages)
        self.interval, self.max_retries, self.timeout, self.backoff = 1.0 / qps, max_retries, timeout, backoff
        self.cache_dir = Path(cache_dir) if cache_dir is not None else pseudosl.cache.cache_dir() / "perspective"
        self.cache_file = self.cache_dir / "scores.jsonl"
        self._check_writable()
        self.cache = self._load_cache()
        self.n_requests = 0  # HTTP requests sent by this instance (retries included)
        self._last = float("-inf")
        self._sleep: Callable[[float], None] = time.sleep

    # -- cache --------------------------------------------------------------------------------
    def _key(self, text: str) -> str:
        blob = json.dumps([self.attribute, self.languages, text], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _check_writable(self) -> None:
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with open(self.cache_file, "ab+") as f:
                if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                    f.write(b"\n")  # end a line cut by a kill, so the next score starts a line of its own
        except OSError as e:
            raise StorageError(f"the Perspective score cache {self.cache_file} cannot be written ({e.strerror or e}); "
                               f"set PSEUDOSL_CACHE (or cache_dir=) to a writable folder") from None

    def _load_cache(self) -> dict[str, float]:
        cache: dict[str, float] = {}
        bad = []
        with open(self.cache_file, "rb") as f:
            for n, raw in enumerate(f, 1):
                entry = _cache_entry(raw)
                if entry is None:
                    bad.append(n)  # a line cut by an interrupted write, or a value that is no score: asked again
                else:
                    cache[entry[0]] = entry[1]
        if bad:
            warnings.warn(f"{self.cache_file}: skipping {len(bad)} unreadable or invalid cache line(s) (line "
                          f"{', '.join(map(str, bad[:5]))}{' ...' if len(bad) > 5 else ''}); their texts are scored again")
        return cache

    def _store(self, key: str, score: float) -> None:
        self.cache[key] = score
        try:
            with open(self.cache_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "score": score}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise StorageError(f"could not append to the Perspective score cache {self.cache_file} ({e.strerror or e}); "
                               f"scores before this one are kept: free space there and run again") from None

    # -- requests -----------------------------------------------------------------------------
    def check_ready(self) -> None:
        """Raise :class:`PerspectiveError` now if a request would fail for want of the API key."""
        self._api_key()

    def _api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise PerspectiveError(f"the Perspective API key is missing: set the environment variable "
                                   f"{self.api_key_env} (or pass api_key_env=NAME), or use an offline scorer "
                                   f"(make_scorer('profanity-check') or 'lexical')")
        return key

    def _wait_turn(self) -> None:
        wait = self._last + self.interval - time.monotonic()
        if wait > 0:
            self._sleep(wait)
        self._last = time.monotonic()

    def _request(self, text: str, key: str) -> float:
        body = json.dumps({"comment": {"text": text}, "languages": self.languages,
                           "requestedAttributes": {self.attribute: {}}, "doNotStore": True}).encode()
        sep = "&" if "?" in self.endpoint else "?"
        req = urllib.request.Request(f"{self.endpoint}{sep}key={key}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        for attempt in range(self.max_retries + 1):
            self._wait_turn()
            self.n_requests += 1
            retry_after = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return self._parse(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode("utf-8", "replace")
                if e.code != 429 and e.code < 500:
                    raise PerspectiveError(f"Perspective API answered HTTP {e.code} for text {text[:60]!r}: "
                                           f"{detail}") from None
                problem, retry_after = f"HTTP {e.code}: {detail}", e.headers.get("Retry-After")
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
                problem = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            if attempt == self.max_retries:
                raise PerspectiveError(f"Perspective API failed {self.max_retries + 1} times at {self.endpoint} "
                                       f"(last: {problem}); run again to resume from the cache")
            delay = min(60.0, self.backoff * 2 ** attempt)
            if retry_after is not None and retry_after.strip().isdigit():
                delay = min(60.0, max(delay, float(retry_after)))
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _parse(self, raw: bytes) -> float:
        try:
            reply = json.loads(raw)
            value = reply["attributeScores"][self.attribute]["summaryScore"]["value"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise PerspectiveError(f"malformed Perspective reply (expected attributeScores.{self.attribute}."
                                   f"summaryScore.value; {type(e).__name__}: {e}): {raw[:200]!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise PerspectiveError(f"malformed Perspective reply: score {value!r} is not a number in [0, 1]")
        return float(value)

    def score(self, texts: list[str]) -> list[float]:
        """``P(toxic)`` per text; cached texts cost no request."""
        texts = _check_texts(texts)
        keys = [self._key(t) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self.cache and texts[i].strip()]
        if todo:
            api_key = self._api_key()
            for i in todo:
                if keys[i] not in self.cache:  # a text repeated in `texts` is requested once
                    self._store(keys[i], self._request(texts[i], api_key))
        return [self.cache[k] if t.strip() else 0.0 for k, t in zip(keys, texts)]


def _cache_entry(raw: bytes) -> tuple[str, float] | None:
    """``(key, score)`` of one cache line, or ``None`` if it is not UTF-8 JSON with a sha256 key and a score in [0, 1]."""
    try:
        entry = json.loads(raw.decode("utf-8"))
        key, score = entry["key"], entry["score"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return None
    if not (isinstance(key, str) and len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        return None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:  # NaN fails too
        return None
    return key, float(score)


class ProfanityCheckScorer:
    """Offline ``P(offensive)`` of ``alt-profanity-check`` (a linear SVM on bag-of-words, weights in the package)."""

    name = "profanity-check"

    def __init__(self) -> None:
        try:
            from profanity_check import predict_prob
        except ModuleNotFoundError:
            raise ModuleNotFoundError("the 'profanity-check' scorer needs the package alt-profanity-check; install "
                                      "it with `pip install 'pseudosl[detox]'`") from None
        self._predict_prob = predict_prob

    def score(self, texts: list[str]) -> list[float]:
        texts = _check_texts(texts)
        return [float(p) for p in self._predict_prob(texts)] if texts else []


class LexicalScorer:
    """1.0 if a forbidden token sequence (either spelling of a word) occurs in the tokenized text, else 0.0.

    :meth:`score_ids` checks token ids directly (generated tokens, no re-tokenization).
    """

    name = "lexical"

    def __init__(self, tokenizer: Any, words: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.sequences = forbidden_sequences(tokenizer, words)

    def score_ids(self, token_ids: Sequence[Sequence[int]]) -> list[float]:
        return [float(contains_forbidden(ids, self.sequences)) for ids in token_ids]

    def score(self, texts: list[str]) -> list[float]:
        texts = _check_texts(texts)
        return self.score_ids([self.tokenizer.encode(t, add_special_tokens=False) for t in texts])


def make_scorer(name: str, **kw: Any) -> ToxicityScorer:
    """The scorer called ``name`` (one of :data:`SCORERS`), built with keyword arguments ``kw``.

    Usage::

        make_scorer("perspective", qps=1.0)              # PERSPECTIVE_API_KEY must be set
        make_scorer("lexical", tokenizer=tokenizer, words=load_words())
    """
    if name == "perspective":
        return PerspectiveScorer(**kw)
    if name == "profanity-check":
        return ProfanityCheckScorer(**kw)
    if name == "lexical":
        return LexicalScorer(**kw)
    raise ValueError(f"unknown scorer {name!r}; choose one of {SCORERS}")
