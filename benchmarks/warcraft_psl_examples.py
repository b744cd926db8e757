"""Warcraft: the pseudo-semantic loss on a sub-batch (``psl_examples``) against the whole batch.

    python benchmarks/warcraft_psl_examples.py [--grid 6] [--batch 32] [--warmup 150] [--batches 4] [--threads 1]

The CNN-LSTM of the former quick preset (ResNet-18 width 1/8, image embedding 128, LSTM 128; the
quick preset's other fields) is first trained for ``--warmup``
cross-entropy steps on generated maps (an untrained model's PSL gradient says little), then, on
``--batches`` fresh batches, the gradient of the batch-mean PSL with respect to all parameters is
computed on the first ``m`` examples (one model sample each) for ``m`` in 1, 2, 4, 8, ... and the whole
batch.  Printed per ``m``: the time of one PSL forward + backward (warm, median), the cosine between
the sub-batch gradient and the whole-batch gradient (mean over batches), and the PSL value.  The
cross-entropy term of the objective always uses the whole batch; only the PSL term is sub-sampled.
BatchNorm uses its running statistics during the measurement, so a sub-batch's rows are exactly the
whole batch's (in training the encoder runs once on the whole batch and the PSL takes its first rows).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pseudosl
from pseudosl.experiments.warcraft.config import load_config, preset_path
from pseudosl.experiments.warcraft.data import generate
from pseudosl.experiments.warcraft.grid import mask_to_edges
from pseudosl.experiments.warcraft.models import build_model
from pseudosl.experiments.warcraft.train import Objective, path_circuit


def _grad(model, loss) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    gs = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(gs, params)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=150, help="cross-entropy steps before measuring")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(preset_path("quick"), grid=args.grid, embed_dim=128, lstm_hidden=128)  # as measured
    k, n_edges = args.grid, 2 * args.grid * (args.grid - 1)
    n = args.batch * (args.warmup // 10 + args.batches)
    d, _, _ = generate(n, k, seed=123)
    maps, edges = torch.from_numpy(d.maps), torch.from_numpy(mask_to_edges(d.paths)).long()
    model = build_model("lstm", cfg, n_edges)
    ce_objective = Objective(model, "lstm", cfg, k)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    t0 = time.time()
    for step in range(args.warmup):
        i = (step * args.batch) % (n - args.batches * args.batch)
        loss, _ = ce_objective(maps[i:i + args.batch], edges[i:i + args.batch])
        opt.zero_grad(); loss.backward(); opt.step()
    print(f"{args.warmup} cross-entropy steps ({time.time() - t0:.0f}s), last loss {loss.item():.3f}")
    circuit = path_circuit(k)
    model.eval()  # BatchNorm on running statistics: the rows of a sub-batch see what they see in the whole batch
    sizes = sorted({m for m in (1, 2, 4, 8, 16, args.batch) if m <= args.batch})
    cos: dict[int, list[float]] = {m: [] for m in sizes}
    secs: dict[int, list[float]] = {m: [] for m in sizes}
    vals: dict[int, list[float]] = {m: [] for m in sizes}
    for b in range(args.batches):
        x = maps[n - (b + 1) * args.batch: n - b * args.batch]
        ctx, steps = model.conditioning(x)
        sample = model.decoder.sample(context=ctx, step_inputs=steps)            # one sample per example
        grads = {}
        for m in sizes:
            t = time.perf_counter()
            ctx, steps = model.conditioning(x[:m])
            psl = pseudosl.pseudo_semantic_loss(model.decoder.engine(ctx, steps), circuit, sample[:m])
            grads[m] = _grad(model, psl)
            secs[m].append(time.perf_counter() - t)
            vals[m].append(psl.item())
        for m in sizes:
            cos[m].append(torch.nn.functional.cosine_similarity(grads[m], grads[args.batch], dim=0).item())
    print(f"{k}x{k} grid, {n_edges} edges, batch {args.batch}, {args.batches} batches, {args.threads} thread(s)")
    print(f"{'examples':>9} {'PSL fwd+bwd s':>14} {'cos(grad, whole batch)':>23} {'PSL value':>10}")
    for m in sizes:
        print(f"{m:>9} {statistics.median(secs[m]):>14.3f} {statistics.mean(cos[m]):>23.3f} "
              f"{statistics.mean(vals[m]):>10.2f}")


if __name__ == "__main__":
    main()
