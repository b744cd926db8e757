"""Circuit evaluation: pseudosl vs KLay (torch backend) vs PySDD, side by side in one process.

    python benchmarks/circuits.py [--batch 128] [--reps 20] [--device cpu] [--threads 1] [--compile] [--only NAME]

For every circuit: log-semiring forward and forward+backward at the given batch size,
warm median over ``--reps`` runs after warm-up, for

* pseudosl: ``Circuit.log_prob`` (eager) and, with ``--compile``, ``Circuit.compiled()``
  (``torch.compile(fullgraph=True)``; on CUDA ``mode="reduce-overhead"``, a CUDA-graph replay);
* KLay (``klaycircuits``): ``to_torch_module(semiring="log", compile=False)`` on the same
  circuit, and with ``--compile`` also ``compile=True`` (SDD files loaded by KLay itself; our categorical circuits handed over node by
  node, each indicator ``[X_v = c]`` a positive literal, so both evaluate the same smooth DAG);
* PySDD: ``WmcManager`` in log mode, one weight vector at a time (SDD circuits only;
  ``propagate`` computes the WMC, and its derivatives come from the same call).

It also counts the work: edges E and batch B give ~2·E·B flops for the forward pass
(gather + add / exp + add), and the bytes the forward pass must at least move
(every node written once, every edge's child read once, float32): divided by the measured
copy bandwidth of the machine that is the floor the last column compares with.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

import pseudosl
from pseudosl import Circuit
from pseudosl.logic.automaton import forbidden_sequences_dfa

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench" / "circuits"


def timeit(fn: Callable[[], object], reps: int, device: str, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs after 3 warm-ups (robust to stalls of a shared VM).

    ``clock=time.process_time`` counts this process's CPU time instead of wall time (CPU, one thread:
    other jobs on a shared machine then slow it only through the caches and memory they share)."""
    for _ in range(3):
        fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    times = []
    for _ in range(reps):
        t = clock()
        fn()
        sync()
        times.append(clock() - t)
    return 1e3 * statistics.median(times)


def copy_bandwidth(device: str) -> float:
    """Measured bytes/s of a large tensor copy (read + write), the memory floor's yardstick."""
    x = torch.empty(1 << 26, device=device)  # 256 MB
    y = torch.empty_like(x)
    ms = timeit(lambda: y.copy_(x), 5, device)
    return 2 * x.numel() * 4 / (ms / 1e3)


def klay_from_dag(circuit: Circuit):
    """The same smooth DAG as a KLay circuit: indicator (v, c) -> literal v*k + c + 1."""
    import klay
    dag = circuit.dag
    kc = klay.Circuit()
    made = []
    for i in range(dag.n_nodes):
        kind = dag.kind[i]
        if kind == 3:
            made.append(kc.true_node() if dag.value[i] else kc.false_node())
        elif kind == 0:
            made.append(kc.literal_node(int(dag.var[i]) * dag.n_values + int(dag.value[i]) + 1))
        else:
            kids = [made[c] for c in dag.children[dag.offsets[i]:dag.offsets[i + 1]]]
            made.append(kc.and_node(kids) if kind == 1 else kc.or_node(kids))
    for r in dag.roots:
        kc.set_root(made[r])
    return kc


def benchmark_circuits(include_experiments: bool, folder: Path = SHARED) -> list[tuple[str, Circuit, tuple | None]]:
    """(name, our circuit, (sdd, vtree) file pair or None): KLay's SDDs, then the experiments' circuits."""
    out: list[tuple[str, Circuit, tuple | None]] = []
    for name in ["sudoku_4", "4-grid", "seq_fun"]:
        sdd, vtree = folder / f"{name}.sdd", folder / f"{name}.vtree"
        if not sdd.exists():
            print(f"skipping {name}: {sdd} not found")
            continue
        out.append((name, Circuit.from_sdd_file(sdd, vtree), (sdd, vtree)))
    if include_experiments:
        from pseudosl.constraints import compile_all_different
        rows = [[9 * r + c for c in range(9)] for r in range(9)]
        cols = [[9 * r + c for r in range(9)] for c in range(9)]
        boxes = [[9 * (3 * br + r) + 3 * bc + c for r in range(3) for c in range(3)] for br in range(3) for bc in range(3)]
        sudoku = compile_all_different(81, 9, rows + cols + boxes)
        out.append(("sudoku-9x9 (27 all-different roots)", sudoku, None))
        words = [[1, 2], [3, 4, 5], [6, 7, 8, 9], [2, 3], [10, 11, 12]]  # 12 token classes + catch-all
        detox = pseudosl.compile_automaton(forbidden_sequences_dfa(words, 13), 10)
        out.append(("forbidden-words DFA (10 pos, 13 values)", detox, None))
    return out


