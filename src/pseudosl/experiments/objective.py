"""What the training loop trains: :class:`Objective`, and the constrained objective the experiments share.

:class:`ConstrainedObjective` is the data term of the model (:meth:`~.structured.StructuredModel.fit`, e.g. the
cross-entropy of the solution) plus ``weight x`` a constraint term chosen by configuration (:class:`ConstraintTerm`):

* ``"sl"``: the semantic loss ``-log P_q(alpha)`` of a factorized model's logits;
* ``"psl"``: the pseudo-semantic loss ``-log p~_y(alpha)`` of an autoregressive model around a sample ``y ~ p``
  of the first ``examples`` examples of the batch (a cost knob), by the model's prefix-reusing engine;
* ``"own"``: the PSL's control without the constraint: the cross-entropy of the targets with the model's own
  sample as the prefix, ``-sum_i log p(target_i | y_<i, x)``, ``y`` drawn as the PSL's anchor (the same engine, the
  same examples), summed over the positions the PSL would score (with ``condition``, those ``allowed`` leaves
  open) and averaged over the examples as the PSL is.  It needs no circuit.  Where the constraint conditioned on
  the inputs has one model (a Sudoku puzzle's completion) the PSL is ``-sum_i log p(target_i | y_-i, x)``, the
  pseudo-log-likelihood of the targets around ``y``: this term asks whether training around one's own samples,
  without the rules, gives what the PSL gives.

The constraint is a circuit or a :class:`pseudosl.Constraint` (a circuit and the value map that folds a large
vocabulary into its values: the PSL then checks that the model's engine folds with the same map), the same for every
example, or a function ``inputs -> circuit or sequence of circuits`` (one per example, e.g. one Sudoku puzzle's
completions): the losses then score each example by its own circuit (:func:`pseudosl.losses.per_example`, the one
place where "one or one per example" is resolved).

``forward`` returns ``(loss, parts)``: ``data`` (the data term), ``constraint`` (weight x SL/PSL, the term added to
the loss) and the unweighted ``sl`` / ``psl`` (the harness logs and plots them per epoch).  Before
``constraint_start_epoch`` (``constrained=False``) the loss is the data term alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

import pseudosl

from .structured import StructuredModel

__all__ = ["Objective", "ConstraintTerm", "ConstrainedObjective", "CONSTRAINT_LOSSES", "CIRCUIT_FREE"]

CONSTRAINT_LOSSES = ("sl", "psl", "own")
CIRCUIT_FREE = frozenset({"own"})  # terms that need no circuit
CircuitOf = (pseudosl.Circuit | pseudosl.Constraint
             | Callable[[Tensor], pseudosl.Circuit | Sequence[pseudosl.Circuit]])


class Objective(nn.Module):
    """A training objective: ``forward(*batch, constrained=bool)`` returns ``(loss, parts)``, ``parts`` mapping
    names to detached scalars (logged in the progress bar); ``model`` is the module it trains (the one the harness
    evaluates and saves).  Wrapping the loss in a module lets ``accelerator.prepare`` (DDP) see every parameter use."""

    model: nn.Module


@dataclass(frozen=True)
class ConstraintTerm:
    """``weight x`` the SL or the PSL (``loss``) of a circuit, or the PSL's control ``"own"`` (module docs).
    ``allowed(inputs)``: unit constraints from the inputs (e.g. Sudoku's givens), or ``None``; ``condition``:
    condition on them instead of conjoining them; ``examples``: the PSL on the first ``m`` examples of each batch
    (default: all)."""

    loss: str
    weight: float
    examples: int | None = None
    allowed: Callable[[Tensor], Tensor | None] | None = None
    condition: bool = False

    def __post_init__(self) -> None:
        if self.loss not in CONSTRAINT_LOSSES:
            raise ValueError(f"loss = {self.loss!r}: expected one of {', '.join(CONSTRAINT_LOSSES)}")


class ConstrainedObjective(Objective):
    """The data term + ``term.weight x`` (SL or PSL) of ``circuit`` (module docs: a circuit or a Constraint, or a
    function of the batch's inputs giving one circuit per example); ``term = None``: the data term alone.  ``augment(inputs,
    targets)``, if given, transforms every training batch (not in eval mode)."""

    def __init__(self, model: StructuredModel, term: ConstraintTerm | None = None,
                 circuit: CircuitOf | None = None, augment: Callable[[Tensor, Tensor], Any] | None = None) -> None:
        super().__init__()
        if (term is not None and term.loss not in CIRCUIT_FREE) != (circuit is not None):
            raise ValueError("a constraint term needs its circuit, and a circuit its term: give both or neither "
                             "(the term 'own' takes no circuit)")
        if term is not None and (term.loss != "sl") != model.autoregressive:
            raise ValueError(f"loss = {term.loss!r} on {'an autoregressive' if model.autoregressive else 'a factorized'} "
                             f"{type(model).__name__}: the SL is for factorized models, the PSL and its control 'own' "
                             f"for autoregressive ones")
        if term is not None and term.loss == "own" and type(model).prefix_nll is StructuredModel.prefix_nll:
            raise ValueError(f"loss = 'own' scores the targets after the model's own sample, which "
                             f"{type(model).__name__} does not implement (StructuredModel.prefix_nll): implement it, "
                             "or use loss = 'psl'")
        folded = isinstance(circuit, pseudosl.Constraint)
        if folded and term.loss == "sl" and circuit.value_map is not None:
            raise ValueError("loss = 'sl' reads the model's own classes: give a circuit (or a Constraint without a "
                             "value map), not a Constraint that folds a vocabulary")
        self.model, self.term, self.augment = model, term, augment
        self.circuit = circuit.circuit if folded else circuit  # a module: moves with the objective (in place)
        self.constraint = circuit  # the Constraint (its circuit is that same module) or the circuit or function

    def forward(self, inputs: Tensor, targets: Tensor, constrained: bool = True) -> tuple[Tensor, dict[str, Tensor]]:
        if self.augment is not None and self.training:
            inputs, targets = self.augment(inputs, targets)
        fit = self.model.fit(inputs, targets)
        loss, parts = fit.loss, {"data": fit.loss.detach()}
        term = self.term
        if term is None or not constrained:  # a model without a constraint loss, or a warm-up epoch
            return loss, parts
        allowed = term.allowed or (lambda x: None)
        if term.loss == "sl":
            circuits = self.circuit_of(inputs)
            circuits = circuits.circuit if isinstance(circuits, pseudosl.Constraint) else circuits
            value = pseudosl.semantic_loss(circuits, fit.logits, allowed=allowed(inputs), condition=term.condition)
        elif term.loss == "psl":
            m = term.examples or inputs.shape[0]
            sample, engine = self.model.psl_inputs(fit, m)  # y ~ p(. | x) (eval mode), then its local conditionals
            value = pseudosl.pseudo_semantic_loss(engine, self.circuit_of(inputs[:m]), sample,
                                                  allowed=allowed(inputs[:m]), condition=term.condition)
        else:  # "own": the targets after the model's own sample, the PSL's anchor
            m = term.examples or inputs.shape[0]
            sample, _ = self.model.psl_inputs(fit, m)                           # (m, n), drawn as the PSL draws it
            nll = self.model.prefix_nll(inputs[:m], targets[:m], sample)        # (m, n): -log p(t_i | y_<i, x)
            mask = allowed(inputs[:m])
            scored = mask.sum(-1) > 1 if term.condition and mask is not None else torch.ones_like(nll, dtype=torch.bool)
            value = (nll * scored).sum(-1).mean()
        parts.update({"constraint": term.weight * value.detach(), term.loss: value.detach()})
        return loss + term.weight * value, parts

    def circuit_of(self, inputs: Tensor) -> pseudosl.Circuit | pseudosl.Constraint | Sequence[pseudosl.Circuit]:
        """The constraint of these inputs: the one circuit or Constraint, or what the function gives for them."""
        c = self.constraint
        return c if isinstance(c, (pseudosl.Circuit, pseudosl.Constraint)) else c(inputs)
