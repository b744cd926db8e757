"""Constrained decoding: every model's output made a valid completion of its puzzle.

The shared decoders of :mod:`pseudosl.experiments.decoders` (``constrained``, ``resample``, and ``greedy``, the plain
row again), each a row per model of the tables (``decoders = ["constrained", "resample"]``).  ``alpha_P`` is the
puzzle's conjunction (every row, column and box all different, the givens kept): :func:`~.constraint.puzzle_circuit`
with ``allowed = givens_mask(puzzle)``, one circuit per puzzle, so the puzzles are decoded one by one.  The ConvNet
is the factorized model (its log-softmax), the RNN the autoregressive one (anchored at its greedy decode).

Every output of ``constrained`` and ``resample`` satisfies ``alpha_P``: Consistent is 100 % by construction.  A
generated puzzle has exactly one completion, so ``alpha_P`` has one model and every such decoder returns it whatever
the model: Exact = 100 % too.  Constrained decoding is then a Sudoku solver (what the "perfect Sudoku accuracy" of
locally constrained resampling amounts to); only loaded puzzles with several completions (``data = "csv:..."``)
tell models apart.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import decoders
from ..structured import StructuredModel
from .constraint import givens_mask, puzzle_circuit

__all__ = ["DECODERS", "decode"]

DECODERS = decoders.decoder_labels("constrained", "resample", "greedy")  # name -> row label


@torch.no_grad()
def decode(model: StructuredModel, puzzles: Tensor, decoder: str, *, num_candidates: int,
           generator: torch.Generator | None = None) -> decoders.Decoded:
    """Completions ``(B, size**2)`` of ``puzzles`` (digits, 0 = blank) by ``decoder`` (module docs); the model is in
    eval mode.  ``num_candidates``: ``K`` of the RNN's ``resample``."""
    decoders.check_decoder(decoder, tuple(DECODERS))
    if puzzles.shape[0] == 0:
        return decoders.Decoded(puzzles.clone(), puzzles.new_zeros(0, dtype=torch.float)
                                if decoder == "resample" and model.autoregressive else None)
    target = decoders.Target([puzzle_circuit(p, device=puzzles.device) for p in puzzles.tolist()],
                             givens_mask(puzzles))                       # the givens as unit constraints
    out = decoders.decode(model, puzzles, decoder, target, num_candidates=num_candidates, generator=generator,
                          offered=tuple(DECODERS))
    return decoders.Decoded(out.values + 1, out.ess)
