"""The test-time decoders every experiment shares: one table, :data:`DECODERS`; each decoder a row per model of the
tables (``decoders = [...]``), evaluated on the checkpoint that the model's own decoding is.

A decoder works on any :class:`~.structured.StructuredModel` against a :class:`Target`: the constraint ``alpha``
(one circuit or :class:`pseudosl.Constraint` for the whole batch, e.g. Warcraft's simple paths or a language model's
forbidden words, or one per example, e.g. a Sudoku puzzle's own rules: :func:`pseudosl.losses.per_example` groups
them), optional unit constraints ``allowed``, and for a language model the streaming automaton and the banned token
sequences.

=============  ==========================================================  ==========================================
decoder        factorized model (``q(y | x)``, ``log_probs``)               autoregressive model (``p(y | x)``,
                                                                            ``engine``)
=============  ==========================================================  ==========================================
greedy         the model's own greedy decode (``greedy``): no constraint;  the model's own greedy decode
               the plain row again, as a decoder row
constrained    ``argmax_y q(y | x, alpha)``: :meth:`Circuit.mpe` of its    ``argmax`` of the local distribution
               log-probabilities                                            ``p~_a(. | alpha)`` around the anchor
                                                                            ``a`` (``constrained_sample``,
                                                                            ``mode="mpe"``)
resample       an exact draw from ``q(. | x, alpha)``                       locally constrained resampling: ``K``
               (:meth:`Circuit.sample`): for a factorized model the local  candidates from ``p~_a(. | alpha)``
               distribution is the model itself, so the draw is exact and  around the anchor ``a``, one kept with
               ``K`` plays no role                                          weight ``p / p~_a``; ``K =
                                                                            resample_candidates``
restart        the same exact draw as ``resample``                          ``K`` candidates from ``RestartProposal``:
                                                                            the anchor kept up to just before the first
                                                                            position the repair needs, the rest drawn
                                                                            from ``p`` under the streaming mask; one
                                                                            kept with its weight (tends to
                                                                            ``p(. | x, y_<s, alpha)``, not exact)
banning        --                                                           a draw (``sample``) with Hugging Face's
                                                                            ``NoBadWordsLogitsProcessor`` over
                                                                            ``target.banned`` (token sequences)
processor      --                                                           a draw with
                                                                            :class:`pseudosl.ConstraintLogitsProcessor`
                                                                            streaming ``target.automaton``
=============  ==========================================================  ==========================================

The autoregressive ``constrained`` and ``resample`` rows use Gen-C's local distribution (``proposal=LocalProposal()``,
exact as ``K`` grows); ``restart`` uses ``constrained_sample``'s default for a language model, the sequential
``RestartProposal``, chosen on real text (docs/benchmarks.md "Fluency": Gen-C's local draws around a 135M model's
continuation are not text).
The autoregressive anchor is :meth:`~.structured.StructuredModel.anchor`: the greedy decode for the Sudoku RNN and the
Warcraft CNN-LSTM, the sampled continuation for a language model (whose own decoding is sampling: its ``resample`` row
starts from the very draws of its plain row).  A greedy anchor centres the proposal on the model's best guess, so the
``constrained`` output is deterministic, and the resampled output of a violating anchor still tends to
``p(. | x, alpha)`` as ``K`` grows (any anchor does; the weights correct the proposal).  An anchor that already
satisfies the constraint (and ``allowed``) is returned unchanged by both (``constrained_sample``'s default
``keep_satisfying=True``): a greedy decode in ``alpha`` is the same approximation of ``argmax p(. | x, alpha)`` that
it is of ``argmax p`` (``p(. | alpha)`` is ``p`` restricted to ``alpha``), and a draw of ``p`` in ``alpha`` is a draw
of ``p(. | alpha)``.  So the constrained rows differ from the plain row exactly on the examples whose anchor violates
the constraint.  Draws use the ``generator`` (the experiments seed it from torch's RNG, which the harness seeds with
the run's seed before each decoder; a language model's ``generate`` draws from torch's RNG itself): the same seed gives
the same output.

The sampling decoders (``banning``, ``processor``) are a model's ``sample`` through logits processors
(:attr:`Decoder.processors`); the same processors give the next-token distribution they draw from, e.g. for a
perplexity.  An experiment lists the decoders it offers in one tuple (``decoders = decoder_labels("constrained",
"resample")``); adding one is adding its name there.  A new decoder is one entry of :data:`DECODERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import Tensor

import pseudosl
from pseudosl.generation import LocalProposal, Proposal, RestartProposal
from pseudosl.losses import per_example

from .structured import StructuredModel

__all__ = ["DECODERS", "WITH_CANDIDATES", "Decoder", "Decoded", "Target", "decode", "check_decoder", "decoder_labels"]


class Target(NamedTuple):
    """What the outputs must satisfy: the constraint (one :class:`pseudosl.Circuit` or :class:`pseudosl.Constraint`
    for the whole batch, or one per example), optional unit constraints ``allowed`` ``(B, n, k)`` (e.g. Sudoku's
    givens), and for the sampling decoders of a language model the same constraint as a streaming ``automaton``
    (:class:`pseudosl.tokens.AutomatonConstraint`, any length: ``processor``) and the token sequences ``banned`` by
    ``banning``."""

    circuits: Sequence[Any]
    allowed: Tensor | None = None
    automaton: Any = None
    banned: Sequence[Sequence[int]] | None = None
    violators_only: bool = False  # an autoregressive model's constrained rows: compute only the violating anchors


class Decoded(NamedTuple):
    """A decoder's outputs: ``values (B, n)`` long, one output per example (in the model's values: classes, token
    ids), satisfying its constraint (``greedy``: any); ``ess (B,)``, the effective sample size of an autoregressive
    model's resampling weights (in ``[1, K]``), ``None`` otherwise."""

    values: Tensor
    ess: Tensor | None


