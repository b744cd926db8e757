"""Constrained decoding (issue 17): every model's output made a valid completion of its puzzle.

Two decoders, each a row per model of the tables (``decoders = ["constrained", "resample"]``), evaluated on the
checkpoint that greedy decoding is.  ``alpha_P`` is the puzzle's conjunction (every row, column and box all
different, the givens kept): :func:`~.constraint.puzzle_circuit` with ``allowed = givens_mask(puzzle)``, one
circuit per puzzle, so the puzzles are decoded one by one.

=============  ==========================================================  ==========================================
decoder        ConvNet (fully factorized ``q(y | x)``)                      RNN (autoregressive ``p(y | x)``)
=============  ==========================================================  ==========================================
constrained    ``argmax_y q(y | x, alpha_P)``: :meth:`Circuit.mpe` of its   ``argmax`` of the local distribution
               log-softmax                                                  ``p~_a(. | alpha_P)`` around the greedy
                                                                            decode ``a`` (``constrained_sample``,
                                                                            ``mode="mpe"``)
resample       an exact draw from ``q(. | x, alpha_P)``                     locally constrained resampling: ``K``
               (:meth:`Circuit.sample`): for a factorized model the local  candidates from ``p~_a(. | alpha_P)``
               distribution is the model itself, so the draw is exact and  around the greedy decode ``a``, one kept
               ``K`` plays no role                                          with weight ``p / p~_a``; ``K =
                                                                            resample_candidates``
=============  ==========================================================  ==========================================

The RNN's anchor is its greedy decode, not a sample: the proposal is then centred on the model's best guess,
the ``constrained`` output is deterministic, and the resampled output still tends to ``p(. | x, alpha_P)`` as
``K`` grows (any anchor does; the weights correct the proposal).  Draws use a ``torch.Generator`` seeded from
torch's RNG, which the harness seeds with the run's seed before each decoder: the same seed gives the same output.

Every output satisfies ``alpha_P``: Consistent is 100 % by construction.  A generated puzzle has exactly one
completion, so ``alpha_P`` has one model and every decoder returns it whatever the model: Exact = 100 % too.
Constrained decoding is then a Sudoku solver (what the "perfect Sudoku accuracy" of locally constrained
resampling amounts to); only loaded puzzles with several completions (``data = "csv:..."``) tell models apart.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

import pseudosl

from .constraint import givens_mask, puzzle_circuit
from .models import SudokuRNN

__all__ = ["DECODERS", "Decoded", "decode", "check_decoder"]

DECODERS = {"constrained": "constrained", "resample": "resample {resample_candidates}"}  # name -> row label


class Decoded(NamedTuple):
    digits: Tensor       # (B, size**2) long, 1..size: a completion of each puzzle
    ess: Tensor | None   # (B,) effective sample size of the RNN's resampling weights (in [1, K]); None otherwise


def check_decoder(decoder: str) -> None:
    if decoder not in DECODERS:
        raise ValueError(f"decoder = {decoder!r}: expected one of {', '.join(DECODERS)}")


@torch.no_grad()
def decode(model: nn.Module, puzzles: Tensor, decoder: str, *, num_candidates: int,
           generator: torch.Generator | None = None) -> Decoded:
    """Completions ``(B, size**2)`` of ``puzzles`` (digits, 0 = blank) by ``decoder`` (module docs); the model is in
    eval mode.  ``num_candidates``: ``K`` of the RNN's ``resample``."""
    check_decoder(decoder)
    if puzzles.shape[0] == 0:
        return Decoded(puzzles.clone(), puzzles.new_zeros(0, dtype=torch.float) if decoder == "resample" and
                       isinstance(model, SudokuRNN) else None)
    allowed = givens_mask(puzzles)                                     # (B, n, size): the givens as unit constraints
    circuits = [puzzle_circuit(p, device=puzzles.device) for p in puzzles.tolist()]
    if isinstance(model, SudokuRNN):
        return _decode_autoregressive(model, puzzles, allowed, circuits, decoder, num_candidates, generator)
    logp = model(puzzles).log_softmax(-1)                              # (B, n, size) the factorized q(y_i | x)
    out = []
    for i, circuit in enumerate(circuits):
        if decoder == "constrained":
            out.append(circuit.mpe(logp[i:i + 1], allowed[i:i + 1]).values[0])
        else:
            out.append(circuit.sample(logp[i:i + 1], 1, allowed=allowed[i:i + 1], generator=generator).values[0, 0])
    return Decoded(torch.stack(out) + 1, None)


def _decode_autoregressive(model: SudokuRNN, puzzles: Tensor, allowed: Tensor, circuits: list[pseudosl.Circuit],
                           decoder: str, num_candidates: int, generator: torch.Generator | None) -> Decoded:
    anchor = model.generate(puzzles, greedy=True) - 1                  # (B, n) classes, the givens kept
    resample = decoder == "resample"
    out, ess = [], []
    for i, circuit in enumerate(circuits):
        y, diag = pseudosl.constrained_sample(model.engine(puzzles[i:i + 1]), circuit, anchor[i:i + 1],
                                              mode="resample" if resample else "mpe",
                                              num_candidates=num_candidates if resample else None,
                                              allowed=allowed[i:i + 1], generator=generator, return_diagnostics=True)
        out.append(y[0])
        ess.append(diag.ess)
    return Decoded(torch.stack(out) + 1, torch.cat(ess) if resample else None)
