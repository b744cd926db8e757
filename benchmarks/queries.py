"""Circuit queries against the log-prob pass, side by side in one process, on the circuits of circuits.py.

    python benchmarks/queries.py [--batch 128] [--samples 100] [--reps 10] [--device cpu] [--threads 1] [--only NAME]
                                 [--cpu-time] [--memory-budget N]

For every circuit, at batch ``B`` (float32, warm median over ``--reps`` runs after warm-up):

* ``log_prob``: the bottom-up log-sum-exp pass without autograd (the reference every ratio divides by);
* ``f+b``: ``log_prob`` forward and backward (the hand-written top-down pass);
* ``marginals``: bottom-up keeping weights, then one top-down pass (the gradient, as a query);
* ``mpe``: bottom-up in the max semiring keeping the argmax, then one top-down pass;
* ``sample x1``: one exact sample per example (bottom-up keeping weights, one top-down pass);
* ``sample xS``: ``--samples`` samples per example (one bottom-up pass over ``B`` rows, then top-down over
  ``S x B`` columns, in chunks of ``Circuit.memory_budget``).

The work is counted in edge-rows: a pass over ``B`` columns touches every edge once per column, so
bottom-up costs ``E x B`` and top-down ``E x columns``; ``sample xS`` is ``E x B x (1 + S)``.  The last
columns give the time per edge-row of each query relative to the log-prob pass: 1.0 means the query is
as fast per unit of work as the log-prob pass.  Multi-rooted circuits answer for root 0.  The script
checks the answers it times (marginals against autograd, the MPE value against the max semiring, the
samples' log-partition against log_prob) before timing them.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from circuits import SHARED, benchmark_circuits, geomean, timeit  # noqa: E402


def check(circuit, x: torch.Tensor, samples: int) -> None:
    """The answers being timed are right (cheap cross-checks; the tests compare with enumeration)."""
    root = {"root": 0}
    xg = x.clone().requires_grad_()
    lp = circuit.log_prob(xg)
    lp = lp if lp.dim() == 1 else lp[:, 0]
    grad, = torch.autograd.grad(lp.sum(), xg)
    torch.testing.assert_close(circuit.marginals(x, **root), grad, atol=1e-4, rtol=1e-4)
    best = circuit(x, semiring="max")[:, 0]
    torch.testing.assert_close(circuit.mpe(x, **root).log_prob, best, atol=1e-3, rtol=1e-5)
    s = circuit.sample(x, samples, **root)
    torch.testing.assert_close(s.log_partition, lp.detach(), atol=1e-4, rtol=1e-5)
    assert (s.log_prob <= best + 1e-3).all() and (s.values >= 0).all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--samples", type=int, default=100, help="samples per example of the 'sample xS' column")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--no-experiments", action="store_true", help="only the SDD files of ../shared")
    ap.add_argument("--only", default=None, help="only circuits whose name contains this")
    ap.add_argument("--memory-budget", type=int, default=None,
                    help="Circuit.memory_budget (default: the circuit's, 64 MiB on a CPU, 2 GiB elsewhere)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the process's CPU time, not wall time (CPU and --threads 1 only): steadier "
                         "on a machine shared with other jobs")
    ap.add_argument("--circuits", type=Path, default=SHARED, help=f"folder of the SDD files (default {SHARED})")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, b, s = args.device, args.batch, args.samples
    if args.cpu_time and (dev != "cpu" or torch.get_num_threads() != 1):
        ap.error("--cpu-time needs --device cpu and --threads 1")
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(f"# machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"device {dev}, torch {torch.__version__}, batch {b}, {s} samples per example, float32, "
          f"median of {args.reps}, {'CPU' if args.cpu_time else 'wall'} time, memory_budget {args.memory_budget or 'default'}\n")
    queries = ["log_prob", "f+b", "marginals", "mpe", "sample x1", f"sample x{s}"]
    work = {"log_prob": 1, "f+b": 2, "marginals": 2, "mpe": 2, "sample x1": 2, f"sample x{s}": 1 + s}
    header = ("| circuit | edges | " + " | ".join(f"{q} ms" for q in queries) + " | "
              + " | ".join(f"{q} / log_prob per edge-row" for q in queries[1:]) + " | log_prob ns per edge-row |")
    print(header)
    print("|" + "|".join(["---"] * (header.count("|") - 1)) + "|")
    per_work: dict[str, list[float]] = {q: [] for q in queries[1:]}
    for name, circuit, _ in benchmark_circuits(not args.no_experiments, args.circuits):
        if args.only and args.only not in name:
            continue
        circuit = circuit.to(dev)
        circuit.memory_budget = args.memory_budget
        torch.manual_seed(0)
        x = torch.randn(b, circuit.n_vars, circuit.n_values, device=dev).log_softmax(-1)
        xg = x.clone().requires_grad_()
        check(circuit, x, min(s, 8))
        gen = torch.Generator(dev).manual_seed(0)

        def no_grad(f):
            def run():
                with torch.no_grad():
                    f()
            return run

        def fb():
            xg.grad = None
            circuit.log_prob(xg).sum().backward()

        fns = {"log_prob": no_grad(lambda: circuit.log_prob(x)), "f+b": fb,
               "marginals": lambda: circuit.marginals(x, root=0), "mpe": lambda: circuit.mpe(x, root=0),
               "sample x1": lambda: circuit.sample(x, 1, root=0, generator=gen),
               f"sample x{s}": lambda: circuit.sample(x, s, root=0, generator=gen)}
        ms = {q: timeit(fns[q], args.reps, dev, clock) for q in queries}
        edge_rows = circuit.n_edges * b
        base = ms["log_prob"] / (work["log_prob"] * edge_rows)
        ratios = {q: ms[q] / (work[q] * edge_rows) / base for q in queries[1:]}
        for q, r in ratios.items():
            per_work[q].append(r)
        print(f"| {name} | {circuit.n_edges} | " + " | ".join(f"{ms[q]:.2f}" for q in queries) + " | "
              + " | ".join(f"{ratios[q]:.2f}" for q in queries[1:]) + f" | {1e6 * base:.2f} |", flush=True)
    print("\ngeometric mean of the time per edge-row relative to the log-prob pass: "
          + ", ".join(f"{q} {geomean(v):.2f}" for q, v in per_work.items()))


if __name__ == "__main__":
    main()
