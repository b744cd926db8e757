"""The engine protocol: what the pseudo-semantic loss, the fidelity study and constrained sampling ask of a model.

An *engine* is an autoregressive model ``p(y | x_b)`` over sequences ``y`` of ``n`` values, bound to the
inputs ``x_b`` of ``n_examples`` examples (contexts, prompts) or to none.  Rows of sequences always
travel with the ids of their examples (``example (N,)`` long, ``0 <= example[r] < n_examples``), so a
chunk of rows can never be scored under another example's input.  :func:`pseudosl.as_engine` makes one
from what a user has; the loss (:func:`pseudosl.pseudo_semantic_loss`) and the fidelity study
(:func:`pseudosl.local_fidelity`) take engines only.

===========================================================  ====================================================
member                                                       meaning
===========================================================  ====================================================
``n_values``                                                 ``k``: values per position the circuit reads
``vocab_size``                                               ``V``: values per position of the model's sequences
                                                             (token ids); ``= n_values`` unless folded / restricted
``value_map``                                                :class:`ValueMap` tokens -> circuit values, or ``None``
``n_examples``                                               bound examples, or ``None`` (unbound: any batch)
``length``                                                   ``n`` when the model fixes it (``sample``'s default)
``autoregressive``                                           ``step_log_probs`` and ``sample`` are available
``log_joint(y, example)``                                    ``(N,)`` exact ``log p(y_r | x_{example_r})``, ``y (N, n)``
``log_prob(sequences, *, chunk_size)``                       ``(B, K)`` exact ``log p(y~ | x_b)`` of ``K`` whole
                                                             sequences per example, ``sequences (B, K, n)``
``local_conditionals(sample, *, chunk_size, candidates,``    ``(B, n, K)`` ``log p(y_i = c | y_-i, x_b)`` around
``positions, fill)``                                         ``sample (B, n)`` (circuit values); chunks never mix
                                                             examples
``step_log_probs(y, example)``                               ``(N, n, V)`` ``log p(. | y_<t, x_{example_r})``
``sample(example=None, *, batch_size, length, temperature,`` ``(N, n)`` ancestral samples ``y ~ p(. | x_b)``, one
``top_p, greedy, generator, logits_processor)``              per entry of ``example`` (default: one per bound
                                                             example), in the model's values, without dropout
``circuit_values(y)``                                        the circuit's values of the model's values ``y``
``example_ids(batch)``                                       the examples of the rows of a ``(B, n)`` sample
===========================================================  ====================================================

Sequences are in the model's values (token ids for a language model); ``local_conditionals`` returns
conditionals over the circuit's values: the same values without a value map, the ``D + 1`` folded
values with one.  ``sample`` rows of a bound engine belong to ``example_ids(B)``: ``B`` must equal
``n_examples`` (row ``b`` is example ``b``), or ``n_examples`` is 1 (every row shares the one input).

Engines evaluate deterministically: dropout off, batch norm on running statistics, full precision
(:func:`exact_mode`), whatever the module's mode; they restore the mode afterwards.  ``sample`` draws in the
same mode, so an anchor is a sample of the distribution whose conditionals the engine computes (a draw with
dropout on would come from another one).

Implementations: :class:`~pseudosl.psl.recurrent.RecurrentEngine` (a :class:`~pseudosl.RecurrentDecoder` or any
``nn.RNN/GRU/LSTM`` step model, prefix states reused), :class:`~pseudosl.psl.causal_lm.CausalLMEngine`
(Hugging Face causal LMs, key/value cache reused) and :class:`LogJointEngine` (a bare ``log_joint``:
every neighbour scored as a whole sequence, the reference path).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

from .. import checks, memory
from ..checks import check_bool, check_int, check_sample
from ..circuit import Circuit
from ..tokens.constraint import Constraint
from ..tokens.value_map import ValueMap
from .neighbours import check_log_joint_output, local_conditionals

__all__ = ["Engine", "LogJointEngine", "LogitsHook", "exact_mode", "trainable_recurrence"]

LogitsHook = Callable[[Tensor, Tensor], Tensor]
"""``(prefix (N, t) long, logits (N, V)) -> (N, V)``: what :meth:`Engine.sample` calls before each draw."""


class Engine(abc.ABC):
    """The protocol every engine implements (see the module docs for the table of members)."""

    n_values: int
    vocab_size: int
    value_map: ValueMap | None = None
    n_examples: int | None = None
    length: int | None = None
    autoregressive: bool = False
    dropout: bool = False  # True: the module keeps its train mode (a stochastic estimate, refused by the fidelity study)

    # -- what every engine computes ------------------------------------------------------------------
    @abc.abstractmethod
    def log_joint(self, y: Tensor, example: Tensor) -> Tensor:
        """``(N,)`` exact ``log p(y_r | x_{example_r})`` of rows ``y (N, n)`` (model values) of examples ``example (N,)``."""

    @abc.abstractmethod
    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None,
                           candidates: Tensor | None = None, positions: Tensor | None = None,
                           fill: float = 0.0) -> Tensor:
        """``(B, n, K)`` log-conditionals ``log p(y_i = c | y_-i, x_b)`` in circuit values around ``sample (B, n)``.

        Args:
            sample: ``(B, n)`` long anchors in the model's values; row ``b`` belongs to ``example_ids(B)[b]``.
            chunk_size: a memory bound: at most about this many neighbour rows per model call.
            candidates: ``(n, K)`` / ``(B, n, K)`` long values per position (all ``n_values`` when ``None``;
                ``1 <= K <= n_values``, no repeats, each in ``0 .. n_values-1``: refused by name before the model
                runs); the conditional is normalised over them.  Engines with a value map refuse them.
            positions: ``(B, n)`` bool: compute only these positions; elsewhere every value gets ``fill``.
            fill: see ``positions``.
        """

    def step_log_probs(self, y: Tensor, example: Tensor) -> Tensor:
        """``(N, n, V)`` next-value log-probabilities ``log p(. | y_<t, x_{example_r})`` of rows ``y (N, n)``."""
        raise NotImplementedError(f"{type(self).__name__} has no step log-probabilities (a bare log_joint is not "
                                  "autoregressive): make the engine from the model itself with pseudosl.as_engine")

    def sample(self, example: Tensor | None = None, *, batch_size: int | None = None, length: int | None = None,
               temperature: float = 1.0, top_p: float | None = None, greedy: bool = False,
               generator: torch.Generator | None = None, logits_processor: LogitsHook | None = None) -> Tensor:
        """``(N, n)`` detached long ancestral samples, one per entry of ``example`` (see :meth:`draw_ids`).

        ``logits_processor(prefix (N, t) long, logits (N, V)) -> (N, V)``, when given, rewrites each step's
        next-value logits before ``temperature``, ``top_p`` and the draw (as a Hugging Face ``LogitsProcessor``
        does, but ``prefix`` holds the sampled values only, not the prompt): masks, forced values, a record of
        the draw's distribution (:mod:`pseudosl.generation.proposals` uses it)."""
        raise NotImplementedError(f"{type(self).__name__} cannot sample (a bare log_joint is not autoregressive): "
                                  "make the engine from the model itself with pseudosl.as_engine, or pass samples")

    # -- shared --------------------------------------------------------------------------------------
    def log_prob(self, sequences: Tensor, *, chunk_size: int | None = None) -> Tensor:
        """``(B, K)`` exact ``log p(y~ | x_b)`` of ``K`` whole sequences per example, ``sequences (B, K, n)`` long.

        For importance weights (constrained sampling) and the fidelity study.  Example ``b``'s sequences are
        scored under its input; rows go to :meth:`log_joint` in chunks of at most ``chunk_size``.
        """
        if not isinstance(sequences, Tensor) or sequences.dim() != 3:
            raise ValueError("sequences must be a long tensor of shape (B, K, n), "
                             f"got {tuple(sequences.shape) if isinstance(sequences, Tensor) else type(sequences).__name__}")
        b, k, n = sequences.shape
        rows = check_sample(sequences.reshape(b * k, n), self.vocab_size, "sequences")
        example = self.example_ids(b, rows.device).repeat_interleave(k)
        if chunk_size is not None:
            check_int("chunk_size", chunk_size, 1)
        step = chunk_size or max(1, b * k)
        out = [self.log_joint(rows[a:a + step], example[a:a + step]) for a in range(0, b * k, step)]
        return torch.cat(out).view(b, k) if out else rows.new_zeros(b, k, dtype=torch.get_default_dtype())

    def circuit_values(self, y: Tensor) -> Tensor:
        """The circuit's values of the model's values ``y`` (identity without a value map)."""
        return self.value_map.to_values(y) if self.value_map is not None else y

    def example_ids(self, batch: int, device: torch.device | str | None = None) -> Tensor:
        """``(batch,)`` the examples of the rows of a ``(batch, n)`` sample: row ``b`` is example ``b``, or all
        rows are example 0 when the engine is bound to one input."""
        if self.n_examples is not None and batch != self.n_examples and self.n_examples != 1:
            raise ValueError(f"a batch of {batch} sequences for an engine bound to {self.n_examples} examples: pass "
                             f"one sequence per example ({self.n_examples}), or bind the engine to {batch} inputs")
        if self.n_examples == 1:
            return torch.zeros(batch, dtype=torch.long, device=device)
        return torch.arange(batch, device=device)

    def draw_ids(self, example: Tensor | None, batch_size: int | None, device: torch.device | str | None,
                 length: int = 0) -> Tensor:
        """The example of each row to sample: ``example`` as given; else one row per bound example; else
        ``batch_size`` rows (an unbound engine, or one bound to a single input).  ``batch_size`` rows of ``length``
        values that cannot fit in the free memory are a ``MemoryError`` before anything is allocated."""
        if example is not None:
            if batch_size is not None:
                raise ValueError("pass example= (the example of each draw) or batch_size=, not both")
            if not isinstance(example, Tensor) or example.dtype != torch.long or example.dim() != 1:
                raise TypeError("example must be a 1-D long tensor of example ids")
            return self.check_example(example.to(device), example.shape[0])
        if batch_size is not None:
            batch_size = check_int("batch_size", batch_size, 0)
            memory.check_fits(f"a sample of {batch_size:,} rows of {length} values", batch_size * (length + 1) * 8,
                              torch.device(device if device is not None else "cpu"), "pass a smaller batch_size",
                              elements=batch_size * length)
            if self.n_examples not in (None, 1, batch_size):
                raise ValueError(f"this engine is bound to {self.n_examples} examples: pass example= (the example "
                                 f"of each draw) or batch_size={self.n_examples}, not batch_size={batch_size}")
            return self.example_ids(batch_size, device)
        if self.n_examples is None:
            raise ValueError("this engine is bound to no input: pass batch_size= (the number of samples)")
        return torch.arange(self.n_examples, device=device)

    def check_example(self, example: Tensor, rows: int) -> Tensor:
        """Validate ``example (rows,)`` long ids against the bound examples."""
        if not isinstance(example, Tensor) or example.dtype != torch.long or example.shape != (rows,):
            raise ValueError(f"example must be a long tensor of shape ({rows},) (one example id per row), got "
                             f"{tuple(example.shape) if isinstance(example, Tensor) else type(example).__name__}")
        if self.n_examples is not None and example.numel() and checks.reads_values(example) and (
                example.min() < 0 or example.max() >= self.n_examples):
            raise ValueError(f"example ids must lie in 0..{self.n_examples - 1} (the bound examples); got "
                             f"{int(example.min())}..{int(example.max())}")
        return example

    def sample_length(self, length: int | None) -> int:
        """``length``, or the model's own; a named error when neither is known."""
        if length is None:
            if self.length is None:
                raise ValueError(f"{type(self).__name__} does not fix the sequence length: pass length=n")
            return self.length
        length = check_int("length", length, 1)
        if self.length is not None and length != self.length:
            raise ValueError(f"this model generates sequences of length {self.length}, not length={length}")
        return length


