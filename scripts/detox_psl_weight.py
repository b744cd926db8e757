"""Choose the PSL weight of a detox preset on validation (issue 36): one epoch of ``psl`` per weight of the paper's grid
(or ``--weights``), seed 0, then the validation metrics of the preset's selection rule; prints one line per weight and
the chosen one (the best by the preset's rule: ``DetoxExperiment.selection_order``).

    python scripts/detox_psl_weight.py --preset real --variant psl@psl_source=prompted --weights 0 0.1 1 8

Weight 0 is SGEAT (the same run without the PSL term).  Data, samples, anchors and evaluations come from (and go to)
the preset's caches, so the regime that follows reuses them.  A pilot on one seed and one epoch: the choice is as
noisy as one validation evaluation is (its word rate is given with the number of hits it counts).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Subset

from pseudosl.experiments.config import load_config, model_variant
from pseudosl.experiments.detox.config import PSL_WEIGHT_GRID
from pseudosl.experiments.detox.train import DetoxExperiment
from pseudosl.experiments.loop import seed_all
from pseudosl.experiments.summary import selection_score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="real")
    ap.add_argument("--variant", default="psl", help="the model whose weight is chosen, e.g. psl@psl_source=prompted")
    ap.add_argument("--weights", type=float, nargs="+", default=list(PSL_WEIGHT_GRID))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    exp = DetoxExperiment()
    cfg = load_config(exp.config_class, exp.preset_path(args.preset))
    splits = exp.load_data(cfg)
    rows = []
    for weight in args.weights:
        name, run_cfg = model_variant(cfg, f"{args.variant}{'@' if '@' not in args.variant else ','}psl_weight={weight}")
        t0, c0 = time.time(), time.process_time()
        seed_all(args.seed)
        model = exp.build_model(name, run_cfg)
        objective = exp.objective(model, name, run_cfg)
        optimizer = exp.optimizer(model, run_cfg)
        order = torch.randperm(len(splits.train), generator=torch.Generator().manual_seed(args.seed * 100_003))
        objective.train()
        for batch in DataLoader(Subset(splits.train, order.tolist()), batch_size=run_cfg.batch_size):
            loss, _ = objective(*batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        metrics, _ = exp.evaluate(model, splits.val, run_cfg, None)
        hits = round(metrics["word_rate"] * len(splits.val.prompts) * splits.val.generations)
        rows.append((selection_score(exp, metrics, run_cfg), weight))
        print(f"psl_weight {weight:g}: validation word rate {metrics['word_rate']:.3f} ({hits} hits), within the "
              f"margin: {metrics.get('fluent_word_rate') == metrics['word_rate']}, EMT {metrics['emt_full']:.3f}, "
              f"perplexity {metrics['ppl']:.2f} ({time.time() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU)",
              flush=True)
    print(f"chosen (the preset's rule, {exp.selection_order(cfg)}): psl_weight {max(rows)[1]:g}")


if __name__ == "__main__":
    main()
