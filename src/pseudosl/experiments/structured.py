"""The surface through which the shared objective (:mod:`.objective`) and decoders (:mod:`.decoders`) use a model.

An experiment's model subclasses :class:`StructuredModel`: a network over structured outputs ``y = (y_0 .. y_{n-1})``
(classes ``0 .. k-1``) given inputs ``x``, either fully factorized (``autoregressive = False``: ``q(y | x) =
prod_i q(y_i | x)``, read by :meth:`~StructuredModel.log_probs`) or autoregressive (``autoregressive = True``:
``p(y | x)``, whose exact local conditionals :meth:`~StructuredModel.engine` returns).  Nothing else is asked of it,
so nothing dispatches on the model's class.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from torch import Tensor, nn

__all__ = ["Fit", "StructuredModel"]


class Fit(NamedTuple):
    """The data term of a batch and what the constraint term reuses of it (so a batch is encoded once)."""

    loss: Tensor                # the data term: the model's negative log-likelihood of the targets (a scalar)
    logits: Tensor | None       # factorized model: the logits the semantic loss reads; None otherwise
    conditioning: Any = None    # autoregressive model: what :meth:`StructuredModel.psl_inputs` reuses


class StructuredModel(nn.Module):
    """A model of structured outputs (module docs).  ``fit`` and ``greedy`` for every model; ``log_probs`` for a
    factorized one; ``engine``, ``psl_inputs``, ``anchor`` and ``prefix_nll`` for an autoregressive one; ``sample`` for
    one whose decoding is sampling."""

    autoregressive: ClassVar[bool] = False

    def fit(self, inputs: Tensor, targets: Tensor) -> Fit:
        """The data term on ``targets`` (teacher-forced for an autoregressive model) and what the SL/PSL reuse."""
        raise NotImplementedError(f"{type(self).__name__}.fit")

    def greedy(self, inputs: Tensor) -> Tensor:
        """The model's own greedy decode ``(B, n)``, classes ``0 .. k-1``."""
        raise NotImplementedError(f"{type(self).__name__}.greedy")

    def anchor(self, inputs: Tensor) -> Tensor:
        """Autoregressive: the output ``(B, n)`` the constrained decoders start from (:mod:`.decoders`): the greedy
        decode; a model whose own decoding is sampling (a language model) returns its draw."""
        return self.greedy(inputs)

    def sample(self, inputs: Any, processors: list) -> Tensor:
        """Autoregressive, sampling decoders (a language model): one draw ``(B, n)`` per input from the model's own
        sampling distribution, each next-token distribution passed through ``processors`` first (Hugging Face
        logits processors, ``(input_ids, scores) -> scores``)."""
        raise NotImplementedError(f"{type(self).__name__} does not decode by sampling")

    def log_probs(self, inputs: Tensor) -> Tensor:
        """Factorized: ``log q(y_i | x)``, ``(B, n, k)`` (or ``(B, n)`` ``log q(y_i = 1 | x)`` for Boolean outputs)."""
        raise NotImplementedError(f"{type(self).__name__} is autoregressive: it has no factorized log_probs")

    def engine(self, inputs: Tensor) -> Any:
        """Autoregressive: the exact local conditionals ``p(y_i | y_-i, x)`` (a :class:`pseudosl.Engine`)."""
        raise NotImplementedError(f"{type(self).__name__} is not autoregressive: it has no engine")

    def prefix_nll(self, inputs: Tensor, targets: Tensor, prefix: Tensor) -> Tensor:
        """Autoregressive: ``-log p(target_i | prefix_<i, x)`` per position ``(B, n)``: the targets scored after
        the prefix ``prefix`` ``(B, n)`` (classes, e.g. the model's own sample) instead of after themselves (the
        objective's control ``"own"``)."""
        raise NotImplementedError(f"{type(self).__name__} is not autoregressive: it has no prefixes")

    def psl_inputs(self, fit: Fit, m: int) -> tuple[Tensor, Any]:
        """Autoregressive: for the PSL of the first ``m`` examples of ``fit``'s batch, a sample ``y ~ p(. | x)``
        ``(m, n)`` (classes; drawn first) and the engine around which its local conditionals are computed.  Draw
        the sample by the engine (``engine.sample``): from the distribution whose conditionals it computes (eval
        mode, dropout off), not from the module in its train mode (a dropout-masked model is another
        distribution)."""
        raise NotImplementedError(f"{type(self).__name__} is not autoregressive: it has no local distribution")
