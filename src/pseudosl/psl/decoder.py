"""An autoregressive recurrent decoder and its fast neighbour engine.

:class:`RecurrentDecoder` models ``p(y | x) = prod_t p(y_t | y_{<t}, x)`` over ``n`` positions with
``k`` values.  The input at step ``t`` is ``[one_hot(y_{t-1}) (zeros at t = 0), step_inputs[:, t]]``
(size ``k + step_dim``); the context ``x (B, context_dim)`` sets the initial hidden (and cell) state of
every layer through a ``Linear``; a ``Linear(hidden, k)`` head scores ``y_t``.

:class:`RecurrentEngine` computes the local conditionals ``log p(y_i = c | y_{-i})`` exactly, reusing
the prefix: all neighbours at position ``i`` share ``y_{<i}``, hence the state ``h_i`` after step ``i``
and the prefix term ``log p(y_{<i})``, which cancels in the per-position normalisation:

    log p(y_i = c | y_{-i}) = log_softmax_c [ log p(c | y_{<i}) + sum_{j > i} log p(y_j | y_{<i}, c, y_{i<.<j}) ].

The sample is run once, keeping every layer's state at every step (RNN, GRU: one call per layer over
the whole sequence; LSTM: step by step, as a fused call returns no per-step cell state), then all
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

import bisect
import contextlib
from typing import Iterator, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .neighbours import _candidates, check_sample
from .sampling import sample_from_logits

__all__ = ["RecurrentDecoder", "RecurrentEngine", "exact_mode", "trainable_recurrence"]

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
            prev = _one_hot(y_t, self.n_values, prev.dtype)[:, None]
        return torch.stack(out, dim=1)

    def engine(self, context: Tensor | None = None, step_inputs: Tensor | None = None, *,
               dropout: bool = False, fused: bool | None = None,
               suffix_dtype: torch.dtype | None = None) -> "RecurrentEngine":
        """A :class:`RecurrentEngine` bound to this context (usable as ``model`` of the loss and as ``log_joint``)."""
        return RecurrentEngine(self, context, step_inputs, dropout=dropout, fused=fused, suffix_dtype=suffix_dtype)


@contextlib.contextmanager
def trainable_recurrence(module: nn.Module) -> Iterator[None]:
    """Recurrent layers (``nn.RNN/LSTM/GRU``) of ``module`` that are in eval mode run in training mode
    with dropout 0 inside the block, when autograd is on.

    cuDNN computes an RNN backward only for a forward run in training mode ("cudnn RNN backward can
    only be called in training mode").  Without dropout the two modes compute the same function, so
    this changes no value; other modules (dropout, batch norm) keep their mode.
    """
    flipped = []
    if torch.is_grad_enabled():
        for m in module.modules():
            if isinstance(m, nn.RNNBase) and not m.training:
                flipped.append((m, m.dropout))
                m.dropout, m.training = 0.0, True
    try:
        yield
    finally:
        for m, p in flipped:
            m.dropout, m.training = p, False


@contextlib.contextmanager
def exact_mode(module: nn.Module, dropout: bool = False) -> Iterator[None]:
    """Evaluate ``module`` deterministically and in full precision, as the exact conditionals need, on any
    device, with autograd.

    The module is put in eval mode (dropout off, batch norm on its running statistics) and its
    recurrent layers are made backprop-able on cuDNN (:func:`trainable_recurrence`); the previous
    modes are restored on exit.  ``dropout=True`` keeps the modes as they are (a stochastic estimate).
    A caller's autocast (mixed-precision training) is switched off on the module's device: a conditional is
    a difference of sums of up to ``n`` log-probabilities, and bfloat16 logits move the Sudoku RNN's
    conditionals by up to 0.16 in probability (docs/psl.md); an engine lowers precision only where asked
    (``RecurrentEngine(suffix_dtype=...)``).
    """
    with _full_precision(module):
        if dropout:
            yield
            return
        modes = [(m, m.training) for m in module.modules()]
        module.eval()
        try:
            with trainable_recurrence(module):
                yield
        finally:
            for m, t in modes:
                m.training = t


def _full_precision(module: nn.Module) -> contextlib.AbstractContextManager:
    """Autocast off on the device of ``module``'s parameters (where that device has autocast)."""
    param = next(module.parameters(), None)
    device = param.device.type if param is not None else "cpu"
    available = getattr(torch.amp, "is_autocast_available", lambda d: d in ("cpu", "cuda"))  # torch < 2.4: no query
    if not available(device):
        return contextlib.nullcontext()
    return torch.autocast(device, enabled=False)


class RecurrentEngine:
    """Exact local conditionals of a :class:`RecurrentDecoder` with prefix reuse (see module docs).

    Bound to a context ``(B, context_dim)`` and ``step_inputs (B, n, step_dim)``.  Called as
    ``log_joint(y (N, n))`` rows are grouped by example (``N = B * m``, example-major, as
    :func:`local_conditionals` builds them without chunking).

    ``fused`` picks how the neighbour suffixes run: ``True`` as one multi-layer ``nn.RNN/LSTM/GRU`` call
    per chunk over suffixes padded to the chunk's longest (cuDNN on a GPU: a few large kernels), ``False``
    step by step with the layer cells on a batch that shrinks as suffixes end (no padding: faster on a
    CPU).  Default (``None``): fused on CUDA, step by step elsewhere.  Both give the same conditionals.

    ``suffix_dtype=torch.bfloat16`` (or ``float16``) runs the suffix recurrence under autocast (the sample
    pass, the head, the log-softmax and the sums stay in float32): about half the time on a GPU, at an
    error measured in docs/psl.md (Sudoku RNN: see there); ``None`` = the module's dtype.  A caller's autocast
    (mixed-precision training) does not reach the engine (:func:`exact_mode`).  On CUDA,
    float32 matmuls and cuDNN RNNs follow ``torch.backends.{cuda.matmul,cudnn}.allow_tf32``.
    """

    def __init__(self, decoder: RecurrentDecoder, context: Tensor | None = None,
                 step_inputs: Tensor | None = None, *, dropout: bool = False, fused: bool | None = None,
                 suffix_dtype: torch.dtype | None = None) -> None:
        self.decoder, self.context, self.step_inputs, self.dropout = decoder, context, step_inputs, dropout
        self.n_values = decoder.n_values
        self.fused = fused
        if suffix_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"suffix_dtype must be None, torch.float32, torch.bfloat16 or torch.float16; got {suffix_dtype}")
        self.suffix_dtype = suffix_dtype

    def _low_precision(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Autocast for the suffix recurrence only (head, log-softmax and sums stay in float32; the engine
        runs in :func:`exact_mode`, which switches a caller's autocast off)."""
        if self.suffix_dtype in (None, torch.float32):
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.suffix_dtype)

    def _expand(self, t: Tensor | None, n_rows: int) -> Tensor | None:
        if t is None:
            return None
        if n_rows % t.shape[0]:
            raise ValueError(f"{n_rows} sequences cannot be grouped over the {t.shape[0]} bound examples; "
                             "call engine.local_conditionals (which chunks correctly) instead of chunking yourself")
        return t.repeat_interleave(n_rows // t.shape[0], dim=0)

    def __call__(self, y: Tensor) -> Tensor:
        """``log p(y | x)``, ``(N,)`` for ``y (N, n)`` grouped by example (example-major)."""
        return self.step_log_probs(y).gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(-1)

    def step_log_probs(self, y: Tensor) -> Tensor:
        """``(N, n, k)`` next-value log-probabilities ``log p(. | x, y_<t)`` for ``y (N, n)`` grouped by example."""
        with exact_mode(self.decoder, self.dropout):
            return self.decoder.step_logits(y, self._expand(self.context, y.shape[0]),
                                            self._expand(self.step_inputs, y.shape[0])).log_softmax(-1)

    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None,
                           candidates: Tensor | None = None, positions: Tensor | None = None,
                           fill: float = 0.0) -> Tensor:
        """``(B, n, K)`` ``log p(y_i = c | y_{-i})`` (``K = k`` or the number of ``candidates`` per position).

        Args:
            sample: ``(B, n)`` long anchor sequences.
            chunk_size: run at most about this many suffix rows together (rows are ``(b, i, c)`` triples in
                order of ``i``); smaller chunks hold fewer activations at once.
            candidates: optional ``(n, K)`` / ``(B, n, K)`` values per position (see :func:`local_conditionals`).
            positions: optional ``(B, n)`` bool: compute the conditionals only where True (the work shrinks in
                proportion); elsewhere the result is ``fill`` for every value.  With ``fill = 0`` (weight 1 for
                every value) a position that a unit constraint fixes, and that the loss conditions on, contributes
                exactly nothing (:func:`pseudosl.pseudo_semantic_loss` does this with ``condition=True``).
            fill: the log-weight written at the positions left out.
        """
        dec = self.decoder
        sample = check_sample(sample, dec.n_values)
        b, n = sample.shape
        cand = _candidates(candidates, b, n, dec.n_values, sample.device)  # (B, n, K)
        k = cand.shape[-1]
        pos = _check_positions(positions, b, n, sample.device)
        with exact_mode(dec, self.dropout):
            # 1. the sample, keeping every layer's state after every step
            x = dec.inputs(sample, self.step_inputs)  # (B, n, I)
            top, states = _sample_pass(dec, x, dec.initial_state(self.context, b))  # (B, n, H), [(n, L, B, H)]
            base = dec.head(top).log_softmax(-1)  # (B, n, k)
            prior = base.gather(-1, cand)  # (B, n, K): log p(c | y_<i)
            # 2. the neighbour suffixes (c, y_{i+1}, ..., y_{n-2}) from the state after step i
            suffix = prior.new_zeros(b, n, k)
            if n > 1:
                rows = _suffix_rows(pos, b, n, k, sample.device)
                fused = self.fused if self.fused is not None else sample.device.type == "cuda"
                run = self._suffix_fused if fused else self._suffix_stepwise
                for chunk in rows.chunks(chunk_size):
                    suffix = suffix.index_put((chunk.b, chunk.i, chunk.j), run(sample, cand, states, chunk))
        scores = (prior + suffix).log_softmax(-1)
        if pos is None:
            return scores
        return torch.where(pos[..., None], scores, torch.full_like(scores, fill))

    # -- the suffix pass ---------------------------------------------------------------------
    def _suffix_inputs(self, y: Tensor, cand: Tensor, states: list[Tensor], r: "_Rows") -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """Padded inputs ``(R, T, I)``, targets ``(R, T)``, valid mask ``(R, T)`` and initial states per layer."""
        dec = self.decoder
        n = y.shape[1]
        s = torch.arange(r.T, device=y.device)[None, :]  # (1, T)
        at = (r.i[:, None] + s).clamp(max=n - 1)  # (R, T): position of the value consumed at suffix step s
        prev = y[r.b[:, None], at]  # (R, T)
        prev[:, 0] = cand[r.b, r.i, r.j]  # step 0 consumes the candidate c
        tgt_pos = (r.i[:, None] + 1 + s).clamp(max=n - 1)  # (R, T): position scored at suffix step s
        inp = _one_hot(prev, dec.n_values, dec.head.weight.dtype)  # (R, T, k)
        if dec.step_dim:
            inp = torch.cat([inp, self.step_inputs[r.b[:, None], tgt_pos].to(inp.dtype)], dim=-1)
        target = y[r.b[:, None], tgt_pos]
        valid = s < (n - 1 - r.i)[:, None]
        h0 = [st[r.i, :, r.b].transpose(0, 1).contiguous() for st in states]  # (L, R, H): state after step i of b
        return inp, target, valid, h0

    def _suffix_fused(self, y: Tensor, cand: Tensor, states: list[Tensor], r: "_Rows") -> Tensor:
        """``(R,)`` suffix log-likelihoods: one multi-layer recurrent call over padded suffixes."""
        dec = self.decoder
        inp, target, valid, h0 = self._suffix_inputs(y, cand, states, r)
        with self._low_precision(y.device):
            out, _ = dec.rnn(inp, tuple(h0) if dec.cell == "lstm" else h0[0])  # (R, T, H)
        logp = dec.head(out.to(dec.head.weight.dtype)).log_softmax(-1).gather(-1, target[..., None]).squeeze(-1)  # (R, T)
        return logp.masked_fill(~valid, 0.0).sum(1)

    def _suffix_stepwise(self, y: Tensor, cand: Tensor, states: list[Tensor], r: "_Rows") -> Tensor:
        """``(R,)`` suffix log-likelihoods, step by step with the layer cells; rows are sorted by start
        position, so the rows still running at step ``s`` are a prefix (``r.active[s]`` of them)."""
        dec = self.decoder
        inp, target, _, h0 = self._suffix_inputs(y, cand, states, r)
        hs: list[State] = [(h0[0][l], h0[1][l]) if dec.cell == "lstm" else h0[0][l] for l in range(dec.num_layers)]
        # one (rows, I) tensor per step: slicing `inp[:active, step]` directly would make every step's
        # backward materialise a zero gradient of the whole (rows, T, I) input (cubic in n in all)
        inp_steps = inp.transpose(0, 1).unbind(0)
        tops, picks = [], []
        for step, active in enumerate(r.active):
            x = inp_steps[step][:active]
            with self._low_precision(y.device):
                for layer in range(dec.num_layers):
                    if layer > 0 and dec.rnn.dropout and dec.rnn.training:
                        x = F.dropout(x, dec.rnn.dropout, training=True)
                    hs[layer] = _cell(dec, layer, x, _take(hs[layer], active))
                    x = hs[layer][0] if dec.cell == "lstm" else hs[layer]
            tops.append(x.to(dec.head.weight.dtype))
            picks.append(target[:active, step])
        logp = dec.head(torch.cat(tops)).log_softmax(-1).gather(-1, torch.cat(picks)[:, None]).squeeze(-1)
        row = torch.cat([torch.arange(t.shape[0], device=y.device) for t in tops])
        return logp.new_zeros(len(r.b)).index_add(0, row, logp)


class _Rows:
    """Suffix rows ``(b, i, j)`` (example, start position ``i < n - 1``, candidate index), sorted by ``i``.

    ``active[s]`` = rows whose suffix is still running at step ``s`` (a prefix, as rows are sorted by ``i``),
    kept on the host so the step loop never waits for the device; ``T`` = the longest suffix.
    """

    def __init__(self, b: Tensor, i: Tensor, j: Tensor, i_host: list[int], n: int) -> None:
        self.b, self.i, self.j, self.n = b, i, j, n
        self.i_host = i_host
        self.T = n - 1 - i_host[0] if i_host else 0
        self.active = [bisect.bisect_left(i_host, n - 1 - s) for s in range(self.T)]  # i_host is sorted

    def chunks(self, size: int | None) -> Iterator["_Rows"]:
        """Consecutive row ranges of about ``size`` rows (whole start positions where possible)."""
        total = len(self.i_host)
        if size is not None and (not isinstance(size, int) or size < 1):
            raise ValueError(f"chunk_size must be a positive int or None, got {size!r}")
        step = total if size is None else size
        for a in range(0, total, step):
            z = min(a + step, total)
            yield _Rows(self.b[a:z], self.i[a:z], self.j[a:z], self.i_host[a:z], self.n)


def _one_hot(y: Tensor, k: int, dtype: torch.dtype) -> Tensor:
    """``F.one_hot(y, k).to(dtype)`` without its host synchronisation on CPU (it reads ``y.min()`` there);
    an out-of-range value fails in ``scatter_`` (an index error on CPU, a device-side assert on CUDA)."""
    return torch.zeros(*y.shape, k, dtype=dtype, device=y.device).scatter_(-1, y.unsqueeze(-1), 1)


def _suffix_rows(pos: Tensor | None, b: int, n: int, k: int, device: torch.device) -> _Rows:
    """All suffix rows, position-major: for ``i`` in ``0 .. n-2``, every example ``b`` (where ``pos[b, i]``), every candidate.

    The index tensors are built on ``device`` (a copy from the host would wait for the device); the start
    positions are also kept on the host, read once from ``pos`` when it is given (its one synchronisation).
    """
    if pos is None:
        i = torch.arange(n - 1, device=device).repeat_interleave(b * k)
        bb = torch.arange(b, device=device).repeat_interleave(k).repeat(n - 1)
        i_host = [s for s in range(n - 1) for _ in range(b * k)]
    else:
        bi = pos[:, :n - 1].t().nonzero()  # (M, 2) = (i, b), sorted by i
        i, bb = bi[:, 0].repeat_interleave(k), bi[:, 1].repeat_interleave(k)
        i_host = bi[:, 0].cpu().repeat_interleave(k).tolist()
    j = torch.arange(k, device=device).repeat(len(i_host) // k if k else 0)
    return _Rows(bb, i, j, i_host, n)


def _sample_pass(dec: RecurrentDecoder, x: Tensor, state: State) -> tuple[Tensor, list[Tensor]]:
    """Run the sample's inputs ``x (B, n, I)`` from ``state``: the top layer's outputs ``(B, n, H)`` and every
    layer's state after every step, ``[(n, L, B, H)]`` (``[h, c]`` for an LSTM).

    RNN and GRU: one call per layer over the whole sequence (on a GPU, ``L`` cuDNN calls): a layer's outputs
    are its states.  LSTM: step by step (``n`` calls of all layers), as no fused call returns the cell state of
    every step.  Dropout between layers as in ``nn.RNN`` (only where the module is in training mode with dropout).
    """
    rnn = dec.rnn
    if dec.cell == "lstm":
        tops, states = [], []
        for t in range(x.shape[1]):
            o, state = rnn(x[:, t:t + 1], state)
            tops.append(o)
            states.append(state)
        return torch.cat(tops, 1), [torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states])]
    call = torch.gru if dec.cell == "gru" else torch.rnn_tanh if rnn.nonlinearity == "tanh" else torch.rnn_relu
    outs = []
    for layer in range(rnn.num_layers):
        if layer > 0 and rnn.dropout and rnn.training:
            x = F.dropout(x, rnn.dropout, training=True)
        w = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        # (input, h0, weights, has_biases, num_layers, dropout, train, bidirectional, batch_first), as nn.RNN calls it
        x, _ = call(x, state[layer:layer + 1], w, True, 1, 0.0, rnn.training, False, True)
        outs.append(x)  # (B, n, H): the layer's state after every step
    return x, [torch.stack(outs).permute(2, 0, 1, 3)]  # (n, L, B, H)


def _check_positions(positions: Tensor | None, b: int, n: int, device: torch.device) -> Tensor | None:
    if positions is None:
        return None
    if not isinstance(positions, Tensor) or positions.dtype != torch.bool:
        raise TypeError("positions must be a bool tensor of shape (B, n)")
    if positions.shape != (b, n):
        raise ValueError(f"positions must have the sample's shape ({b}, {n}); got {tuple(positions.shape)}")
    return positions.to(device)


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
