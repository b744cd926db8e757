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
   The common prefix term cancels in the per-position normalisation (as in :mod:`.decoder`).
3. Token log-probabilities are ``h . W[tok] - logsumexp(h W^T)``; the log-sum-exp over the vocabulary runs
   in row chunks inside a custom autograd function (it recomputes the chunk logits in backward), so
   ``(rows, V)`` logits are never held for all neighbours at once.

Vocabulary folding (:class:`ValueMap`).  With a large vocabulary the circuit sees ``D + 1`` values: the
``D`` token ids the constraint distinguishes and one catch-all value ``D`` ("any other token").  Per
position the engine evaluates exactly: the ``D`` distinguished tokens, the sampled token (when it is not
distinguished) and the ``top_k`` most likely other tokens under ``p(. | x, y_<i)``; together the set ``S``.
The mass of the rest ``R = V \\ S`` is ESTIMATED as

    sum_{c in R} p(y^{i<-c}) ~= p(y_<i) * p(R | x, y_<i) * p(y_>i | x, y_<i, r),

with ``r`` the most likely token of ``R`` (one extra neighbour; ``p(R | .)`` is exact, from the full-vocab
softmax of the base run).  The catch-all value gets the exact scores of the non-distinguished tokens of ``S``
plus this estimate; no token is counted twice.  When ``R`` is empty, or holds a single token, the result
equals the exact folded conditionals.  Without a value map the engine is exact over all ``V`` tokens.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .decoder import exact_mode
from .neighbours import check_sample

__all__ = ["CausalLMEngine", "ValueMap", "head_logsumexp"]


