"""Warcraft paths as edge vectors: conversions round-trip, the 4-connected relabelling, the metrics."""

import numpy as np
import pytest

from pseudosl.constraints import grid_edges, is_simple_path
from pseudosl.experiments.warcraft.data import WarcraftSplit, generate
from pseudosl.experiments.warcraft.grid import (
    edge_index,
    edges_to_mask,
    edges_to_path,
    mask_to_edges,
    path_cost,
    path_to_edges,
    shortest_paths,
)
from pseudosl.experiments.warcraft.metrics import path_metrics
from pseudosl.experiments.warcraft.train import prepare


def test_edge_order_is_grid_edges():
    pairs, lookup = edge_index(4)
    assert len(pairs) == 24 == len(grid_edges(4, 4)) and len(edge_index(12)[0]) == 264
    for i, ((r, c), (r2, c2)) in enumerate(grid_edges(4, 4)):
        assert tuple(pairs[i]) == (4 * r + c, 4 * r2 + c2) and lookup[(4 * r + c, 4 * r2 + c2)] == i


def test_conversions_round_trip_on_minimum_cost_paths():
    d, _, _ = generate(40, 5, seed=7)
    edges = mask_to_edges(d.paths)                                         # (40, 40)
    assert np.array_equal(edges_to_mask(edges, 5), d.paths)
    _, cost, _ = shortest_paths(d.weights)
    for b in range(40):
        cells = edges_to_path(edges[b], 5)
        assert cells is not None and cells[0] == (0, 0) and cells[-1] == (4, 4)
        assert is_simple_path([int(v) for v in edges[b]], 5, 5)
        assert np.array_equal(path_to_edges(cells, 5), edges[b])
        assert path_cost(cells, d.weights[b]) == pytest.approx(cost[b])
        assert len(cells) == int(d.paths[b].sum()) == int(edges[b].sum()) + 1


def test_edges_to_path_rejects_non_paths():
    k = 3
    right_then_down = [(0, 0), (0, 1), (0, 2), (1, 2), (2, 2)]
    e = path_to_edges(right_then_down, k)
    assert edges_to_path(e, k) == right_then_down
    assert edges_to_path(np.zeros_like(e), k) is None                      # nothing on
    broken = e.copy(); broken[edge_index(k)[1][(2, 5)]] = 0
    assert edges_to_path(broken, k) is None                                # a gap
    cycle = e.copy()
    for a, b in ((3, 4), (3, 6), (4, 7), (6, 7)):                          # a separate 4-cycle
        cycle[edge_index(k)[1][(a, b)]] = 1
    assert edges_to_path(cycle, k) is None
    branch = e.copy(); branch[edge_index(k)[1][(1, 4)]] = 1                 # a spur
    assert edges_to_path(branch, k) is None
    with pytest.raises(ValueError, match="not 4-adjacent"):
        path_to_edges([(0, 0), (1, 1)], k)
    with pytest.raises(ValueError, match=r"shape \(12,\)"):
        edges_to_path(np.zeros(5), k)


def test_eight_connected_labels_are_recomputed():
    """A real-layout label with a diagonal step is replaced by the 4-connected minimum-cost path."""
    w = np.full((1, 3, 3), 9.2)
    w[0, 0, 0] = w[0, 1, 1] = w[0, 2, 2] = 0.8
    w[0, 0, 1] = 1.2
    diagonal = np.eye(3, dtype=np.uint8)[None]                              # (0,0) -> (1,1) -> (2,2)
    d = prepare(WarcraftSplit(np.zeros((1, 24, 24, 3), np.uint8), diagonal, w))
    assert d.relabelled == 1
    cells = edges_to_path(d.edges[0].numpy(), 3)
    assert cells == [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)] or cells == [(0, 0), (0, 1), (1, 1), (2, 1), (2, 2)]
    assert d.optimum[0] == pytest.approx(0.8 + 1.2 + 0.8 + 9.2 + 0.8)


def test_metrics_on_hand_made_predictions():
    k = 3
    w = np.ones((4, k, k)); w[:, 0, 1] = 5.0                                 # avoid (0, 1)
    _, optimum, _ = shortest_paths(w)
    down_right = path_to_edges([(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)], k)   # optimal, cost 5
    other_optimum = path_to_edges([(0, 0), (1, 0), (1, 1), (1, 2), (2, 2)], k)  # also cost 5 (a tie)
    detour = path_to_edges([(0, 0), (0, 1), (0, 2), (1, 2), (2, 2)], k)      # valid, cost 9
    broken = down_right.copy(); broken[np.nonzero(down_right)[0][0]] = 0     # not a path
    pred = np.stack([down_right, other_optimum, detour, broken])
    m, per = path_metrics(pred, w, optimum)
    assert per["consistent"].tolist() == [True, True, True, False]
    assert per["exact"].tolist() == [True, True, False, False]
    assert np.isnan(per["cost"][3]) and per["cost"][2] == 9
    assert m["exact"] == 50 and m["consistent"] == 75
    assert m["cost_ratio"] == pytest.approx((1 + 1 + 9 / 5) / 3)
    none, _ = path_metrics(pred[3:], w[3:], optimum[3:])
    assert none["consistent"] == 0 and np.isnan(none["cost_ratio"])
    with pytest.raises(ValueError, match="pred must have shape"):
        path_metrics(pred[:, :3].T, w, optimum)
