"""An autoregressive recurrent decoder and its fast neighbour engine.

:class:`RecurrentDecoder` models ``p(y | x) = prod_t p(y_t | y_{<t}, x)`` over ``n`` positions with
``k`` values.  The input at step ``t`` is ``[one_hot(y_{t-1}) (zeros at t = 0), step_inputs[:, t]]``
(size ``k + step_dim``); the context ``x (B, context_dim)`` sets the initial hidden (and cell) state of
every layer through a ``Linear``; a ``Linear(hidden, k)`` head scores ``y_t``.

:class:`RecurrentEngine` computes the local conditionals ``log p(y_i = c | y_{-i})`` exactly, reusing
the prefix: all neighbours at position ``i`` share ``y_{<i}``, hence the state ``h_i`` after step ``i``
and the prefix term ``log p(y_{<i})``, which cancels in the per-position normalisation:

    log p(y_i = c | y_{-i}) = log_softmax_c [ log p(c | y_{<i}) + sum_{j > i} log p(y_j | y_{<i}, c, y_{i<.<j}) ].

The sample is run once step by step (keeping every layer's state at every step), then all
``B * (n - 1) * K`` suffixes ``(c, y_{i+1}, ..., y_{n-2})`` run together, each row starting from its
own ``h_i``, ordered by start position so that the batch shrinks as suffixes end (the recurrence is
stepped with the module's own weights, ``torch.lstm_cell`` etc.; a ``PackedSequence`` does the same
work but its CPU backward is several times slower): ``K n (n - 1) / 2`` token-steps per sample
instead of the ``K n^2`` of the full expansion.

Dropout: the engine evaluates with dropout OFF (it puts the decoder in eval mode for the call and
restores the previous mode), so conditionals are deterministic and exact in both modes; the engine
called as ``log_joint`` does the same, so it agrees with the generic path.  Pass ``dropout=True`` to
:meth:`RecurrentDecoder.engine` to keep the module's mode (then every neighbour sees its own masks:
a stochastic estimate, not the exact conditionals of any one dropout mask).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .neighbours import _candidates, check_sample
from .sampling import sample_from_logits

__all__ = ["RecurrentDecoder", "RecurrentEngine"]

State = Tensor | tuple[Tensor, Tensor]


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
        if not isinstance(n_values, int) or n_values < 2:
            raise ValueError(f"n_values must be an int >= 2, got {n_values!r}")
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be a positive int, got {length!r}")
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
        prev = F.one_hot(y[:, :-1], self.n_values).to(self.head.weight.dtype)
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
        """Ancestral sampling: ``(B, n)`` detached long (in the module's current train/eval mode).

        ``fixed`` ``(B, n)`` clamps positions to known values (``-1`` = free): a fixed position is
        not sampled and the following steps condition on its value, as a solver keeps its givens.
        """
        if context is not None:
            batch = context.shape[0]
        elif step_inputs is not None:
            batch = step_inputs.shape[0]
        elif batch_size is not None:
            batch = batch_size
        else:
            raise ValueError("pass context, step_inputs or batch_size to fix the number of samples")
        state = self.initial_state(context, batch)
        prev = self.head.weight.new_zeros(batch, 1, self.n_values)
        out = []
        for t in range(self.length):
            h, state = self.rnn(self._with_steps(prev, step_inputs, t), state)
            y_t = sample_from_logits(self.head(h[:, 0]), temperature=temperature, top_p=top_p, greedy=greedy,
                                     generator=generator).to(prev.device)
            if fixed is not None:
                y_t = torch.where(fixed[:, t] >= 0, fixed[:, t], y_t)
            out.append(y_t)
            prev = F.one_hot(y_t, self.n_values).to(prev.dtype)[:, None]
        return torch.stack(out, dim=1)

    def engine(self, context: Tensor | None = None, step_inputs: Tensor | None = None, *,
               dropout: bool = False) -> "RecurrentEngine":
        """A :class:`RecurrentEngine` bound to this context (usable as ``model`` of the loss and as ``log_joint``)."""
        return RecurrentEngine(self, context, step_inputs, dropout=dropout)


@contextlib.contextmanager
def _mode(module: nn.Module, keep: bool) -> Iterator[None]:
    was = module.training
    if not keep:
        module.eval()
    try:
        yield
    finally:
        module.train(was)


class RecurrentEngine:
    """Exact local conditionals of a :class:`RecurrentDecoder` with prefix reuse (see module docs).

    Bound to a context ``(B, context_dim)`` and ``step_inputs (B, n, step_dim)``.  Called as
    ``log_joint(y (N, n))`` rows are grouped by example (``N = B * m``, example-major, as
    :func:`local_conditionals` builds them without chunking).
    """

    def __init__(self, decoder: RecurrentDecoder, context: Tensor | None = None,
                 step_inputs: Tensor | None = None, *, dropout: bool = False) -> None:
        self.decoder, self.context, self.step_inputs, self.dropout = decoder, context, step_inputs, dropout
        self.n_values = decoder.n_values

    def _expand(self, t: Tensor | None, n_rows: int) -> Tensor | None:
        if t is None:
            return None
        if n_rows % t.shape[0]:
            raise ValueError(f"{n_rows} sequences cannot be grouped over the {t.shape[0]} bound examples; "
                             "call engine.local_conditionals (which chunks correctly) instead of chunking yourself")
        return t.repeat_interleave(n_rows // t.shape[0], dim=0)

    def __call__(self, y: Tensor) -> Tensor:
        with _mode(self.decoder, self.dropout):
            return self.decoder.log_joint(y, self._expand(self.context, y.shape[0]),
                                          self._expand(self.step_inputs, y.shape[0]))

    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None,
                           candidates: Tensor | None = None) -> Tensor:
        """``(B, n, K)`` ``log p(y_i = c | y_{-i})`` (``K = k`` or the number of ``candidates`` per position).

        ``chunk_size`` bounds the number of suffix rows run together (``B K`` per start position, at least one
        position per group); smaller groups hold fewer activations at once.
        """
        dec = self.decoder
        sample = check_sample(sample, dec.n_values)
        b, n = sample.shape
        cand = _candidates(candidates, b, n, dec.n_values, sample.device)  # (B, n, K)
        k = cand.shape[-1]
        with _mode(dec, self.dropout):
            # 1. the sample, step by step, keeping every layer's state after every step
            x = dec.inputs(sample, self.step_inputs)  # (B, n, I)
            state = dec.initial_state(self.context, b)
            tops, states = [], []
            for t in range(n):
                o, state = dec.rnn(x[:, t:t + 1], state)
                tops.append(o)
                states.append(state)
            base = dec.head(torch.cat(tops, 1)).log_softmax(-1)  # (B, n, k)
            prior = base.gather(-1, cand)  # (B, n, K): log p(c | y_<i)
            if n == 1:
                return prior.log_softmax(-1)
            suffix = self._suffixes(sample, cand, states, chunk_size)  # (B, n-1, K)
        scores = prior + torch.cat([suffix, suffix.new_zeros(b, 1, k)], dim=1)
        return scores.log_softmax(-1)

    def _suffixes(self, y: Tensor, cand: Tensor, states: list[State], chunk_size: int | None) -> Tensor:
        """``sum_{j > i} log p(y_j | y_<i, c, y_{i<.<j})`` for rows ``(b, i, c)``, ``i < n - 1``: ``(B, n-1, K)``.

        Rows are ordered position-major, so at suffix step ``s`` the rows still running (those with
        ``i < n - 1 - s``) are a prefix of the batch: the batch shrinks as the suffixes end.
        """
        b, n = y.shape
        T = n - 1
        per = b * cand.shape[-1]  # rows per start position
        group = T if chunk_size is None else max(1, chunk_size // per)
        out = [self._suffix_group(y, cand, states, i0, min(i0 + group, T)) for i0 in range(0, T, group)]
        return torch.cat(out, dim=1)

    def _suffix_group(self, y: Tensor, cand: Tensor, states: list[State], i0: int, i1: int) -> Tensor:
        """Suffix log-likelihoods for start positions ``i0 <= i < i1``: ``(B, i1 - i0, K)``."""
        dec = self.decoder
        b, n = y.shape
        k = cand.shape[-1]
        m, T = i1 - i0, n - 1 - i0  # positions in the group, longest suffix
        dev = y.device
        i = torch.arange(i0, i1, device=dev)[:, None]  # (m, 1)
        s = torch.arange(T, device=dev)[None, :]  # (1, T)
        tgt_pos = (i + 1 + s).clamp(max=n - 1)  # (m, T) position scored at suffix step s
        prev = y[:, (i + s).clamp(max=n - 1)].permute(1, 0, 2)  # (m, B, T): previous value y_{i+s}
        prev = prev[:, :, None, :].expand(m, b, k, T).clone()
        prev[..., 0] = cand[:, i0:i1].permute(1, 0, 2)  # step 0 consumes the candidate c
        rows = m * b * k
        inp = F.one_hot(prev.reshape(rows, T), dec.n_values).to(dec.head.weight.dtype)  # (rows, T, k)
        if dec.step_dim:
            steps = self.step_inputs[:, tgt_pos].permute(1, 0, 2, 3)  # (m, B, T, step_dim)
            steps = steps[:, :, None].expand(m, b, k, T, dec.step_dim).reshape(rows, T, dec.step_dim)
            inp = torch.cat([inp, steps.to(inp.dtype)], dim=-1)
        target = y[:, tgt_pos].permute(1, 0, 2)[:, :, None, :].expand(m, b, k, T).reshape(rows, T)

        def start(st: list[Tensor]) -> Tensor:  # states after step i, (L, B, H) each -> (L, rows, H)
            h = torch.stack(st[i0:i1], dim=1)  # (L, m, B, H)
            return h[:, :, :, None].expand(-1, m, b, k, -1).reshape(h.shape[0], rows, -1)

        if dec.cell == "lstm":
            hs = list(zip(start([st[0] for st in states]).unbind(0), start([st[1] for st in states]).unbind(0)))
        else:
            hs = list(start(list(states)).unbind(0))
        # one (rows, I) tensor per step: slicing `inp[:active, step]` directly would make every step's
        # backward materialise a zero gradient of the whole (rows, T, I) input (cubic in n in all)
        inp_steps = inp.transpose(0, 1).unbind(0)
        tops, picks = [], []
        for step in range(T):
            active = (min(m, T - step)) * b * k  # rows with i < n - 1 - step
            x = inp_steps[step][:active]
            for layer in range(dec.num_layers):
                if layer > 0 and dec.rnn.dropout and dec.rnn.training:
                    x = F.dropout(x, dec.rnn.dropout, training=True)
                hs[layer] = _cell(dec, layer, x, _take(hs[layer], active))
                x = hs[layer][0] if dec.cell == "lstm" else hs[layer]
            tops.append(x)
            picks.append(target[:active, step])
        logp = dec.head(torch.cat(tops)).log_softmax(-1).gather(-1, torch.cat(picks)[:, None]).squeeze(-1)
        row = torch.cat([torch.arange(t.shape[0], device=dev) for t in tops])
        total = logp.new_zeros(rows).index_add(0, row, logp)
        return total.view(m, b, k).permute(1, 0, 2)


def _take(state: State, rows: int) -> State:
    return (state[0][:rows], state[1][:rows]) if isinstance(state, tuple) else state[:rows]


def _cell(dec: RecurrentDecoder, layer: int, x: Tensor, state: State) -> State:
    """One step of layer ``layer`` of ``dec.rnn`` with its own weights (same math as ``nn.RNN/LSTM/GRU``)."""
    w = [getattr(dec.rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    if dec.cell == "lstm":
        return torch.lstm_cell(x, state, *w)
    if dec.cell == "gru":
        return torch.gru_cell(x, state, *w)
    fn = torch.rnn_tanh_cell if dec.rnn.nonlinearity == "tanh" else torch.rnn_relu_cell
    return fn(x, state, *w)
