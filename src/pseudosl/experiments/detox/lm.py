"""A causal LM and its tokenizer: loading, the model the harness trains and decodes, sampling and perplexity.

:func:`load_lm` is :func:`pseudosl.experiments.pretrained.load_causal_lm`: the scratch model's folder, any local
Hugging Face folder, a ``.gguf`` file or ``"smollm2"``.  Prompts are left-padded with EOS (GPT-2 has no pad
token); position ids follow the attention mask.

* :class:`CausalLM`: a Hugging Face causal LM as a :class:`~pseudosl.experiments.structured.StructuredModel`, so the
  shared objective (:class:`~pseudosl.experiments.objective.ConstrainedObjective`: the LM loss + weight x PSL) trains
  it and the shared decoders (:mod:`pseudosl.experiments.decoders`: word banning, the streaming constraint processor,
  locally constrained resampling) decode it.  Its inputs are :func:`prompt_rows`: ``(B, 2, P)`` left-padded prompt
  ids and their attention mask in one tensor; its outputs the ``new_tokens`` generated tokens.
* :func:`sample_continuations`: ``G`` continuations of ``new_tokens`` tokens per prompt by a decoder of the shared
  table (``None``: the model's own nucleus sampling) -> token ids ``(P, G, new_tokens)`` (every token after the
  first EOS set to EOS) and the decoded texts ``P x G`` (up to the first EOS).  Unprompted samples use the BOS token
  as the prompt and a fixed length.
* :func:`text_perplexity`: ``exp`` of the mean token NLL of texts (each scored after a BOS token, truncated to the
  model's context); optional logits processors (a sampling decoder's) renormalise every next-token distribution as
  decoding with them would.
* :func:`continuation_perplexity`: ``exp`` of the mean token NLL of sampled continuations under a model (the
  base model: the decoders' output perplexity), each scored after its prompt, up to its first EOS.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

import pseudosl

from .. import decoders
from ..pretrained import load_causal_lm as load_lm
from ..structured import Fit, StructuredModel

__all__ = ["load_lm", "bos_id", "CausalLM", "prompt_rows", "sample_continuations", "text_perplexity",
           "context_length", "cut_at_eos", "continuation_perplexity"]


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


def prompt_rows(ids: Tensor, mask: Tensor) -> Tensor:
    """``(B, 2, P)`` long: left-padded prompt ids ``(B, P)`` and their attention mask ``(B, P)`` in one tensor (the
    inputs of :class:`CausalLM`: one tensor, so batches, slices and data sets carry both)."""
    if ids.shape != mask.shape or ids.dim() != 2:
        raise ValueError(f"ids and mask must both be (B, P), got {tuple(ids.shape)} and {tuple(mask.shape)}")
    return torch.stack([ids.long(), mask.long()], 1)


class CausalLM(StructuredModel):
    """A Hugging Face causal LM ``lm`` as a structured model over ``new_tokens`` generated tokens (module docs).

    Sampling: nucleus ``top_p`` at ``temperature`` (``generate``, torch's RNG), ``eos_token_id`` / ``pad_token_id`` as
    the tokenizer's.  The engine of the local conditionals (PSL, resampling): :class:`pseudosl.CausalLMEngine` with
    ``value_map`` (the constraint's folding of the vocabulary), ``top_k``, ``top_k_distinguished`` (the PSL's;
    resampling's ``resample_top_k_distinguished``), ``max_class_size`` and ``memory_budget`` (bytes; ``None``: the engine's default).  The PSL anchors come with the
    batch (``fit``'s ``targets``: :func:`prompt_rows` of context + anchor, the anchor its last ``psl_window`` tokens;
    set ``anchor_set`` of the sets the batch carries),
    or with ``psl_sampling = (top_p, temperature)`` are drawn by the engine after the context (the method as the
    paper's Section 3 states it).

    Checkpoints hold ``lm``'s own state dict (:meth:`state_dict` and :meth:`load_state_dict` are ``lm``'s).
    """

    autoregressive = True

    def __init__(self, lm: nn.Module, *, eos_token_id: int, pad_token_id: int | None, new_tokens: int,
                 top_p: float = 0.9, temperature: float = 1.0, value_map: Any = None, top_k: int = 0,
                 top_k_distinguished: int | None = None, resample_top_k_distinguished: int | None = None,
                 max_class_size: int = 1, memory_budget: int | None = None,
                 psl_window: int = 10, psl_sampling: tuple[float, float] | None = None, anchor_set: int = 0) -> None:
        super().__init__()
        self.lm = lm
        self.eos_token_id, self.pad_token_id, self.new_tokens = eos_token_id, pad_token_id, new_tokens
        self.top_p, self.temperature = top_p, temperature
        self.value_map, self.top_k, self.top_k_distinguished = value_map, top_k, top_k_distinguished
        self.max_class_size, self.memory_budget = max_class_size, memory_budget
        self.resample_top_k_distinguished = resample_top_k_distinguished
        self.psl_window, self.psl_sampling, self.anchor_set = psl_window, psl_sampling, anchor_set
        self.given: Tensor | None = None  # anchors given by `anchored`

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self.lm.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.lm.load_state_dict(state_dict, strict=strict, assign=assign)

    # -- training -----------------------------------------------------------------------------------
    def fit(self, inputs: Tensor, targets: Tensor) -> Fit:
        """The LM loss of ``inputs (B, L)`` (BOS, then a text); ``targets`` (the PSL anchors in their context, one
        set per anchor source: :func:`prompt_rows` stacked, ``(B, S, 2, P + psl_window)``) ride along for
        :meth:`psl_inputs`, which reads set ``anchor_set``."""
        return Fit(self.lm(input_ids=inputs, labels=inputs).loss, None, targets)

    def psl_inputs(self, fit: Fit, m: int) -> tuple[Tensor, Any]:
        rows = fit.conditioning[:m, self.anchor_set]             # (m, 2, P + w)
        w = self.psl_window
        engine = self._engine(rows[:, 0, :-w], rows[:, 1, :-w], self.top_k_distinguished)  # each anchor's context
        if self.psl_sampling is not None:  # y ~ p(. | context), drawn by the engine (eval mode)
            top_p, temperature = self.psl_sampling
            return engine.sample(length=w, top_p=top_p, temperature=temperature), engine
        return rows[:, 0, -w:], engine                           # (m, w) the anchors of the batch

    # -- decoding -------------------------------------------------------------------------------------
    def engine(self, inputs: Tensor) -> Any:
        """The local conditionals the decoders resample with (``resample_top_k_distinguished``)."""
        return self._engine(inputs[:, 0], inputs[:, 1], self.resample_top_k_distinguished)

    def _engine(self, ids: Tensor, mask: Tensor, top_k_distinguished: int | None) -> Any:
        return pseudosl.CausalLMEngine(self.lm, ids, mask, value_map=self.value_map, top_k=self.top_k,
                                       top_k_distinguished=top_k_distinguished,
                                       max_class_size=self.max_class_size, memory_budget=self.memory_budget)

    def anchor(self, inputs: Tensor) -> Tensor:
        """The model's own decoding of ``inputs``: the draws given by :meth:`anchored` (the plain row's, so that the
        constrained decoders resample its very continuations), else a fresh draw."""
        if self.given is not None:
            if self.given.shape[0] != inputs.shape[0]:
                raise ValueError(f"{self.given.shape[0]} anchors given for {inputs.shape[0]} input rows")
            return self.given.to(inputs.device)
        return self.sample(inputs, [])

    @contextmanager
    def anchored(self, draws: Tensor | None) -> Iterator[None]:
        """Within the block, :meth:`anchor` returns ``draws (B, new_tokens)`` (``None``: draws afresh)."""
        self.given = draws
        try:
            yield
        finally:
            self.given = None

    def greedy(self, inputs: Tensor) -> Tensor:
        raise NotImplementedError("a language model here decodes by sampling (CausalLM.sample)")

    def sample(self, inputs: Tensor, processors: list, *, min_new_tokens: int | None = None) -> Tensor:
        """``(B, new_tokens)``: one continuation per prompt row of ``inputs`` (:func:`prompt_rows`), nucleus-sampled
        through ``processors``; a continuation that ends early (EOS) is padded with EOS."""
        from transformers import LogitsProcessorList
        ids, mask = inputs[:, 0], inputs[:, 1]
        kw = dict(do_sample=True, top_p=self.top_p, top_k=0, temperature=self.temperature,
                  max_new_tokens=self.new_tokens, pad_token_id=self.pad_token_id)
        if min_new_tokens is not None:
            kw["min_new_tokens"] = min_new_tokens
        if processors:
            kw["logits_processor"] = LogitsProcessorList(processors)
        out = self.lm.generate(input_ids=ids, attention_mask=mask, **kw)[:, ids.shape[1]:]  # (B, <= new_tokens)
        if out.shape[1] < self.new_tokens:
            out = torch.cat([out, out.new_full((out.shape[0], self.new_tokens - out.shape[1]), self.eos_token_id)], 1)
        return out


@torch.no_grad()
def sample_continuations(model: CausalLM, tokenizer: Any, prompts: Sequence[str] | None, n: int, *,
                         batch_size: int = 32, fixed_length: bool = False, decoder: str | None = None,
                         target: decoders.Target | None = None, num_candidates: int = 8,
                         anchors: Tensor | None = None) -> tuple[Tensor, list[list[str]]]:
    """``n`` continuations of each prompt (``prompts=None``: one BOS prompt): ids ``(P, n, new_tokens)``, texts.

    ``batch_size`` prompts go to one call (``batch_size * n`` rows; unprompted: ``batch_size`` samples per call).
    ``fixed_length`` forces exactly ``new_tokens`` tokens (no early EOS), as for SGEAT's unprompted samples.
    ``decoder`` (a shared decoder, against ``target``; ``num_candidates``: ``K`` of ``resample``): keep every
    continuation inside the constraint; ``None``: the model's own nucleus sampling.  ``anchors (P, n, new_tokens)``:
    the draws the constrained decoders start from (the plain row's continuations), instead of drawing afresh.
    """
    device = next(model.parameters()).device
    eos, new_tokens = model.eos_token_id, model.new_tokens
    room = context_length(model.lm) - new_tokens  # prompt tokens that fit before the continuation
    if room < 1:
        raise ValueError(f"new_tokens = {new_tokens} leaves no room for a prompt in the model's context of "
                         f"{context_length(model.lm)} tokens; lower it")
    if prompts is None:  # (rows, 1) of BOS, batch_size per call
        calls = []
        for a in range(0, n, batch_size):
            x = torch.full((min(batch_size, n - a), 1), bos_id(tokenizer), dtype=torch.long)
            calls.append(prompt_rows(x, torch.ones_like(x)))
    else:
        texts = list(prompts)
        calls = []
        for a in range(0, len(texts), batch_size):
            enc = tokenizer(texts[a:a + batch_size], return_tensors="pt", padding=True, add_special_tokens=False,
                            truncation=True, max_length=room)
            calls.append(prompt_rows(enc["input_ids"], enc["attention_mask"]).repeat_interleave(n, 0))
    ids, decoded = [], []
    total = n * (1 if prompts is None else len(texts))
    bar = tqdm(calls, desc=f"sampling {total:,} continuations of {new_tokens} tokens", unit="batch", leave=False,
               mininterval=1.0, disable=len(calls) < 2)
    given = None if anchors is None else anchors.reshape(-1, new_tokens)
    done = 0
    for rows in bar:
        rows = rows.to(device)
        if decoder is None:
            out = model.sample(rows, [], min_new_tokens=new_tokens if fixed_length else None)
        else:
            with model.anchored(None if given is None else given[done:done + rows.shape[0]]):
                out = decoders.decode(model, rows, decoder, target, num_candidates=num_candidates).values
        done += rows.shape[0]
        out = cut_at_eos(out, eos)
        ids.append(out.cpu())
        decoded.extend(tokenizer.batch_decode(out, skip_special_tokens=True))
    all_ids = torch.cat(ids).view(-1, n, new_tokens)
    return all_ids, [decoded[i * n:(i + 1) * n] for i in range(all_ids.shape[0])]


@torch.no_grad()
def text_perplexity(model: nn.Module, tokenizer: Any, texts: Sequence[str], *, batch_size: int = 16,
                    processors: Callable[[], list] | None = None) -> float:
    """``exp(mean NLL)`` over all tokens of ``texts`` (each after BOS, cut to the context); ``inf`` if a token gets
    probability 0.  ``processors()``: fresh logits processors for each batch (a sampling decoder's), applied to every
    next-token distribution in order, as decoding with them would."""
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
        if processors is not None:  # the next-token distribution that decoding with them samples from
            procs = processors()
            steps = []
            for t in range(width - 1):
                scores = logits[:, t]
                for p in procs:
                    scores = p(ids[:, :t + 1], scores)
                steps.append(scores)
            logits = torch.stack(steps, 1)
        else:
            logits = logits[:, :-1]
        logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (b, L-1)
        keep = mask[:, 1:].bool()
        total -= logp[keep].sum().item()
        count += int(keep.sum())
    return math.exp(total / count) if math.isfinite(total) else math.inf


@torch.no_grad()
def continuation_perplexity(model: nn.Module, tokenizer: Any, prompts: Sequence[str], ids: Tensor, *,
                            batch_size: int = 64, memo: dict | None = None) -> float:
    """``exp(mean NLL)`` under ``model`` of the tokens of the continuations ``ids (P, G, n)``, each scored after its
    prompt (tokenized as :func:`sample_continuations` does, without padding) and read up to its first EOS.

    The output perplexity of a decoder: with ``model`` the base model, a decoding that breaks the text (rare
    tokens, repetition) scores high however low its toxicity.  ``nan`` when every continuation is empty.
    ``memo``: a dict of the token log-probabilities of (prompt, continuation) pairs scored before under ``model``
    (filled here): a decoding that keeps most of another's continuations scores only the new ones.
    """
    if ids.dim() != 3 or ids.shape[0] != len(prompts):
        raise ValueError(f"ids must be (prompts, continuations, tokens) with {len(prompts)} prompts, got shape "
                         f"{tuple(ids.shape)}")
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    room = context_length(model) - ids.shape[-1]
    encoded = tokenizer(list(prompts), add_special_tokens=False, truncation=True, max_length=room)["input_ids"]
    memo = {} if memo is None else memo
    total, count = 0.0, 0
    for prompt, rows in zip(encoded, ids.tolist()):
        conts = [c[:c.index(eos)] if eos in c else c for c in rows]
        conts = [c for c in conts if c]
        for a in range(0, len(conts), batch_size):
            chunk = conts[a:a + batch_size]
            new = [c for c in dict.fromkeys(map(tuple, chunk)) if (tuple(prompt), c) not in memo]
            if new:
                for key, logp in zip(new, _continuation_log_probs(model, prompt, [list(c) for c in new], pad, device)):
                    memo[(tuple(prompt), key)] = logp
            total -= float(torch.cat([memo[(tuple(prompt), tuple(c))] for c in chunk]).double().sum())
            count += sum(map(len, chunk))
    return math.exp(total / count) if count else math.nan


def _continuation_log_probs(model: nn.Module, prompt: list[int], conts: list[list[int]], pad: int,
                            device: torch.device) -> list[Tensor]:
    """``log p(c_t | prompt, c_<t)`` of each continuation, one batch: a float32 vector per continuation (on CPU)."""
    width = len(prompt) + max(map(len, conts))
    x = torch.tensor([prompt + c + [pad] * (width - len(prompt) - len(c)) for c in conts], device=device)
    mask = torch.tensor([[1] * (len(prompt) + len(c)) + [0] * (width - len(prompt) - len(c)) for c in conts],
                        device=device)
    logp = model(input_ids=x, attention_mask=mask).logits[:, :-1].float().log_softmax(-1)
    logp = logp.gather(-1, x[:, 1:, None]).squeeze(-1)  # (b, width - 1): token t + 1 given tokens <= t
    start = len(prompt) - 1  # the first continuation token's position in logp
    return [logp[i, start:start + len(c)].cpu() for i, c in enumerate(conts)]
