"""How large is the archive that carries a table between GPU slots (docs/gpu.md, "Across GPU slots")?

Builds every model of a preset with its optimizer (one Adam step on random gradients, so its state is as
large and as incompressible as after training), writes one checkpoint per (model, seed) in the harness's
format into a temporary run folder, packs it with ``pseudosl.experiments.archive.pack`` and prints the
sizes, for three states of the table: every run in flight (best checkpoint an earlier epoch), every run in
flight with its last epoch the best, every run finished.  Nothing is trained.

    python scripts/archive_size.py                    # Sudoku, paper preset (15 runs)
    python scripts/archive_size.py --experiment warcraft --preset paper
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from pseudosl.experiments.archive import PART_BYTES, pack
from pseudosl.experiments.checkpoints import save_checkpoint
from pseudosl.experiments.config import load_config, model_variant

PARTS_PER_CALL = 3  # scripts/gpu.sh: three parts of 16 MB per device call, beside the logs


def _experiment(name: str):
    if name == "sudoku":
        from pseudosl.experiments.sudoku.train import SudokuExperiment
        return SudokuExperiment()
    from pseudosl.experiments.warcraft.train import WarcraftExperiment
    return WarcraftExperiment()


def _checkpoint(exp, cfg, name: str, seed: int, state: str) -> dict:
    base, run_cfg = model_variant(cfg, name)
    torch.manual_seed(seed)
    model = exp.build_model(base, run_cfg)
    optimizer = exp.optimizer(model, run_cfg)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    best = {k: v + 1e-3 if v.is_floating_point() else v.clone() for k, v in weights.items()}
    epoch = cfg.epochs if state == "finished" else cfg.epochs // 2
    return {"epoch": epoch, "history": [{"epoch": e + 1, "train_loss": 1.0} for e in range(epoch)], "wall_s": 0.0,
            "best": [0.0], "best_epoch": epoch if state == "best is last" else max(1, epoch - 1),
            "best_model": weights if state == "best is last" else best, "bad_evals": 0, "stopped": False,
            "experiment": exp.name, "config": cfg.to_dict(), "model_name": name, "seed": seed,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": {"torch": torch.get_rng_state()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", choices=("sudoku", "warcraft"), default="sudoku")
    parser.add_argument("--preset", default="paper")
    args = parser.parse_args()
    exp = _experiment(args.experiment)
    cfg = load_config(exp.config_class, exp.preset_path(args.preset))
    print(f"{exp.name}, preset {args.preset}: {len(cfg.models)} models x {len(cfg.seeds)} seeds; parts of "
          f"{PART_BYTES / 2**20:.2f} MiB, {PARTS_PER_CALL} per device call")
    for name in cfg.models:
        model = exp.build_model(*model_variant(cfg, name))
        print(f"  {name}: {sum(p.numel() for p in model.parameters()):,} parameters")
    for state in ("in flight", "best is last", "finished"):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            for name in cfg.models:
                for seed in cfg.seeds:
                    (run / f"{name}-seed{seed}").mkdir(parents=True)
                    save_checkpoint(_checkpoint(exp, cfg, name, seed, state), run / f"{name}-seed{seed}" / "checkpoint.pt")
            raw = sum(p.stat().st_size for p in run.glob("*/checkpoint.pt"))
            manifest = pack(run, Path(tmp) / "archive")
            n = len(manifest["parts"])
            print(f"  every run {state:12}: checkpoints {raw / 2**20:6.1f} MiB -> archive {manifest['bytes'] / 2**20:6.1f} "
                  f"MiB, {n:2d} part(s), {-(-n // PARTS_PER_CALL)} device call(s) each way")


if __name__ == "__main__":
    main()
