"""Sudoku as autoregressive generation (paper Table 1): the experiment on the shared harness.

    pseudosl sudoku train --quick                 # all four models, small data, ~minutes on a CPU
    pseudosl sudoku train --preset paper          # 9K/1K puzzles, 3 seeds (GPU)
    accelerate launch -m pseudosl.cli sudoku train --quick

Models (``models.py``): ``convnet`` (cross-entropy), ``convnet_sl`` (+ semantic loss),
``rnn`` (teacher-forced cross-entropy), ``rnn_psl`` (+ pseudo-semantic loss), ``rnn_own`` (the PSL's control: +
the cross-entropy of the solution after the model's own sample, no rules).  Boards of side
``cfg.size`` (9, or 4 / 6 for the CPU regime).  Metrics, greedy decoding on the test split: Exact
(grid == the stored solution), Consistent (every row, column and box distinct and the givens kept:
a valid completion, whichever) and the accuracy on blank cells.  Generated puzzles have a unique
solution, so there Exact = Consistent; on loaded puzzles with several completions they differ.  The extra
decoders ``constrained`` and ``resample`` (``decoders``; :mod:`.decoding`) add a row per model whose outputs
are valid completions by construction.  Seeds, run folders, checkpoints, ``--resume``, results, tables and
curves come from :mod:`pseudosl.experiments.harness`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from ..config import model_variant, split_model
from ..decoders import check_decoder
from ..experiment import Experiment, Splits
from ..harness import train as harness_train
from ..objective import CIRCUIT_FREE, ConstrainedObjective, ConstraintTerm
from ..summary import CHOSEN
from .config import CONSTRAINT_LOSS, PRESETS, SudokuConfig
from .constraint import BOARD_SIZES, board_circuit, givens_mask, is_consistent, puzzle_circuits, sudoku_circuit
from .data import SudokuData, load_csv, load_or_generate, load_satnet
from .decoding import DECODERS, decode
from .models import build_model
from .split import GRID_SPLITS, augmentation, load_or_generate_part, split_seed

__all__ = ["SudokuExperiment", "Objective", "constraint_circuit", "load_data", "predict", "evaluate", "main", "PAPER",
           "LABELS"]

PAPER = {"convnet": {"exact": 16.80}, "convnet_sl": {"exact": 22.10}, "rnn": {"exact": 22.40},
         "rnn_psl": {"exact": 28.20}}
PSL_CHOSEN = f"rnn_psl@psl_weight={CHOSEN}"  # the PSL row whose weight each seed chose on validation
LABELS = {"convnet": "ConvNet", "convnet_sl": "ConvNet + SL", "rnn": "RNN", "rnn_psl": "RNN + PSL",
          "rnn_own": "RNN + own-sample CE"}


# -- data -----------------------------------------------------------------------------------------
def load_data(cfg: SudokuConfig, seed: int | None = None) -> tuple[SudokuData, SudokuData | None, SudokuData]:
    """Train, validation (``None`` when ``n_val = 0``) and test splits (of model seed ``seed``: ``split =
    "balanced"`` draws a split per model seed, and needs it).  ``split = "random"``: in that order of the data set,
    the first ``n_train`` puzzles train, the next ``n_test`` test, the next ``n_val`` validate (so the test split is
    the same whatever ``n_val``); ``"grids"`` / ``"balanced"``: each from its own classes of solution grids
    (:mod:`.split`; the test split is the same whatever ``n_train`` and ``n_val``)."""
    if cfg.split in GRID_SPLITS:  # config.check: data = "generate"
        balanced = cfg.split == "balanced"
        if balanced and seed is None:
            raise ValueError("split = 'balanced' draws a split per model seed: pass the seed")
        data_seed = split_seed(cfg.data_seed, seed) if balanced else cfg.data_seed
        train, val, test = (load_or_generate_part(part, k, cfg.n_missing, data_seed, cfg.satnet_dist,
                                                  cfg.data_dir, cfg.size, balanced) if k else None
                            for part, k in (("train", cfg.n_train), ("val", cfg.n_val), ("test", cfg.n_test)))
        return train, val, test
    n = cfg.n_train + cfg.n_test + cfg.n_val
    if cfg.data == "generate":
        data = load_or_generate(n, cfg.n_missing, cfg.data_seed, cfg.satnet_dist, cfg.data_dir, cfg.size)
    elif cfg.data.startswith("satnet:"):
        data = load_satnet(cfg.data.split(":", 1)[1])
    else:
        data = load_csv(cfg.data.split(":", 1)[1], cfg.size)
    if data.size != cfg.size:
        raise ValueError(f"{cfg.data}: {data.size}x{data.size} puzzles, but size = {cfg.size}; set size = {data.size}")
    if len(data) < n:
        raise ValueError(f"{cfg.data}: {len(data)} puzzles, but n_train + n_test + n_val = {n}; lower them")
    a, b = cfg.n_train, cfg.n_train + cfg.n_test
    return data[:a], (data[b:n] if cfg.n_val else None), data[a:b]


# -- the training objective ----------------------------------------------------------------------
class Objective(ConstrainedObjective):
    """Cross-entropy on the solution + weight x (SL or PSL, as :data:`~.config.CONSTRAINT_LOSS` configures the model
    ``name``) of the Sudoku rules (``cfg.constraint``: :func:`constraint_circuit`), the givens as ``cfg.givens``
    says; for ``rnn_own`` (the PSL's control) ``psl_weight x`` the solution's cross-entropy after the model's own
    sample, on the cells the PSL scores; the shared objective (:mod:`..objective`)."""

    def __init__(self, model: nn.Module, name: str, cfg: SudokuConfig) -> None:
        loss = CONSTRAINT_LOSS[name]
        term = None if loss is None else ConstraintTerm(
            loss, {"sl": cfg.sl_weight, "psl": cfg.psl_weight, "own": cfg.psl_weight}[loss], cfg.psl_examples,
            allowed=None if cfg.givens == "ignore" else givens_mask, condition=cfg.givens == "condition")
        super().__init__(model, term, constraint_circuit(cfg) if term and loss not in CIRCUIT_FREE else None,
                         augmentation(cfg.split) if cfg.augment else None)
        self.name, self.cfg = name, cfg


def constraint_circuit(cfg: SudokuConfig):
    """What the SL/PSL maximise (:mod:`.constraint`): ``"groups"``, the ``3 x size``-rooted group circuit;
    ``"puzzle"``, the whole-board circuit on 4x4 boards, else one circuit per puzzle (a function of the puzzles)."""
    if cfg.constraint == "groups":
        return sudoku_circuit(cfg.size)
    return board_circuit(cfg.size) if cfg.size in BOARD_SIZES else puzzle_circuits


# -- evaluation ------------------------------------------------------------------------------------
@torch.no_grad()
def predict(model: nn.Module, puzzles: Tensor) -> Tensor:
    """Greedy decoding: digits ``(B, 81)``.  Every model keeps the givens, as a solver would: the RNN
    writes them while decoding (later cells condition on them), the ConvNet's given cells are set."""
    return model.greedy(puzzles) + 1


@torch.no_grad()
def evaluate(model: nn.Module, data: SudokuData, accelerator: Any, batch_size: int = 500, decoder: str | None = None,
             num_candidates: int = 16, generator: torch.Generator | None = None) -> tuple[dict[str, float], Tensor]:
    """Exact, Consistent and blank-cell accuracy (in %) on ``data``, and the predictions ``(N, 81)``.

    Greedy decoding (the RNN keeps the givens), or the constrained ``decoder`` (:mod:`.decoding`, with
    ``num_candidates`` and ``generator``; the RNN's ``resample`` adds ``ess``, the mean effective sample size of
    its weights).  Predictions are gathered over processes (``gather_for_metrics``).  The caller puts the model
    in eval mode.
    """
    if decoder is not None:
        check_decoder(decoder, tuple(DECODERS))
    loader = accelerator.prepare(DataLoader(TensorDataset(data.puzzles, data.solutions), batch_size=batch_size))
    preds, puzzles, solutions, ess = [], [], [], []
    for p, s in loader:
        if decoder is None:
            out, e = predict(model, p), None
        else:
            out, e = decode(model, p, decoder, num_candidates=num_candidates, generator=generator)
        out, p, s = accelerator.gather_for_metrics((out, p, s))
        preds.append(out.cpu()); puzzles.append(p.cpu()); solutions.append(s.cpu())
        if e is not None:
            ess.append(accelerator.gather_for_metrics(e).cpu())
    pred, puz, sol = torch.cat(preds), torch.cat(puzzles), torch.cat(solutions)
    exact = (pred == sol).all(1).float().mean().item() * 100
    consistent = is_consistent(pred, puz).float().mean().item() * 100
    blank = puz == 0
    blank_acc = ((pred == sol) & blank).sum().item() / max(int(blank.sum()), 1) * 100  # extra: accuracy on blanks
    metrics = {"exact": exact, "consistent": consistent, "blank_acc": blank_acc}
    if ess:
        metrics["ess"] = torch.cat(ess).float().mean().item()
    return metrics, pred


# -- the experiment ---------------------------------------------------------------------------------
def _splits(train: SudokuData, val: SudokuData | None, test: SudokuData, desc: str) -> Splits:
    return Splits(TensorDataset(train.puzzles, train.solutions), val, test, desc)


class SudokuExperiment(Experiment[SudokuConfig]):
    name = "sudoku"
    config_class = SudokuConfig
    labels = LABELS
    metrics = ("exact", "consistent", "blank_acc")
    # compared seed by seed: Exact and blank accuracy (on generated puzzles, which have one completion each,
    # Consistent is Exact again; the table still shows it)
    comparison_metrics = ("exact", "blank_acc")
    baselines = {"convnet_sl": "convnet", "rnn_psl": "rnn", "rnn_own": "rnn"}
    decoders = DECODERS
    paper = PAPER
    presets = PRESETS
    fidelity_models = ("rnn*",)  # the RNN and every RNN + PSL variant: the fidelity block of `pseudosl reproduce`

    def chosen_rows(self, cfg: SudokuConfig) -> dict[str, list[str]]:
        """With several PSL weights (``rnn_psl@psl_weight=...`` rows, no other override), the row of the weight
        chosen per seed on validation: ``rnn_psl@psl_weight=chosen``."""
        grid = [m for m in cfg.models if split_model(m)[0] == "rnn_psl" and set(split_model(m)[1]) == {"psl_weight"}]
        return {PSL_CHOSEN: grid} if len(grid) > 1 else {}

    def primary(self, cfg: SudokuConfig) -> tuple[str, str, str] | None:
        """RNN + PSL (at the weight chosen on validation, with a grid) vs the RNN on Exact, the paper's metric."""
        psl = PSL_CHOSEN if self.chosen_rows(cfg) else next((m for m in cfg.models if m == "rnn_psl"), None)
        return (psl, "rnn", "exact") if psl and "rnn" in cfg.models else None

    def contrasts(self, cfg: SudokuConfig) -> list[tuple[str, str]]:
        """What the constrained loss brings beyond its controls: the PSL row with the config's own weight and givens
        against ``rnn_own`` (own-sample training without the rules) and against the PSL with other givens (e.g.
        ``givens = ignore``, the rules alone); ConvNet + SL against the SL with other givens."""
        def variants(base: str) -> list[tuple[str, SudokuConfig]]:
            return [(m, model_variant(cfg, m)[1]) for m in cfg.models if split_model(m)[0] == base]

        out = []
        for loss, controls in (("rnn_psl", ["rnn_own"]), ("convnet_sl", [])):
            rows = variants(loss)
            own = [m for m, c in rows if (c.psl_weight, c.sl_weight, c.givens) == (cfg.psl_weight, cfg.sl_weight,
                                                                                     cfg.givens)]
            if not own:
                continue
            others = [m for m, c in rows if c.givens != cfg.givens]
            out += [(own[0], other) for other in [m for m in cfg.models if split_model(m)[0] in controls] + others]
        return out

    def load_data(self, cfg: SudokuConfig) -> Splits:
        """The splits; with ``split = "balanced"`` those of the first model seed, and every seed's own through
        ``Splits.of_seed``."""
        per_seed = cfg.split == "balanced"
        train, val, test = load_data(cfg, cfg.seeds[0]) if per_seed else load_data(cfg)
        blanks = (train.puzzles == 0).sum(1).float().mean()
        desc = (f"{cfg.size}x{cfg.size} boards, {len(train)} train / {len(val) if val is not None else 0} validation / "
                f"{len(test)} test puzzles, {blanks:.1f} blanks on average"
                + (", solution grids disjoint up to relabelling digits" if cfg.split in GRID_SPLITS else "")
                + (f", each model seed its own split (seed {cfg.seeds[0]}'s here), balanced over the grid types"
                   if per_seed else ""))
        splits = _splits(train, val, test, desc)
        if per_seed:
            splits.for_seed = lambda seed: _splits(*load_data(cfg, seed), desc)
        return splits

    def build_model(self, name: str, cfg: SudokuConfig) -> nn.Module:
        return build_model(name, cfg)

    def objective(self, model: nn.Module, name: str, cfg: SudokuConfig) -> nn.Module:
        return Objective(model, name, cfg)

    def evaluate(self, model: nn.Module, data: SudokuData, cfg: SudokuConfig, accelerator: Any,
                 decoder: str | None = None):
        if decoder is None:
            return evaluate(model, data, accelerator)
        # the harness seeded torch with the run's seed: the decoder's draws are reproducible
        generator = torch.Generator(accelerator.device).manual_seed(torch.initial_seed())
        return evaluate(model, data, accelerator, decoder=decoder, num_candidates=cfg.resample_candidates,
                        generator=generator)

    def plot_examples(self, test: SudokuData, predictions: dict[str, Tensor], path: Path) -> None:
        from .plots import plot_grids
        plot_grids(test, predictions, path, labels=LABELS)

    def fidelity_inputs(self, model: nn.Module, test: SudokuData, n_examples: int) -> tuple[Any, Tensor, str]:
        """The RNN's engine on the first test puzzles; anchors = its own samples with the givens kept (as the
        PSL's, in eval mode), circuit values = digits - 1."""
        if not model.autoregressive:
            raise ValueError("pseudosl fidelity needs an autoregressive model (rnn, rnn_psl); this checkpoint "
                             f"holds a {type(model).__name__}")
        if not 1 <= n_examples <= len(test):
            raise ValueError(f"--n-examples must lie in 1..{len(test)} (test puzzles), got {n_examples}")
        p = test.puzzles[:n_examples].to(model.decoder.head.weight.device)
        how = f"the model's samples on the first {n_examples} test puzzles (givens kept, eval mode)"
        return model.engine(p), model.generate(p, greedy=False) - 1, how


def main(cfg: SudokuConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Train every model in ``cfg.models`` for every seed, then write results, table and figures."""
    return harness_train(SudokuExperiment(), cfg, resume=resume, overwrite=overwrite)
