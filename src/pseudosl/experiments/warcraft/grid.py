"""Paths on the k x k grid of cells: minimum-cost paths, and paths as edge vectors.

A map has a cost ``w[r, c] > 0`` per cell.  A path from the top-left cell ``(0, 0)`` to the
bottom-right cell ``(k-1, k-1)`` moves between 4-connected neighbours and costs the sum of the
weights of the cells it visits, both ends included (the Warcraft convention).

:func:`shortest_paths` solves ``N`` maps at once, vectorised over maps with numpy:

1. distances: ``d[v] = w[v] + min_{u ~ v} d[u]``, ``d[start] = w[start]``, by relaxation to the
   fixpoint (Bellman-Ford on all maps in parallel; every weight is positive, so it is exact and
   gives the distances Dijkstra computes, in at most ``k^2`` sweeps);
2. ties: the number of minimum-cost paths, counted over the DAG of tight moves
   (``|d[u] + w[v] - d[v]| <= tol``), cells processed in increasing ``d`` (capped at 2);
3. the path: back from the goal, always to the first tight neighbour (up, left, down, right).

Maps are solved :data:`CHUNK` at a time (the same answers in bounded memory), with a progress bar from
:data:`PROGRESS_FROM` maps on.

Paths as sequences.  A path is the binary vector over the edges of the 4-connected grid
(``2 k (k - 1)`` edges, 264 for 12 x 12) in the order of :func:`pseudosl.constraints.grid_edges`,
which is also the order the autoregressive models generate them in.  :func:`mask_to_edges` takes
the edges between adjacent path cells: for a minimum-cost path (positive weights) two cells of the
path are adjacent only when they are consecutive (else the shortcut would be cheaper), so this is
exactly the path's edges.  :func:`edges_to_path` walks an edge vector from ``(0, 0)`` and returns
the visited cells, or ``None`` when the vector is not a simple corner-to-corner path.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["shortest_paths", "edge_index", "mask_to_edges", "path_to_edges", "edges_to_path",
           "edges_to_mask", "path_cost"]


def _neighbours(k: int) -> np.ndarray:
    """``(k*k, 4)`` flat indices of the up / left / down / right neighbour of every cell, ``-1`` outside."""
    r, c = np.divmod(np.arange(k * k), k)
    out = np.full((k * k, 4), -1, dtype=np.int64)
    for j, (dr, dc) in enumerate(((-1, 0), (0, -1), (1, 0), (0, 1))):
        rr, cc = r + dr, c + dc
        ok = (rr >= 0) & (rr < k) & (cc >= 0) & (cc < k)
        out[ok, j] = rr[ok] * k + cc[ok]
    return out


CHUNK = 2000  # maps solved at once: bounds the (N, k^2, 4) temporaries
PROGRESS_FROM = 20_000  # shortest_paths shows a progress bar (stderr) for this many maps or more


def shortest_paths(weights: np.ndarray, tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimum-cost corner-to-corner paths of ``N`` maps (see the module docs).

    Args:
        weights: ``(N, k, k)`` positive cell costs.
        tol: two path costs within ``tol`` are a tie.

    Returns:
        ``paths (N, k, k)`` uint8 mask of the cells of one minimum-cost path, ``costs (N,)`` float64
        (its cost, both end cells included) and ``n_paths (N,)`` int64, the number of minimum-cost
        paths capped at 2 (``2`` = a tie).
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[1] < 1:
        raise ValueError(f"weights must have shape (N, k, k); got {w.shape}")
    if not np.all(np.isfinite(w)) or not np.all(w > 0):
        raise ValueError("weights must be finite and positive (a zero or negative cell cost has no shortest path)")
    n = w.shape[0]
    if n <= CHUNK:
        return _solve(w, tol)
    from tqdm.auto import tqdm
    parts = []
    with tqdm(total=n, desc=f"shortest paths of {n:,} maps", unit="map", mininterval=1.0,
              disable=n < PROGRESS_FROM) as bar:
        for a in range(0, n, CHUNK):  # maps are independent: chunks give the same answers in bounded memory
            parts.append(_solve(w[a:a + CHUNK], tol))
            bar.update(len(parts[-1][0]))
    return tuple(np.concatenate(p) for p in zip(*parts))  # type: ignore[return-value]


def _solve(w: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`shortest_paths` of checked weights ``(N, k, k)``, all maps at once."""
    n, k = w.shape[0], w.shape[1]
    flat = w.reshape(n, k * k)
    nb = _neighbours(k)                                          # (k², 4)
    valid = nb >= 0
    # 1. distances by relaxation to the fixpoint
    d = np.full((n, k * k), np.inf)
    d[:, 0] = flat[:, 0]
    for _ in range(k * k):
        via = np.where(valid, d[:, np.where(valid, nb, 0)], np.inf).min(-1)   # (N, k²)
        new = np.minimum(d, via + flat)
        new[:, 0] = flat[:, 0]
        if np.array_equal(new, d):
            break
        d = new
    # tight[b, v, j]: moving from neighbour j of v into v is on some minimum-cost path to v
    dn = np.where(valid, d[:, np.where(valid, nb, 0)], np.inf)               # (N, k², 4)
    tight = valid & (np.abs(dn + flat[:, :, None] - d[:, :, None]) <= tol)
    # 2. count minimum-cost paths in increasing distance (predecessors have strictly smaller d)
    order = np.argsort(d, axis=1, kind="stable")
    count = np.zeros((n, k * k), dtype=np.int64)
    count[:, 0] = 1
    ar = np.arange(n)
    for r in range(1, k * k):
        v = order[:, r]
        us = nb[v]                                                            # (N, 4)
        c = np.where(tight[ar, v], count[ar[:, None], np.where(us >= 0, us, 0)], 0).sum(-1)
        count[ar, v] = np.minimum(c, 2)
    # 3. back from the goal through the first tight neighbour
    mask = np.zeros((n, k * k), dtype=np.uint8)
    cur = np.full(n, k * k - 1)
    mask[ar, cur] = 1
    for _ in range(k * k):
        active = cur != 0
        if not active.any():
            break
        j = np.argmax(tight[ar, cur], axis=1)                                 # first tight direction
        cur = np.where(active, nb[cur, j], cur)
        mask[ar, cur] = 1
    return mask.reshape(n, k, k), d[:, -1].copy(), count[:, -1].copy()