def circuits(include_experiments: bool, folder: Path = SHARED) -> list[tuple[str, Circuit, object]]:
    """(name, our circuit, (KLay circuit, sdd, vtree)): SDD files loaded by KLay itself, ours handed over."""
    import klay
    out = []
    for name, ours, files in benchmark_circuits(include_experiments, folder):
        if files is None:
            out.append((name, ours, (klay_from_dag(ours), None, None)))
            continue
        kc = klay.Circuit()
        kc.add_sdd_from_file(str(files[0]))
        out.append((name, ours, (kc, *files)))
    return out


def pysdd_ms(sdd: Path, vtree: Path, logp: torch.Tensor) -> float:
    """Mean ms per batch for PySDD's log-mode WMC, looping over the batch."""
    import numpy as np
    from pysdd.sdd import SddManager, Vtree
    mgr = SddManager.from_vtree(Vtree.from_file(str(vtree)))
    node = mgr.read_sdd_file(str(sdd).encode())
    wmc = node.wmc(log_mode=True)
    n = mgr.var_count()
    pos = logp[:, :n].double().numpy()
    neg = np.log1p(-np.exp(pos))
    t = time.perf_counter()
    for b in range(len(pos)):
        # weights array: [-n..-1, 1..n] literal order as PySDD expects
        wmc.set_literal_weights_from_array(np.concatenate([neg[b, ::-1], pos[b]]))
        wmc.propagate()
    return 1e3 * (time.perf_counter() - t)


