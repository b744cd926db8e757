"""The test-time decoders every experiment shares: each a row per model of the tables (``decoders = [...]``),
evaluated on the checkpoint that the model's own greedy decoding is.

A decoder works on any :class:`~.structured.StructuredModel` against a :class:`Target`: the constraint ``alpha``
of each example (one circuit per example, e.g. a Sudoku puzzle's own rules, or one circuit for the whole batch,
e.g. Warcraft's simple paths) and optional unit constraints ``allowed``.

=============  ==========================================================  ==========================================
decoder        factorized model (``q(y | x)``, ``log_probs``)               autoregressive model (``p(y | x)``,
                                                                            ``engine``)
=============  ==========================================================  ==========================================
greedy         the model's own greedy decode (``greedy``): no constraint;  the model's own greedy decode ``a``
               the plain row again, as a decoder row
constrained    ``argmax_y q(y | x, alpha)``: :meth:`Circuit.mpe` of its    ``argmax`` of the local distribution
               log-probabilities                                            ``p~_a(. | alpha)`` around the greedy
                                                                            decode ``a`` (``constrained_sample``,
                                                                            ``mode="mpe"``)
resample       an exact draw from ``q(. | x, alpha)``                       locally constrained resampling: ``K``
               (:meth:`Circuit.sample`): for a factorized model the local  candidates from ``p~_a(. | alpha)``
               distribution is the model itself, so the draw is exact and  around the greedy decode ``a``, one kept
               ``K`` plays no role                                          with weight ``p / p~_a``; ``K =
                                                                            resample_candidates``
=============  ==========================================================  ==========================================

The autoregressive rows use Gen-C's local distribution (``proposal=LocalProposal()``; ``constrained_sample``'s default
for a language model is the sequential ``RestartProposal``, chosen on real text, docs/benchmarks.md "Fluency").  The
autoregressive anchor is the greedy decode, not a sample: the proposal is then centred on the model's best guess,
the ``constrained`` output is deterministic, and the resampled output of a violating anchor still tends to
``p(. | x, alpha)`` as ``K`` grows (any anchor does; the weights correct the proposal).  A greedy decode that already
satisfies the constraint (and ``allowed``) is returned unchanged by both (``constrained_sample``'s default
``keep_satisfying=True``).  It is not a draw from ``p``, so the mixture argument of ``docs/psl.md`` does not apply to
it; the choice rests on what the decoders are for: the greedy decode approximates ``argmax p``, and when it lies in
``alpha`` it is the same approximation of ``argmax p(. | x, alpha)`` (``p(. | alpha)`` is ``p`` restricted to
``alpha``), which ``argmax`` of the local distribution, or one weighted draw, could only move away from.  So the
constrained rows differ from the greedy row exactly on the examples whose greedy decode violates the constraint.  Draws use the ``generator`` (the experiments seed it from
torch's RNG, which the harness seeds with the run's seed before each decoder): the same seed gives the same output.

An experiment lists the decoders it offers in one tuple (``decoders = decoder_labels("constrained", "resample")``);
adding one is adding its name there.  A new decoder is one entry of :data:`DECODERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

import pseudosl
from pseudosl.generation import LocalProposal

from .structured import StructuredModel

__all__ = ["DECODERS", "Decoder", "Decoded", "Target", "decode", "check_decoder", "decoder_labels"]


class Target(NamedTuple):
    """What the outputs must satisfy: one circuit per example, or one circuit for the whole batch, and optional
    unit constraints ``allowed`` ``(B, n, k)`` (e.g. Sudoku's givens)."""

    circuits: Sequence[pseudosl.Circuit]
    allowed: Tensor | None = None


class Decoded(NamedTuple):
    values: Tensor       # (B, n) long classes: an output per example, satisfying its circuit (greedy: any)
    ess: Tensor | None   # (B,) effective sample size of an autoregressive model's resampling weights; None otherwise


@dataclass(frozen=True)
class Decoder:
    label: str           # the label suffix of its rows; may name config fields in braces, filled from the table's config
    run: Callable[[StructuredModel, Tensor, Target, int, "torch.Generator | None"], Decoded]


def _chunks(n: int, target: Target) -> list[tuple[slice, pseudosl.Circuit, Tensor | None]]:
    """The examples decoded together: all of them with a shared circuit, else one by one with their own."""
    if len(target.circuits) == 1:
        return [(slice(0, n), target.circuits[0], target.allowed)]
    if len(target.circuits) != n:
        raise ValueError(f"target: {len(target.circuits)} circuits for {n} examples; give one, or one per example")
    return [(slice(i, i + 1), c, None if target.allowed is None else target.allowed[i:i + 1])
            for i, c in enumerate(target.circuits)]


def _greedy(model: StructuredModel, inputs: Tensor, target: Target, num_candidates: int,
            generator: torch.Generator | None) -> Decoded:
    return Decoded(model.greedy(inputs), None)


def _local(mode: str):
    def run(model: StructuredModel, inputs: Tensor, target: Target, num_candidates: int,
            generator: torch.Generator | None) -> Decoded:
        resample = mode == "resample"
        out, ess = [], []
        if model.autoregressive:
            anchor = model.greedy(inputs)                                 # (B, n) the greedy decode
            for rows, circuit, allowed in _chunks(inputs.shape[0], target):
                y, diag = pseudosl.constrained_sample(model.engine(inputs[rows]), circuit, anchor[rows],
                                                      mode="resample" if resample else "mpe",
                                                      num_candidates=num_candidates if resample else None,
                                                      proposal=LocalProposal(),
                                                      allowed=allowed, generator=generator, return_diagnostics=True)
                out.append(y)
                ess.append(diag.ess)
            return Decoded(torch.cat(out), torch.cat(ess) if resample else None)
        logq = model.log_probs(inputs)                                    # the factorized q(y_i | x)
        for rows, circuit, allowed in _chunks(inputs.shape[0], target):
            if resample:
                out.append(circuit.sample(logq[rows], 1, allowed=allowed, generator=generator).values[0])
            else:
                out.append(circuit.mpe(logq[rows], allowed).values)
        return Decoded(torch.cat(out), None)
    return run


DECODERS: dict[str, Decoder] = {
    "constrained": Decoder("constrained", _local("mpe")),
    "resample": Decoder("resample {resample_candidates}", _local("resample")),
    "greedy": Decoder("greedy", _greedy),
}


def decoder_labels(*names: str) -> dict[str, str]:
    """An experiment's ``decoders``: the named shared decoders, name -> row label."""
    for name in names:
        check_decoder(name)
    return {name: DECODERS[name].label for name in names}


def check_decoder(decoder: str, offered: Sequence[str] = tuple(DECODERS)) -> None:
    if decoder not in offered:
        raise ValueError(f"decoder = {decoder!r}: expected one of {', '.join(offered)}")


@torch.no_grad()
def decode(model: StructuredModel, inputs: Tensor, decoder: str, target: Target, *, num_candidates: int,
           generator: torch.Generator | None = None) -> Decoded:
    """Outputs ``(B, n)`` (classes) for ``inputs`` by ``decoder`` (module docs); the model is in eval mode.
    ``num_candidates``: ``K`` of an autoregressive model's ``resample``."""
    check_decoder(decoder)
    return DECODERS[decoder].run(model, inputs, target, num_candidates, generator)
