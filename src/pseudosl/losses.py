"""The semantic loss and related queries for fully-factorized output distributions.

For per-position distributions ``q_v`` (from logits ``(B, n, k)``, or ``(B, n)`` Bernoulli
logits for Boolean circuits) and a constraint ``alpha`` compiled into ``circuit``:

* ``constraint_log_prob``  ``log P_q(alpha AND allowed)``                  ``(B,)`` (``(B, R)`` for R roots)
* ``product_log_prob``     ``log P_q(allowed) + sum_r log P_q(alpha_r | allowed)``                     ``(B,)``
* ``semantic_loss``        ``-product_log_prob``, reduced over the batch (mean of -log, never -log of a mean)
* ``constraint_entropy``   ``H(q(. | alpha AND allowed))``, the entropy of ``q`` conditioned on the constraint

Several roots.  A circuit with ``R`` roots (e.g. one all-different root per Sudoku row, column
and box) is scored by the product of its roots' probabilities given the unit constraints, times
the probability of the unit constraints: the unit constraints count once, not once per root.
For one root this is exactly ``P(alpha AND allowed)``; for several it is exact when the roots
are independent given ``allowed`` and otherwise the standard tractable surrogate for their
conjunction (whose circuit may be intractably large).

One circuit per example.  Where the constraint differs per example (e.g. one Sudoku puzzle's completions),
:func:`semantic_loss` (and :func:`pseudosl.pseudo_semantic_loss`) take a sequence of ``B`` circuits in place
of one: the log-probabilities are computed once for the batch, then each example is scored by its own circuit
(:func:`per_example`: examples that share a circuit object are evaluated together).  The circuits must agree
on ``n``, ``k`` and the number of roots.

``allowed`` is an optional ``(B, n, k)`` bool mask of per-example unary constraints
(``X_v in {c : allowed[b, v, c]}``) conjoined with ``alpha``, e.g. the given cells of a Sudoku.
Conjoining unit constraints only zeroes leaves, so the circuit stays valid.
An unsatisfiable constraint has ``log P = -inf`` (loss ``+inf``) with zero, never NaN, gradients.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import apply_allowed, check_bool, check_dense, require
from .circuit import Circuit
from .numerics import log1mexp

__all__ = ["constraint_log_prob", "product_log_prob", "semantic_loss", "constraint_entropy", "log_probs_from_logits",
           "reduce_loss", "per_example", "check_circuits"]

Reduction = Literal["mean", "sum", "none"]
Circuits = Circuit | Sequence[Circuit]  # one circuit for every example, or one per example


def check_circuits(circuits: Circuits, batch: int) -> list[Circuit]:
    """``circuits`` as a list of ``batch`` circuits (one circuit: the same for every example), or a named error:
    a sequence must hold ``batch`` circuits with the same ``n_vars``, ``n_values`` and ``n_roots``."""
    if isinstance(circuits, Circuit):
        return [circuits] * batch
    if isinstance(circuits, (str, bytes)) or not isinstance(circuits, Sequence):
        raise TypeError(f"circuit must be a pseudosl.Circuit or a sequence of them (one per example), got "
                        f"{type(circuits).__name__}")
    if not circuits:
        raise ValueError("circuit: an empty sequence of circuits; pass one circuit per example (a Circuit for an "
                         "empty batch)")
    if len(circuits) != batch:
        raise ValueError(f"circuit: a sequence of {len(circuits)} circuits for a batch of {batch} examples; pass one "
                         "circuit per example (or one Circuit for all)")
    first = circuits[0]
    for b, c in enumerate(circuits):
        if not isinstance(c, Circuit):
            raise TypeError(f"circuit[{b}] must be a pseudosl.Circuit, got {type(c).__name__}")
        if (c.n_vars, c.n_values, c.n_roots) != (first.n_vars, first.n_values, first.n_roots):
            raise ValueError(f"circuit[{b}] has {c.n_vars} variables x {c.n_values} values and {c.n_roots} roots, "
                             f"circuit[0] {first.n_vars} x {first.n_values} and {first.n_roots}: the circuits of a "
                             "batch must share their shape")
    return list(circuits)


def per_example(circuits: Circuits | Any, fn: Callable[..., Any], *rows: Tensor | None) -> Any:
    """``fn(circuit, *rows)`` with example ``b`` (row ``b`` of every tensor in ``rows``; ``None`` stays ``None``)
    scored by its own circuit ``circuits[b]``; results in the examples' order.  The one place where "one circuit, or
    one per example" is resolved (the losses and the shared decoders use it).  One circuit (or any single constraint
    object, e.g. a :class:`pseudosl.Constraint`): one call on the whole batch.  A sequence (:func:`check_circuits`
    for circuits): one call per distinct object, on its examples.  ``fn`` returns a ``(B, ...)`` tensor or a tuple of
    them (``None`` entries stay ``None``)."""
    if isinstance(circuits, (str, bytes)) or not isinstance(circuits, Sequence):
        return fn(circuits, *rows)
    first = next(r for r in rows if r is not None)
    circuits = (check_circuits(circuits, first.shape[0]) if all(isinstance(c, Circuit) for c in circuits)
                else _one_per_example(circuits, first.shape[0]))
    groups: dict[int, list[int]] = {}
    for b, c in enumerate(circuits):
        groups.setdefault(id(c), []).append(b)
    if len(groups) == 1:
        return fn(circuits[0], *rows)
    parts, order = [], []
    for examples in groups.values():
        index = torch.tensor(examples, device=first.device)
        parts.append(fn(circuits[examples[0]], *(None if r is None else r[index] for r in rows)))
        order += examples
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    inverse = inverse.to(first.device)
    if isinstance(parts[0], tuple):
        return tuple(None if p[0] is None else torch.cat(p)[inverse] for p in zip(*parts))
    return torch.cat(parts)[inverse]


def _one_per_example(constraints: Sequence[Any], batch: int) -> list[Any]:
    if len(constraints) != batch:
        raise ValueError(f"circuit: a sequence of {len(constraints)} constraints for a batch of {batch} examples; "
                         "pass one per example (or one for all)")
    return list(constraints)


def log_probs_from_logits(circuit: Circuit, logits: Tensor) -> Tensor:
    """``(B, n, k)`` log-probabilities: ``log_softmax`` of categorical logits, ``logsigmoid`` of Boolean ones.

    Infinite logits are the one-hot limit, as in the Boolean form: a position with ``+inf`` logits puts
    all its mass on them (shared equally when several are ``+inf``), ``-inf`` is probability 0.  A position
    whose logits are all ``-inf`` has no possible value and is an error, as is NaN.

    Like :meth:`Circuit.categorical_input`, the value checks (NaN, all ``-inf``) run only where
    :meth:`Circuit.validates` says so (by default on CPU, eagerly); elsewhere nothing here reads the data.
    """
    _check_tensor("logits", logits)
    check = circuit.validates(logits)
    if check:
        require(~torch.isnan(logits).any(), "logits contain NaN")
    if logits.dim() == 2 and circuit.n_values == 2:
        return torch.stack([F.logsigmoid(-logits), F.logsigmoid(logits)], dim=-1)
    if logits.dim() == 3:
        return _log_softmax_with_infinities(logits, check)
    raise ValueError(f"logits must have shape (B, {circuit.n_vars}, {circuit.n_values})"
                     + (f" or (B, {circuit.n_vars})" if circuit.n_values == 2 else "") + f"; got {tuple(logits.shape)}")


def _log_softmax_with_infinities(logits: Tensor, check: bool) -> Tensor:
    """``log_softmax(-1)`` extended to ``+inf`` logits (the one-hot limit); ``(B, n, k)``.

    With ``check`` (host-side data allowed) finite logits take the plain path and all-``-inf``
    positions raise; otherwise the one formula below runs for every input, with no data-dependent branch.
    """
    if check and torch.compiler.is_compiling():
        require(~torch.isneginf(logits).all(-1).any(), "logits: a position has all -inf logits (no possible value)")
    elif check:
        if not torch.isinf(logits).any():
            return logits.log_softmax(-1)
        if torch.isneginf(logits).all(-1).any():
            b, v = torch.nonzero(torch.isneginf(logits).all(-1))[0].tolist()
            raise ValueError(f"logits[{b}, {v}] are all -inf: position {v} of example {b} has no possible value")
    top = torch.isposinf(logits)
    limit = torch.where(top, 0.0, float("-inf")).to(logits.dtype)  # the +inf values share the mass
    limit = limit - top.sum(-1, keepdim=True).clamp(min=1).to(logits.dtype).log()
    finite = logits.masked_fill(top, 0.0).log_softmax(-1)  # no NaN in the branch that is not taken
    return torch.where(top.any(-1, keepdim=True), limit, finite)


def constraint_log_prob(circuit: Circuit, log_probs: Tensor, allowed: Tensor | None = None) -> Tensor:
    """``log P(alpha AND allowed)`` for per-position log-probabilities ``(B, n, k)`` (or ``(B, n)`` Boolean)."""
    x = circuit.categorical_input(log_probs)
    return circuit.log_prob(apply_allowed(x, allowed))


def product_log_prob(circuit: Circuit, log_probs: Tensor, allowed: Tensor | None = None, *,
                     negate: bool = False, condition: bool = False) -> Tensor:
    """``(B,)`` ``log P(allowed) + sum_r log P(alpha_r | allowed)`` for normalised log-probabilities.

    With ``condition=True`` the unit constraints are conditioned on instead of conjoined: the
    ``log P(allowed)`` term is dropped, leaving ``sum_r log P(alpha_r | allowed)`` (e.g. "the
    Sudoku groups hold given the givens", without also rewarding the givens themselves).

    With ``negate=True`` every root is replaced by its negation: ``log P(allowed) + sum_r log(1 - P(alpha_r | allowed))``,
    computed stably with ``log1mexp`` (the same as compiling ``not alpha_r``, up to rounding: where
    ``P(alpha_r | allowed)`` is 1 the result is about ``-37`` nats in float64 rather than ``-inf``; compile
    the negation when that matters).  ``P(allowed)`` of a
    fully-factorized distribution is ``prod_v sum_{c allowed} q_v(c)`` (1 without ``allowed``).
    Where ``P(allowed) = 0`` the result is ``-inf``.
    """
    negate, condition = check_bool("negate", negate), check_bool("condition", condition)
    x = circuit.categorical_input(log_probs)
    lp = circuit.log_prob(apply_allowed(x, allowed))
    lp = lp.unsqueeze(-1) if lp.dim() == 1 else lp  # (B, R)
    if allowed is None and not negate:
        return lp.sum(-1)  # P(allowed) = 1: conditioning changes nothing
    log_allowed = apply_allowed(x, allowed).logsumexp(-1).sum(-1) if allowed is not None else lp.new_zeros(len(lp))
    impossible = torch.isneginf(log_allowed)
    safe_allowed = log_allowed.masked_fill(impossible, 0.0).unsqueeze(-1)
    cond = (lp - safe_allowed).clamp(max=0.0)  # log P(alpha_r | allowed), rounding kept <= 0
    if negate:
        cond = log1mexp(cond)
    out = cond.sum(-1) if condition else safe_allowed.squeeze(-1) + cond.sum(-1)
    return out.masked_fill(impossible, float("-inf"))


def semantic_loss(circuit: Circuits, logits: Tensor, reduction: Reduction = "mean",
                  allowed: Tensor | None = None, *, condition: bool = False) -> Tensor:
    """The semantic loss ``-log P(alpha)`` of fully-factorized outputs given by ``logits``.

    Args:
        circuit: the compiled constraint (``n`` variables with ``k`` values), or a sequence of ``B`` circuits,
            one per example (module docs).
        logits: ``(B, n, k)`` unnormalised scores (``log_softmax`` is applied per position),
            or ``(B, n)`` Bernoulli logits when ``k = 2``.
        reduction: ``"mean"`` (default) or ``"sum"`` over the batch of per-example losses, or ``"none"`` (``(B,)``).
        allowed: optional ``(B, n, k)`` bool mask of per-example unit constraints conjoined with ``alpha``.
            Several roots are combined by :func:`product_log_prob` (unit constraints counted once).
        condition: condition on ``allowed`` instead of conjoining it (see :func:`product_log_prob`).

    Example:
        >>> import torch, pseudosl
        >>> c = pseudosl.compile_cnf([[1, 2, 3]])               # at least one of three
        >>> pseudosl.semantic_loss(c, torch.zeros(1, 3))        # -log(1 - 1/8)
        tensor(0.1335)
    """
    condition = check_bool("condition", condition)
    first = circuit if isinstance(circuit, Circuit) else check_circuits(circuit, logits.shape[0])[0]
    lp = per_example(circuit, lambda c, x, a: product_log_prob(c, x, a, condition=condition),
                     log_probs_from_logits(first, logits), allowed)
    return reduce_loss(-lp, reduction)


def constraint_entropy(circuit: Circuit, logits: Tensor, allowed: Tensor | None = None) -> Tensor:
    """Entropy of ``q(y | alpha)``, ``(B,)``, differentiable (it differentiates :meth:`Circuit.log_prob` twice).

    Uses ``H = log Z - sum_{v,c} mu[v,c] * log q_v(c)`` where ``Z = P_q(alpha)`` and
    ``mu = d log Z / d log q`` are the conditional marginals (exact for deterministic circuits).
    """
    lp = apply_allowed(log_probs_from_logits(circuit, logits), allowed)
    if circuit.n_roots != 1:
        raise ValueError(f"constraint_entropy needs a single-rooted circuit, this one has {circuit.n_roots} roots")
    with torch.enable_grad():
        x = lp if lp.requires_grad else lp.detach().requires_grad_()
        log_z = circuit.log_prob(x)
        (mu,) = torch.autograd.grad(log_z.sum(), x, create_graph=logits.requires_grad)
    finite = torch.where(mu > 0, lp, torch.zeros_like(lp))  # 0 * -inf := 0
    return log_z - (mu * finite).flatten(1).sum(1)


def reduce_loss(loss: Tensor, reduction: Reduction) -> Tensor:
    """Reduce per-example losses ``(B,)`` over the batch (the mean of an empty batch is 0, not NaN)."""
    if reduction == "mean":
        return loss.mean() if loss.numel() else loss.sum()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_tensor(name: str, t: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_dense(name, t)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