Processors = Callable[[StructuredModel, Target, "int | None"], list]


@dataclass(frozen=True)
class Decoder:
    """``label``: the label suffix of its rows (may name config fields in braces, filled from the table's config);
    ``run(model, inputs, target, num_candidates, generator) -> Decoded``; ``processors(model, target,
    max_new_tokens)``: for a sampling decoder, the logits processors of the next-token distribution it draws from
    (``max_new_tokens = None``: for a text of any length, e.g. a held-out text's perplexity), else ``None``."""

    label: str
    run: Callable[[StructuredModel, Any, Target, int, "torch.Generator | None"], Decoded]
    processors: Processors | None = None


def _greedy(model: StructuredModel, inputs: Tensor, target: Target, num_candidates: int,
            generator: torch.Generator | None) -> Decoded:
    return Decoded(model.greedy(inputs), None)


def _local(mode: str, proposal: Proposal):
    resample = mode == "resample"

    def run(model: StructuredModel, inputs: Tensor, target: Target, num_candidates: int,
            generator: torch.Generator | None) -> Decoded:
        circuits = target.circuits[0] if len(target.circuits) == 1 else target.circuits
        if model.autoregressive:
            def local(circuit: Any, x: Tensor, a: Tensor, allowed: Tensor | None) -> tuple[Tensor, Tensor]:
                y, diag = pseudosl.constrained_sample(model.engine(x), circuit, a, mode=mode,
                                                      num_candidates=num_candidates if resample else None,
                                                      proposal=proposal,
                                                      allowed=allowed, generator=generator, return_diagnostics=True)
                return y, diag.ess
            anchor = model.anchor(inputs)                                 # (B, n): greedy decode, or a draw
            if target.violators_only:
                bad = ~_satisfied(model, circuits, anchor, target.allowed)
                values, ess = anchor.clone(), torch.full((anchor.shape[0],), float("nan"), device=anchor.device)
                if bad.any():
                    rows = bad.nonzero().flatten()
                    pick = (lambda t: None if t is None else t[rows])  # noqa: E731
                    sub = [circuits[i] for i in rows.tolist()] if isinstance(circuits, Sequence) else circuits
                    got, got_ess = per_example(sub, local, inputs[rows], anchor[rows], pick(target.allowed))
                    values[rows], ess[rows] = got, got_ess.to(ess.dtype)  # a sequential proposal's ESS is float64
            else:
                values, ess = per_example(circuits, local, inputs, anchor, target.allowed)
            return Decoded(values, ess if resample else None)
        logq = model.log_probs(inputs)                                    # the factorized q(y_i | x)
        if resample:
            draw = lambda c, x, allowed: c.sample(x, 1, allowed=allowed, generator=generator).values[0]  # noqa: E731
            return Decoded(per_example(circuits, draw, logq, target.allowed), None)
        return Decoded(per_example(circuits, lambda c, x, allowed: c.mpe(x, allowed).values, logq, target.allowed),
                       None)
    return run