@lru_cache(maxsize=None)
def edge_index(k: int) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
    """``(E, 2)`` flat cell indices of the edges of the k x k grid in :func:`grid_edges` order, and
    the map ``(min cell, max cell) -> edge position``."""
    from pseudosl.constraints import grid_edges
    pairs = np.array([(r * k + c, r2 * k + c2) for (r, c), (r2, c2) in grid_edges(k, k)], dtype=np.int64)
    lookup = {(int(min(a, b)), int(max(a, b))): i for i, (a, b) in enumerate(pairs)}
    return pairs, lookup


def mask_to_edges(paths: np.ndarray) -> np.ndarray:
    """``(N, k, k)`` path masks -> ``(N, E)`` uint8 edge vectors: the edges between two path cells.

    Exact for minimum-cost paths (no two non-consecutive cells of such a path are adjacent)."""
    p = np.asarray(paths)
    n, k = p.shape[0], p.shape[1]
    pairs, _ = edge_index(k)
    flat = p.reshape(n, k * k).astype(bool)
    return (flat[:, pairs[:, 0]] & flat[:, pairs[:, 1]]).astype(np.uint8)


def path_to_edges(cells: list[tuple[int, int]], k: int) -> np.ndarray:
    """An ordered list of cells ``[(r, c), ...]`` (consecutive cells 4-adjacent) -> ``(E,)`` uint8 edge vector."""
    _, lookup = edge_index(k)
    out = np.zeros(len(lookup), dtype=np.uint8)
    for (r, c), (r2, c2) in zip(cells, cells[1:]):
        a, b = r * k + c, r2 * k + c2
        key = (min(a, b), max(a, b))
        if key not in lookup:
            raise ValueError(f"cells {(r, c)} and {(r2, c2)} are not 4-adjacent on the {k}x{k} grid")
        out[lookup[key]] = 1
    return out


def edges_to_path(edges: np.ndarray, k: int) -> list[tuple[int, int]] | None:
    """Walk the edge vector ``(E,)`` from ``(0, 0)``: the cells of the simple path to ``(k-1, k-1)``, or
    ``None`` when the edges on are not exactly one simple corner-to-corner path."""
    pairs, _ = edge_index(k)
    on = np.asarray(edges).astype(bool)
    if on.shape != (len(pairs),):
        raise ValueError(f"edges must have shape ({len(pairs)},) for a {k}x{k} grid; got {on.shape}")
    adj: dict[int, list[int]] = {}
    for a, b in pairs[on]:
        adj.setdefault(int(a), []).append(int(b))
        adj.setdefault(int(b), []).append(int(a))
    goal = k * k - 1
    if k == 1:
        return [(0, 0)] if not on.any() else None
    if len(adj.get(0, [])) != 1 or len(adj.get(goal, [])) != 1:
        return None
    if any(len(v) != 2 for u, v in adj.items() if u not in (0, goal)):
        return None
    path, prev, cur = [0], -1, 0
    while cur != goal:
        nxt = [v for v in adj[cur] if v != prev]
        prev, cur = cur, nxt[0]
        path.append(cur)
    if len(path) - 1 != int(on.sum()):  # edges left over: a cycle apart from the path
        return None
    return [divmod(v, k) for v in path]


def edges_to_mask(edges: np.ndarray, k: int) -> np.ndarray:
    """``(N, E)`` edge vectors -> ``(N, k, k)`` uint8: the cells touched by an edge that is on."""
    pairs, _ = edge_index(k)
    e = np.asarray(edges).astype(bool)
    mask = np.zeros((e.shape[0], k * k), dtype=np.uint8)
    for j in (0, 1):
        np.maximum.at(mask, (np.nonzero(e)[0], pairs[np.nonzero(e)[1], j]), 1)
    return mask.reshape(-1, k, k)


def path_cost(cells: list[tuple[int, int]], weights: np.ndarray) -> float:
    """Sum of ``weights[r, c]`` over the cells of the path."""
    return float(sum(weights[r, c] for r, c in cells))
