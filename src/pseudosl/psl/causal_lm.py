"""Local conditionals of a Hugging Face causal LM with key/value-cache reuse, and vocabulary folding.

:class:`CausalLMEngine` wraps any ``AutoModelForCausalLM`` whose logits are ``head(last_hidden_state)``
for a ``Linear`` head (``model.get_output_embeddings()``) on top of ``model.base_model`` -- GPT-2, Llama,
Mistral, Qwen ... (models with logit soft-capping or scaling are not supported).  For prompt ``x`` of
length ``P`` and sample ``y`` of length ``n`` (positions ``P .. P+n-1`` of the full sequence):

1. ``x + y`` runs once with ``use_cache=True``.  The hidden state at full position ``t`` scores token
   ``t + 1``: ``log p(y_i = c | x, y_<i) = log_softmax(head(h[P + i - 1]))[c]`` (hence ``P >= 1``:
   pass a BOS token as prompt when there is no context).
2. For position ``i`` the neighbours ``(c, y_{i+1}, .., y_{n-2})`` of all candidates ``c`` run as one batch
   on the cache truncated to ``P + i`` tokens and repeated per candidate; they score ``y_{i+1} .. y_{n-1}``.
   The common prefix term cancels in the per-position normalisation (as in :mod:`.recurrent`).
3. Token log-probabilities are ``h . W[tok] - logsumexp(h W^T)``; the log-sum-exp over the vocabulary runs
   in row chunks inside a custom autograd function (it recomputes the chunk logits in backward), so
   ``(rows, V)`` logits are never held for all neighbours at once.

Vocabulary folding (:class:`ValueMap`).  With a large vocabulary the circuit sees the ``K`` classes of a partition
of the vocabulary (``D`` distinguished tokens and one catch-all value, or any partition, as
``pseudosl.no_forbidden_words`` makes).  Per position the engine scores exactly the sampled token, the
``top_k_distinguished`` most likely tokens of the classes of at most ``max_class_size`` tokens (default: every one)
and the ``top_k`` most likely of each larger class; the mass of each class's rest is ESTIMATED as

    sum_{c in R} p(y^{i<-c}) ~= p(y_<i) * p(R | x, y_<i) * p(y_>i | x, y_<i, r),

``p(R | .)`` exact (the full-vocab softmax of the base run), ``r`` the most likely token of the rest (one extra
neighbour per larger class, one shared by the small classes): :mod:`.folded_neighbours` states the sets, the
estimator and the neighbour rows per position (``engine.n_candidates``, at most ``V + 1``).  When every rest holds
at most one token the result equals the exact folded conditionals.  A catch-all map with the default
``max_class_size=1`` is ``D`` small classes and one large one: ``D + top_k + 2`` rows, the ``D`` distinguished
tokens exact and the rest of the catch-all estimated; with ``top_k_distinguished=k_D``, ``k_D + top_k + 3`` rows
(the paper's construction).  Without a value map the engine is exact over all ``V`` tokens, or over the tokens
``0 .. n_values-1`` (``n_values=``: a small model whose vocabulary adds a BOS token after its values).

Rows carry their example ids (:mod:`pseudosl.psl.engine`): row ``r`` is scored after prompt ``example[r]``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .. import checks
from ..checks import check_bool, check_candidates, check_int, check_positions, check_sample
from ..memory import check_budget, release_freed_cpu_memory
from ..tokens.value_map import ValueMap
from .engine import Engine, LogitsHook, exact_mode
from .folded_neighbours import FoldedNeighbours
from .lm_memory import MAX_LENGTH, LMShape, NeighbourPlan, default_budget, plan_neighbours, plan_rows
from .sampling import sample_from_logits

__all__ = ["CausalLMEngine", "head_logsumexp"]


class _HeadLogSumExp(torch.autograd.Function):
    """``logsumexp(h W^T + b, -1)`` over row chunks; backward recomputes each chunk's softmax."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, rows: int) -> Tensor:  # h (N, H)
        out = h.new_empty(h.shape[0])
        for a in range(0, h.shape[0], rows):
            logits = h[a:a + rows] @ weight.t()
            if bias is not None:
                logits = logits + bias
            out[a:a + rows] = logits.logsumexp(-1)
        ctx.rows = rows
        ctx.save_for_backward(h, weight, bias, out)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        h, weight, bias, out = ctx.saved_tensors
        gh, gw = torch.empty_like(h), torch.zeros_like(weight)
        gb = torch.zeros_like(bias) if bias is not None else None
        for a in range(0, h.shape[0], ctx.rows):
            logits = h[a:a + ctx.rows] @ weight.t()
            if bias is not None:
                logits = logits + bias
            p = torch.exp(logits - out[a:a + ctx.rows, None]) * g[a:a + ctx.rows, None]  # (r, V)
            gh[a:a + ctx.rows] = p @ weight
            gw += p.t() @ h[a:a + ctx.rows]
            if gb is not None:
                gb += p.sum(0)
        return gh, gw, gb, None