def compiled_klay(kc, dev: str):
    """KLay's ``compile=True`` module, or None if it does not run here."""
    try:
        return kc.to_torch_module(semiring="log", compile=True).to(dev)
    except Exception as e:  # noqa: BLE001 -- a missing compiler toolchain is reported, not fatal
        print(f"KLay compile=True unavailable: {type(e).__name__}: {e}")
        return None


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--no-experiments", action="store_true", help="only the SDD files of ../shared")
    ap.add_argument("--compile", action="store_true",
                    help="also time Circuit.compiled() (on CUDA with mode='reduce-overhead', i.e. CUDA graphs) "
                         "and KLay's compile=True (slow to compile on a CPU)")
    ap.add_argument("--only", default=None, help="only circuits whose name contains this")
    ap.add_argument("--circuits", type=Path, default=SHARED, help=f"folder of the SDD files (default {SHARED})")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.device
    bandwidth = copy_bandwidth(dev)
    print(f"# machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"device {dev}, torch {torch.__version__}, batch {args.batch}, float32, median of {args.reps}; "
          f"measured copy bandwidth {bandwidth / 1e9:.1f} GB/s\n")
    modes = ["ours", "ours-c", "KLay", "KLay-c"] if args.compile else ["ours", "KLay"]
    header = ("| circuit | vars×values | edges | " + " | ".join(f"{m} fwd ms" for m in modes) + " | PySDD ms | "
              + " | ".join(f"{m} f+b ms" for m in modes) + " | best ours / best KLay fwd | f+b "
              "| fwd floor ms | best ours fwd / floor |")
    print(header)
    print("|" + "|".join(["---"] * (header.count("|") - 1)) + "|")
    ratios: dict[str, list[float]] = {"fwd": [], "f+b": [], "eager fwd": [], "eager f+b": []}
    for name, ours, (kc, sdd, vtree) in circuits(not args.no_experiments, args.circuits):
        if args.only and args.only not in name:
            continue
        ours = ours.to(dev)
        kms = {"KLay": kc.to_torch_module(semiring="log", compile=False).to(dev)}
        fns = {"ours": ours.log_prob}
        if args.compile:
            fns["ours-c"] = ours.compiled(mode="reduce-overhead") if dev == "cuda" else ours.compiled()
            kms["KLay-c"] = compiled_klay(kc, dev)
        n, k = ours.n_vars, ours.n_values
        torch.manual_seed(0)
        x = torch.randn(args.batch, n, k, device=dev).log_softmax(-1)
        xg = x.clone().requires_grad_()
        if sdd is not None:  # KLay's own SDD reader: Boolean positive/negative log-weights
            kpos, kneg = x[..., 1], x[..., 0]
            kposg = xg[..., 1]
        else:  # one positive literal per indicator
            kpos = x.reshape(args.batch, -1)
            kneg = torch.zeros_like(kpos)
            kposg = xg.reshape(args.batch, -1)
        ref = ours.log_prob(x).reshape(args.batch, -1)
        ref_grad, = torch.autograd.grad(ours.log_prob(xg).sum(), xg)
        for mode, fn in fns.items():
            with torch.no_grad():
                got = fn(x).reshape(args.batch, -1)
            assert torch.allclose(ref, got, atol=1e-3, rtol=1e-4), f"{name}: {mode} and eager pseudosl disagree"
            got_grad, = torch.autograd.grad(fn(xg).sum(), xg)
            assert torch.allclose(ref_grad, got_grad, atol=1e-4), f"{name}: {mode} gradients disagree with eager"
        for mode, km in kms.items():
            if km is not None:
                got = km(kpos, kneg).reshape(args.batch, -1)
                assert torch.allclose(ref, got, atol=1e-3, rtol=1e-4), f"{name}: {mode} and pseudosl disagree"

        def fwd(f, *a):
            def run():
                with torch.no_grad():
                    f(*a)
            return run

        def fb(f, *a):
            def run():
                xg.grad = None
                f(*a).sum().backward()
            return run

        t_f: dict[str, float] = {}
        t_b: dict[str, float] = {}
        for mode, fn in fns.items():
            t_f[mode], t_b[mode] = timeit(fwd(fn, x), args.reps, dev), timeit(fb(fn, xg), args.reps, dev)
        for mode, km in kms.items():
            if km is None:
                t_f[mode] = t_b[mode] = float("nan")
                continue
            t_f[mode], t_b[mode] = timeit(fwd(km, kpos, kneg), args.reps, dev), timeit(fb(km, kposg, kneg), args.reps, dev)
        t_sdd = pysdd_ms(sdd, vtree, x[..., 1].cpu()) if sdd is not None else float("nan")
        best = {key: (min(v for m, v in t.items() if m.startswith("ours")),
                      min((v for m, v in t.items() if m.startswith("KLay") and v == v), default=float("nan")))
                for key, t in (("fwd", t_f), ("f+b", t_b))}
        for key in ("fwd", "f+b"):
            ratios[key].append(best[key][0] / best[key][1])
        ratios["eager fwd"].append(t_f["ours"] / t_f["KLay"])
        ratios["eager f+b"].append(t_b["ours"] / t_b["KLay"])
        edges = ours.n_edges
        bytes_min = 4 * args.batch * (ours.n_slots + edges)  # write every node once, read every edge once
        floor_ms = 1e3 * bytes_min / bandwidth
        sdd_cell = f"{t_sdd:.2f}" if t_sdd == t_sdd else "n/a"
        cells = lambda t: " | ".join(f"{t[m]:.2f}" if t[m] == t[m] else "n/a" for m in modes)  # noqa: E731
        print(f"| {name} | {n}×{k} | {edges} | {cells(t_f)} | {sdd_cell} | {cells(t_b)} "
              f"| {ratios['fwd'][-1]:.2f}× | {ratios['f+b'][-1]:.2f}× | {floor_ms:.3f} | {best['fwd'][0] / floor_ms:.1f}× |",
              flush=True)
    print("\ngeometric mean of our time / KLay's time: "
          + ", ".join(f"{key} {geomean(v):.2f}×" for key, v in ratios.items()))


if __name__ == "__main__":
    main()
