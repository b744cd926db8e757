"""Exact local conditionals of recurrent step models (``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM``) with prefix reuse.

A recurrent step model scores ``y_t`` from the state after consuming ``y_{<t}``: at step ``t`` it reads the
input made of the previous value (none at ``t = 0``), runs its recurrent module one step and applies a head.
:class:`RecurrentSteps` names those three pieces; :class:`RecurrentEngine` computes

    log p(y_i = c | y_{-i}) = log_softmax_c [ log p(c | y_{<i}) + sum_{j > i} log p(y_j | y_{<i}, c, y_{i<.<j}) ],

reusing the prefix: all neighbours at position ``i`` share ``y_{<i}``, hence the state ``h_i`` after step
``i`` and the prefix term ``log p(y_{<i})``, which cancels in the per-position normalisation.

The sample is run once, keeping every layer's state at every step (RNN, GRU: one call per layer over
the whole sequence; LSTM: step by step, as a fused call returns no per-step cell state), then all
``B * (n - 1) * K`` suffixes ``(c, y_{i+1}, ..., y_{n-2})`` run together, each row starting from its
own ``h_i``, ordered by start position so that the batch shrinks as suffixes end (the recurrence is
stepped with the module's own weights, ``torch.lstm_cell`` etc.; a ``PackedSequence`` does the same
work but its CPU backward is several times slower): ``K n (n - 1) / 2`` token-steps per sample
instead of the ``K n^2`` of the full expansion.

Two step models are built in: :class:`~pseudosl.RecurrentDecoder` (``decoder.engine(context, step_inputs)``)
and :class:`EmbeddingSteps` (any module with an embedding of the previous value, a recurrent module and a
head: ``pseudosl.as_engine(model, rnn=..., embed=..., head=..., length=n)``).  Other models subclass
:class:`RecurrentSteps` (e.g. to add per-step inputs).

Dropout: the engine evaluates and samples with dropout OFF (:func:`~pseudosl.psl.engine.exact_mode`), so
conditionals are deterministic and exact in both modes, and samples come from the same distribution;
``dropout=True`` keeps the module's mode (then every neighbour sees its own masks: a stochastic estimate, not
the exact conditionals of any one dropout mask).
"""

from __future__ import annotations

import abc
import bisect
import contextlib
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import checks
from ..checks import check_bool, check_candidates, check_int, check_positions, check_sample
from .engine import Engine, LogitsHook, exact_mode
from .sampling import sample_from_logits

__all__ = ["RecurrentSteps", "EmbeddingSteps", "RecurrentEngine", "State"]

State = Tensor | tuple[Tensor, Tensor]


class RecurrentSteps(abc.ABC):
    """The pieces of a recurrent step model that :class:`RecurrentEngine` runs.

    Attributes:
        module: the whole model (its train/eval mode is set while the engine runs).
        rnn: its recurrent module: ``nn.RNN``, ``nn.GRU`` or ``nn.LSTM``, unidirectional, without ``proj_size``.
        n_values: ``k``, values per position.
        length: ``n``, when the model fixes it (else pass ``length=`` to sample).
        n_examples: the number of bound inputs (contexts), or ``None``.
    """

    module: nn.Module
    rnn: nn.RNNBase
    n_values: int
    length: int | None = None
    n_examples: int | None = None

    @abc.abstractmethod
    def inputs(self, prev: Tensor, pos: Tensor, example: Tensor) -> Tensor:
        """``(R, T, I)`` recurrent inputs: ``prev (R, T)`` long, the value consumed at each step (``-1`` at
        position 0: there is none), ``pos (R, T)`` long, the position each step scores, ``example (R,)``."""

    @abc.abstractmethod
    def initial_state(self, example: Tensor) -> State:
        """``(L, R, H)`` state before position 0 of each row's example (an ``(h, c)`` pair for an LSTM)."""

    @abc.abstractmethod
    def head(self, out: Tensor) -> Tensor:
        """Logits ``(..., k)`` of the next value from the top layer's output ``(..., H)``."""


