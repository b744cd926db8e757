"""Random valid circuits with the predicate each encodes (built independently of the runtime), and a recorder of
large allocations."""

from __future__ import annotations

import random

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pseudosl import Circuit, CircuitBuilder
from pseudosl.logic.dag import FALSE, TRUE


def random_circuit(seed: int, n: int, k: int, n_roots: int = 1):
    """A random valid circuit and the predicate it encodes (built independently of the runtime).

    Decision nodes split a variable's values into groups (deterministic); AND nodes split the
    variable set (decomposable); leaves are constants.  Smoothing is left to the builder.
    """
    rng = random.Random(seed)
    b = CircuitBuilder(n, k)

    def make(vs: list[int]):
        r = rng.random()
        if not vs or r < 0.15:
            val = rng.random() < 0.7
            return (TRUE if val else FALSE), (lambda a, val=val: val)
        if len(vs) >= 2 and r < 0.4:
            cut = rng.randrange(1, len(vs))
            (l, pl), (rr, pr) = make(vs[:cut]), make(vs[cut:])
            return b.and_(l, rr), (lambda a: pl(a) and pr(a))
        v, rest = vs[0], vs[1:]
        vals = list(range(k))
        rng.shuffle(vals)
        groups, start = [], 0
        while start < k:
            size = rng.randint(1, k - start)
            groups.append(vals[start:start + size])
            start += size
        arms = []
        for g in groups:
            if rng.random() < 0.2:
                continue  # this value group is forbidden
            sub, ps = make(rest)
            arms.append((b.and_(b.in_set(v, g), sub), set(g), ps))
        node = b.or_(*(a[0] for a in arms))
        return node, (lambda a, arms=arms, v=v: any(a[v] in g and ps(a) for _, g, ps in arms))

    roots, preds = [], []
    for _ in range(n_roots):
        order = list(range(n))
        rng.shuffle(order)
        node, pred = make(order)
        roots.append(node)
        preds.append(pred)
    return Circuit(b.build(roots)), preds


class LargeAllocations(TorchDispatchMode):
    """Records the shape of every op output of more than ``limit`` bytes that is not a view."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.large = limit, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in torch.utils._pytree.tree_leaves(out):
            if isinstance(o, torch.Tensor) and o.numel() * o.element_size() > self.limit and o._base is None \
                    and not func._schema.is_mutable and "alias" not in str(func._schema):
                self.large.append((func.__name__, tuple(o.shape)))
        return out


def random_allowed(seed: int, batch: int, n: int, k: int) -> torch.Tensor:
    """A bool ``(B, n, k)`` mask with about a fifth of the values ruled out (some rows none left)."""
    return torch.rand(batch, n, k, generator=torch.Generator().manual_seed(seed)) > 0.2