class LogJointEngine(Engine):
    """A bare ``log_joint(y (N, n), example (N,)) -> (N,)`` as an engine: every neighbour of the sample is scored
    as a whole sequence (:func:`~pseudosl.psl.neighbours.local_conditionals`, ``B n k`` rows).

    ``example[r]`` is the row of the caller's batch that row ``r`` belongs to (its context, if any); a
    context-free model ignores it.  Not autoregressive: no sampling, no step log-probabilities.

    Example:
        >>> import torch
        >>> table = torch.randn(2, 2).flatten().log_softmax(0).view(2, 2)
        >>> engine = LogJointEngine(lambda y, example: table[y[:, 0], y[:, 1]], n_values=2)
        >>> cond = engine.local_conditionals(torch.tensor([[0, 1]]))        # (B, n, k) log p(y_i = c | y_-i)
        >>> torch.allclose(cond.exp().sum(-1), torch.ones(1, 2))
        True
    """

    def __init__(self, log_joint: Callable[[Tensor, Tensor], Tensor], n_values: int, *,
                 recompute: bool = True) -> None:
        if not callable(log_joint):
            raise TypeError(f"log_joint must be callable (y (N, n), example (N,)) -> (N,), got {type(log_joint).__name__}")
        self.fn = log_joint
        self.n_values = self.vocab_size = check_int("n_values", n_values, 2)
        self.recompute = check_bool("recompute", recompute)

    def log_joint(self, y: Tensor, example: Tensor) -> Tensor:
        try:
            out = self.fn(y, example)
        except TypeError as e:
            raise TypeError(f"log_joint(y, example) raised TypeError: {e}. A bare log_joint takes the rows y (N, n) "
                            "and their example ids (N,) (lambda y, example: ... for a model without inputs); for an "
                            "nn.RNN/GRU/LSTM step model pass rnn=, embed=, head= to pseudosl.as_engine") from e
        return check_log_joint_output(out, y.shape[0])

    def local_conditionals(self, sample: Tensor, *, chunk_size: int | None = None,
                           candidates: Tensor | None = None, positions: Tensor | None = None,
                           fill: float = 0.0) -> Tensor:
        return local_conditionals(self.log_joint, sample, n_values=self.n_values, candidates=candidates,
                                  chunk_size=chunk_size, recompute=self.recompute, positions=positions, fill=fill)


