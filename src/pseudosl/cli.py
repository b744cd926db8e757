"""The ``pseudosl`` command line: one subcommand per experiment (``pseudosl sudoku train|eval``).

An experiment adds itself with a ``_add_<name>(subparsers)`` function that registers its
parser and sets ``func``; :func:`main` dispatches.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "build_parser"]


def _add_sudoku(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sudoku", help="Sudoku as autoregressive generation (paper Table 1)",
                       description="Sudoku: ConvNet / ConvNet+SL / RNN / RNN+PSL. See docs/sudoku.md.")
    actions = p.add_subparsers(dest="action", required=True, metavar="{train,eval}")

    t = actions.add_parser("train", help="train the models and write results, table and figures",
                           description="Train every model for every seed. Settings: --config/--preset TOML, "
                                       "then the flags below override.")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--config", help="TOML file of SudokuConfig fields (start from a copy of a preset, see docs/sudoku.md)")
    src.add_argument("--preset", help="a shipped preset: quick, cpu or paper")
    src.add_argument("--quick", action="store_true",
                     help="= --preset quick: all four models, small data, minutes on a CPU")
    t.add_argument("--models", nargs="+", help="subset of convnet convnet_sl rnn rnn_psl")
    t.add_argument("--seeds", nargs="+", type=int, help="model seeds (mean ± std over them)")
    t.add_argument("--epochs", type=int)
    t.add_argument("--batch-size", type=int, dest="batch_size")
    t.add_argument("--lr", type=float)
    t.add_argument("--n-train", type=int, dest="n_train")
    t.add_argument("--n-test", type=int, dest="n_test")
    t.add_argument("--n-missing", type=int, dest="n_missing", help="blank cells per generated puzzle (paper: 10)")
    t.add_argument("--satnet-dist", action="store_const", const=True, dest="satnet_dist",
                   help="generate with 31..42 givens (SATNet's distribution)")
    t.add_argument("--data", help="generate (default), satnet:<dir with features.pt, labels.pt> or csv:<file>")
    t.add_argument("--data-dir", dest="data_dir", help="cache folder for generated puzzles "
                   "(default $PSEUDOSL_CACHE/sudoku or ~/.cache/pseudosl/sudoku)")
    t.add_argument("--sl-weight", type=float, dest="sl_weight")
    t.add_argument("--psl-weight", type=float, dest="psl_weight", help="paper grid: 0.01, 0.05")
    t.add_argument("--psl-examples", type=int, dest="psl_examples",
                   help="compute the PSL on the first m examples of each batch (cost control)")
    t.add_argument("--condition-on-givens", action="store_const", const=True, dest="condition_on_givens",
                   help="SL/PSL condition on the givens instead of conjoining them (drops -log P(givens))")
    t.add_argument("--constraint-start-epoch", type=int, dest="constraint_start_epoch",
                   help="apply the SL/PSL from this epoch on (1-based); earlier epochs train on cross-entropy only")
    t.add_argument("--threads", type=int, help="torch threads (1 is fastest on a busy 2-core CPU)")
    t.add_argument("--out", help="output folder (default runs/sudoku)")
    t.add_argument("--resume", action="store_true", help="continue from <out>/<model>-seed<seed>/checkpoint.pt")
    t.set_defaults(func=_sudoku_train)

    e = actions.add_parser("eval", help="re-evaluate the checkpoints under --out and print the table")
    e.add_argument("--out", default="runs/sudoku")
    e.set_defaults(func=_sudoku_eval)


def _sudoku_train(args: argparse.Namespace) -> None:
    from .experiments.sudoku.config import load_config, preset_path
    from .experiments.sudoku.train import main as train_main
    path = args.config or (preset_path("quick") if args.quick else preset_path(args.preset) if args.preset else None)
    keys = ("models", "seeds", "epochs", "batch_size", "lr", "n_train", "n_test", "n_missing", "satnet_dist",
            "data", "data_dir", "sl_weight", "psl_weight", "psl_examples", "condition_on_givens", "constraint_start_epoch", "threads", "out")
    cfg = load_config(path, **{k: getattr(args, k) for k in keys})
    train_main(cfg, resume=args.resume)


def _sudoku_eval(args: argparse.Namespace) -> None:
    from .experiments.sudoku.train import evaluate_checkpoints
    evaluate_checkpoints(args.out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pseudosl", description="Semantic and pseudo-semantic losses: experiments")
    sub = parser.add_subparsers(dest="experiment", required=True, metavar="{sudoku}")
    _add_sudoku(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as e:
        parser.exit(2, f"pseudosl: error: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
