"""The simple-path constraint on grids vs depth-first enumeration, a direct checker and the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
from assertions import assert_matches_oracle, random_log_weights
from pseudosl.logic.errors import UnsatisfiableError
from pseudosl.constraints import grid_edges, is_simple_path, simple_path
from pseudosl.logic.simpath import normalized_bound, simple_path_dag


def dfs_paths(rows: int, cols: int) -> list[np.ndarray]:
    """Every simple path (0,0) -> (rows-1, cols-1) as a 0/1 vector over ``grid_edges`` (brute force)."""
    index = {e: i for i, e in enumerate(grid_edges(rows, cols))}
    t = (rows - 1, cols - 1)
    out: list[np.ndarray] = []

    def go(cell, seen, used):
        if cell == t:
            y = np.zeros(len(index), dtype=np.int64)
            y[used] = 1
            out.append(y)
            return
        r, c = cell
        for nb in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nb[0] < rows and 0 <= nb[1] < cols and nb not in seen:
                edge = (min(cell, nb), max(cell, nb))
                go(nb, seen | {nb}, used + [index[edge]])

    go((0, 0), {(0, 0)}, [])
    return out


def model_count(circuit) -> float:
    """Weighted model count with every weight 1 (log-weights 0), in float64."""
    return circuit.log_prob(torch.zeros(1, circuit.n_vars, 2, dtype=torch.float64)).exp().item()


GRIDS = [(1, 2), (2, 1), (1, 5), (2, 2), (2, 3), (3, 2), (3, 3), (3, 4), (4, 3), (4, 4), (2, 5), (5, 5), (4, 6)]


def test_grid_edges_order():
    edges = grid_edges(12, 12)
    assert len(edges) == 264 and len(set(edges)) == 264
    assert edges[:3] == [((0, 0), (0, 1)), ((0, 0), (1, 0)), ((0, 1), (0, 2))]
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 and a < b for a, b in edges)
    assert len(grid_edges(3, 4)) == 3 * 3 + 2 * 4


@pytest.mark.parametrize("rows, cols", GRIDS)
def test_model_count_matches_dfs_for_every_bound(rows, cols):
    paths = dfs_paths(rows, cols)
    lengths = np.array([p.sum() for p in paths])
    shortest = rows + cols - 2
    assert lengths.min() == shortest
    for bound in [None, *range(shortest, rows * cols + 1, 1 if rows * cols < 20 else 2)]:  # odd steps: same circuit
        circuit = simple_path(rows, cols, bound, cache=False)
        want = len(paths) if bound is None else int((lengths <= bound).sum())
        assert round(model_count(circuit)) == want, (rows, cols, bound)
        assert circuit.dag.evaluate(np.stack(paths))[:, 0].tolist() == [bound is None or n <= bound for n in lengths]


@pytest.mark.parametrize("n, count", [(2, 2), (3, 12), (4, 184), (5, 8512), (6, 1262816), (7, 575780564)])
def test_known_counts_oeis_a007764(n, count):
    assert round(model_count(simple_path(n, n, cache=False))) == count


def near_misses(rows: int, cols: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Edge sets that are almost a path: one edge added or removed, a path plus a disjoint square."""
    edges = grid_edges(rows, cols)
    index = {e: i for i, e in enumerate(edges)}
    out = []
    for p in dfs_paths(rows, cols):
        flip = p.copy()
        flip[rng.integers(len(p))] ^= 1  # a branch, a gap, or a longer/shorter neighbour
        out.append(flip)
        on_cells = {c for i in np.flatnonzero(p) for c in edges[i]}
        for r in range(rows - 1):
            for c in range(cols - 1):
                square = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)]
                if not on_cells & set(square):  # a disjoint cycle
                    q = p.copy()
                    for a, b in zip(square, square[1:] + square[:1]):
                        q[index[(min(a, b), max(a, b))]] = 1
                    out.append(q)
    return out


@pytest.mark.parametrize("rows, cols", [(3, 3), (3, 4), (4, 4), (2, 5)])
def test_accepts_exactly_like_the_checker(rows, cols):
    rng = np.random.default_rng(rows * 10 + cols)
    n = len(grid_edges(rows, cols))
    paths = dfs_paths(rows, cols)
    cases = paths + near_misses(rows, cols, rng) + list(rng.integers(0, 2, size=(300, n)))
    cases += list((rng.random((300, n)) < 0.3).astype(np.int64))
    y = np.stack(cases)
    for bound in (None, rows + cols, rows + cols + 2):
        got = simple_path(rows, cols, bound, cache=False).dag.evaluate(y)[:, 0]
        want = np.array([is_simple_path(a, rows, cols, max_edges=bound) for a in y])
        assert (got == want).all()
    assert all(is_simple_path(p, rows, cols) for p in paths)
    assert not any(is_simple_path(p, rows, cols, max_edges=p.sum() - 1) for p in paths)


