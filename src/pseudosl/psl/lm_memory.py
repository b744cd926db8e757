"""How much of the neighbour work of :class:`~pseudosl.psl.causal_lm.CausalLMEngine` runs at once: a plan within a
memory budget.

At sample position ``i`` of ``n`` the engine runs ``R = B x K`` neighbour rows (``K`` candidates per anchor), each a
suffix of ``s = n - 1 - i`` tokens on a copy of the key/value cache of the ``c = P + i`` tokens before it.  One
row of one position costs about

    cache  = itemsize x L x 2 x kv x (c + s)                        (the copied and extended key/value cache)
    active = itemsize x L x (s (6 H + 2 kv + 5 I) + 2 h (c + s) d + 2 h s (c + s))

(what each layer keeps for backward: per new token the norms, q/k/v and the MLP; the keys and values repeated to
every head, ``d`` wide, over the whole context; the attention weights) for ``L`` layers of width ``H``, MLP width
``I``, ``h`` heads of width ``d`` and key/value width ``kv`` (read from the model's config).  Without autograd a chunk needs ``cache + active`` per row while it runs (nothing is kept).  With autograd
and without recomputation every row's ``active`` is kept until backward; with recomputation (activation
checkpointing per chunk) only the chunk being recomputed is.

The plan (:func:`plan_neighbours`): recompute when keeping every row's activations would exceed the budget;
chunks of at most ``budget / (cache + active)`` rows per position.  Whole sequences (``log_prob``: every token
new, no cache to start from) run in chunks of ``budget / (cache + active)`` rows of their length
(:func:`plan_rows`).  The default budget is a quarter of the memory
free on the device, at most 1 GiB on a CPU: measured on SmolLM2-135M (docs/benchmarks.md, "The PSL on SmolLM2"), a
step's resident peak above the loaded model is the plan plus the parameters' gradients and the base run: 2.24 GiB
at batch 4, window 10 for a 1 GiB plan; ``memory_budget=`` on the engine trades memory for time: a larger budget
means fewer, larger model calls and, when everything fits, no recomputation (about one forward pass less).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..memory import format_bytes, free_bytes

__all__ = ["LMShape", "NeighbourPlan", "plan_neighbours", "plan_rows", "default_budget", "MAX_LENGTH"]

MAX_LENGTH = 1 << 20
"""The longest sample a plan is made for (tokens), for a model that does not state its context: a plan costs a
step per position."""

CPU_BUDGET_CAP = 1 << 30
"""The largest default budget on a CPU (bytes)."""


@dataclass(frozen=True)
class LMShape:
    """A transformer's sizes, as the memory estimate needs them (module docs)."""

    layers: int
    hidden: int
    mlp: int
    heads: int
    kv: int  # key (or value) width per token and layer
    itemsize: int
    head_dim: int = 0  # default: hidden // heads

    @staticmethod
    def of(model: nn.Module, head: nn.Linear) -> LMShape:
        """The sizes of a Hugging Face causal LM from its config; without one (or a field), conservative guesses
        from the head's width and the parameter count."""
        config = getattr(model, "config", None)
        hidden = int(_field(config, "hidden_size", "n_embd") or head.weight.shape[1])
        layers = _field(config, "num_hidden_layers", "n_layer")
        if not layers:  # ~12 H^2 parameters per layer
            params = sum(p.numel() for p in model.parameters()) - head.weight.numel()
            layers = max(1, round(params / (12 * hidden * hidden)))
        heads = int(_field(config, "num_attention_heads", "n_head") or max(1, hidden // 64))
        kv_heads = int(_field(config, "num_key_value_heads") or heads)
        head_dim = int(_field(config, "head_dim") or hidden // heads)
        mlp = int(_field(config, "intermediate_size", "n_inner") or 4 * hidden)
        return LMShape(int(layers), hidden, mlp, heads, kv_heads * head_dim, head.weight.element_size(), head_dim)

    def cache_bytes(self, tokens: int) -> int:
        """Key/value cache of one row of ``tokens`` tokens."""
        return self.itemsize * self.layers * 2 * self.kv * tokens

    def active_bytes(self, suffix: int, context: int) -> int:
        """What one row of ``suffix`` new tokens after ``context`` cached ones keeps for backward."""
        d = self.head_dim or self.hidden // self.heads
        total = context + suffix
        per_layer = (suffix * (6 * self.hidden + 2 * self.kv + 5 * self.mlp) + 2 * self.heads * total * d
                     + 2 * self.heads * suffix * total)
        return self.itemsize * self.layers * per_layer


@dataclass(frozen=True)
class NeighbourPlan:
    """How a ``local_conditionals`` call runs its neighbour rows: ``chunks[i]`` rows per model call at position
    ``i``, ``recompute`` (activation checkpointing per chunk), and the estimated peak bytes of that work."""

    rows: int  # neighbour rows per position (B x K)
    chunks: tuple[int, ...]
    recompute: bool
    grad: bool
    peak: int
    budget: int

    def __str__(self) -> str:
        sizes = sorted(set(self.chunks)) or [0]
        size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        mode = ("recomputation on (backward recomputes one chunk at a time)" if self.recompute
                else "no recomputation" if self.grad else "without autograd")
        return (f"{self.rows} neighbour rows per position in chunks of {size} rows, {mode}; estimated peak "
                f"{format_bytes(self.peak)} within a budget of {format_bytes(self.budget)}")


def default_budget(device: torch.device) -> int:
    """A quarter of the memory free on ``device``, at most :data:`CPU_BUDGET_CAP` on a CPU (256 MiB where
    unknown)."""
    free = free_bytes(device)
    if free is None:
        return 256 << 20
    budget = free // 4
    return min(budget, CPU_BUDGET_CAP) if device.type == "cpu" else budget


def plan_neighbours(shape: LMShape, *, rows: int, prompt: int, length: int, grad: bool, budget: int,
                    chunk: int | None = None, recompute: bool | None = None) -> NeighbourPlan:
    """The plan for ``rows`` neighbour rows per position of a sample of ``length`` tokens after ``prompt`` (module
    docs); ``chunk`` / ``recompute`` given by the caller are kept."""
    cost = [(shape.cache_bytes(prompt + length - 1), shape.active_bytes(length - 1 - i, prompt + i))
            for i in range(length - 1)]
    if chunk is not None:
        chunks = tuple(min(chunk, rows) for _ in cost)
    else:
        chunks = tuple(max(1, min(rows, budget // max(1, cache + active))) for cache, active in cost)
    one_chunk = max((c * (cache + active) for c, (cache, active) in zip(chunks, cost)), default=0)
    kept = sum(rows * active for _, active in cost) + max((c * cache for c, (cache, _) in zip(chunks, cost)), default=0)
    if recompute is None:
        recompute = kept > budget
    recompute = bool(recompute and grad)
    peak = kept if grad and not recompute else one_chunk
    return NeighbourPlan(rows, chunks, recompute, grad, int(peak), int(budget))


def plan_rows(shape: LMShape, *, tokens: int, budget: int) -> int:
    """Rows of ``tokens`` new tokens each (whole sequences after their prompt, no cache) per model call within
    ``budget`` bytes: ``budget / (cache + active)``, one at least."""
    return max(1, budget // (shape.cache_bytes(tokens) + shape.active_bytes(tokens, 0)))


def _field(config: object, *names: str) -> object:
    for name in names:
        value = getattr(config, name, None)
        if value:
            return value
    return None

