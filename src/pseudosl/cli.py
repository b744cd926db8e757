"""The ``pseudosl`` command line: ``pseudosl <experiment> train|eval`` (and an experiment's own steps),
``pseudosl reproduce``, ``pseudosl fidelity``.

Every experiment registers itself in :data:`pseudosl.experiments.registry.EXPERIMENTS` (its name, a
one-line help, and where to import its :class:`~pseudosl.experiments.experiment.Experiment` and presets).
The ``train`` flags are made from the experiment's config dataclass, one per field (``n_train`` ->
``--n-train``), so a flag and a TOML key are checked by the same code.  An experiment may contribute further steps
(``Experiment.actions()``: name -> :class:`~pseudosl.experiments.experiment.Action`, its help and what it runs,
e.g. the detox experiment's ``pretrain`` and ``generate``); they take the same config flags as ``train``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path

from .errors import user_message
from .logic.checks import parse_int_token
from .experiments.decoders import WITH_CANDIDATES
from .experiments.registry import EXPERIMENTS, experiment

__all__ = ["main", "build_parser", "add_config_flags"]

_NOT_FLAGS = {"preset"}  # set by --preset/--quick


def int_flag(text: str) -> int:
    """An int flag's value, read strictly (:func:`~pseudosl.logic.checks.parse_int_token`): ASCII digits after an
    optional ``-``; not ``3_0``, ``+3``, `` 3`` or other Unicode digits such as ``\u0663``, which ``int()`` takes."""
    return parse_int_token(text, "", ValueError, negative=True)


int_flag.__name__ = "int"  # argparse's message: "invalid int value: '...'"


def _flag_type(t: typing.Any) -> tuple[typing.Any, bool]:
    """(element type, is_list) of a config annotation, ``X | None`` unwrapped; ints read by :func:`int_flag`."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        t = next(a for a in typing.get_args(t) if a is not type(None))
    if typing.get_origin(t) is list:
        item = typing.get_args(t)[0]
        return (int_flag if item is int else item), True
    return (int_flag if t is int else t), False


def add_config_flags(parser: argparse.ArgumentParser, cls: type) -> list[str]:
    """One flag per field of the config dataclass ``cls``; returns the field names."""
    hints = typing.get_type_hints(cls)
    names = []
    for f in dataclasses.fields(cls):
        if f.name in _NOT_FLAGS:
            continue
        t, is_list = _flag_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        meta = f.metadata
        bits = [meta.get("help", "")]
        if meta.get("min") is not None or meta.get("max") is not None:
            bits.append(f"range {meta.get('min', '')}..{meta.get('max') if meta.get('max') is not None else ''}")
        if meta.get("choices"):
            bits.append("one of " + ", ".join(map(str, meta["choices"])))
        help_ = "; ".join(b for b in bits if b) or None
        if t is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            parser.add_argument(flag, dest=f.name, type=t, nargs="+" if is_list else None, default=None, help=help_,
                                metavar=f.name.upper())
        names.append(f.name)
    return names


def _add_experiment(sub: argparse._SubParsersAction, name: str) -> None:
    help_ = EXPERIMENTS[name][0]
    exp = experiment(name)
    presets = sorted(p.stem for p in Path(exp.presets).glob("*.toml"))
    p = sub.add_parser(name, help=help_, description=f"{help_}. See docs/{name}.md.")
    extra = exp.actions()
    actions = p.add_subparsers(dest="action", required=True, metavar="{" + ",".join(["train", "eval", *extra]) + "}")

    t = actions.add_parser("train", help="train the models and write results, table and figures",
                           description="Train every model for every seed. Settings: --config/--preset TOML, then "
                                       "the flags below override. Outputs go to --out, by default "
                                       f"runs/{name}/<preset>-<config key>/.")
    _add_config_source(t, presets)
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the checkpoints in the run folder")
    mode.add_argument("--overwrite", action="store_true", help="replace the checkpoints in the run folder")
    t.set_defaults(func=_train, experiment_name=name, fields=add_config_flags(t, exp.config_class))

    e = actions.add_parser("eval", help="re-evaluate the checkpoints under a folder; one table per config")
    e.add_argument("--out", default=f"runs/{name}", help=f"folder searched recursively (default runs/{name})")
    e.add_argument("--decoders", nargs="+", metavar="DECODER",
                   help="extra test-time decoders, a row each (default: those the runs were trained with)"
                        + (f"; known: {', '.join(exp.decoders)}" if exp.decoders else "; this experiment has none yet"))
    if WITH_CANDIDATES & set(exp.decoders):
        e.add_argument("--resample-candidates", type=int_flag, metavar="K",
                       help="candidates K of the resample / restart decoders (default: each run's "
                            "resample_candidates)")
    e.set_defaults(func=_eval, experiment_name=name, resample_candidates=None)

    for action, (action_help, _) in extra.items():
        a = actions.add_parser(action, help=action_help, description=f"{action_help}. Settings as for train.")
        _add_config_source(a, presets)
        a.set_defaults(func=_action, experiment_name=name, action_name=action,
                       fields=add_config_flags(a, exp.config_class))