# -- evaluation modes ------------------------------------------------------------------------------------
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


def engine_circuit(engine: "Engine", constraint: Circuit | Constraint) -> Circuit:
    """The circuit of ``constraint`` for ``engine``, or a named error: the engine is an :class:`Engine`, a
    :class:`~pseudosl.Constraint` folds tokens as the engine does, the circuit reads the engine's values (the one
    check of it).  The loss and constrained sampling check their inputs with it before the model runs."""
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a pseudosl engine, got {type(engine).__name__}; make one with "
                        "pseudosl.as_engine(model, ...) (a RecurrentDecoder, an nn.RNN/GRU/LSTM step model, "
                        "a Hugging Face causal LM, or a log_joint(y, example) with n_values=k)")
    if isinstance(constraint, Constraint):
        if constraint.value_map != engine.value_map:
            raise ValueError(f"the constraint folds tokens with {constraint.value_map} but the engine with "
                             f"{engine.value_map}; build the engine with value_map=constraint.value_map")
        circuit = constraint.circuit
    elif isinstance(constraint, Circuit):
        circuit = constraint
    else:
        raise TypeError(f"circuit must be a pseudosl.Circuit or a pseudosl.Constraint, got {type(constraint).__name__}")
    if engine.n_values != circuit.n_values:
        raise ValueError(f"the model has {engine.n_values} values per position but the circuit has {circuit.n_values}; "
                         f"compile the constraint over the model's values (or fold them with a ValueMap)")
    return circuit