def head_logsumexp(h: Tensor, head: nn.Linear, max_logits: int = 1 << 22) -> Tensor:
    """``logsumexp(head(h), -1)`` for ``h (..., H)`` holding at most ``max_logits`` logits at a time."""
    max_logits = check_int("max_logits", max_logits, 1, " (the most logits held at once)")
    flat = h.reshape(-1, h.shape[-1])
    rows = max(1, max_logits // head.weight.shape[0])
    return _HeadLogSumExp.apply(flat, head.weight, head.bias, rows).view(h.shape[:-1])


def _token_logp(h: Tensor, head: nn.Linear, tokens: Tensor, max_logits: int) -> Tensor:
    """``log softmax(head(h))[tokens]`` for ``h (..., H)``, ``tokens (...)`` without full-vocab log-softmax."""
    w = head.weight[tokens]  # (..., H)
    score = (h * w).sum(-1) + (head.bias[tokens] if head.bias is not None else 0.0)
    return score - head_logsumexp(h, head, max_logits)


class CausalLMEngine(Engine):
    """Local conditionals of a causal LM around sampled continuations (see module docs).

    Args:
        model: a Hugging Face causal LM (``model.base_model`` + ``Linear`` ``get_output_embeddings()``).
        prompt_ids: ``(E, P)`` or ``(P,)`` long context, ``P >= 1`` (a BOS token when there is none); the engine
            is bound to these ``E`` prompts (one prompt: shared by every row).
        attention_mask: ``(E, P)`` 0/1 (bool, integer or float) mask of the prompt, 1 on real tokens, padded on any
            side (a tokenizer's right padding too): the engine moves each row's padding to its left, so the
            sequence continues right after the last real token; positions follow ``cumsum(mask) - 1``.  Other
            values, a row without a real token and another shape are refused by name.
        value_map: fold the vocabulary into the circuit's values (its classes); ``None``: circuit values = token ids.
        n_values: without a value map, the circuit's values are the token ids ``0 .. n_values-1`` (default: the
            whole vocabulary): the conditionals are over those tokens only, samples draw only those tokens (the
            others masked, e.g. a BOS token placed after them), and anchors must use only those tokens.
        top_k: with a value map, the number of most likely tokens of each large class (the sample aside) evaluated
            exactly per position; at most the largest large class's size minus 1 (the paper's "top-10 good words").
        max_class_size: with a value map, the classes of at most this many tokens (>= 1) are small: their tokens are
            the distinguished ones; every larger class gets ``top_k`` exact tokens and an estimate of its rest.
        top_k_distinguished: with a value map, the number of most likely distinguished tokens (the sample aside)
            evaluated exactly per position, the rest of each small class estimated (the paper's "top-470 toxic
            words"); at most ``D - 1`` for ``D`` distinguished tokens; ``None`` (default): all ``D`` exact.
        memory_budget: bytes the neighbour work may take at once (default: a quarter of the memory free on the
            device, at most 1 GiB on a CPU); the engine picks its chunks and recomputation within it
            (:mod:`.lm_memory`; :meth:`memory_plan` says what it chose).  Larger: fewer model calls and no
            recomputation when everything fits; smaller: less memory, more calls.
        chunk_size: neighbour rows per model call (the default of :meth:`local_conditionals`' ``chunk_size``);
            default: planned within ``memory_budget``.
        max_logits: the most logits held at once in the vocabulary log-sum-exp (an int >= 1).
        dropout: keep the model's train mode (stochastic); default evaluates in eval mode (exact).
        recompute: activation-checkpoint every neighbour chunk: backward recomputes one chunk at a time, so the
            activations held between forward and backward are the base run's only (same gradients, ~1 extra
            forward pass of compute); default: on when keeping every chunk's activations would exceed
            ``memory_budget``.

    A prompt plus a sequence longer than the model's context (``config.n_positions`` /
    ``max_position_embeddings``) is refused before the model runs.
    """

    autoregressive = True

    def __init__(self, model: nn.Module, prompt_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                 *, value_map: ValueMap | None = None, n_values: int | None = None, top_k: int = 0,
                 max_class_size: int = 1, top_k_distinguished: int | None = None,
                 memory_budget: int | None = None, chunk_size: int | None = None,
                 max_logits: int = 1 << 22, dropout: bool = False, recompute: bool | None = None) -> None:
        head = model.get_output_embeddings()
        if not isinstance(head, nn.Linear):
            raise TypeError(f"model.get_output_embeddings() must be an nn.Linear, got {type(head).__name__}")
        self.model, self.head, self.base = model, head, model.base_model
        self.vocab_size = head.weight.shape[0]
        if prompt_ids is None:
            raise ValueError("prompt_ids is required (>= 1 token): the first sampled token is scored from the "
                             "hidden state of the token before it; pass e.g. [[tokenizer.bos_token_id]]")
        if not isinstance(prompt_ids, Tensor):
            raise TypeError(f"prompt_ids must be a long tensor (E, P), got {type(prompt_ids).__name__}")
        prompt_ids = prompt_ids[None] if prompt_ids.dim() == 1 else prompt_ids
        self.prompt_ids = check_sample(prompt_ids, self.vocab_size, "prompt_ids")
        if self.prompt_ids.shape[1] < 1:
            raise ValueError("prompt_ids must hold at least one token (e.g. BOS)")
        self.prompt_ids, self.attention_mask = _left_padded(self.prompt_ids, attention_mask)
        self.n_examples = self.prompt_ids.shape[0]
        if value_map is not None and value_map.vocab_size != self.vocab_size:
            raise ValueError(f"value_map.vocab_size={value_map.vocab_size} differs from the model's {self.vocab_size}")
        if value_map is not None and n_values is not None:
            raise ValueError("pass value_map (folded tokens) or n_values (tokens 0..n_values-1), not both")
        if value_map is None and top_k != 0:
            raise ValueError(f"top_k={top_k!r} applies with a value_map (the most likely tokens of its large classes); "
                             "without one every token is scored exactly: leave top_k=0")
        if value_map is None and top_k_distinguished is not None:
            raise ValueError(f"top_k_distinguished={top_k_distinguished!r} applies with a value_map (the distinguished "
                             "tokens are its small classes); without one every token is scored exactly")
        self.value_map, self.top_k = value_map, check_int("top_k", top_k, low=0)
        self.max_class_size = check_int("max_class_size", max_class_size, low=1)
        self.top_k_distinguished = top_k_distinguished
        self._folding = None if value_map is None else FoldedNeighbours(
            value_map, top_k=top_k, max_class_size=max_class_size, top_k_distinguished=top_k_distinguished)
        if self._folding is not None:
            self.n_candidates = self._folding.n_candidates  # neighbour rows per position
        self.chunk_size = _check_chunk_size(chunk_size)
        self.memory_budget = check_budget(memory_budget, "CausalLMEngine(memory_budget=)",
                                          "a quarter of the memory free on the device, at most 1 GiB on a CPU")
        self.recompute = check_bool("recompute", recompute, none="planned within memory_budget")
        self.dropout = check_bool("dropout", dropout)
        self.max_logits = check_int("max_logits", max_logits, 1, " (the most logits held at once)")
        self._shape = LMShape.of(model, head)
        if value_map is not None:
            self.n_values = value_map.n_values
        elif n_values is not None:
            self.n_values = check_int("n_values", n_values, 2)
            if self.n_values > self.vocab_size:
                raise ValueError(f"n_values={n_values} exceeds the model's vocabulary of {self.vocab_size} tokens")
        else:
            self.n_values = self.vocab_size
        config = getattr(model, "config", None)
        self.max_positions = (getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None))

    # -- helpers ------------------------------------------------------------------------------
    def _prompts(self, example: Tensor) -> tuple[Tensor, Tensor]:
        """The prompt and its mask of each row's example: ``(N, P)`` each."""
        return self.prompt_ids[example], self.attention_mask[example]

    def _check_length(self, n: int) -> None:
        """Refuse, before the model runs, a prompt plus ``n`` tokens longer than the model's context."""
        total = self.prompt_ids.shape[1] + n
        if self.max_positions is not None and total > self.max_positions:
            raise ValueError(f"the prompt ({self.prompt_ids.shape[1]} tokens) and a sequence of {n} tokens need "
                             f"{total} positions but the model has {self.max_positions} (config.n_positions / "
                             "max_position_embeddings); use shorter sequences or a shorter prompt")

    def memory_plan(self, batch_size: int, length: int, *, grad: bool = True, chunk_size: int | None = None,
                    candidates: int | None = None) -> NeighbourPlan:
        """How :meth:`local_conditionals` runs ``batch_size`` anchors of ``length`` tokens (``grad``: with autograd;
        ``chunk_size``: rows per model call, default the engine's or planned; ``candidates``: values per position,
        default every one): chunk sizes, recomputation and the estimated peak of the neighbour work
        (:mod:`.lm_memory`); ``str()`` of the plan says it in words.  Each argument is checked by name; ``length``
        within the model's context (at most :data:`~.lm_memory.MAX_LENGTH` tokens for a model without one)."""
        batch_size = check_int("batch_size", batch_size, 0)
        length = check_int("length", length, 1, high=MAX_LENGTH)
        self._check_length(length)
        grad, chunk_size = check_bool("grad", grad), _check_chunk_size(chunk_size)
        k = self.n_candidates if self._folding is not None else self.n_values
        k = k if candidates is None else check_int("candidates", candidates, 1, high=k)
        return plan_neighbours(self._shape, rows=batch_size * k, prompt=self.prompt_ids.shape[1], length=length,
                               grad=grad, budget=self._budget(),
                               chunk=chunk_size if chunk_size is not None else self.chunk_size,
                               recompute=self.recompute)

    def _budget(self) -> int:
        """``memory_budget``, or the default for the engine's device."""
        return self.memory_budget or default_budget(self.prompt_ids.device)

    def _restricted(self) -> bool:
        """Circuit values are the token ids ``0 .. n_values-1`` of a larger vocabulary (no value map)."""
        return self.value_map is None and self.n_values < self.vocab_size

    def _scoring_states(self, y: Tensor, example: Tensor) -> tuple[Tensor, Tensor]:
        """``(y, h)``: the checked sample and the ``(N, n, H)`` hidden states that score its tokens (the state at full
        position ``t`` scores token ``t + 1``), from one forward pass over prompt + ``y``."""
        y = check_sample(y, self.vocab_size, "y")
        example = self.check_example(example, y.shape[0])
        self._check_length(y.shape[1])
        prompt, mask = self._prompts(example)
        ids, mask = torch.cat([prompt, y], 1), torch.cat([mask, torch.ones_like(y)], 1)
        with exact_mode(self.model, self.dropout):
            h = self.base(input_ids=ids, attention_mask=mask, position_ids=_positions(mask)).last_hidden_state
        return y, h[:, prompt.shape[1] - 1:-1]

    def log_joint(self, y: Tensor, example: Tensor) -> Tensor:
        """Naive ``log p(y | prompt)``, ``(N,)``: one forward pass over prompt + ``y`` (the vocabulary's log-sum-exp in
        chunks of ``max_logits``)."""
        y, h = self._scoring_states(y, example)
        return _token_logp(h, self.head, y, self.max_logits).sum(-1)

    def log_prob(self, sequences: Tensor, *, chunk_size: int | None = None) -> Tensor:
        """As :meth:`Engine.log_prob`; by default in chunks of rows planned within ``memory_budget``
        (:func:`~.lm_memory.plan_rows`)."""
        if chunk_size is None and isinstance(sequences, Tensor) and sequences.dim() == 3:
            chunk_size = plan_rows(self._shape, tokens=self.prompt_ids.shape[1] + sequences.shape[-1],
                                   budget=self._budget())
        return super().log_prob(sequences, chunk_size=chunk_size)

    def step_log_probs(self, y: Tensor, example: Tensor) -> Tensor:
        """``(N, n, V)`` next-token log-probabilities ``log p(. | x, y_<t)`` for ``t < n`` (``y (N, n)``, ``example (N,)``);
        one full forward pass over prompt + ``y``."""
        _, h = self._scoring_states(y, example)
        return self.head(h).log_softmax(-1)

    @torch.no_grad()
    def sample(self, example: Tensor | None = None, *, batch_size: int | None = None, length: int | None = None,
               temperature: float = 1.0, top_p: float | None = None, greedy: bool = False,
               generator: torch.Generator | None = None, logits_processor: LogitsHook | None = None) -> Tensor:
        """``(N, length)`` ancestral samples of the prompts' continuations, token by token on the key/value cache.

        Exact samples of ``p`` (no token is banned, none ends the sequence early), except that with
        ``n_values`` < vocabulary only the tokens ``0 .. n_values-1`` are drawn (the others masked at each step),
        and that ``logits_processor`` (:meth:`Engine.sample`) rewrites each step's logits.
        """
        n = self.sample_length(length)
        self._check_length(n)
        device = self.prompt_ids.device
        example = self.draw_ids(example, batch_size, device)
        out = torch.zeros(example.shape[0], 0, dtype=torch.long, device=device)
        if example.shape[0] == 0:
            return out.new_zeros(0, n)
        ids, mask = self._prompts(example)
        with exact_mode(self.model, self.dropout):
            step = self.model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=True)
            for t in range(n):
                logits = step.logits[:, -1]
                if self._restricted():
                    logits = logits.masked_fill(torch.arange(self.vocab_size, device=device) >= self.n_values,
                                                float("-inf"))
                if logits_processor is not None:
                    logits = logits_processor(out, logits)
                tok = sample_from_logits(logits, temperature=temperature, top_p=top_p, greedy=greedy,
                                         generator=generator).to(device)[:, None]
                out = torch.cat([out, tok], 1)
                if t == n - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(tok)], 1)
                step = self.model(input_ids=tok, attention_mask=mask, position_ids=mask.sum(-1, keepdim=True) - 1,
                                  use_cache=True, **_cache_kwarg(self.model, _kv_cache(step)))
        return out

    # -- the engine ---------------------------------------------------------------------------
    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None,
                           candidates: Tensor | None = None, positions: Tensor | None = None,
                           fill: float = 0.0) -> Tensor:
        """``(B, n, K)`` log-conditionals in circuit values (token ids without a value map; the ``D + 1`` folded
        values with one).  ``positions`` leaves positions out of the result (``fill``), not out of the work."""
        sample = check_sample(sample, self.vocab_size if self.value_map is not None else self.n_values)
        b, n = sample.shape
        chunk_size = _check_chunk_size(chunk_size)
        if candidates is not None and self.value_map is not None:
            raise ValueError("candidates= applies to engines without a value map (the folded values are fixed)")
        pos = check_positions(positions, b, n, sample.device)
        given = None if self.value_map is not None else check_candidates(candidates, b, n, self.n_values, sample.device)
        self._check_length(n)
        prompt, pmask = self._prompts(self.example_ids(b, sample.device))
        P = prompt.shape[1]
        ids, mask = torch.cat([prompt, sample], 1), torch.cat([pmask, torch.ones_like(sample)], 1)
        position_ids = _positions(mask)
        with exact_mode(self.model, self.dropout):
            out = self.base(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True)
            hid = out.last_hidden_state  # (B, P+n, H)
            kv = [(layer.keys, layer.values) for layer in _kv_cache(out).layers]
            base = self.head(hid[:, P - 1:P + n - 1]).log_softmax(-1)  # (B, n, V): log p(. | x, y_<i)
            folded = None if self._folding is None else self._folding.candidates(sample, base, self.max_logits)
            cand = given if folded is None else folded.tokens  # (B, n, K)
            k = cand.shape[-1]
            plan = self.memory_plan(b, n, grad=torch.is_grad_enabled(), chunk_size=chunk_size, candidates=k)
            suffix = [self._suffix(i, sample, cand[:, i], kv, ids, mask, position_ids, plan.chunks[i], plan.recompute)
                      for i in range(n - 1)]
            suffix.append(base.new_zeros(b, k))
        scores = base.gather(-1, cand) + torch.stack(suffix, 1)  # (B, n, K)
        if folded is None:
            result = scores.log_softmax(-1)
        else:
            result = self._folding.fold(scores, base, folded).log_softmax(-1)
        if pos is None:
            return result
        return torch.where(pos[..., None], result, torch.full_like(result, fill))

    def _suffix(self, i: int, y: Tensor, cand: Tensor, kv: list[tuple[Tensor, Tensor]], ids: Tensor,
                mask: Tensor, pos: Tensor, step: int, recompute: bool) -> Tensor:
        """``sum_{j > i} log p(y_j | x, y_<i, c, ..)`` for candidates ``cand (B, K)`` at sample position ``i``: ``(B, K)``."""
        from transformers import DynamicCache

        b, k = cand.shape
        n = y.shape[1]
        P = ids.shape[1] - n
        cut = P + i  # cached prefix: x, y_<i
        inp = torch.cat([cand[..., None], y[:, None, i + 1:n - 1].expand(b, k, n - 2 - i)], -1).reshape(b * k, -1)
        tgt = y[:, None, i + 1:].expand(b, k, n - 1 - i).reshape(b * k, -1)
        row_b = torch.arange(b, device=y.device).repeat_interleave(k)  # example of each neighbour row
        out = []
        for a in range(0, b * k, step):
            rb = row_b[a:a + step]

            def run(inp_c: Tensor, tgt_c: Tensor, rb: Tensor = rb) -> Tensor:
                if inp_c.device.type == "cpu":  # the previous chunk's freed blocks back to the system (forward and
                    release_freed_cpu_memory()  # the recomputation in backward), or resident memory keeps growing
                cache = DynamicCache([(key[rb, :, :cut], val[rb, :, :cut]) for key, val in kv])
                h = self.base(input_ids=inp_c, attention_mask=mask[rb, :P + n - 1], position_ids=pos[rb, cut:P + n - 1],
                              use_cache=True, **_cache_kwarg(self.base, cache)).last_hidden_state
                return _token_logp(h, self.head, tgt_c, self.max_logits).sum(-1)

            if recompute:
                out.append(checkpoint(run, inp[a:a + step], tgt[a:a + step], use_reentrant=False))
            else:
                out.append(run(inp[a:a + step], tgt[a:a + step]))
        return torch.cat(out).view(b, k)


