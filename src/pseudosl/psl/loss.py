"""The pseudo-semantic loss: the semantic loss of the local conditionals around a sample.

For a sample ``y ~ p(. | x)`` (or any given sequence) the loss is

    L(alpha, y) = -log p~_y(alpha) = -log sum_{y~ |= alpha} prod_i p(y~_i | y_{-i}, x),

computed by pushing the ``(B, n, k)`` log-conditionals through the compiled circuit, i.e. the
same :func:`pseudosl.losses.constraint_log_prob` the semantic loss uses.  It is differentiable
w.r.t. the model parameters through the conditionals; the sample itself is a constant.

Sign convention.  By default the loss *maximises* ``p~(alpha)``.  When the circuit encodes an
event to avoid (e.g. "a forbidden word occurs") either

* compile ``not alpha`` and use the default, or
* keep ``alpha`` and pass ``negate=True``: ``L = -log(1 - p~(alpha))``, computed stably with ``log1mexp``.

Both give the same value and gradients (with ``allowed``: ``-log(p~(allowed) - p~(alpha and allowed))``,
which is ``-log p~(not alpha and allowed)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from .. import checks
from ..checks import check_bool, check_candidates, check_sample
from ..circuit import Circuit
from ..losses import Reduction, check_circuits, constraint_log_prob, per_example, product_log_prob, reduce_loss
from ..tokens.constraint import Constraint, sample_satisfies
from .engine import Engine, engine_circuit

__all__ = ["pseudo_semantic_loss", "PSLDiagnostics"]


@dataclass(frozen=True)
class PSLDiagnostics:
    """Per-example diagnostics of one loss evaluation (all detached, shape ``(B,)`` unless noted).

    Attributes:
        satisfied: bool, whether the sample satisfies the constraint (every root) and ``allowed``.
        p_constraint: ``p~_y(alpha and allowed)``; ``(B, R)`` for a circuit with ``R`` roots.
        entropy: entropy of ``p~_y`` (sum over positions of the entropies of the conditionals), nats.
        loss: the unreduced loss.
        conditionals: ``(B, n, k)`` the log-conditionals fed to the circuit.
    """

    satisfied: Tensor
    p_constraint: Tensor
    entropy: Tensor
    loss: Tensor
    conditionals: Tensor


Constraints = Circuit | Constraint | Sequence[Circuit | Constraint]  # one for every example, or one per example


def _check_inputs(engine: Engine, constraint: Constraints, sample: Tensor, candidates: Tensor | None,
                  unexpected: dict[str, Any]) -> tuple[Circuit | list[Circuit], Tensor, Tensor | None]:
    """Name a mismatch between the engine, the constraint and the sample before the model runs."""
    if unexpected:
        names = ", ".join(f"{k}={v!r}" for k, v in unexpected.items())
        hint = ("; the number of values comes from the engine (engine.n_values) and must match the circuit's "
                "(for a bare log_joint: pseudosl.as_engine(log_joint, n_values=k))") if "n_values" in unexpected else ""
        raise ValueError(f"pseudo_semantic_loss got an unexpected argument {names}{hint}; its options are "
                         "reduction, allowed, return_diagnostics, negate, condition, chunk_size, candidates")
    if isinstance(constraint, (Circuit, Constraint)):
        circuits = engine_circuit(engine, constraint)
    elif isinstance(constraint, Sequence) and not isinstance(constraint, (str, bytes)):  # one per example
        circuits = [engine_circuit(engine, c) for c in constraint]
    else:
        raise TypeError(f"circuit must be a pseudosl.Circuit, a pseudosl.Constraint or a sequence of them (one per "
                        f"example), got {type(constraint).__name__}")
    sample = check_sample(sample)
    if isinstance(circuits, list):
        circuits = check_circuits(circuits, sample.shape[0])
    circuit = circuits if isinstance(circuits, Circuit) else circuits[0]
    if sample.shape[1] != circuit.n_vars:
        raise ValueError(f"sample has length {sample.shape[1]} but the circuit has {circuit.n_vars} positions; "
                         f"pass (B, {circuit.n_vars}) sequences (or compile the constraint for length {sample.shape[1]})")
    if engine.value_map is None and sample.numel() and checks.reads_values(sample) and sample.max() >= circuit.n_values:
        raise ValueError(f"sample values must lie in 0..{circuit.n_values - 1} (the circuit's values); "
                         f"got a {int(sample.max())}")
    if candidates is not None:
        if engine.value_map is not None:
            raise ValueError("candidates= applies to engines without a value map (the folded values are fixed)")
        candidates = check_candidates(candidates, sample.shape[0], circuit.n_vars, circuit.n_values, sample.device)
    return circuits, sample, candidates


def _check_conditionals(engine: Engine, cond: Tensor) -> Tensor:
    """Name NaN conditionals (read on CPU only): a position where the model gives every candidate probability 0,
    i.e. an anchor it cannot produce, or a model whose outputs hold NaN."""
    if cond.numel() and checks.reads_values(cond):
        bad = cond.detach().isnan().any(-1)  # (B, n)
        if bad.any():
            b, i = (int(v) for v in bad.nonzero()[0])
            raise ValueError(f"{type(engine).__name__}.local_conditionals is NaN at position {i} of sample {b} "
                             f"({int(bad.sum())} such positions): the model gives every candidate there probability 0 "
                             "(the sample cannot be produced) or its outputs hold NaN; anchor on sequences the model "
                             "can produce (e.g. its own samples)")
    return cond


def _on_values(cond: Tensor, candidates: Tensor, n_values: int, positions: Tensor | None) -> Tensor:
    """Conditionals over the candidates ``(B, n, K)`` -> over the circuit's values ``(B, n, k)``: value
    ``candidates[b, i, j]`` gets ``cond[b, i, j]``, a value that is no candidate probability 0 (a position left
    out of ``positions`` weight 1 for every value, as the engine's ``fill``)."""
    out = cond.new_full((*cond.shape[:2], n_values), float("-inf")).scatter(-1, candidates, cond)
    return out if positions is None else torch.where(positions[..., None], out, torch.zeros_like(out))


def pseudo_semantic_loss(engine: Engine, circuit: Constraints, sample: Tensor, reduction: Reduction = "mean", *,
                         allowed: Tensor | None = None, return_diagnostics: bool = False, negate: bool = False,
                         condition: bool = False, chunk_size: int | None = None, candidates: Tensor | None = None,
                         **unexpected: Any) -> Tensor | tuple[Tensor, PSLDiagnostics]:
    """The pseudo-semantic loss ``-log p~_y(alpha)`` of the model around ``sample``.

    Args:
        engine: the model as an engine (:func:`pseudosl.as_engine`: a :class:`RecurrentDecoder`, an
            ``nn.RNN/GRU/LSTM`` step model, a Hugging Face causal LM or a bare ``log_joint``).
        circuit: the compiled constraint over ``n`` positions with ``k`` values, or a :class:`Constraint`
            (its circuit; its value map must be the engine's).  A circuit with ``R`` roots
            (e.g. one all-different root per Sudoku row, column and box) is scored by
            :func:`pseudosl.losses.product_log_prob`: ``-log p~(allowed) - sum_r log p~(alpha_r | allowed)``
            (the product of the roots' probabilities, unit constraints counted once; not ``p~`` of their conjunction).
            Or a sequence of ``B`` circuits (or constraints), one per example: the conditionals are computed once
            for the batch, then example ``b`` is scored by ``circuit[b]`` (:func:`pseudosl.losses.per_example`).
        sample: ``(B, n)`` long anchor sequences: model samples (``engine.sample()``, ``decoder.sample``),
            greedy decodes or data windows -- any long tensor works; it is detached.  In the model's values
            (token ids for a language model); row ``b`` belongs to the engine's example ``b``.
        reduction: ``"mean"`` / ``"sum"`` over the batch, or ``"none"``.
        allowed: optional ``(B, n, k)`` bool unit constraints conjoined with ``alpha``.
        return_diagnostics: also return a :class:`PSLDiagnostics`.
        negate: minimise ``p~(alpha)`` instead: ``L = -log(1 - p~(alpha))`` (see module docs).
        condition: condition on ``allowed`` instead of conjoining it: ``L = -sum_r log p~(alpha_r | allowed)``.
            A position where ``allowed`` leaves one value then contributes nothing, whatever its conditional,
            so only the others' conditionals are computed (for a Sudoku with 10 blanks, 10 of 81 positions:
            ~8x less work with a recurrent engine), with the same value and gradients.
        chunk_size: the engine's memory bound (neighbour rows per model call).
        candidates: ``(n, K)`` / ``(B, n, K)`` long values per position (``1 <= K <= k``, no repeats, each in
            ``0 .. k-1``; refused by name before the model runs): the conditionals are normalised over them and
            every other value gets probability 0 in ``p~_y``.  Engines with a value map refuse them.

    Example:
        >>> import torch, pseudosl
        >>> b = pseudosl.CircuitBuilder(3, 2)        # y_0 = 1 or y_1 = 1, as a decision on y_0
        >>> root = b.or_(b.literal(0, 1), b.and_(b.literal(0, 0), b.literal(1, 1)))
        >>> circuit = pseudosl.Circuit(b.build(root))
        >>> dec = pseudosl.RecurrentDecoder(n_values=2, length=3, hidden_size=8)
        >>> y = dec.sample(batch_size=4)
        >>> loss = pseudosl.pseudo_semantic_loss(pseudosl.as_engine(dec), circuit, y)
        >>> loss.backward()
    """
    return_diagnostics, negate = check_bool("return_diagnostics", return_diagnostics), check_bool("negate", negate)
    condition = check_bool("condition", condition)
    circuits, sample, candidates = _check_inputs(engine, circuit, sample, candidates, unexpected)
    circuit = circuits if isinstance(circuits, Circuit) else circuits[0]  # the shape the batch shares
    if sample.shape[0] == 0:  # an empty batch: nothing to score, the model is not called
        empty_losses = torch.zeros(0, device=sample.device, requires_grad=torch.is_grad_enabled())
        loss = reduce_loss(empty_losses, reduction)
        if not return_diagnostics:
            return loss
        empty = empty_losses.detach()
        return loss, PSLDiagnostics(satisfied=empty.bool(), p_constraint=empty, entropy=empty, loss=empty,
                                    conditionals=empty.new_zeros(0, circuit.n_vars, circuit.n_values))
    # with condition=True a position where ``allowed`` leaves one value contributes a factor q(a)/q(a) = 1
    # whatever its conditional: compute the conditionals only where there is a choice (e.g. a Sudoku's blanks)
    positions = allowed.sum(-1) > 1 if condition and allowed is not None else None
    cond = _check_conditionals(engine, engine.local_conditionals(sample, chunk_size=chunk_size, candidates=candidates,
                                                                 positions=positions))
    if candidates is not None:
        cond = _on_values(cond, candidates, circuit.n_values, positions)
    losses = -per_example(circuits, lambda c, x, a: product_log_prob(c, x, a, negate=negate, condition=condition),
                          cond, allowed)  # (B,)
    loss = reduce_loss(losses, reduction)
    if not return_diagnostics:
        return loss
    with torch.no_grad():
        lp = per_example(circuits, constraint_log_prob, cond, allowed)  # (B,) or (B, R)
        probs = cond.exp()
        ent = -torch.where(probs > 0, probs * cond, torch.zeros_like(cond)).flatten(1).sum(1)
        satisfied = per_example(circuits, sample_satisfies, engine.circuit_values(sample).detach(), allowed)
        diag = PSLDiagnostics(satisfied=satisfied, p_constraint=lp.detach().exp(), entropy=ent,
                              loss=losses.detach(), conditionals=cond.detach())
    return loss, diag