class EmbeddingSteps(RecurrentSteps):
    """A step model made of an embedding of the previous value, a recurrent module and a head.

    Step ``t`` reads ``embed(y_{t-1})`` (``embed(start)`` at ``t = 0``), runs ``rnn`` one step from ``state``
    (zeros when ``None``) and scores ``y_t`` with ``head``.  ``state`` ``(L, E, H)`` (a pair for an LSTM) binds
    the engine to ``E`` examples: one initial state each (e.g. computed from a context by the caller).
    """

    def __init__(self, module: nn.Module, rnn: nn.RNNBase, embed: Callable[[Tensor], Tensor],
                 head: Callable[[Tensor], Tensor], *, start: int, n_values: int | None = None,
                 length: int | None = None, state: State | None = None) -> None:
        self.module, self.rnn, self.embed, self._head = module, rnn, embed, head
        self.start = check_int("start", start, 0)
        n_embeddings = getattr(embed, "num_embeddings", None)
        if n_embeddings is not None and self.start >= n_embeddings:
            raise ValueError(f"start={self.start} is not an id of embed, an nn.Embedding of {n_embeddings} ids: pass the id "
                             f"of its start embedding (0..{n_embeddings - 1}), e.g. k for an nn.Embedding(k + 1, d)")
        if n_values is None:
            out = getattr(head, "out_features", None)
            if out is None:
                raise ValueError("pass n_values=k: the head is not an nn.Linear, so its number of values is unknown")
            n_values = out
        self.n_values = check_int("n_values", n_values, 2)
        self.length = None if length is None else check_int("length", length, 1)
        self.state = state
        if state is not None:
            h = state[0] if isinstance(state, tuple) else state
            if isinstance(rnn, nn.LSTM) != isinstance(state, tuple) or h.dim() != 3 or h.shape[0] != rnn.num_layers:
                raise ValueError(f"state must be (num_layers={rnn.num_layers}, E, hidden) "
                                 f"{'(an (h, c) pair for an LSTM)' if isinstance(rnn, nn.LSTM) else ''}; "
                                 f"got {tuple(h.shape) if isinstance(h, Tensor) else type(state).__name__}")
            self.n_examples = h.shape[1]

    def inputs(self, prev: Tensor, pos: Tensor, example: Tensor) -> Tensor:
        return self.embed(torch.where(prev < 0, self.start, prev))

    def initial_state(self, example: Tensor) -> State:
        if self.state is None:
            w = self.rnn.weight_hh_l0
            h = w.new_zeros(self.rnn.num_layers, example.shape[0], self.rnn.hidden_size)
            return (h, h.clone()) if isinstance(self.rnn, nn.LSTM) else h
        if isinstance(self.state, tuple):
            return self.state[0][:, example].contiguous(), self.state[1][:, example].contiguous()
        return self.state[:, example].contiguous()

    def head(self, out: Tensor) -> Tensor:
        return self._head(out)


def _check_rnn(rnn: nn.Module) -> nn.RNNBase:
    if not isinstance(rnn, (nn.RNN, nn.GRU, nn.LSTM)):
        raise TypeError(f"rnn must be an nn.RNN, nn.GRU or nn.LSTM, got {type(rnn).__name__}")
    if rnn.bidirectional:
        raise ValueError("rnn must be unidirectional (a bidirectional RNN is not autoregressive)")
    if getattr(rnn, "proj_size", 0):
        raise ValueError("an nn.LSTM with proj_size is not supported; use proj_size=0 and a head")
    return rnn


