"""Showing that the children of an OR node exclude each other (determinism), for every circuit maker.

:meth:`CircuitBuilder.or_ <pseudosl.logic.builder.CircuitBuilder.or_>` (node by node) and
:meth:`Dag.check_or_nodes <pseudosl.logic.dag.Dag.check_or_nodes>` (a file made elsewhere) show it the
same way, with the functions here:

1. :func:`separated`: the children are a decision, split by the values they fix for some variable
   (:func:`fixed_values`: from their literals, their ORs of literals of one variable, and the ANDs below);
2. failing that, :func:`first_overlap`: the children's truth on every assignment of the OR's variables
   (:func:`truth_below`), which finds two children that hold together, if any.

Circuits are read as two lists (or anything indexable) over node ids: ``kinds[u]``, a kind of
:mod:`pseudosl.logic.nodes`, and ``payload[u]``: ``(var, value)`` of a literal, ``(value,)`` of a constant,
the children of an AND or OR.

Example:
    >>> from pseudosl.logic.nodes import AND, CONST, LIT, OR
    >>> kinds = [CONST, CONST, LIT, LIT, LIT, AND]          # X0=0, X0=1, X1=1, X0=1 AND X1=1
    >>> payload = [(0,), (1,), (0, 0), (0, 1), (1, 1), (3, 4)]
    >>> separated([fixed_values(c, kinds, payload, {}, {}) for c in (2, 5)])
    True
    >>> first_overlap((3, 5), [0, 1], 2, kinds, payload)    # X0=1 holds whenever X0=1 AND X1=1 does
    (3, 5, 'X0=1, X1=1')
"""

from __future__ import annotations

import itertools
from typing import Mapping, Sequence

import numpy as np

from .nodes import AND, CONST, LIT, OR

__all__ = ["fixed_values", "separated", "assignments", "truth_below", "first_overlap"]


def fixed_values(node: int, kinds: Sequence[int], payload: Sequence[tuple[int, ...]], or_var: Mapping[int, int],
                 or_allowed: Mapping[int, int]) -> dict[int, int]:
    """Variables ``node`` fixes -> a bitset of the values it allows: from its literals, its ORs of literals of
    one variable (``or_var[u]``: that variable, ``or_allowed[u]``: the bitset of their values) and those of the
    ANDs below it (other ORs fix nothing)."""
    facts: dict[int, int] = {}
    stack = [node]
    while stack:
        u = stack.pop()
        kind = kinds[u]
        if kind == LIT:
            facts[payload[u][0]] = 1 << payload[u][1]
        elif kind == AND:
            stack.extend(payload[u])
        elif kind == OR and u in or_allowed:
            facts[or_var[u]] = or_allowed[u]
    return facts


def separated(facts: list[dict[int, int]]) -> bool:
    """Whether the children with these facts (variable -> allowed values) pairwise exclude each other.

    Splits the children by the values they allow for a variable they all fix, when those value
    sets are pairwise equal or disjoint (children of different parts exclude each other), and
    repeats inside each part; False when some part cannot be split this way.
    """
    todo = [facts]
    while todo:
        group = todo.pop()
        if len(group) < 2:
            continue
        common = set(group[0]).intersection(*group[1:])
        for v in common:
            parts: dict[int, list[dict[int, int]]] = {}
            for f in group:
                parts.setdefault(f[v], []).append(f)
            if len(parts) == 1:
                continue
            union = 0
            for values in parts:
                if union & values:
                    break
                union |= values
            else:
                todo.extend(parts.values())
                break
        else:
            return False
    return True


def assignments(n_values: int, n: int) -> np.ndarray:
    """Every assignment of ``n`` variables with ``n_values`` values, ``(n_values ** n, n)`` int64, in
    lexicographic order."""
    grid = np.array(list(itertools.product(range(n_values), repeat=n)), dtype=np.int64)
    return grid.reshape(-1, n)


def truth_below(nodes: Sequence[int], kinds: Sequence[int], payload: Sequence[tuple[int, ...]], grid: np.ndarray,
                column: Mapping[int, int] | Sequence[int]) -> dict[int, np.ndarray]:
    """Truth of ``nodes`` and every node below them on the assignments ``grid`` (``(A, columns)``), where
    variable ``v`` is column ``column[v]``."""
    truth: dict[int, np.ndarray] = {}
    stack = list(nodes)
    while stack:  # post-order over the nodes below
        u = stack[-1]
        if u in truth:
            stack.pop()
            continue
        kind = kinds[u]
        if kind == CONST:
            truth[u] = np.full(len(grid), bool(payload[u][0]))
        elif kind == LIT:
            truth[u] = grid[:, column[payload[u][0]]] == payload[u][1]
        else:
            todo = [c for c in payload[u] if c not in truth]
            if todo:
                stack.extend(todo)
                continue
            reduce = np.logical_and.reduce if kind == AND else np.logical_or.reduce
            truth[u] = reduce([truth[c] for c in payload[u]])
        stack.pop()
    return truth


def first_overlap(kids: Sequence[int], variables: list[int], n_values: int, kinds: Sequence[int],
                  payload: Sequence[tuple[int, ...]]) -> tuple[int, int, str] | None:
    """Two of ``kids`` and an assignment of ``variables`` (all they mention) on which both hold, or None.

    The assignment is the first in lexicographic order, the two children the first of ``kids`` holding there."""
    grid = assignments(n_values, len(variables))
    truth = truth_below(kids, kinds, payload, grid, {v: j for j, v in enumerate(variables)})
    held = np.stack([truth[c] for c in kids])  # (children, assignments)
    both = np.flatnonzero(held.sum(0) > 1)
    if not len(both):
        return None
    a, b = (kids[i] for i in np.flatnonzero(held[:, both[0]])[:2])
    return a, b, ", ".join(f"X{v}={int(x)}" for v, x in zip(variables, grid[both[0]]))