class ValueMap:
    """Token ids -> circuit values: ``tokens[v]`` is value ``v``; every other token is the catch-all ``len(tokens)``.

    Example:
        >>> vm = ValueMap([17, 4], vocab_size=50)
        >>> vm.n_values, vm.to_values(torch.tensor([[4, 17, 9]])).tolist()
        (3, [[1, 0, 2]])
    """

    def __init__(self, tokens: Sequence[int], vocab_size: int) -> None:
        toks = [int(t) for t in tokens]
        if len(set(toks)) != len(toks):
            raise ValueError("tokens must be distinct (a token would be counted twice)")
        if any(not 0 <= t < vocab_size for t in toks):
            raise ValueError(f"tokens must lie in 0..{vocab_size - 1}, got {toks}")
        if len(toks) >= vocab_size:
            raise ValueError("a value map must leave at least one token for the catch-all value")
        self.vocab_size = vocab_size
        self.tokens = torch.tensor(toks, dtype=torch.long)
        self.n_values = len(toks) + 1
        self.other = len(toks)
        self.lookup = torch.full((vocab_size,), self.other, dtype=torch.long)
        self.lookup[self.tokens] = torch.arange(len(toks))
        self._copies: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def on(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """``(tokens, lookup)`` on ``device``, copied there once (a copy per call would wait for a GPU each time)."""
        if device not in self._copies:
            self._copies[device] = (self.tokens.to(device), self.lookup.to(device))
        return self._copies[device]

    def to_values(self, token_ids: Tensor) -> Tensor:
        """Circuit values of token ids (any shape)."""
        return self.on(token_ids.device)[1][token_ids]

    def fold(self, log_scores: Tensor) -> Tensor:
        """``(..., V)`` log-scores over tokens -> ``(..., D + 1)``: distinguished tokens, then log-sum-exp of the rest."""
        tokens, lookup = self.on(log_scores.device)
        dist = log_scores[..., tokens]
        rest = log_scores.masked_fill(lookup != self.other, float("-inf"))
        return torch.cat([dist, rest.logsumexp(-1, keepdim=True)], dim=-1)

    def __repr__(self) -> str:
        return f"ValueMap(n_tokens={len(self.tokens)}, vocab_size={self.vocab_size})"


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
    flat = h.reshape(-1, h.shape[-1])
    rows = max(1, max_logits // head.weight.shape[0])
    return _HeadLogSumExp.apply(flat, head.weight, head.bias, rows).view(h.shape[:-1])


def _token_logp(h: Tensor, head: nn.Linear, tokens: Tensor, max_logits: int) -> Tensor:
    """``log softmax(head(h))[tokens]`` for ``h (..., H)``, ``tokens (...)`` without full-vocab log-softmax."""
    w = head.weight[tokens]  # (..., H)
    score = (h * w).sum(-1) + (head.bias[tokens] if head.bias is not None else 0.0)
    return score - head_logsumexp(h, head, max_logits)


class CausalLMEngine:
    """Local conditionals of a causal LM around sampled continuations (see module docs).

    Args:
        model: a Hugging Face causal LM (``model.base_model`` + ``Linear`` ``get_output_embeddings()``).
        prompt_ids: ``(B, P)`` or ``(P,)`` long context, ``P >= 1`` (a BOS token when there is none).
        attention_mask: ``(B, P)`` 0/1 mask of the prompt (left padding); positions follow ``cumsum(mask) - 1``.
        value_map: fold the vocabulary into the circuit's ``D + 1`` values; ``None``: circuit values = token ids.
        top_k: with a value map, the number of most likely non-distinguished tokens evaluated exactly per position.
        max_neighbours_per_chunk: bound on neighbour sequences per forward call (memory budget).
        max_logits: bound on logits held at once in the vocabulary log-sum-exp.
        dropout: keep the model's train mode (stochastic); default evaluates in eval mode (exact).
        recompute: activation-checkpoint every neighbour chunk: backward recomputes one chunk at a time, so the
            activations held between forward and backward are the base run's only (same gradients, ~1 extra
            forward pass of compute).
    """

    def __init__(self, model: nn.Module, prompt_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                 *, value_map: ValueMap | None = None, top_k: int = 0, max_neighbours_per_chunk: int | None = None,
                 max_logits: int = 1 << 22, dropout: bool = False, recompute: bool = False) -> None:
        head = model.get_output_embeddings()
        if not isinstance(head, nn.Linear):
            raise TypeError(f"model.get_output_embeddings() must be an nn.Linear, got {type(head).__name__}")
        self.model, self.head, self.base = model, head, model.base_model
        self.vocab_size = head.weight.shape[0]
        if prompt_ids is None:
            raise ValueError("prompt_ids is required (>= 1 token): the first sampled token is scored from the "
                             "hidden state of the token before it; pass e.g. [[tokenizer.bos_token_id]]")
        prompt_ids = prompt_ids[None] if prompt_ids.dim() == 1 else prompt_ids
        self.prompt_ids = check_sample(prompt_ids, self.vocab_size, "prompt_ids")
        if self.prompt_ids.shape[1] < 1:
            raise ValueError("prompt_ids must hold at least one token (e.g. BOS)")
        if attention_mask is not None and attention_mask.shape != self.prompt_ids.shape:
            raise ValueError(f"attention_mask must have the prompt's shape {tuple(self.prompt_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        self.attention_mask = attention_mask
        if value_map is not None and value_map.vocab_size != self.vocab_size:
            raise ValueError(f"value_map.vocab_size={value_map.vocab_size} differs from the model's {self.vocab_size}")
        if value_map is not None and not 0 <= top_k <= self.vocab_size - value_map.n_values:
            raise ValueError(f"top_k must lie in 0..{self.vocab_size - value_map.n_values} "
                             f"(vocabulary minus distinguished tokens minus the sample), got {top_k}")
        self.value_map, self.top_k = value_map, top_k
        self.chunk, self.max_logits, self.dropout = max_neighbours_per_chunk, max_logits, dropout
        self.recompute = recompute
        self.n_values = value_map.n_values if value_map is not None else self.vocab_size

    # -- helpers ------------------------------------------------------------------------------
    def _context(self, batch: int) -> tuple[Tensor, Tensor]:
        """Prompt ``(B, P)`` and its mask, broadcast to ``batch`` rows (example-major)."""
        p = self.prompt_ids
        m = self.attention_mask if self.attention_mask is not None else torch.ones_like(p)
        if batch % p.shape[0]:
            raise ValueError(f"{batch} sequences cannot be grouped over the {p.shape[0]} prompts")
        r = batch // p.shape[0]
        return p.repeat_interleave(r, 0), m.repeat_interleave(r, 0)

    def circuit_values(self, sample: Tensor) -> Tensor:
        """Token ids -> circuit values (identity without a value map)."""
        return self.value_map.to_values(sample) if self.value_map is not None else sample

    def __call__(self, y: Tensor) -> Tensor:
        """Naive ``log p(y | prompt)``, ``(N,)``: one full forward pass over prompt + ``y`` with full-vocab logits."""
        return self.step_log_probs(y).gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(-1)

    def step_log_probs(self, y: Tensor) -> Tensor:
        """``(N, n, V)`` next-token log-probabilities ``log p(. | x, y_<t)`` for ``t < n`` (``y (N, n)``, rows grouped
        by prompt, example-major); one full forward pass over prompt + ``y``."""
        y = check_sample(y, self.vocab_size, "y")
        prompt, mask = self._context(y.shape[0])
        ids, mask = torch.cat([prompt, y], 1), torch.cat([mask, torch.ones_like(y)], 1)
        with exact_mode(self.model, self.dropout):
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask)).logits
        p = prompt.shape[1]
        return logits[:, p - 1:-1].log_softmax(-1)  # logits at t score token t + 1

    @torch.no_grad()
    def sample(self, length: int, *, temperature: float = 1.0, top_p: float | None = None, greedy: bool = False,
               **generate_kw: Any) -> Tensor:
        """``(B, length)`` detached continuations of the prompts via ``model.generate``."""
        prompt, mask = self._context(self.prompt_ids.shape[0])
        kw = dict(do_sample=not greedy, max_new_tokens=length, min_new_tokens=length,
                  pad_token_id=generate_kw.pop("pad_token_id", 0))
        if not greedy:
            kw.update(temperature=temperature, top_p=top_p if top_p is not None else 1.0, top_k=0)
        out = self.model.generate(input_ids=prompt, attention_mask=mask, **kw, **generate_kw)
        return out[:, prompt.shape[1]:].detach()

    # -- the engine ---------------------------------------------------------------------------
    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None) -> Tensor:
        """``(B, n, n_values)`` log-conditionals in circuit values (token ids without a value map)."""
        sample = check_sample(sample, self.vocab_size)
        b, n = sample.shape
        prompt, pmask = self._context(b)
        P = prompt.shape[1]
        ids, mask = torch.cat([prompt, sample], 1), torch.cat([pmask, torch.ones_like(sample)], 1)
        pos = _positions(mask)
        chunk = chunk_size or self.chunk
        with exact_mode(self.model, self.dropout):
            out = self.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            hid = out.last_hidden_state  # (B, P+n, H)
            kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
            base = self.head(hid[:, P - 1:P + n - 1]).log_softmax(-1)  # (B, n, V): log p(. | x, y_<i)
            cand, valid, rest = self._candidates(sample, base)  # (B, n, K), (B, n, K), (B, n)
            k = cand.shape[-1]
            suffix = [self._suffix(i, sample, cand[:, i], kv, ids, mask, pos, chunk) for i in range(n - 1)]
            suffix.append(base.new_zeros(b, k))
        scores = base.gather(-1, cand) + torch.stack(suffix, 1)  # (B, n, K)
        if self.value_map is None:
            return scores.log_softmax(-1)
        vm = self.value_map
        D = len(vm.tokens)
        scores = torch.cat([scores[..., :-1], (rest + _suffix_of_last(scores, base, cand))[..., None]], -1)
        scores = scores.masked_fill(~valid, float("-inf"))
        folded = torch.cat([scores[..., :D], scores[..., D:].logsumexp(-1, keepdim=True)], -1)
        return folded.log_softmax(-1)

    def _candidates(self, sample: Tensor, base: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Candidate tokens per position, their validity and ``log p(R | x, y_<i)`` of the rest.

        Layout with a value map: ``[D distinguished | sample | top_k others | representative r of R]``.
        """
        b, n, V = base.shape
        if self.value_map is None:
            cand = torch.arange(V, device=sample.device).expand(b, n, V)
            return cand, torch.ones_like(cand, dtype=torch.bool), base.new_full((b, n), float("-inf"))
        vm = self.value_map
        tokens = vm.on(sample.device)[0]
        dist = tokens.expand(b, n, -1)
        is_dist = vm.to_values(sample) != vm.other  # (B, n)
        taken = torch.zeros(b, n, V, dtype=torch.bool, device=sample.device)
        taken[..., tokens] = True
        taken.scatter_(-1, sample[..., None], True)
        others = base.detach().masked_fill(taken, float("-inf")).topk(self.top_k + 1, -1)  # (B, n, top_k + 1)
        top, rep = others.indices[..., :-1], others.indices[..., -1:]
        taken.scatter_(-1, top, True)
        rest = base.masked_fill(taken, float("-inf")).logsumexp(-1)  # (B, n): exact mass of R
        cand = torch.cat([dist, sample[..., None], top, rep], -1)
        valid = torch.cat([torch.ones_like(dist, dtype=torch.bool), ~is_dist[..., None],
                           torch.isfinite(others.values[..., :-1]), torch.isfinite(rest)[..., None]], -1)
        return cand, valid, rest

    def _suffix(self, i: int, y: Tensor, cand: Tensor, kv: list[tuple[Tensor, Tensor]], ids: Tensor,
                mask: Tensor, pos: Tensor, chunk: int | None) -> Tensor:
        """``sum_{j > i} log p(y_j | x, y_<i, c, ..)`` for candidates ``cand (B, K)`` at sample position ``i``: ``(B, K)``."""
        from transformers import DynamicCache

        b, k = cand.shape
        n = y.shape[1]
        P = ids.shape[1] - n
        cut = P + i  # cached prefix: x, y_<i
        inp = torch.cat([cand[..., None], y[:, None, i + 1:n - 1].expand(b, k, n - 2 - i)], -1).reshape(b * k, -1)
        tgt = y[:, None, i + 1:].expand(b, k, n - 1 - i).reshape(b * k, -1)
        row_b = torch.arange(b, device=y.device).repeat_interleave(k)  # example of each neighbour row
        step = chunk or b * k
        out = []
        for a in range(0, b * k, step):
            rb = row_b[a:a + step]

            def run(inp_c: Tensor, tgt_c: Tensor, rb: Tensor = rb) -> Tensor:
                cache = DynamicCache([(key[rb, :, :cut], val[rb, :, :cut]) for key, val in kv])
                h = self.base(input_ids=inp_c, past_key_values=cache, attention_mask=mask[rb, :P + n - 1],
                              position_ids=pos[rb, cut:P + n - 1], use_cache=True).last_hidden_state
                return _token_logp(h, self.head, tgt_c, self.max_logits).sum(-1)

            if self.recompute and torch.is_grad_enabled():
                out.append(checkpoint(run, inp[a:a + step], tgt[a:a + step], use_reentrant=False))
            else:
                out.append(run(inp[a:a + step], tgt[a:a + step]))
        return torch.cat(out).view(b, k)


def _suffix_of_last(scores: Tensor, base: Tensor, cand: Tensor) -> Tensor:
    """Suffix log-likelihood of the representative (last) candidate: its score minus its own prior."""
    return scores[..., -1] - base.gather(-1, cand[..., -1:]).squeeze(-1)


def _positions(mask: Tensor) -> Tensor:
    """Position ids ``cumsum(mask) - 1`` (left padding gets 0), as ``generate`` computes them."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)
