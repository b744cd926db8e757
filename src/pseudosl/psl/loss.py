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

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import _validation
from ..circuit import Circuit
from ..losses import Reduction, constraint_log_prob, product_log_prob, reduce_loss
from .neighbours import check_sample, local_conditionals

__all__ = ["pseudo_semantic_loss", "PSLDiagnostics", "conditionals_of", "sample_satisfies"]


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


def conditionals_of(model: Any, sample: Tensor, **kw: Any) -> Tensor:
    """``(B, n, k)`` log-conditionals from an engine (``model.local_conditionals``) or a ``log_joint`` callable."""
    if hasattr(model, "local_conditionals"):
        return model.local_conditionals(sample, **kw)
    if callable(model):
        return local_conditionals(model, sample, **kw)
    raise TypeError("model must be a log_joint callable (y (N, n) -> (N,)) or an engine with "
                    f".local_conditionals(sample); got {type(model).__name__}")


def sample_satisfies(circuit: Circuit, values: Tensor, allowed: Tensor | None = None) -> Tensor:
    """``(B,)`` bool: does each sequence of circuit values satisfy the constraint (and ``allowed``)?

    Evaluates the circuit once on the one-hot log-probabilities of ``values`` (0 at the value, ``-inf``
    elsewhere): the log WMC is 0 for a model and ``-inf`` otherwise.
    """
    values = check_sample(values, circuit.n_values, "values")
    one_hot = torch.full((*values.shape, circuit.n_values), float("-inf"), device=values.device)
    one_hot.scatter_(-1, values.unsqueeze(-1), 0.0)
    with torch.no_grad():
        lp = constraint_log_prob(circuit, one_hot, allowed)
    ok = lp > -0.5
    return ok.all(-1) if ok.dim() == 2 else ok


def _takes_positions(model: Any) -> bool:
    fn = getattr(model, "local_conditionals", None)
    return fn is not None and "positions" in inspect.signature(fn).parameters


def _check_against_circuit(model: Any, circuit: Circuit, sample: Tensor) -> Tensor:
    """Name a mismatch between the sample, the model and the circuit before the model runs."""
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a pseudosl.Circuit, got {type(circuit).__name__}")
    sample = check_sample(sample)
    if sample.shape[1] != circuit.n_vars:
        raise ValueError(f"sample has length {sample.shape[1]} but the circuit has {circuit.n_vars} positions; "
                         f"pass (B, {circuit.n_vars}) sequences (or compile the constraint for length {sample.shape[1]})")
    k = getattr(model, "n_values", None)
    if k is not None and k != circuit.n_values:
        raise ValueError(f"the model has {k} values per position but the circuit has {circuit.n_values}; "
                         f"compile the constraint over the model's values (or fold them with a ValueMap)")
    if (not hasattr(model, "circuit_values") and sample.numel() and _validation.reads_values(sample)
            and sample.max() >= circuit.n_values):
        raise ValueError(f"sample values must lie in 0..{circuit.n_values - 1} (the circuit's values); "
                         f"got a {int(sample.max())}")
    return sample


