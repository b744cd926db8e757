"""How far each proposal's output is from ``p(. | alpha)``, exactly, on models small enough to enumerate (issue 37).

    python benchmarks/resample_tv.py [--seeds 5] [--k 1 8 32 128]

The GRUs of tests/generation/test_constrained_sample.py (4 positions of 3 values: 81 sequences; seeds 0..4, a random
constraint holding on ~30 % of them) and the proposals of ``pseudosl.generation.proposals``, built by brute force
(tests/helpers/proposal_oracle.py; the tests check the library's draws against them).  Anchors ``y ~ p``, an anchor
that satisfies the constraint kept (``constrained_sample``'s default); the output's distribution is

    sum_y p(y) ([y in A] delta_y + [y not in A] SIR_K(q_y)),

``SIR_K(q)`` the law of sampling importance resampling with ``K`` candidates from ``q`` weighted by ``p / q``,
computed exactly for any ``K`` by one integral (``1 / a = int_0^inf e^{-a u} du``):

    P(out = z) = K q(z) w(z) int_0^inf e^{-u w(z)} phi(u)^(K-1) du,   phi(u) = sum_x q(x) e^{-u w(x)},

on a log-spaced grid (checked against the enumeration of every ``(K-1)``-tuple for ``K <= 3``, printed).  Printed:
the total-variation distance to ``p(. | alpha)`` per proposal and ``K`` (mean, min and max over the seeds), ``K = inf``
the limit (``p`` restricted to the proposal's support); then ``rounds`` (the violators' outputs resampled around
themselves, exact composition of the kernels) at ``K = 8``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "generation")]
import oracle  # noqa: E402
from proposal_oracle import Brute  # noqa: E402
from test_constrained_sample import GRU, K_VALUES, N, local_table, random_truth, table_of  # noqa: E402

torch.set_default_dtype(torch.float64)
GRID = torch.linspace(-40.0, 60.0, 20_001)  # log u


def sir_law(q: torch.Tensor, log_p: torch.Tensor, k: int | float) -> torch.Tensor:
    """``(A,)`` the exact law of sampling importance resampling with ``k`` candidates (``inf``: ``p`` on q's support)."""
    support = q > 0
    out = torch.zeros_like(q)
    if k == float("inf"):
        w = log_p.masked_fill(~support, float("-inf"))
        return (w - w.logsumexp(0)).exp()
    qs = q[support]
    lw = log_p[support] - qs.log()
    w = (lw - lw.max()).exp()
    u = GRID.exp()
    decay = torch.exp(-u[:, None] * w[None, :])  # (G, S)
    phi = (decay * qs).sum(1)
    integral = torch.trapezoid(decay * (phi ** (k - 1) * u)[:, None], GRID, dim=0)
    out[support] = k * qs * w * integral
    return out


def proposals(brute: Brute) -> dict[str, callable]:
    table = brute.log_p.view((K_VALUES,) * N)

    def local(t: float):
        return lambda a: brute.factorized(local_table(table, tuple(brute.ys[a].tolist())) / t)
    return {"Gen-C (LocalProposal)": local(1.0), "LocalProposal(0.5)": local(0.5),
            "EditProposal(0.02, 1)": lambda a: brute.edit(a, 0.02, 1),
            "RestartProposal(0)": lambda a: brute.restart(a, 0), "RestartProposal(2)": lambda a: brute.restart(a, 2)}


def output_law(brute: Brute, q_of, k: int | float) -> torch.Tensor:
    p = brute.log_p.exp()
    law = p.masked_fill(~brute.ok, 0.0)
    for a in torch.nonzero(~brute.ok).flatten().tolist():
        law = law + p[a] * sir_law(q_of(a), brute.log_p, k)
    return law


def rounds_law(brute: Brute, q_of, k: int, rounds: int) -> torch.Tensor:
    """The violators' outputs resampled around themselves ``rounds - 1`` more times; satisfying anchors kept."""
    p = brute.log_p.exp()
    kernel = {z: sir_law(q_of(z), brute.log_p, k) for z in torch.nonzero(brute.ok).flatten().tolist()}
    moved = torch.zeros_like(p)
    for a in torch.nonzero(~brute.ok).flatten().tolist():
        moved = moved + p[a] * sir_law(q_of(a), brute.log_p, k)
    for _ in range(rounds - 1):
        moved = sum(moved[z] * kernel[z] for z in kernel)
    return p.masked_fill(~brute.ok, 0.0) + moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 8, 32, 128])
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = []
    for seed in range(args.seeds):
        model, truth = GRU(seed=seed), random_truth(seed)
        cases.append(Brute(table_of(model), truth, N, K_VALUES))
    check = max(float((sir_law(q, cases[0].log_p, k) - oracle.resampling_output(q, cases[0].log_p, k)).abs().max())
                for q in [proposals(cases[0])["Gen-C (LocalProposal)"](int(a)) for a in
                          torch.nonzero(~cases[0].ok).flatten()[:5]] for k in (1, 2, 3))
    print(f"{args.seeds} GRUs (seeds 0..{args.seeds - 1}), 81 sequences each, the constraint on "
          f"{np.mean([float(c.ok.double().mean()) for c in cases]):.2f} of them (p(alpha) "
          f"{np.mean([float(c.log_p.exp()[c.ok].sum()) for c in cases]):.2f} on average); the integral against the "
          f"enumeration (K <= 3): max abs difference {check:.1e}\n")
    ks = [*args.k, float("inf")]
    print("| proposal | " + " | ".join(f"K = {k}" if k != float('inf') else "K = ∞" for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    for name in proposals(cases[0]):
        cells = []
        for k in ks:
            d = [oracle_tv(output_law(c, proposals(c)[name], k), c.target()) for c in cases]
            cells.append(f"{np.mean(d):.4f} ({min(d):.4f}–{max(d):.4f})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    print("\nRounds at K = 8 (the violators' outputs resampled around themselves):\n")
    print("| proposal | rounds = 1 | 2 | 3 |")
    print("|---|---|---|---|")
    for name in ("Gen-C (LocalProposal)", "LocalProposal(0.5)", "EditProposal(0.02, 1)"):
        cells = []
        for r in (1, 2, 3):
            d = [oracle_tv(rounds_law(c, proposals(c)[name], 8, r), c.target()) for c in cases]
            cells.append(f"{np.mean(d):.4f} ({min(d):.4f}–{max(d):.4f})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def oracle_tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


if __name__ == "__main__":
    main()