def _satisfied(model: StructuredModel, circuits: Any, anchor: Tensor, allowed: Tensor | None) -> Tensor:
    """``(B,)`` bool: does each anchor satisfy its constraint (a Constraint reads token ids through its value map)?"""
    def check(c: Any, a: Tensor, al: Tensor | None) -> Tensor:
        if isinstance(c, pseudosl.Constraint):
            return c.satisfied(a, al)
        return pseudosl.sample_satisfies(c, a, al)
    return per_example(circuits, check, anchor, allowed)


def _banned(model: StructuredModel, target: Target, max_new_tokens: int | None) -> list:
    from transformers import NoBadWordsLogitsProcessor
    if not target.banned:
        raise ValueError("decoder 'banning' needs the token sequences to ban: Target(..., banned=[[ids], ...])")
    return [NoBadWordsLogitsProcessor([list(s) for s in target.banned], eos_token_id=model.eos_token_id)]


def _streamed(model: StructuredModel, target: Target, max_new_tokens: int | None) -> list:
    if target.automaton is None:
        raise ValueError("decoder 'processor' needs the constraint as an automaton: Target(..., automaton=...)")
    return [pseudosl.ConstraintLogitsProcessor(target.automaton, eos_token_id=model.eos_token_id,
                                               max_new_tokens=max_new_tokens)]


def _sampling(processors: Processors):
    def run(model: StructuredModel, inputs: Any, target: Target, num_candidates: int,
            generator: torch.Generator | None) -> Decoded:
        return Decoded(model.sample(inputs, processors(model, target, model.new_tokens)), None)
    return run


DECODERS: dict[str, Decoder] = {
    "constrained": Decoder("constrained", _local("mpe", LocalProposal())),
    "resample": Decoder("resample {resample_candidates}", _local("resample", LocalProposal())),
    "restart": Decoder("restart {resample_candidates}", _local("resample", RestartProposal())),
    "greedy": Decoder("greedy", _greedy),
    "banning": Decoder("word banning", _sampling(_banned), _banned),
    "processor": Decoder("constraint processor", _sampling(_streamed), _streamed),
}


WITH_CANDIDATES = frozenset({"resample", "restart"})
"""The decoders that draw ``K`` candidates (``resample_candidates``)."""


def decoder_labels(*names: str) -> dict[str, str]:
    """An experiment's ``decoders``: the named shared decoders, name -> row label."""
    for name in names:
        check_decoder(name)
    return {name: DECODERS[name].label for name in names}


def check_decoder(decoder: str, offered: Sequence[str] = tuple(DECODERS)) -> None:
    """The one decoder-name check: ``decoder`` must be one of ``offered`` (default: every shared decoder)."""
    if decoder not in offered:
        raise ValueError(f"decoder = {decoder!r}: expected one of {', '.join(offered)}")


@torch.no_grad()
def decode(model: StructuredModel, inputs: Any, decoder: str, target: Target, *, num_candidates: int,
           generator: torch.Generator | None = None, offered: Sequence[str] = tuple(DECODERS)) -> Decoded:
    """Outputs ``(B, n)`` for ``inputs`` by ``decoder`` (module docs), one of ``offered`` (an experiment's
    ``decoders``); the model is in eval mode.  ``num_candidates``: ``K`` of an autoregressive model's ``resample``."""
    check_decoder(decoder, tuple(offered))
    return DECODERS[decoder].run(model, inputs, target, num_candidates, generator)
