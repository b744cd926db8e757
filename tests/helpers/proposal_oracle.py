"""Brute-force proposals of ``pseudosl.constrained_sample`` over every sequence of a small model (float64).

:class:`Brute` holds a joint table over token sequences, a constraint on them and a value map, and builds each
proposal's ``q`` over all sequences by enumeration -- the next-value distributions after each prefix summed off the
joint table, the most probable repair by enumeration over value sequences, the sequential proposal's masks from the
constraint's sequences -- independently of the library's code (tests/generation/test_proposals.py,
benchmarks/resample_tv.py).
"""

from __future__ import annotations

import numpy as np
import torch

import oracle
from pseudosl.generation.proposals import REPAIR_RATE


def prefix_table(log_p: torch.Tensor, n: int, v: int) -> torch.Tensor:
    """``(A, n, V)``: ``log p(. | y_<i)`` after each prefix of each sequence, by summing the joint table."""
    table = log_p.view((v,) * n)
    ys = oracle.assignments(n, v)
    out = torch.empty(len(ys), n, v)
    for i in range(n):
        marg = table.logsumexp(tuple(range(i + 1, n))) if i + 1 < n else table  # (v,)*(i+1): log p(y_<=i)
        for a, y in enumerate(ys):
            out[a, i] = marg[tuple(y[:i])].log_softmax(-1)
    return out


class Brute:
    """A model's table over token sequences, a constraint on them and a value map (identity for the GRU)."""

    def __init__(self, log_p: torch.Tensor, ok: np.ndarray, n: int, v: int, lookup: torch.Tensor | None = None):
        self.log_p, self.ok, self.n, self.v = log_p, torch.as_tensor(ok), n, v
        self.ys = torch.as_tensor(oracle.assignments(n, v))
        self.pref = prefix_table(log_p, n, v)
        self.lookup = torch.arange(v) if lookup is None else lookup
        self.values = self.lookup[self.ys]  # (A, n)

    def index(self, y: torch.Tensor) -> torch.Tensor:
        return oracle.assignment_index(y, self.v)

    def factorized(self, factors: torch.Tensor) -> torch.Tensor:
        """``(A,)`` ``q(y~) ∝ prod_i exp(factors[i, y~_i])`` on the constraint, normalised."""
        w = factors.gather(1, self.ys.t()).sum(0).masked_fill(~self.ok, float("-inf"))
        return (w - w.logsumexp(0)).exp()

    def keep_or_draw(self, a: int, rho: torch.Tensor) -> torch.Tensor:
        keep = torch.nn.functional.one_hot(self.ys[a], self.v).double()
        return (((1 - rho)[:, None] * keep) + rho[:, None] * self.pref[a].exp()).log()

    def repair_changed(self, a: int) -> torch.Tensor:
        """``(n,)`` bool: positions whose value the most probable repair changes (the maximiser over the constraint
        of the folded keep-or-draw weights, by enumeration over value sequences)."""
        f = self.keep_or_draw(a, torch.full((self.n,), REPAIR_RATE))
        k = int(self.lookup.max()) + 1
        folded = torch.stack([torch.stack([f[i, self.lookup == c].logsumexp(0) for c in range(k)])
                              for i in range(self.n)])
        vals = torch.as_tensor(oracle.assignments(self.n, k))
        good = torch.zeros(len(vals), dtype=torch.bool)
        good[oracle.assignment_index(self.values[self.ok], k)] = True
        w = folded.gather(1, vals.t()).sum(0).masked_fill(~good, float("-inf"))
        return vals[w.argmax()] != self.values[a]

    def edit(self, a: int, rate: float, window: int) -> torch.Tensor:
        changed = self.repair_changed(a).nonzero().flatten().tolist()
        rho = torch.tensor([1.0 if any(abs(i - j) <= window for j in changed) else rate for i in range(self.n)])
        return self.factorized(self.keep_or_draw(a, rho))

    def restart_start(self, a: int, lookback: int) -> int:
        changed = self.repair_changed(a).nonzero().flatten()
        first = int(changed[0]) if len(changed) else self.n
        return max(0, first - lookback)

    def restart(self, a: int, lookback: int) -> torch.Tensor:
        """``(A,)`` the sequential proposal: the anchor's prefix before ``s``, then the model masked to the tokens that
        keep a completion on the constraint."""
        s = self.restart_start(a, lookback)
        q = torch.zeros(len(self.ys))
        for b in torch.nonzero(self.ok).flatten().tolist():
            y = self.ys[b]
            if not torch.equal(y[:s], self.ys[a, :s]):
                continue
            lq = 0.0
            for t in range(s, self.n):
                same = (self.ys[:, :t] == y[:t]).all(1) & self.ok
                allowed = torch.zeros(self.v, dtype=torch.bool)
                allowed[self.ys[same, t]] = True
                lq += float(self.pref[b, t, y[t]] - self.pref[b, t][allowed].logsumexp(0))
            q[b] = np.exp(lq)
        return q

    def target(self) -> torch.Tensor:
        w = self.log_p.masked_fill(~self.ok, float("-inf"))
        return (w - w.logsumexp(0)).exp()