class RecurrentEngine(Engine):
    """Exact local conditionals of a recurrent step model with prefix reuse (see module docs).

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

    autoregressive = True

    def __init__(self, steps: RecurrentSteps, *, dropout: bool = False, fused: bool | None = None,
                 suffix_dtype: torch.dtype | None = None) -> None:
        if not isinstance(steps, RecurrentSteps):
            raise TypeError(f"steps must be a pseudosl.psl.RecurrentSteps, got {type(steps).__name__}")
        self.steps, self.rnn = steps, _check_rnn(steps.rnn)
        self.module, self.dropout = steps.module, check_bool("dropout", dropout)
        self.fused = check_bool("fused", fused, none="fused on CUDA, step by step elsewhere")
        self.n_values = self.vocab_size = steps.n_values
        self.n_examples, self.length = steps.n_examples, steps.length
        self.dtype = self.rnn.weight_hh_l0.dtype
        if suffix_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"suffix_dtype must be None, torch.float32, torch.bfloat16 or torch.float16; got {suffix_dtype}")
        self.suffix_dtype = suffix_dtype

    def _low_precision(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Autocast for the suffix recurrence only (head, log-softmax and sums stay in float32; the engine
        runs in :func:`exact_mode`, which switches a caller's autocast off)."""
        if self.suffix_dtype in (None, torch.float32):
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.suffix_dtype)

    def _teacher_forced(self, y: Tensor, example: Tensor) -> Tensor:
        """``(N, n, I)`` inputs of rows ``y``: the previous value (none at position 0) and the step's position."""
        prev = torch.cat([y.new_full((y.shape[0], 1), -1), y[:, :-1]], 1)
        pos = torch.arange(y.shape[1], device=y.device).expand_as(y)
        return self.steps.inputs(prev, pos, example)

    # -- the protocol ---------------------------------------------------------------------------------
    def log_joint(self, y: Tensor, example: Tensor) -> Tensor:
        return self.step_log_probs(y, example).gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(-1)

    def step_log_probs(self, y: Tensor, example: Tensor) -> Tensor:
        y = check_sample(y, self.n_values, "y")
        example = self.check_example(example, y.shape[0])
        with exact_mode(self.module, self.dropout):
            out, _ = _run(self.rnn, self._teacher_forced(y, example), self.steps.initial_state(example))
            return self.steps.head(out).log_softmax(-1)

    @torch.no_grad()
    def sample(self, example: Tensor | None = None, *, batch_size: int | None = None, length: int | None = None,
               temperature: float = 1.0, top_p: float | None = None, greedy: bool = False,
               generator: torch.Generator | None = None, fixed: Tensor | None = None,
               logits_processor: LogitsHook | None = None) -> Tensor:
        """``(N, n)`` ancestral samples (see :meth:`Engine.sample`; ``logits_processor`` rewrites each step's
        logits), in the mode of the conditionals (:func:`exact_mode`: dropout off unless the engine keeps it).
        ``fixed`` ``(N, n)`` long clamps positions to known values (``-1`` = free): a fixed position is not sampled
        and the following steps condition on its value (e.g. a Sudoku's givens)."""
        n = self.sample_length(length)
        device = self.rnn.weight_hh_l0.device
        example = self.draw_ids(example, batch_size, device, n)
        rows = example.shape[0]
        if fixed is not None:
            _check_fixed(fixed, rows, n, self.n_values)
        out = torch.zeros(rows, 0, dtype=torch.long, device=device)
        if rows == 0:
            return out.new_zeros(0, n)
        with exact_mode(self.module, self.dropout):
            state = self.steps.initial_state(example)
            prev = torch.full((rows, 1), -1, dtype=torch.long, device=device)
            for t in range(n):
                h, state = _run(self.rnn, self.steps.inputs(prev, torch.full_like(prev, t), example), state)
                logits = self.steps.head(h[:, 0])
                if logits_processor is not None:
                    logits = logits_processor(out, logits)
                prev = sample_from_logits(logits, temperature=temperature, top_p=top_p,
                                          greedy=greedy, generator=generator).to(device)[:, None]
                if fixed is not None:
                    prev = torch.where(fixed[:, t:t + 1] >= 0, fixed[:, t:t + 1], prev)
                out = torch.cat([out, prev], 1)
        return out

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
        sample = check_sample(sample, self.n_values)
        b, n = sample.shape
        example = self.example_ids(b, sample.device)
        cand = check_candidates(candidates, b, n, self.n_values, sample.device)  # (B, n, K)
        k = cand.shape[-1]
        pos = check_positions(positions, b, n, sample.device)
        with exact_mode(self.module, self.dropout):
            # 1. the sample, keeping every layer's state after every step
            x = self._teacher_forced(sample, example)  # (B, n, I)
            top, states = _sample_pass(self.rnn, x, self.steps.initial_state(example))  # (B, n, H), [(n, L, B, H)]
            base = self.steps.head(top).log_softmax(-1)  # (B, n, k)
            prior = base.gather(-1, cand)  # (B, n, K): log p(c | y_<i)
            # 2. the neighbour suffixes (c, y_{i+1}, ..., y_{n-2}) from the state after step i
            suffix = prior.new_zeros(b, n, k)
            if n > 1:
                rows = _suffix_rows(pos, b, n, k, sample.device)
                fused = self.fused if self.fused is not None else sample.device.type == "cuda"
                run = self._suffix_fused if fused else self._suffix_stepwise
                for chunk in rows.chunks(chunk_size):
                    suffix = suffix.index_put((chunk.b, chunk.i, chunk.j), run(sample, example, cand, states, chunk))
        scores = (prior + suffix).log_softmax(-1)
        if pos is None:
            return scores
        return torch.where(pos[..., None], scores, torch.full_like(scores, fill))

    # -- the suffix pass ---------------------------------------------------------------------
    def _suffix_inputs(self, y: Tensor, example: Tensor, cand: Tensor, states: list[Tensor],
                       r: "_Rows") -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """Padded inputs ``(R, T, I)``, targets ``(R, T)``, valid mask ``(R, T)`` and initial states per layer."""
        n = y.shape[1]
        s = torch.arange(r.T, device=y.device)[None, :]  # (1, T)
        at = (r.i[:, None] + s).clamp(max=n - 1)  # (R, T): position of the value consumed at suffix step s
        prev = y[r.b[:, None], at]  # (R, T)
        prev[:, 0] = cand[r.b, r.i, r.j]  # step 0 consumes the candidate c
        tgt_pos = (r.i[:, None] + 1 + s).clamp(max=n - 1)  # (R, T): position scored at suffix step s
        inp = self.steps.inputs(prev, tgt_pos, example[r.b])  # (R, T, I)
        target = y[r.b[:, None], tgt_pos]
        valid = s < (n - 1 - r.i)[:, None]
        h0 = [st[r.i, :, r.b].transpose(0, 1).contiguous() for st in states]  # (L, R, H): state after step i of b
        return inp, target, valid, h0

    def _suffix_fused(self, y: Tensor, example: Tensor, cand: Tensor, states: list[Tensor], r: "_Rows") -> Tensor:
        """``(R,)`` suffix log-likelihoods: one multi-layer recurrent call over padded suffixes."""
        inp, target, valid, h0 = self._suffix_inputs(y, example, cand, states, r)
        with self._low_precision(y.device):
            out, _ = _run(self.rnn, inp, tuple(h0) if isinstance(self.rnn, nn.LSTM) else h0[0])  # (R, T, H)
        logp = self.steps.head(out.to(self.dtype)).log_softmax(-1).gather(-1, target[..., None]).squeeze(-1)  # (R, T)
        return logp.masked_fill(~valid, 0.0).sum(1)

    def _suffix_stepwise(self, y: Tensor, example: Tensor, cand: Tensor, states: list[Tensor], r: "_Rows") -> Tensor:
        """``(R,)`` suffix log-likelihoods, step by step with the layer cells; rows are sorted by start
        position, so the rows still running at step ``s`` are a prefix (``r.active[s]`` of them)."""
        rnn = self.rnn
        lstm = isinstance(rnn, nn.LSTM)
        inp, target, _, h0 = self._suffix_inputs(y, example, cand, states, r)
        hs: list[State] = [(h0[0][l], h0[1][l]) if lstm else h0[0][l] for l in range(rnn.num_layers)]
        # one (rows, I) tensor per step: slicing `inp[:active, step]` directly would make every step's
        # backward materialise a zero gradient of the whole (rows, T, I) input (cubic in n in all)
        inp_steps = inp.transpose(0, 1).unbind(0)
        tops, picks = [], []
        for step, active in enumerate(r.active):
            x = inp_steps[step][:active]
            with self._low_precision(y.device):
                for layer in range(rnn.num_layers):
                    if layer > 0 and rnn.dropout and rnn.training:
                        x = F.dropout(x, rnn.dropout, training=True)
                    hs[layer] = _cell(rnn, layer, x, _take(hs[layer], active))
                    x = hs[layer][0] if lstm else hs[layer]
            tops.append(x.to(self.dtype))
            picks.append(target[:active, step])
        logp = self.steps.head(torch.cat(tops)).log_softmax(-1).gather(-1, torch.cat(picks)[:, None]).squeeze(-1)
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
        if size is not None:
            size = check_int("chunk_size", size, 1, " (or None)")
        step = total if size is None else size
        for a in range(0, total, step):
            z = min(a + step, total)
            yield _Rows(self.b[a:z], self.i[a:z], self.j[a:z], self.i_host[a:z], self.n)


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


