"""CPU seconds per training epoch of every row of the Sudoku cpu preset, at several RNN sizes: what sizes its regime.

    python benchmarks/sudoku_epoch_cost.py [--sizes 128x5 64x3 48x2] [--steps 8] [--seeds 12] [--epochs 80]

Per row (the preset's models and variants, e.g. ``rnn_psl@givens=ignore``) and RNN size: ``--steps`` training steps
of the preset's objective on its first batches (one thread, ``time.process_time``, so another job on the machine
changes little), scaled to an epoch (``n_train / batch_size`` steps), plus one evaluation of the validation and
test splits (the harness evaluates both every epoch).  Then the regime's CPU time: the sum over the rows, times
``--seeds`` and ``--epochs``.  Measure before choosing a size: the PSL rows dominate, and the seeds are not the
thing to cut (docs/sudoku.md, "Cost of the PSL, and the presets").
"""

from __future__ import annotations

import argparse
import time

import torch

from pseudosl.experiments.config import model_variant
from pseudosl.experiments.harness import make_accelerator
from pseudosl.experiments.loop import evaluate_model
from pseudosl.experiments.sudoku.config import load_config, preset_path
from pseudosl.experiments.sudoku.train import SudokuExperiment, load_data


def epoch_cost(spec: str, cfg, train, val, test, steps: int, accelerator) -> tuple[float, float]:
    """CPU seconds of one training epoch of the row ``spec`` and of one evaluation of validation and test."""
    exp = SudokuExperiment()
    name, run_cfg = model_variant(cfg, spec)
    torch.manual_seed(0)
    model = exp.build_model(name, run_cfg)
    objective, optimizer = exp.objective(model, name, run_cfg), exp.optimizer(model, run_cfg)
    objective.train()
    b = run_cfg.batch_size
    start = time.process_time()
    for i in range(steps):
        loss, _ = objective(train.puzzles[i * b:(i + 1) * b], train.solutions[i * b:(i + 1) * b])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    per_epoch = (time.process_time() - start) / steps * -(-len(train) // b)
    start = time.process_time()
    for data in (val, test):
        evaluate_model(exp, model, data, run_cfg, accelerator)
    return per_epoch, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["128x5", "64x3", "48x2"], help="RNN hidden x layers")
    parser.add_argument("--steps", type=int, default=8, help="training steps measured per row")
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=80)
    args = parser.parse_args()
    torch.set_num_threads(1)
    accelerator = make_accelerator()
    for size in args.sizes:
        hidden, layers = map(int, size.split("x"))
        cfg = load_config(preset_path("cpu"), rnn_hidden=hidden, rnn_layers=layers)
        train, val, test = load_data(cfg, cfg.seeds[0])
        total = 0.0
        print(f"RNN {size}: CPU seconds per epoch (training + evaluating validation and test)")
        for spec in cfg.models:
            fit, evaluate = epoch_cost(spec, cfg, train, val, test, args.steps, accelerator)
            total += fit + evaluate
            print(f"  {spec:<28} {fit:6.2f} + {evaluate:5.2f}", flush=True)
        print(f"  every row, one seed: {total:.1f} s per epoch; {args.seeds} seeds x {args.epochs} epochs: "
              f"{total * args.seeds * args.epochs / 3600:.2f} CPU-hours")


if __name__ == "__main__":
    main()