def pseudo_semantic_loss(model: Any, circuit: Circuit, sample: Tensor, reduction: Reduction = "mean", *,
                         allowed: Tensor | None = None, return_diagnostics: bool = False,
                         negate: bool = False, condition: bool = False,
                         **kw: Any) -> Tensor | tuple[Tensor, PSLDiagnostics]:
    """The pseudo-semantic loss ``-log p~_y(alpha)`` of the model around ``sample``.

    Args:
        model: a ``log_joint`` callable ``y (N, n) -> (N,)`` (generic path, :func:`local_conditionals`)
            or an engine with ``.local_conditionals(sample, **kw)`` (:class:`RecurrentEngine`,
            :class:`CausalLMEngine`), which computes the same conditionals faster.
        circuit: the compiled constraint over ``n`` positions with ``k`` values.  A circuit with ``R`` roots
            (e.g. one all-different root per Sudoku row, column and box) is scored by
            :func:`pseudosl.losses.product_log_prob`: ``-log p~(allowed) - sum_r log p~(alpha_r | allowed)``
            (the product of the roots' probabilities, unit constraints counted once; not ``p~`` of their conjunction).
        sample: ``(B, n)`` long anchor sequences: model samples (:func:`sample_autoregressive`,
            ``decoder.sample``), greedy decodes or data windows -- any long tensor works; it is detached.
            For engines with a value map (:class:`CausalLMEngine`) these are token ids.
        reduction: ``"mean"`` / ``"sum"`` over the batch, or ``"none"``.
        allowed: optional ``(B, n, k)`` bool unit constraints conjoined with ``alpha``.
        return_diagnostics: also return a :class:`PSLDiagnostics`.
        negate: minimise ``p~(alpha)`` instead: ``L = -log(1 - p~(alpha))`` (see module docs).
        condition: condition on ``allowed`` instead of conjoining it: ``L = -sum_r log p~(alpha_r | allowed)``.
            A position where ``allowed`` leaves one value then contributes nothing, whatever its conditional,
            so engines that take ``positions`` (:class:`RecurrentEngine`) compute only the others (for a
            Sudoku with 10 blanks, 10 of 81 positions: ~8x less work), with the same value and gradients.
        **kw: forwarded to the conditionals (``chunk_size``, ``candidates``, ``n_values`` ...).

    Example:
        >>> import torch, pseudosl
        >>> b = pseudosl.CircuitBuilder(3, 2)        # y_0 = 1 or y_1 = 1, as a decision on y_0
        >>> root = b.or_(b.literal(0, 1), b.and_(b.literal(0, 0), b.literal(1, 1)))
        >>> circuit = pseudosl.Circuit(b.build(root))
        >>> dec = pseudosl.RecurrentDecoder(n_values=2, length=3, hidden_size=8)
        >>> y = dec.sample(batch_size=4)
        >>> loss = pseudosl.pseudo_semantic_loss(dec.engine(), circuit, y)
        >>> loss.backward()
    """
    sample = _check_against_circuit(model, circuit, sample)
    if not hasattr(model, "local_conditionals") and "candidates" not in kw:
        kw.setdefault("n_values", circuit.n_values)  # a bare log_joint: the circuit knows k
    if sample.shape[0] == 0:  # an empty batch: nothing to score, the model is not called
        per_example = torch.zeros(0, device=sample.device, requires_grad=torch.is_grad_enabled())
        loss = reduce_loss(per_example, reduction)
        if not return_diagnostics:
            return loss
        empty = per_example.detach()
        return loss, PSLDiagnostics(satisfied=empty.bool(), p_constraint=empty, entropy=empty, loss=empty,
                                    conditionals=empty.new_zeros(0, circuit.n_vars, circuit.n_values))
    if condition and allowed is not None and "positions" not in kw and _takes_positions(model):
        # a position where ``allowed`` leaves one value contributes a factor q(a)/q(a) = 1 whatever its
        # conditional: compute the conditionals only where there is a choice (e.g. a Sudoku's blanks)
        kw["positions"] = allowed.sum(-1) > 1
    cond = conditionals_of(model, sample, **kw)  # (B, n, k)
    per_example = -product_log_prob(circuit, cond, allowed, negate=negate, condition=condition)  # (B,)
    loss = reduce_loss(per_example, reduction)
    if not return_diagnostics:
        return loss
    with torch.no_grad():
        lp = constraint_log_prob(circuit, cond, allowed)  # (B,) or (B, R)
        values = model.circuit_values(sample) if hasattr(model, "circuit_values") else sample
        probs = cond.exp()
        ent = -torch.where(probs > 0, probs * cond, torch.zeros_like(cond)).flatten(1).sum(1)
        diag = PSLDiagnostics(satisfied=sample_satisfies(circuit, values.detach(), allowed),
                              p_constraint=lp.detach().exp(), entropy=ent,
                              loss=per_example.detach(), conditionals=cond.detach())
    return loss, diag
