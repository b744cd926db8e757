"""Warcraft metrics on predicted edge vectors (greedy decodes), in percent.

* Consistent: the edges that are on form one simple path from the top-left to the bottom-right cell
  (:func:`pseudosl.constraints.is_simple_path`).
* Exact: consistent, and the path's cost (the sum of the weights of the cells it visits) equals the
  optimum within ``1e-6``.  Cost, not equality with the label: a map can have several minimum-cost
  paths (most generated maps do), and any of them solves the task.
* Cost ratio: mean of cost / optimum over the consistent predictions (NaN when none is consistent;
  tables then show "–" and on how many seeds it is defined); 1 is optimal, lower is better.
* Edge F1 (with ``label``): mean over maps of the F1 score of the predicted edges against the label
  path's, ``2 |pred ∩ label| / (|pred| + |label|)``, in %.  Not a task metric (another optimal path
  scores below 100): a graded tie-breaker for model selection while Exact and Consistent are still 0.
"""

from __future__ import annotations

import numpy as np

from .grid import edges_to_path, path_cost

__all__ = ["path_metrics", "EXACT_TOL"]

EXACT_TOL = 1e-6


def path_metrics(pred: np.ndarray, weights: np.ndarray, optimum: np.ndarray,
                 label: np.ndarray | None = None) -> tuple[dict[str, float], dict]:
    """Metrics of predictions ``pred (N, E)`` 0/1 on maps ``weights (N, k, k)`` with optimal costs ``optimum (N,)``.

    Returns the metrics (``exact``, ``consistent`` in %, ``cost_ratio``, and ``edge_f1`` in % when the label
    paths ``label (N, E)`` are given) and per-map arrays ``consistent (N,)`` bool, ``exact (N,)`` bool and
    ``cost (N,)`` (NaN where inconsistent).
    """
    from pseudosl.constraints import is_simple_path
    pred, weights, optimum = np.asarray(pred), np.asarray(weights, dtype=np.float64), np.asarray(optimum, dtype=np.float64)
    n, k = weights.shape[0], weights.shape[1]
    if pred.ndim != 2 or pred.shape[0] != n:
        raise ValueError(f"pred must have shape ({n}, E) to match weights {weights.shape}; got {pred.shape}")
    consistent = np.zeros(n, dtype=bool)
    cost = np.full(n, np.nan)
    for i in range(n):
        on = [bool(v) for v in pred[i]]
        if is_simple_path(on, k, k):
            cells = edges_to_path(pred[i], k)
            assert cells is not None, "is_simple_path and edges_to_path disagree"
            consistent[i] = True
            cost[i] = path_cost(cells, weights[i])
    exact = consistent & (np.abs(np.where(consistent, cost, np.inf) - optimum) <= EXACT_TOL)
    ratio = float(np.mean(cost[consistent] / optimum[consistent])) if consistent.any() else float("nan")
    metrics = {"exact": 100.0 * exact.mean() if n else 0.0, "consistent": 100.0 * consistent.mean() if n else 0.0,
               "cost_ratio": ratio}
    if label is not None:
        p, t = pred.astype(bool), np.asarray(label).astype(bool)
        f1 = 2 * (p & t).sum(1) / np.maximum(p.sum(1) + t.sum(1), 1)
        metrics["edge_f1"] = 100.0 * float(f1.mean()) if n else 0.0
    return metrics, {"consistent": consistent, "exact": exact, "cost": cost}