def _add_config_source(parser: argparse.ArgumentParser, presets: list[str]) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", help="TOML file of config fields (start from a copy of a preset)")
    src.add_argument("--preset", help=f"a shipped preset: {', '.join(presets)}")
    src.add_argument("--quick", action="store_true", help="= --preset quick: every model, small data, minutes on a CPU")


def _load(args: argparse.Namespace):
    from .experiments.config import load_config, preset_path
    exp = experiment(args.experiment_name)
    preset = "quick" if args.quick else args.preset
    path = args.config or (preset_path(exp.presets, preset) if preset else None)
    return exp, load_config(exp.config_class, path, **{k: vars(args)[k] for k in args.fields})


def _action(args: argparse.Namespace) -> None:
    exp, cfg = _load(args)
    cfg.preflight()
    exp.actions()[args.action_name].run(cfg)


def _train(args: argparse.Namespace) -> None:
    from .experiments.harness import train
    exp, cfg = _load(args)
    train(exp, cfg, resume=args.resume, overwrite=args.overwrite)


def _eval(args: argparse.Namespace) -> None:
    from .experiments.harness import evaluate_checkpoints
    evaluate_checkpoints(experiment(args.experiment_name), args.out, args.decoders, args.resample_candidates)


def _add_reproduce(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="run every experiment's quick, cpu, real or paper preset and write the report",
                       description="Train every experiment's preset (replacing earlier reproduction runs under "
                                   "--runs, or continuing them with --resume), then write the report: the tracked document's generated blocks "
                                   "replaced, under --runs (default) or in docs/ itself (--write-docs). "
                                   "See docs/reproduction.md.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_const", const="quick", dest="mode",
                      help="the quick presets: minutes on a 2-core CPU (report: reproduction.md)")
    mode.add_argument("--cpu", action="store_const", const="cpu", dest="mode",
                      help="the cpu presets: the CPU regime, >= 5 seeds, <= 90 min each on 2 cores (report: results.md)")
    mode.add_argument("--real", action="store_const", const="real", dest="mode",
                      help="the real-model presets (detox on SmolLM2-135M): <= 2 h on 2 cores, needs "
                           "bash scripts/install_smollm2.sh (report: results.md)")
    mode.add_argument("--paper", action="store_const", const="paper", dest="mode",
                      help="the paper presets: one GPU (report: reproduction.md)")
    p.add_argument("--only", nargs="+", help="a subset of the experiments / sections")
    p.add_argument("--write-docs", action="store_true",
                   help="update the tracked docs/reproduction.md or docs/results.md (default: a copy under --runs)")
    p.add_argument("--report", type=Path, help="the report to update (overrides --write-docs and the default)")
    p.add_argument("--runs", type=Path, default=Path("runs/reproduce"), help="where the runs and the report go")
    p.add_argument("--resume", action="store_true",
                   help="continue the runs under --runs (an interrupted reproduction, or finished runs whose test "
                        "rows are recomputed from their checkpoints) instead of starting afresh")
    p.set_defaults(func=lambda a: __import__("pseudosl.reproduce", fromlist=["reproduce"]).reproduce(
        a.mode, a.report, a.only, a.runs, a.write_docs, resume=a.resume))