def _run(rnn: nn.RNNBase, x: Tensor, state: State) -> tuple[Tensor, State]:
    """``rnn(x (R, T, I), state)`` whatever its ``batch_first``: outputs ``(R, T, H)`` and the last state."""
    if rnn.batch_first:
        return rnn(x, state)
    out, last = rnn(x.transpose(0, 1), state)
    return out.transpose(0, 1), last


def _weights(rnn: nn.RNNBase, layer: int) -> list[Tensor]:
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh") if rnn.bias else ("weight_ih", "weight_hh")
    return [getattr(rnn, f"{name}_l{layer}") for name in names]


def _sample_pass(rnn: nn.RNNBase, x: Tensor, state: State) -> tuple[Tensor, list[Tensor]]:
    """Run the sample's inputs ``x (B, n, I)`` from ``state``: the top layer's outputs ``(B, n, H)`` and every
    layer's state after every step, ``[(n, L, B, H)]`` (``[h, c]`` for an LSTM).

    RNN and GRU: one call per layer over the whole sequence (on a GPU, ``L`` cuDNN calls): a layer's outputs
    are its states.  LSTM: step by step (``n`` calls of all layers), as no fused call returns the cell state of
    every step.  Dropout between layers as in ``nn.RNN`` (only where the module is in training mode with dropout).
    """
    if isinstance(rnn, nn.LSTM):
        tops, states = [], []
        for t in range(x.shape[1]):
            o, state = _run(rnn, x[:, t:t + 1], state)
            tops.append(o)
            states.append(state)
        return torch.cat(tops, 1), [torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states])]
    call = torch.gru if isinstance(rnn, nn.GRU) else torch.rnn_tanh if rnn.nonlinearity == "tanh" else torch.rnn_relu
    outs = []
    for layer in range(rnn.num_layers):
        if layer > 0 and rnn.dropout and rnn.training:
            x = F.dropout(x, rnn.dropout, training=True)
        # (input, h0, weights, has_biases, num_layers, dropout, train, bidirectional, batch_first), as nn.RNN calls it
        x, _ = call(x, state[layer:layer + 1], _weights(rnn, layer), rnn.bias, 1, 0.0, rnn.training, False, True)
        outs.append(x)  # (B, n, H): the layer's state after every step
    return x, [torch.stack(outs).permute(2, 0, 1, 3)]  # (n, L, B, H)


