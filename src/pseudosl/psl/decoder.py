"""An autoregressive recurrent decoder (the model of the Sudoku and Warcraft experiments).

:class:`RecurrentDecoder` models ``p(y | x) = prod_t p(y_t | y_{<t}, x)`` over ``n`` positions with
``k`` values.  The input at step ``t`` is ``[one_hot(y_{t-1}) (zeros at t = 0), step_inputs[:, t]]``
(size ``k + step_dim``); the context ``x (B, context_dim)`` sets the initial hidden (and cell) state of
every layer through a ``Linear``; a ``Linear(hidden, k)`` head scores ``y_t``.

``decoder.engine(context, step_inputs)`` (= ``pseudosl.as_engine(decoder, context=..., step_inputs=...)``)
is its :class:`~pseudosl.psl.recurrent.RecurrentEngine`: exact local conditionals with prefix reuse
(:mod:`pseudosl.psl.recurrent`), through :class:`DecoderSteps`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from .. import memory
from ..checks import check_int, check_sample
from .engine import trainable_recurrence
from .recurrent import RecurrentEngine, RecurrentSteps, State

__all__ = ["RecurrentDecoder", "DecoderSteps"]


class RecurrentDecoder(nn.Module):
    """Autoregressive RNN / LSTM / GRU over ``length`` positions with ``n_values`` values (see module docs).

    Example:
        >>> dec = RecurrentDecoder(n_values=9, length=81, hidden_size=128, num_layers=5, cell="rnn", dropout=0.2)
        >>> y = dec.sample(batch_size=2)                      # (2, 81) long
        >>> dec.log_joint(y).shape
        torch.Size([2])
    """

    def __init__(self, n_values: int, length: int, hidden_size: int, num_layers: int = 1,
                 cell: Literal["rnn", "lstm", "gru"] = "lstm", nonlinearity: str = "tanh", dropout: float = 0.0,
                 context_dim: int | None = None, step_dim: int = 0) -> None:
        super().__init__()
        n_values, length = check_int("n_values", n_values, 2), check_int("length", length, 1)
        hidden_size, num_layers = check_int("hidden_size", hidden_size, 1), check_int("num_layers", num_layers, 1)
        step_dim = check_int("step_dim", step_dim, 0)
        context_dim = None if context_dim is None else check_int("context_dim", context_dim, 1,
                                                                   " (or None for no context)")
        if cell not in ("rnn", "lstm", "gru"):
            raise ValueError(f"cell must be 'rnn', 'lstm' or 'gru', got {cell!r}")
        if cell != "rnn" and nonlinearity != "tanh":
            raise ValueError(f"nonlinearity={nonlinearity!r} applies to cell='rnn' only (LSTM/GRU use tanh/sigmoid)")
        self.n_values, self.length, self.hidden_size, self.num_layers = n_values, length, hidden_size, num_layers
        self.cell, self.context_dim, self.step_dim = cell, context_dim, step_dim
        kw = dict(input_size=n_values + step_dim, hidden_size=hidden_size, num_layers=num_layers,
                  batch_first=True, dropout=dropout if num_layers > 1 else 0.0)
        if cell == "rnn":
            self.rnn: nn.RNNBase = nn.RNN(nonlinearity=nonlinearity, **kw)
        else:
            self.rnn = nn.LSTM(**kw) if cell == "lstm" else nn.GRU(**kw)
        n_state = 2 if cell == "lstm" else 1
        self.init = nn.Linear(context_dim, n_state * num_layers * hidden_size) if context_dim else None
        self.head = nn.Linear(hidden_size, n_values)

    # -- pieces ------------------------------------------------------------------------
    def initial_state(self, context: Tensor | None, batch: int) -> State:
        """``(L, B, H)`` initial hidden state (a pair for LSTM): ``Linear(context)`` or zeros."""
        L, H = self.num_layers, self.hidden_size
        p = self.head.weight
        if context is None:
            if self.init is not None:
                raise ValueError(f"this decoder has context_dim={self.context_dim}: pass context (B, {self.context_dim})")
            h = p.new_zeros(L, batch, H)
            return (h, h.clone()) if self.cell == "lstm" else h
        if self.init is None:
            raise ValueError("this decoder was built without context_dim; pass context=None")
        if context.dim() != 2 or context.shape != (batch, self.context_dim):
            raise ValueError(f"context must have shape ({batch}, {self.context_dim}); got {tuple(context.shape)}")
        s = self.init(context).view(batch, -1, L, H).permute(1, 2, 0, 3)  # (n_state, L, B, H)
        return (s[0].contiguous(), s[1].contiguous()) if self.cell == "lstm" else s[0].contiguous()

    def inputs(self, y: Tensor, step_inputs: Tensor | None = None) -> Tensor:
        """Teacher-forced inputs ``(B, n, k + step_dim)``: previous value one-hot (zeros at t = 0) and step inputs."""
        b, n = y.shape
        prev = _one_hot(y[:, :-1], self.n_values, self.head.weight.dtype)
        prev = torch.cat([prev.new_zeros(b, 1, self.n_values), prev], dim=1)
        return self._with_steps(prev, step_inputs, 0)

    def _with_steps(self, x: Tensor, step_inputs: Tensor | None, offset: int) -> Tensor:
        if self.step_dim == 0:
            if step_inputs is not None:
                raise ValueError("this decoder has step_dim=0; pass step_inputs=None")
            return x
        if step_inputs is None or step_inputs.dim() != 3 or step_inputs.shape[-1] != self.step_dim:
            raise ValueError(f"step_inputs must have shape (B, n, {self.step_dim}); "
                             f"got {None if step_inputs is None else tuple(step_inputs.shape)}")
        return torch.cat([x, step_inputs[:, offset:offset + x.shape[1]].to(x.dtype)], dim=-1)

    # -- scoring ---------------------------------------------------------------------------
    def step_logits(self, y: Tensor, context: Tensor | None = None, step_inputs: Tensor | None = None) -> Tensor:
        """Teacher-forced logits ``(B, n, k)``: ``logits[:, t]`` scores ``y_t`` given ``y_{<t}``."""
        y = check_sample(y, self.n_values, "y")
        with trainable_recurrence(self):  # an eval-mode decoder stays backprop-able on cuDNN
            out, _ = self.rnn(self.inputs(y, step_inputs), self.initial_state(context, y.shape[0]))
        return self.head(out)

    def log_joint(self, y: Tensor, context: Tensor | None = None, step_inputs: Tensor | None = None) -> Tensor:
        """``log p(y | context)``: ``(B,)``."""
        logp = self.step_logits(y, context, step_inputs).log_softmax(-1)
        return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(-1)

    @torch.no_grad()
    def sample(self, context: Tensor | None = None, step_inputs: Tensor | None = None, *,
               batch_size: int | None = None, temperature: float = 1.0, top_p: float | None = None,
               greedy: bool = False, generator: torch.Generator | None = None,
               fixed: Tensor | None = None) -> Tensor:
        """Ancestral sampling: ``(B, n)`` detached long, by its engine (:meth:`RecurrentEngine.sample`): in eval mode
        (dropout off) whatever the module's mode, which is restored -- the distribution whose conditionals the
        engine computes, so a PSL anchor drawn here is a sample of it.

        ``fixed`` ``(B, n)`` clamps positions to known values (``-1`` = free): a fixed position is
        not sampled and the following steps condition on its value, as a solver keeps its givens.
        """
        if context is not None:
            batch = context.shape[0]
        elif step_inputs is not None:
            batch = step_inputs.shape[0]
        elif batch_size is not None:
            batch = check_int("batch_size", batch_size, 0)
        else:
            raise ValueError("pass context, step_inputs or batch_size to fix the number of samples")
        row_bytes = 8 * self.length + 4 * (self.n_values + 2 * self.num_layers * self.hidden_size)
        memory.check_fits(f"a sample of {batch:,} rows", batch * row_bytes, self.head.weight.device,
                          "pass a smaller batch_size", elements=batch * self.length)
        engine = self.engine(context, step_inputs)
        bound = context is not None or step_inputs is not None
        return engine.sample(batch_size=None if bound else batch, temperature=temperature, top_p=top_p,
                             greedy=greedy, generator=generator, fixed=fixed)

    def engine(self, context: Tensor | None = None, step_inputs: Tensor | None = None, *,
               dropout: bool = False, fused: bool | None = None,
               suffix_dtype: torch.dtype | None = None) -> RecurrentEngine:
        """A :class:`~pseudosl.psl.recurrent.RecurrentEngine` bound to ``context (E, context_dim)`` and
        ``step_inputs (E, n, step_dim)`` (``pseudosl.as_engine(decoder, context=..., step_inputs=...)``)."""
        return RecurrentEngine(DecoderSteps(self, context, step_inputs), dropout=dropout, fused=fused,
                               suffix_dtype=suffix_dtype)


class DecoderSteps(RecurrentSteps):
    """The steps of a :class:`RecurrentDecoder` bound to ``context (E, context_dim)`` and ``step_inputs (E, n, step_dim)``."""

    def __init__(self, decoder: RecurrentDecoder, context: Tensor | None = None,
                 step_inputs: Tensor | None = None) -> None:
        self.decoder, self.context, self.step_inputs = decoder, context, step_inputs
        self.module, self.rnn, self.n_values, self.length = decoder, decoder.rnn, decoder.n_values, decoder.length
        bound = [t.shape[0] for t in (context, step_inputs) if t is not None]
        if len(set(bound)) > 1:
            raise ValueError(f"context and step_inputs bind different numbers of examples: {bound[0]} and {bound[1]}")
        self.n_examples = bound[0] if bound else None
        if step_inputs is not None and (step_inputs.dim() != 3 or step_inputs.shape[1:] != (decoder.length, decoder.step_dim)):
            raise ValueError(f"step_inputs must have shape (E, {decoder.length}, {decoder.step_dim}); "
                             f"got {tuple(step_inputs.shape)}")
        if decoder.step_dim and step_inputs is None:
            raise ValueError(f"this decoder has step_dim={decoder.step_dim}: pass step_inputs (E, n, {decoder.step_dim})")
        if not decoder.step_dim and step_inputs is not None:
            raise ValueError("this decoder has step_dim=0; pass step_inputs=None")

    def inputs(self, prev: Tensor, pos: Tensor, example: Tensor) -> Tensor:
        dec = self.decoder
        x = _one_hot(prev.clamp(min=0), dec.n_values, dec.head.weight.dtype).masked_fill((prev < 0)[..., None], 0)
        if self.step_inputs is None:
            return x
        return torch.cat([x, self.step_inputs[example[:, None], pos].to(x.dtype)], dim=-1)

    def initial_state(self, example: Tensor) -> State:
        return self.decoder.initial_state(None if self.context is None else self.context[example], example.shape[0])

    def head(self, out: Tensor) -> Tensor:
        return self.decoder.head(out)


def _one_hot(y: Tensor, k: int, dtype: torch.dtype) -> Tensor:
    """``F.one_hot(y, k).to(dtype)`` without its host synchronisation on CPU (it reads ``y.min()`` there);
    an out-of-range value fails in ``scatter_`` (an index error on CPU, a device-side assert on CUDA)."""
    return torch.zeros(*y.shape, k, dtype=dtype, device=y.device).scatter_(-1, y.unsqueeze(-1), 1)

