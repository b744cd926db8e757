"""A causal LM and its tokenizer: loading, nucleus sampling and perplexity, device-agnostic.

:func:`load_lm` is :func:`pseudosl.experiments.pretrained.load_causal_lm`: the scratch model's folder, any local
Hugging Face folder, a ``.gguf`` file or ``"smollm2"``.  Prompts are left-padded with EOS (GPT-2 has no pad
token); position ids follow the attention mask.

* :func:`sample_continuations`: ``G`` continuations of ``new_tokens`` tokens per prompt (nucleus ``top_p``,
  ``temperature``; extra ``generate`` kwargs, e.g. word banning; or a :class:`ConstrainedDecoding`: the
  constraint's logits processor, or locally constrained resampling of the sampled continuations) -> token
  ids ``(P, G, new_tokens)`` (every token after the first EOS set to EOS) and the decoded texts ``P x G``
  (up to the first EOS).  Unprompted samples use the BOS token as the prompt and a fixed length.
* :func:`text_perplexity`: ``exp`` of the mean token NLL of texts (each scored after a BOS token,
  truncated to the model's context); optional ``logits_processor`` (word banning) renormalises every
  next-token distribution as decoding with it would.
* :func:`continuation_perplexity`: ``exp`` of the mean token NLL of sampled continuations under a model (the
  base model: the decoders' output perplexity), each scored after its prompt, up to its first EOS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

import pseudosl

from ..pretrained import load_causal_lm as load_lm

__all__ = ["load_lm", "bos_id", "sample_continuations", "text_perplexity", "context_length", "ConstrainedDecoding",
           "cut_at_eos", "continuation_perplexity", "RESAMPLE_ROWS"]

RESAMPLE_ROWS = 256
"""Continuations resampled together (the base pass holds ``rows x new_tokens x vocabulary`` log-probabilities)."""


@dataclass(frozen=True)
class ConstrainedDecoding:
    """Continuations that satisfy ``constraint``, a :class:`pseudosl.Constraint` over the ``new_tokens`` generated
    positions (folded vocabulary: its value map).

    ``resample = None``: generation with :class:`pseudosl.ConstraintLogitsProcessor` (every token that would leave
    no satisfying completion is masked before nucleus sampling).  ``resample = K``: the continuations are sampled
    as without a constraint, then each is the anchor of :func:`pseudosl.constrained_sample` with ``K`` candidates
    (engine :class:`pseudosl.CausalLMEngine` bound to its prompt, ``top_k`` other tokens and ``top_k_distinguished``
    forbidden-word tokens evaluated exactly, None: all of them); a
    continuation that already satisfies the constraint is kept as it is.
    """

    constraint: Any  # pseudosl.Constraint
    resample: int | None = None
    top_k: int = 10
    top_k_distinguished: int | None = None


def cut_at_eos(ids: Tensor, eos: int) -> Tensor:
    """``ids (..., n)`` with every token after the first ``eos`` of its row set to ``eos`` (the text ends there)."""
    return ids.masked_fill((ids == eos).long().cumsum(-1) > 0, eos)


def bos_id(tokenizer: Any) -> int:
    """The token that starts an unprompted sample: BOS, else EOS (GPT-2's ``<|endoftext|>``)."""
    t = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if t is None:
        raise ValueError("the tokenizer has neither a BOS nor an EOS token to start unprompted samples")
    return int(t)


def context_length(model: nn.Module) -> int:
    cfg = model.config
    return int(getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", 1024))


@torch.no_grad()
def sample_continuations(model: nn.Module, tokenizer: Any, prompts: Sequence[str] | None, n: int, new_tokens: int, *,
                         top_p: float = 0.9, temperature: float = 1.0, batch_size: int = 32, fixed_length: bool = False,
                         decoding: ConstrainedDecoding | None = None,
                         **generate_kw: Any) -> tuple[Tensor, list[list[str]]]:
    """``n`` continuations of each prompt (``prompts=None``: one BOS prompt): ids ``(P, n, new_tokens)``, texts.

    ``batch_size`` prompts go to one ``generate`` call (``batch_size * n`` sequences; unprompted: ``batch_size``
    samples per call).  ``fixed_length`` forces exactly ``new_tokens`` tokens (no early EOS), as for SGEAT's
    unprompted samples.  ``decoding``: keep every continuation inside a constraint over its ``new_tokens``
    positions (:class:`ConstrainedDecoding`; position 0 is the first token after the call's padded prompt).
    """
    if decoding is not None and decoding.constraint.circuit.n_vars != new_tokens:
        raise ValueError(f"the decoding constraint covers {decoding.constraint.circuit.n_vars} positions but the "
                         f"continuations have new_tokens = {new_tokens}; compile it over {new_tokens} positions")
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    room = context_length(model) - new_tokens  # prompt tokens that fit before the continuation
    if room < 1:
        raise ValueError(f"new_tokens = {new_tokens} leaves no room for a prompt in the model's context of "
                         f"{context_length(model)} tokens; lower it")
    kw = dict(do_sample=True, top_p=top_p, top_k=0, temperature=temperature, max_new_tokens=new_tokens,
              pad_token_id=tokenizer.pad_token_id)
    if fixed_length:
        kw["min_new_tokens"] = new_tokens
    if prompts is None:  # (1, n) rows of BOS, batch_size per call
        calls = [(torch.full((min(batch_size, n - a), 1), bos_id(tokenizer), dtype=torch.long), 1)
                 for a in range(0, n, batch_size)]
        calls = [({"input_ids": x, "attention_mask": torch.ones_like(x)}, r) for x, r in calls]
    else:
        texts = list(prompts)
        calls = [(tokenizer(texts[a:a + batch_size], return_tensors="pt", padding=True, add_special_tokens=False,
                            truncation=True, max_length=room), n)
                 for a in range(0, len(texts), batch_size)]
    ids, decoded = [], []
    total = n * (1 if prompts is None else len(texts))
    bar = tqdm(calls, desc=f"sampling {total:,} continuations of {new_tokens} tokens", unit="batch", leave=False,
               mininterval=1.0, disable=len(calls) < 2)
    for enc, reps in bar:
        enc = {k: v.to(device) for k, v in dict(enc).items()}
        width = enc["input_ids"].shape[1]  # the padded prompt: the constraint's position 0 is token `width`
        extra = dict(generate_kw)
        if decoding is not None and decoding.resample is None:
            from transformers import LogitsProcessorList
            extra["logits_processor"] = LogitsProcessorList(
                [pseudosl.ConstraintLogitsProcessor(decoding.constraint, prompt_length=width)])
        out = model.generate(**enc, **kw, num_return_sequences=reps, **extra)
        out = out[:, width:]  # (rows, <= new_tokens)
        if out.shape[1] < new_tokens:
            out = torch.cat([out, out.new_full((out.shape[0], new_tokens - out.shape[1]), eos)], 1)
        if decoding is not None and decoding.resample is not None:
            out = _resample(model, enc, reps, out, decoding)
        out = cut_at_eos(out, eos)
        ids.append(out.cpu())
        decoded.extend(tokenizer.batch_decode(out, skip_special_tokens=True))
    all_ids = torch.cat(ids).view(-1, n, new_tokens)
    return all_ids, [decoded[i * n:(i + 1) * n] for i in range(all_ids.shape[0])]


def _resample(model: nn.Module, enc: dict[str, Tensor], reps: int, anchors: Tensor,
              decoding: ConstrainedDecoding) -> Tensor:
    """Each row of ``anchors (rows, n)`` resampled by :func:`pseudosl.constrained_sample`, scored after its prompt
    (``enc``'s row ``r // reps``, left-padded: the engine follows the attention mask)."""
    prompts, masks = enc["input_ids"].repeat_interleave(reps, 0), enc["attention_mask"].repeat_interleave(reps, 0)
    out = []
    for a in range(0, anchors.shape[0], RESAMPLE_ROWS):
        rows = slice(a, a + RESAMPLE_ROWS)
        engine = pseudosl.CausalLMEngine(model, prompts[rows], masks[rows], value_map=decoding.constraint.value_map,
                                         top_k=decoding.top_k, top_k_distinguished=decoding.top_k_distinguished)
        out.append(pseudosl.constrained_sample(engine, decoding.constraint, anchors[rows],
                                               num_candidates=decoding.resample))
    return torch.cat(out)


@torch.no_grad()
def text_perplexity(model: nn.Module, tokenizer: Any, texts: Sequence[str], *, batch_size: int = 16,
                    logits_processor: Any = None) -> float:
    """``exp(mean NLL)`` over all tokens of ``texts`` (each after BOS, cut to the context); ``inf`` if a token is banned."""
    if not texts:
        raise ValueError("texts is empty: perplexity needs at least one text")
    device = next(model.parameters()).device
    limit = context_length(model) - 1
    bos = bos_id(tokenizer)
    rows = [[bos] + ids[:limit] for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    total, count = 0.0, 0
    for a in range(0, len(rows), batch_size):
        chunk = rows[a:a + batch_size]
        width = max(len(r) for r in chunk)
        ids = torch.tensor([r + [bos] * (width - len(r)) for r in chunk], device=device)  # right padding
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in chunk], device=device)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()  # (b, L, V)
        if logits_processor is not None:  # the next-token distribution decoding with the processor samples from
            if hasattr(logits_processor, "reset"):  # a ConstraintLogitsProcessor follows one sequence of calls
                logits_processor.reset()
            logits = torch.stack([logits_processor(ids[:, :t + 1], logits[:, t]) for t in range(width - 1)], 1)
        else:
            logits = logits[:, :-1]
        logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (b, L-1)
        keep = mask[:, 1:].bool()
        total -= logp[keep].sum().item()
        count += int(keep.sum())
    return math.exp(total / count) if math.isfinite(total) else math.inf


@torch.no_grad()
def continuation_perplexity(model: nn.Module, tokenizer: Any, prompts: Sequence[str], ids: Tensor, *,
                            batch_size: int = 64) -> float:
    """``exp(mean NLL)`` under ``model`` of the tokens of the continuations ``ids (P, G, n)``, each scored after its
    prompt (tokenized as :func:`sample_continuations` does, without padding) and read up to its first EOS.

    The output perplexity of a decoder: with ``model`` the base model, a decoding that breaks the text (rare
    tokens, repetition) scores high however low its toxicity.  ``nan`` when every continuation is empty.
    """
    if ids.dim() != 3 or ids.shape[0] != len(prompts):
        raise ValueError(f"ids must be (prompts, continuations, tokens) with {len(prompts)} prompts, got shape "
                         f"{tuple(ids.shape)}")
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    room = context_length(model) - ids.shape[-1]
    encoded = tokenizer(list(prompts), add_special_tokens=False, truncation=True, max_length=room)["input_ids"]
    total, count = 0.0, 0
    for prompt, rows in zip(encoded, ids.tolist()):
        conts = [c[:c.index(eos)] if eos in c else c for c in rows]
        conts = [c for c in conts if c]
        for a in range(0, len(conts), batch_size):
            chunk = conts[a:a + batch_size]
            width = len(prompt) + max(map(len, chunk))
            x = torch.tensor([prompt + c + [pad] * (width - len(prompt) - len(c)) for c in chunk], device=device)
            mask = torch.tensor([[1] * (len(prompt) + len(c)) + [0] * (width - len(prompt) - len(c)) for c in chunk],
                                device=device)
            logp = model(input_ids=x, attention_mask=mask).logits[:, :-1].float().log_softmax(-1)
            logp = logp.gather(-1, x[:, 1:, None]).squeeze(-1)  # (b, width - 1): token t + 1 given tokens <= t
            target = torch.arange(1, width, device=device)
            lengths = torch.tensor([len(c) for c in chunk], device=device)
            keep = (target[None] >= len(prompt)) & (target[None] < len(prompt) + lengths[:, None])
            total -= float(logp[keep].double().sum())
            count += int(keep.sum())
    return math.exp(total / count) if count else math.nan
