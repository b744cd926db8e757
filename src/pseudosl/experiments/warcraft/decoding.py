"""Constrained decoding: every model's output made a simple path from the top-left to the bottom-right cell.

The shared decoders of :mod:`pseudosl.experiments.decoders` (``constrained``, ``resample``), each a row per model of
the tables (``decoders = ["constrained", "resample"]``).  ``alpha`` is the simple-path circuit the SL and PSL use
(:func:`~.train.path_circuit`: the grid's edges, paths of at most ``max_path_edges`` edges); every map shares it,
so a batch of maps is decoded at once.  The ResNet-18 is the factorized model (independent edges, their
log-sigmoids), the CNN-LSTM the autoregressive one (anchored at its greedy decode).  Every output is a simple path:
Consistent is 100 % by construction; Exact (an optimal path) and the cost ratio say how good the paths are.
"""

from __future__ import annotations

import torch
from torch import Tensor

import pseudosl

from .. import decoders
from ..structured import StructuredModel

__all__ = ["DECODERS", "decode"]

DECODERS = decoders.decoder_labels("constrained", "resample")  # name -> row label


@torch.no_grad()
def decode(model: StructuredModel, maps: Tensor, circuit: pseudosl.Circuit, decoder: str, *, num_candidates: int,
           generator: torch.Generator | None = None) -> decoders.Decoded:
    """Edge vectors ``(B, E)`` of simple paths on ``maps (B, H, W, 3)`` by ``decoder`` (module docs), ``circuit`` the
    simple-path circuit over the ``E`` edges; the model is in eval mode.  ``num_candidates``: ``K`` of the CNN-LSTM's
    ``resample``."""
    return decoders.decode(model, maps, decoder, decoders.Target([circuit]), num_candidates=num_candidates,
                           generator=generator, offered=tuple(DECODERS))