def _check_chunk_size(chunk_size: object) -> int | None:
    """``chunk_size`` (neighbour rows per model call) as an int >= 1, or None (planned within ``memory_budget``)."""
    return None if chunk_size is None else check_int("chunk_size", chunk_size, 1,
                                                     " (rows per model call; or None: planned within memory_budget)")


def _left_padded(prompt_ids: Tensor, attention_mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The prompts and their long 0/1 mask with each row's padding moved to its left (real tokens keep their order):
    right, mixed and left padding all become left padding, so a continuation follows the last real token."""
    if attention_mask is None:
        return prompt_ids, torch.ones_like(prompt_ids)
    if not isinstance(attention_mask, Tensor) or attention_mask.is_complex():
        got = attention_mask.dtype if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise TypeError(f"attention_mask must be a bool, integer or float tensor of 0/1 (1 on real tokens), got {got}")
    if attention_mask.shape != prompt_ids.shape:
        raise ValueError(f"attention_mask must have the prompt's shape {tuple(prompt_ids.shape)}, "
                         f"got {tuple(attention_mask.shape)}")
    if attention_mask.numel() and checks.reads_values(attention_mask):
        bad = (attention_mask != 0) & (attention_mask != 1)
        if bad.any():
            r, c = (int(v) for v in bad.nonzero()[0])
            raise ValueError("attention_mask must hold 0 (padding) or 1 (a real token); got "
                             f"{attention_mask[r, c].item()} at row {r}, column {c}")
        empty = (attention_mask == 0).all(-1)
        if empty.any():
            raise ValueError(f"attention_mask row {int(empty.nonzero()[0, 0])} has no real token (all 0): every prompt "
                             "needs at least one (e.g. BOS)")
    mask = attention_mask.to(device=prompt_ids.device, dtype=torch.long)
    order = mask.argsort(dim=-1, stable=True)  # padding (0) first, the real tokens (1) after it in their order
    return prompt_ids.gather(-1, order), mask.gather(-1, order)


def _positions(mask: Tensor) -> Tensor:
    """Position ids ``cumsum(mask) - 1`` (left padding gets 0), as ``generate`` computes them."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _cache_kwarg(module: nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``module``'s forward: transformers 5.2x takes the KV cache as ``cache`` and deprecates
    ``past_key_values`` (the name of earlier versions)."""
    takes_cache = "cache" in inspect.signature(module.forward).parameters
    return {"cache" if takes_cache else "past_key_values": cache}


def _kv_cache(output: Any) -> Any:
    """The KV cache of a model output: ``output.cache`` (transformers 5.2x) or ``output.past_key_values``."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
