"""Constrained decoding (issue 17): every model's output made a simple path from the top-left to the bottom-right cell.

Two decoders, each a row per model of the tables (``decoders = ["constrained", "resample"]``), evaluated on the
checkpoint that greedy decoding is.  ``alpha`` is the simple-path circuit the SL and PSL use
(:func:`~.train.path_circuit`: the grid's edges, paths of at most ``max_path_edges`` edges); every map shares it,
so a batch of maps is decoded at once.

=============  ==========================================================  ==========================================
decoder        ResNet-18 (independent edges ``q(y | map)``)                CNN-LSTM (autoregressive ``p(y | map)``)
=============  ==========================================================  ==========================================
constrained    ``argmax_y q(y | map, alpha)``: :meth:`Circuit.mpe` of its   ``argmax`` of the local distribution
               edge log-probabilities                                       ``p~_a(. | alpha)`` around the greedy
                                                                            decode ``a`` (``constrained_sample``,
                                                                            ``mode="mpe"``)
resample       an exact draw from ``q(. | map, alpha)``                     locally constrained resampling: ``K``
               (:meth:`Circuit.sample`): the edges are independent, so the  candidates from ``p~_a(. | alpha)``,
               local distribution is the model itself and ``K`` plays no   one kept with weight ``p / p~_a``;
               role                                                         ``K = resample_candidates``
=============  ==========================================================  ==========================================

The CNN-LSTM's anchor is its greedy decode (the proposal centred on its best guess; the resampled output still
tends to ``p(. | map, alpha)`` as ``K`` grows).  Draws use a ``torch.Generator`` seeded from torch's RNG, which the
harness seeds with the run's seed before each decoder.  Every output is a simple path: Consistent is 100 % by
construction; Exact (an optimal path) and the cost ratio say how good the paths are.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import pseudosl

from .models import CNNLSTM

__all__ = ["DECODERS", "Decoded", "decode", "check_decoder"]

DECODERS = {"constrained": "constrained", "resample": "resample {resample_candidates}"}  # name -> row label


class Decoded(NamedTuple):
    edges: Tensor        # (B, E) long 0/1: a simple path per map
    ess: Tensor | None   # (B,) effective sample size of the CNN-LSTM's resampling weights (in [1, K]); None otherwise


def check_decoder(decoder: str) -> None:
    if decoder not in DECODERS:
        raise ValueError(f"decoder = {decoder!r}: expected one of {', '.join(DECODERS)}")


@torch.no_grad()
def decode(model: nn.Module, maps: Tensor, circuit: pseudosl.Circuit, decoder: str, *, num_candidates: int,
           generator: torch.Generator | None = None) -> Decoded:
    """Edge vectors ``(B, E)`` of simple paths on ``maps (B, H, W, 3)`` by ``decoder`` (module docs), ``circuit`` the
    simple-path circuit over the ``E`` edges; the model is in eval mode.  ``num_candidates``: ``K`` of the CNN-LSTM's
    ``resample``."""
    check_decoder(decoder)
    if isinstance(model, CNNLSTM):
        ctx, steps = model.conditioning(maps)                          # (B, 128), (B, E, 128 + pos)
        anchor = model.decoder.sample(context=ctx, step_inputs=steps, greedy=True)  # (B, E) the greedy decode
        resample = decoder == "resample"
        y, diag = pseudosl.constrained_sample(model.decoder.engine(ctx, steps), circuit, anchor,
                                              mode="resample" if resample else "mpe",
                                              num_candidates=num_candidates if resample else None,
                                              generator=generator, return_diagnostics=True)
        return Decoded(y, diag.ess if resample else None)
    log_q = F.logsigmoid(model(maps))                                  # (B, E) log q(edge on | map)
    if decoder == "constrained":
        return Decoded(circuit.mpe(log_q).values, None)
    return Decoded(circuit.sample(log_q, 1, generator=generator).values[0], None)
