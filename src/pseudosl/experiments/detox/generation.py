"""SGEAT's training data: unprompted samples of the base model, scored, split at the median.

SGEAT (Wang et al. 2022, "Exploring the limits of domain-adaptive training for detoxifying large-scale
language models") samples ``N`` texts from the model itself without a prompt (nucleus ``p = 0.9``,
temperature 1), scores their toxicity and fine-tunes on the least toxic half with the LM loss.

* :func:`scored_generations`: ``N`` samples of ``L`` tokens ``(N, L)``, their texts and scores, cached in
  ``<root>/generations/<key>.pt`` (``key`` hashes the model, the sampling settings, the scorer and the seed);
  an entry that is unreadable (truncated) or not what the key promises (shapes, scores outside ``[0, 1]``)
  is made again, with a warning.
* :func:`sgeat_split`: indices of the least toxic half and of the rest (stable: ties keep sample order).
* :func:`forbidden_windows`: a window of ``w`` tokens per sequence, centred on its first forbidden sequence
  when it has one (else a seeded random window): the PSL anchors cut from the toxic half.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from ..runs import atomic_path
from .lm import CausalLM, sample_continuations

__all__ = ["scored_generations", "sgeat_split", "forbidden_windows", "window_starts", "first_occurrence"]


def sgeat_split(scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``(least toxic half, the rest)`` as index arrays; with ``N`` odd the middle sample goes to the rest."""
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or len(s) < 2:
        raise ValueError(f"scores must be a list of at least 2 numbers, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores hold NaN or infinite values; the scorer failed on some texts")
    order = np.argsort(s, kind="stable")
    return np.sort(order[:len(s) // 2]), np.sort(order[len(s) // 2:])


def first_occurrence(ids: Sequence[int], sequences: Sequence[Sequence[int]]) -> tuple[int, int] | None:
    """``(start, length)`` of the earliest occurrence of any of ``sequences`` in ``ids``, or ``None``."""
    ids = list(ids)
    best = None
    for seq in sequences:
        k = len(seq)
        for s in range(len(ids) - k + 1):
            if ids[s:s + k] == list(seq):
                if best is None or s < best[0]:
                    best = (s, k)
                break
    return best


def window_starts(ids: Tensor, locate: Callable[[list[int]], tuple[int, int] | None], window: int,
                  seed: int) -> list[int]:
    """Where the window of ``window`` tokens of each row of ``ids (M, L)`` starts: centred on ``locate(row)``
    (``(start, length)`` of its first forbidden word, e.g. :func:`first_occurrence`), else at a seeded random
    start (one ``random.Random(seed)`` for all rows)."""
    m, length = ids.shape
    if not 1 <= window <= length:
        raise ValueError(f"window = {window} must lie in 1..{length} (the sample length)")
    rng = random.Random(seed)
    starts = []
    for row in ids.tolist():
        hit = locate(row)
        if hit is not None:
            start = hit[0] - (window - min(hit[1], window)) // 2
        else:
            start = rng.randrange(length - window + 1)
        starts.append(max(0, min(start, length - window)))
    return starts


def forbidden_windows(ids: Tensor, sequences: Sequence[Sequence[int]], window: int, seed: int) -> Tensor:
    """``(M, window)`` windows of ``ids (M, L)``: around the first forbidden sequence, else at a seeded random start."""
    starts = window_starts(ids, lambda row: first_occurrence(row, sequences), window, seed)
    return torch.tensor([row[s:s + window] for row, s in zip(ids.tolist(), starts)], dtype=torch.long).view(-1, window)


def _key(model_id: str, cfg: Any, scorer_name: str) -> str:
    parts = {"model": model_id, "scorer": scorer_name, "n": cfg.n_generations, "length": cfg.gen_length,
             "top_p": cfg.gen_top_p, "temperature": cfg.gen_temperature, "seed": cfg.data_seed}
    if scorer_name == "lexical":  # its scores depend on the word list
        parts["words"] = cfg.forbidden_words()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:10]


def _checked_entry(data: Any, cfg: Any) -> dict[str, Any]:
    """A cache entry as :func:`scored_generations` wrote it for ``cfg``, or a ``ValueError`` saying what is off."""
    if not isinstance(data, dict) or not {"ids", "texts", "scores"} <= set(data):
        raise ValueError("not a dict with ids, texts and scores")
    ids, texts, scores = data["ids"], data["texts"], data["scores"]
    if not (torch.is_tensor(ids) and tuple(ids.shape) == (cfg.n_generations, cfg.gen_length)):
        raise ValueError(f"ids are not a ({cfg.n_generations}, {cfg.gen_length}) tensor")
    if len(texts) != cfg.n_generations or len(scores) != cfg.n_generations:
        raise ValueError(f"{len(texts)} texts and {len(scores)} scores for {cfg.n_generations} samples")
    if not all(isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores):
        raise ValueError("a score is not a number in [0, 1]")
    return data


def scored_generations(model: Any, tokenizer: Any, scorer: Any, cfg: Any, model_id: str, root: Path,
                       print_fn: Any = print) -> dict[str, Any]:
    """``{"ids": (N, L), "texts": [N], "scores": [N], "scorer": name}``, generated once and cached."""
    path = root / "generations" / f"{_key(model_id, cfg, scorer.name)}.pt"
    if path.is_file():
        try:
            return _checked_entry(torch.load(path, weights_only=False), cfg)
        except Exception as e:  # a truncated file raises EOFError, RuntimeError, UnpicklingError, ...
            warnings.warn(f"{path}: unusable cached generations ({type(e).__name__}: {str(e)[:160]}); making them again")
    print_fn(f"detox generate: {cfg.n_generations} unprompted samples of {cfg.gen_length} tokens "
             f"(top_p {cfg.gen_top_p}, temperature {cfg.gen_temperature}), scored by {scorer.name}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.data_seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(cfg.data_seed)
        was = model.training
        model.eval()
        sampler = CausalLM(model, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                           new_tokens=cfg.gen_length, top_p=cfg.gen_top_p, temperature=cfg.gen_temperature)
        ids, texts = sample_continuations(sampler, tokenizer, None, cfg.n_generations, batch_size=cfg.gen_batch,
                                          fixed_length=True)
        model.train(was)
    texts = texts[0]
    scores = [float(s) for s in scorer.score(texts)]
    data = {"ids": ids[0], "texts": texts, "scores": scores, "scorer": scorer.name, "model": model_id}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(data, tmp)
    print_fn(f"detox generate: mean toxicity {np.mean(scores):.3f}, {np.mean(np.array(scores) > 0.5) * 100:.1f}% "
             f"above 0.5; cached {path}")
    return data
