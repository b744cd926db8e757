"""Warcraft shortest paths (paper Table 2): the experiment on the shared harness.

    pseudosl warcraft train --quick               # all four models, 6 x 6 grid, minutes on a CPU
    pseudosl warcraft train --preset paper        # 12 x 12, 10K/1K/1K maps, 3 seeds (GPU)
    accelerate launch -m pseudosl.cli warcraft train --quick

Models (``models.py``): ``resnet`` (binary cross-entropy per edge), ``resnet_sl`` (+ semantic loss
of the simple-path circuit on the edge logits), ``lstm`` (CNN-LSTM, teacher-forced cross-entropy),
``lstm_psl`` (+ pseudo-semantic loss around a sample of the CNN-LSTM).  Metrics (``metrics.py``),
greedy decoding on the test split: Exact, Consistent, cost ratio.  The extra decoders ``constrained`` and
``resample`` (``decoders``; :mod:`.decoding`) add a row per model whose outputs are simple paths by
construction.  Seeds, run folders, checkpoints, ``--resume``, results, tables and curves come from
:mod:`pseudosl.experiments.harness`.

Labels.  Whatever the source, the training label of a map is the 4-connected minimum-cost path
recomputed from its ``vertex_weights`` (:func:`~.grid.shortest_paths`), as an edge vector in
:func:`pseudosl.constraints.grid_edges` order.  For generated data that is the stored path; the
real data's stored paths are 8-connected and are kept only for reporting (see docs/warcraft.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import pseudosl

from ..decoders import check_decoder
from ..experiment import Experiment, Splits
from ..harness import train as harness_train
from ..objective import ConstrainedObjective, ConstraintTerm
from .config import CONSTRAINT_LOSS, PRESETS, WarcraftConfig
from .data import SPLITS, WarcraftSplit, load_layout, load_or_generate
from .decoding import DECODERS, decode
from .grid import edge_index, mask_to_edges, shortest_paths
from .metrics import path_metrics
from .models import build_model

__all__ = ["WarcraftExperiment", "WarcraftData", "Objective", "load_data", "evaluate", "path_circuit", "main",
           "PAPER", "LABELS"]

PAPER = {"resnet": {"exact": 55.0, "consistent": 56.9}, "resnet_sl": {"exact": 59.4, "consistent": 61.2},
         "lstm": {"exact": 62.0, "consistent": 76.6}, "lstm_psl": {"exact": 66.0, "consistent": 79.0}}
LABELS = {"resnet": "ResNet-18", "resnet_sl": "ResNet-18 + SL", "lstm": "CNN-LSTM", "lstm_psl": "CNN-LSTM + PSL"}


# -- data -----------------------------------------------------------------------------------------
@dataclass
class WarcraftData:
    """One split ready for training and evaluation."""

    maps: Tensor            # (N, 8k, 8k, 3) uint8
    edges: Tensor           # (N, E) long: the 4-connected minimum-cost path as an edge vector
    weights: np.ndarray     # (N, k, k) float64 cell costs
    optimum: np.ndarray     # (N,) the minimum path cost
    n_paths: np.ndarray     # (N,) number of minimum-cost paths, capped at 2
    relabelled: int         # maps whose stored path is not the 4-connected optimum recomputed here

    def __len__(self) -> int:
        return int(self.maps.shape[0])

    @property
    def grid(self) -> int:
        return int(self.weights.shape[1])


def prepare(split: WarcraftSplit) -> WarcraftData:
    """Recompute the 4-connected minimum-cost path from the weights; edges in ``grid_edges`` order."""
    paths, optimum, n_paths = shortest_paths(split.weights)
    relabelled = int((paths != split.paths).any((1, 2)).sum()) if len(split) else 0
    return WarcraftData(torch.from_numpy(split.maps), torch.from_numpy(mask_to_edges(paths)).long(),
                        split.weights, optimum, n_paths, relabelled)


def load_data(cfg: WarcraftConfig) -> dict[str, WarcraftData]:
    """Train / val / test: the first ``n_*`` maps of each split (generated and cached, or a real-layout folder)."""
    if cfg.data == "generate":
        raw, _ = load_or_generate(cfg.grid, cfg.n_train, cfg.n_val, cfg.n_test, cfg.data_seed, cfg.reject_ties,
                                  cfg.data_dir)
    else:
        raw = load_layout(cfg.data.split(":", 1)[1])
    out = {}
    for s, n in zip(SPLITS, (cfg.n_train, cfg.n_val, cfg.n_test)):
        if len(raw[s]) < n:
            raise ValueError(f"{cfg.data}: the {s} split has {len(raw[s])} maps, but n_{s} = {n}; lower it")
        d = raw[s]
        out[s] = prepare(WarcraftSplit(d.maps[:n], d.paths[:n], d.weights[:n]))
    return out


@lru_cache(maxsize=4)
def path_circuit(k: int, max_edges: int | None = None) -> pseudosl.Circuit:
    """The simple-path circuit over the edges of the k x k grid, paths of at most ``max_edges`` edges.

    Built once per process and shared by every objective (it has buffers, no parameters; building the
    evaluation plan of a large circuit is the costly part, so it is not repeated per run)."""
    return pseudosl.constraints.simple_path(k, k, max_edges)


# -- the training objective ----------------------------------------------------------------------
class Objective(ConstrainedObjective):
    """Negative log-likelihood of the label path + weight x (SL or PSL, as :data:`~.config.CONSTRAINT_LOSS`
    configures the model ``name``) of the simple-path circuit of the ``k x k`` grid; the shared objective
    (:mod:`..objective`)."""

    def __init__(self, model: nn.Module, name: str, cfg: WarcraftConfig, k: int) -> None:
        loss = CONSTRAINT_LOSS[name]
        term = None if loss is None else ConstraintTerm(loss, {"sl": cfg.sl_weight, "psl": cfg.psl_weight}[loss],
                                                        cfg.psl_examples)
        super().__init__(model, term, path_circuit(k, cfg.max_path_edges) if term else None)
        self.name, self.cfg = name, cfg


# -- evaluation ------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model: nn.Module, data: WarcraftData, accelerator: Any, batch_size: int = 250,
             decoder: str | None = None, circuit: pseudosl.Circuit | None = None, num_candidates: int = 16,
             generator: torch.Generator | None = None) -> tuple[dict[str, float], np.ndarray]:
    """Exact, Consistent (%), cost ratio and edge F1 (%) of decodes on ``data``, and the predictions ``(N, E)``.

    Greedy decoding: the ResNet thresholds every edge at probability 0.5, the CNN-LSTM takes the
    argmax edge by edge.  Or the constrained ``decoder`` (:mod:`.decoding`) with the simple-path ``circuit``,
    ``num_candidates`` and ``generator``; the CNN-LSTM's ``resample`` adds ``ess``, the mean effective sample
    size of its weights.  Predictions are gathered over processes (``gather_for_metrics``).
    """
    if decoder is not None:
        check_decoder(decoder, tuple(DECODERS))
        if circuit is None:
            raise ValueError(f"decoder = {decoder!r} needs the simple-path circuit: pass circuit=path_circuit(k)")
    idx = torch.arange(len(data))
    loader = accelerator.prepare(DataLoader(TensorDataset(data.maps, idx), batch_size=batch_size))
    preds, order, ess = [], [], []
    for maps, i in loader:
        if decoder is None:
            out, e = model.greedy(maps), None
        else:
            out, e = decode(model, maps, circuit, decoder, num_candidates=num_candidates, generator=generator)
        out, i = accelerator.gather_for_metrics((out, i))
        preds.append(out.cpu()); order.append(i.cpu())
        if e is not None:
            ess.append(accelerator.gather_for_metrics(e).cpu())
    n_edges = len(edge_index(data.grid)[0])
    pred = np.zeros((len(data), n_edges), dtype=np.int64)
    if preds:
        pred[torch.cat(order).numpy()] = torch.cat(preds).numpy()
    metrics, _ = path_metrics(pred, data.weights, data.optimum, data.edges.numpy())
    if ess:
        metrics["ess"] = torch.cat(ess).float().mean().item()
    return metrics, pred


# -- the experiment ---------------------------------------------------------------------------------
class WarcraftExperiment(Experiment[WarcraftConfig]):
    name = "warcraft"
    config_class = WarcraftConfig
    labels = LABELS
    metrics = ("exact", "consistent", "cost_ratio", "edge_f1")
    units = {"cost_ratio": "x"}
    lower_is_better = frozenset({"cost_ratio"})
    baselines = {"resnet_sl": "resnet", "lstm_psl": "lstm"}
    decoders = DECODERS
    paper = PAPER
    presets = PRESETS

    def load_data(self, cfg: WarcraftConfig) -> Splits:
        d = load_data(cfg)
        tr, val, te = d["train"], d["val"], d["test"]
        k = tr.grid
        desc = (f"{k}x{k} grid ({len(edge_index(k)[0])} edges), {len(tr)} train / {len(val)} validation / "
                f"{len(te)} test maps; {100 * (tr.n_paths > 1).mean():.0f}% of the training maps have several "
                f"minimum-cost paths; {sum(x.relabelled for x in d.values())} stored paths replaced by the "
                f"4-connected optimum")
        return Splits(TensorDataset(tr.maps, tr.edges), val if len(val) else None, te, desc)

    def build_model(self, name: str, cfg: WarcraftConfig) -> nn.Module:
        return build_model(name, cfg, n_edges=2 * _grid(cfg) * (_grid(cfg) - 1))

    def objective(self, model: nn.Module, name: str, cfg: WarcraftConfig) -> nn.Module:
        return Objective(model, name, cfg, _grid(cfg))

    def evaluate(self, model: nn.Module, data: WarcraftData, cfg: WarcraftConfig, accelerator: Any,
                 decoder: str | None = None):
        if decoder is None:
            return evaluate(model, data, accelerator, cfg.eval_batch_size)
        circuit = path_circuit(data.grid, cfg.max_path_edges).to(accelerator.device)
        # the harness seeded torch with the run's seed: the decoder's draws are reproducible
        generator = torch.Generator(accelerator.device).manual_seed(torch.initial_seed())
        return evaluate(model, data, accelerator, cfg.eval_batch_size, decoder=decoder, circuit=circuit,
                        num_candidates=cfg.resample_candidates, generator=generator)

    def plot_examples(self, test: WarcraftData, predictions: dict[str, np.ndarray], path: Path) -> None:
        from .plots import plot_maps
        plot_maps(test, predictions, path, labels=LABELS)

    def fidelity_inputs(self, model: nn.Module, test: WarcraftData, n_examples: int) -> tuple[Any, Tensor, str]:
        """The CNN-LSTM's engine on the first test maps; anchors = its own sampled edge vectors (eval mode)."""
        if not model.autoregressive:
            raise ValueError("pseudosl fidelity needs an autoregressive model (lstm, lstm_psl); this checkpoint "
                             f"holds a {type(model).__name__}")
        if not 1 <= n_examples <= len(test):
            raise ValueError(f"--n-examples must lie in 1..{len(test)} (test maps), got {n_examples}")
        maps = test.maps[:n_examples].to(model.embed.weight.device)
        how = f"the model's sampled edge vectors on the first {n_examples} test maps (eval mode)"
        return model.engine(maps), model.generate(maps, greedy=False), how


def _grid(cfg: WarcraftConfig) -> int:
    """The grid size: ``cfg.grid`` for generated data, read from the maps of a real-layout folder."""
    if cfg.data == "generate":
        return cfg.grid
    shape = np.load(Path(cfg.data.split(":", 1)[1]) / "test_maps.npy", mmap_mode="r").shape
    return int(shape[1]) // 8


def main(cfg: WarcraftConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Train every model in ``cfg.models`` for every seed, then write results, table and figures."""
    return harness_train(WarcraftExperiment(), cfg, resume=resume, overwrite=overwrite)