def _take(state: State, rows: int) -> State:
    return (state[0][:rows], state[1][:rows]) if isinstance(state, tuple) else state[:rows]


def _cell(rnn: nn.RNNBase, layer: int, x: Tensor, state: State) -> State:
    """One step of layer ``layer`` of ``rnn`` with its own weights (same math as ``nn.RNN/LSTM/GRU``)."""
    w = _weights(rnn, layer)
    if isinstance(rnn, nn.LSTM):
        return torch.lstm_cell(x, state, *w)
    if isinstance(rnn, nn.GRU):
        return torch.gru_cell(x, state, *w)
    fn = torch.rnn_tanh_cell if rnn.nonlinearity == "tanh" else torch.rnn_relu_cell
    return fn(x, state, *w)


def _check_fixed(fixed: Tensor, batch: int, length: int, k: int) -> None:
    """Refuse ``fixed`` unless a ``(batch, length)`` long tensor of ``-1`` (free) or values ``0 .. k-1``."""
    if not isinstance(fixed, Tensor) or fixed.dtype != torch.long or tuple(fixed.shape) != (batch, length):
        got = f"{fixed.dtype} {tuple(fixed.shape)}" if isinstance(fixed, Tensor) else type(fixed).__name__
        raise ValueError(f"fixed must be a long tensor of shape ({batch}, {length}) (-1 = free, else the value), got {got}")
    if fixed.numel() and checks.reads_values(fixed) and bool(((fixed < -1) | (fixed >= k)).any()):
        raise ValueError(f"fixed must hold -1 (free) or values 0..{k - 1}; got range {int(fixed.min())}..{int(fixed.max())}")