def test_checker_rejects_near_misses():
    edges = grid_edges(3, 3)
    on = lambda *pairs: np.array([int(e in pairs) for e in edges])
    path = [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 2), (1, 2)), ((1, 2), (2, 2))]
    assert is_simple_path(on(*path), 3, 3)
    assert not is_simple_path(on(*path, ((1, 0), (2, 0)), ((2, 0), (2, 1))), 3, 3)  # a dangling fragment
    assert not is_simple_path(on(*path, ((0, 1), (1, 1))), 3, 3)  # a branch
    assert not is_simple_path(on(*path[:3]), 3, 3)  # stops short
    assert not is_simple_path(on(*path), 3, 3, max_edges=3)
    square = [((1, 0), (1, 1)), ((1, 0), (2, 0)), ((2, 0), (2, 1)), ((1, 1), (2, 1))]
    edges4 = grid_edges(3, 4)
    on4 = lambda *pairs: np.array([int(e in pairs) for e in edges4])
    top = [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 2), (0, 3)), ((0, 3), (1, 3)), ((1, 3), (2, 3))]
    assert is_simple_path(on4(*top), 3, 4) and not is_simple_path(on4(*top, *square), 3, 4)  # + a cycle
    assert is_simple_path([True, False, True, False], 2, 2) and is_simple_path(torch.tensor([0., 1., 0., 1.]), 2, 2)


@pytest.mark.parametrize("rows, cols, bound", [(2, 2, None), (2, 3, None), (2, 3, 3), (3, 3, None), (3, 3, 4),
                                               (3, 3, 6)])
def test_probability_matches_oracle(rows, cols, bound):
    circuit = simple_path(rows, cols, bound, cache=False)
    circuit.check()
    n = circuit.n_vars
    truth = oracle.truth_of(lambda y: is_simple_path(y, rows, cols, max_edges=bound), n, 2)
    for seed, normalised in ((0, True), (1, False)):
        assert_matches_oracle(circuit, [truth], random_log_weights(seed, 3, n, 2, normalised))


def test_structure_and_cache(tmp_path, monkeypatch):
    for rows, cols, bound in [(3, 4, None), (3, 4, 7), (2, 5, 7)]:
        simple_path(rows, cols, bound, cache=False).check()
    simple_path(5, 5, 12, cache=False).check(determinism=False)  # 40 edges: too many to enumerate
    shown = simple_path(3, 3, 6, cache=False, progress=True)  # the tqdm bar changes nothing
    assert shown.fingerprint() == simple_path(3, 3, 6, cache=False).fingerprint()
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    first = simple_path(4, 5, 11)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    again = simple_path(4, 5, 12)  # rounded down to the parity of every path: the same circuit
    assert len(list(tmp_path.glob("*.npz"))) == 1 and again.fingerprint() == first.fingerprint()


def test_bounds_are_normalised():
    assert normalized_bound(12, 12, None) is None
    assert normalized_bound(12, 12, 23) == 22 and normalized_bound(12, 12, 40) == 40
    assert normalized_bound(3, 3, 8) is None  # every path has at most 8 edges
    assert simple_path_dag(12, 12, 22).n_vars == 264


@pytest.mark.parametrize("call, err, match", [
    (lambda: simple_path(1, 1), ValueError, "1x1 grid has no edges"),
    (lambda: simple_path(0, 3), ValueError, "rows must be >= 1"),
    (lambda: simple_path(3, 2.0), TypeError, "cols must be an int"),
    (lambda: simple_path(3, True), TypeError, "cols must be an int"),
    (lambda: simple_path(3, 3, 0), ValueError, "max_edges must be >= 1"),
    (lambda: simple_path(3, 3, 3), UnsatisfiableError, "below 4"),
    (lambda: grid_edges(1, 1), ValueError, "1x1"),
    (lambda: is_simple_path([1, 0, 1], 2, 2), ValueError, "vector of 4 values"),
    (lambda: is_simple_path([1, 0, 2, 0], 2, 2), ValueError, "0/1"),
    (lambda: is_simple_path([0.5, 0, 1, 0], 2, 2), ValueError, "0/1"),
    (lambda: is_simple_path(["a", "b", "c", "d"], 2, 2), ValueError, "0/1"),
])
def test_bad_arguments(call, err, match):
    with pytest.raises(err, match=match):
        call()