def _add_fidelity(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fidelity", help="entropy of the model, of the local approximation, and their KL (paper §5)",
                       description="How close is the PSL's local approximation p~_y to the model p? Prints "
                                   "H(p), H(p~_y) and KL(p~_y || p) in bits (exact where k^n is small, else "
                                   "Monte-Carlo) beside the paper's GPT-2 numbers; writes fidelity.json and "
                                   "fidelity_positions.png to --out. See docs/psl.md.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="a harness checkpoint of an autoregressive model, e.g. "
                                                     "runs/sudoku/<run>/rnn-seed0/checkpoint.pt")
    src.add_argument("--hf-model", help="a Hugging Face causal LM: hub name or local folder (from_pretrained)")
    p.add_argument("--length", type=int_flag, help="--hf-model: tokens per window (default 10)")
    p.add_argument("--text", type=Path, help="--hf-model: take the windows from this text file instead of sampling")
    p.add_argument("--n-examples", type=int_flag, default=8, help="anchors (default 8)")
    p.add_argument("--n-mc", type=int_flag, default=1000, help="Monte-Carlo draws per anchor (default 1000)")
    p.add_argument("--method", choices=["auto", "exact", "mc"], default="auto",
                   help="auto (default): exact enumeration iff k^n <= 16384, else Monte-Carlo")
    p.add_argument("--seed", type=int_flag, default=0)
    p.add_argument("--device", help="torch device (default cuda when available, else cpu)")
    p.add_argument("--out", type=Path, default=Path("runs/fidelity"),
                   help="folder for fidelity.json and fidelity_positions.png (replaced; default runs/fidelity)")
    p.set_defaults(func=_fidelity)


def _fidelity(args: argparse.Namespace) -> None:
    import torch

    from .experiments.config import check_device
    from .experiments.fidelity import checkpoint_inputs, hf_inputs, run_fidelity
    from .experiments.runs import check_out_folder
    if args.n_examples < 1:
        raise ValueError(f"--n-examples must be >= 1, got {args.n_examples}")
    if args.n_mc < 2:
        raise ValueError(f"--n-mc must be >= 2 (draws per anchor, for a standard error), got {args.n_mc}")
    if args.length is not None and args.length < 1:
        raise ValueError(f"--length must be >= 1 (tokens per window), got {args.length}")
    if args.checkpoint is not None and (args.length is not None or args.text is not None):
        raise ValueError("--length and --text apply to --hf-model only (a checkpoint fixes n)")
    if args.text is not None and not args.text.is_file():
        raise ValueError(f"--text {args.text}: no such file; give a text file to cut the windows from")
    check_out_folder(args.out)
    device = check_device(args.device)
    torch.manual_seed(args.seed)
    gen = torch.Generator(device).manual_seed(args.seed)
    if args.checkpoint is not None:
        run = checkpoint_inputs(args.checkpoint, args.n_examples, device)
    else:
        run = hf_inputs(args.hf_model, 10 if args.length is None else args.length, args.n_examples, device,
                        args.text, gen)
    exact = {"auto": None, "exact": True, "mc": False}[args.method]
    result = run_fidelity(run, args.out, n_mc=args.n_mc, exact=exact, generator=gen)
    print(result["report"])
    print(f"wrote {args.out / 'fidelity.json'} and {args.out / 'fidelity_positions.png'}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pseudosl", description="Semantic and pseudo-semantic losses: experiments")
    commands = [*EXPERIMENTS, "reproduce", "fidelity"]
    sub = parser.add_subparsers(dest="experiment", required=True, metavar="{" + ",".join(commands) + "}")
    for name in EXPERIMENTS:
        _add_experiment(sub, name)
    _add_reproduce(sub)
    _add_fidelity(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; an anticipated error prints one line and exits with status 2, Ctrl-C with 130."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        parser.exit(130, "pseudosl: interrupted (checkpoints up to the last finished epoch are kept: --resume "
                         "continues)\n")
    except Exception as e:
        message = user_message(e)
        if message is None:
            raise
        parser.exit(2, f"pseudosl: error: {message}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
