"""How a :class:`~pseudosl.logic.dag.Dag` is evaluated: its nodes grouped into layers (no torch).

:func:`plan_layers` makes the :class:`LayerPlan` that :class:`~pseudosl.Circuit` evaluates group by
group (:meth:`Dag.layer_plan <pseudosl.logic.dag.Dag.layer_plan>` caches it per circuit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .nodes import AND, CONST, FALSE, LIT, OR, TRUE

__all__ = ["LayerPlan", "plan_layers"]

# A group costs a fixed dispatch overhead of roughly the time to gather this many padded rows
# (measured at batch 128 on a 2-core CPU); neighbouring buckets merge while padding costs less.
_GROUP_OVERHEAD_ROWS = 64


def _merge_buckets(height: np.ndarray, n_el: np.ndarray, n_term: np.ndarray) -> np.ndarray:
    """Split points of nodes sorted by (height, E, A) into groups.

    Starts from one group per distinct (height, E, A) and greedily merges a group into the
    previous one of the same height while the padding it adds (rows gathered for nothing)
    stays below the fixed cost of a group.
    """
    keys = np.stack([height, n_el, n_term], 1)
    starts = [0, *(np.flatnonzero((np.diff(keys, axis=0) != 0).any(1)) + 1)]
    ends = starts[1:] + [len(height)]
    cuts: list[int] = []
    g_start, g_e, g_a, g_real = 0, 0, 0, 0
    for s, e in zip(starts, ends):
        real = int((n_el[s:e] * n_term[s:e]).sum())
        if s > 0 and height[s] == height[g_start]:
            m_e, m_a = max(g_e, int(n_el[s])), max(g_a, int(n_term[s:e].max()))
            if (e - g_start) * m_e * m_a - (g_real + real) <= _GROUP_OVERHEAD_ROWS + (s - g_start) * g_e * g_a - g_real:
                g_e, g_a, g_real = m_e, m_a, g_real + real
                continue
        if s > 0:
            cuts.append(s)
        g_start, g_e, g_a, g_real = s, int(n_el[s:e].max()), int(n_term[s:e].max()), real
    return np.array(cuts, dtype=np.int64)

@dataclass(frozen=True)
class LayerPlan:
    """How a :class:`Dag` is evaluated, group by group.

    Node values live in one buffer of ``n_slots`` rows:
    row 0 = FALSE, row 1 = TRUE, rows ``2 + v * n_values + c`` = leaf ``[X_v = c]``,
    then the materialised inner nodes in evaluation order.  A group ``(start, count, E, A, idx)``
    computes rows ``start : start + count`` as a sum of products in log space::

        out[i] = logsumexp_e  sum_a  buf[idx[i, e, a]]          idx: (count, E, A)

    An OR node is one row (its elements are its children; an AND child used only by OR
    nodes is inlined as an element, so an SDD decision node is one row); an AND node is
    ``E = 1``.  Padding terms point at TRUE (row 1, adds 0), padding elements at
    FALSE (row 0, adds exp(-inf) = 0).  Groups share height and power-of-two ``E`` and ``A``.
    """

    n_slots: int
    groups: tuple[tuple[int, int, int, int, np.ndarray], ...]  # (start, count, E, A, idx flattened)
    roots: np.ndarray  # buffer rows of the roots
    n_layers: int


class CsrCircuit(Protocol):
    """What :func:`plan_layers` reads of a circuit (a :class:`~pseudosl.logic.dag.Dag` has it)."""

    n_vars: int
    n_values: int
    kind: np.ndarray
    var: np.ndarray
    value: np.ndarray
    offsets: np.ndarray
    children: np.ndarray
    roots: np.ndarray

    @property
    def n_nodes(self) -> int: ...


def plan_layers(dag: CsrCircuit) -> LayerPlan:
    """Group the materialised nodes by height and element/term counts (see :class:`LayerPlan`)."""
    k = dag.n_values
    n_leaf = 2 + dag.n_vars * k
    # plain Python lists in the per-node loop: numpy calls on 2-element arrays cost microseconds each
    kinds, children, offsets = dag.kind.tolist(), dag.children.tolist(), dag.offsets.tolist()
    kids_of = [children[offsets[i]:offsets[i + 1]] for i in range(dag.n_nodes)]
    is_root = np.zeros(dag.n_nodes, dtype=bool)
    is_root[dag.roots] = True
    only_or_parents = np.ones(dag.n_nodes, dtype=bool)
    parent_kind = np.repeat(dag.kind, np.diff(dag.offsets))
    only_or_parents[dag.children[parent_kind == AND]] = False
    inline = ((dag.kind == AND) & only_or_parents & ~is_root).tolist()
    slot = np.full(dag.n_nodes, -1, dtype=np.int64)
    consts = dag.kind == CONST
    slot[consts] = dag.value[consts]
    lits = dag.kind == LIT
    slot[lits] = 2 + dag.var[lits] * k + dag.value[lits]
    height = [0] * dag.n_nodes
    elements: dict[int, list[list[int]]] = {}
    for i in range(dag.n_nodes):  # topological: children first
        kd = kinds[i]
        if kd == AND:
            height[i] = max(height[c] for c in kids_of[i]) + (0 if inline[i] else 1)
            if not inline[i]:
                elements[i] = [kids_of[i]]
        elif kd == OR:
            elements[i] = els = [kids_of[c] if inline[c] else [c] for c in kids_of[i]]
            height[i] = 1 + max(max(height[c] for c in e) for e in els)
    height = np.array(height, dtype=np.int64)
    nodes = np.array(sorted(elements), dtype=np.int64)
    if len(nodes) == 0:
        return LayerPlan(n_leaf, (), slot[dag.roots], 0)
    n_el = np.array([len(elements[i]) for i in nodes.tolist()])
    n_term = np.array([max(len(e) for e in elements[i]) for i in nodes.tolist()])
    order = np.lexsort((n_term, n_el, height[nodes]))
    nodes, n_el, n_term = nodes[order], n_el[order], n_term[order]
    boundaries = _merge_buckets(height[nodes], n_el, n_term)
    slot[nodes] = n_leaf + np.arange(len(nodes))
    groups = []
    for members, e_max, a_max in zip(np.split(nodes, boundaries), np.split(n_el, boundaries),
                                      np.split(n_term, boundaries)):
        e_w, a_w = int(e_max.max()), int(a_max.max())
        idx = np.full((len(members), e_w, a_w), TRUE, dtype=np.int64)
        idx[:, :, 0] = FALSE  # padding elements: -inf (a real element's first term overwrites it)
        where: list[int] = []  # flat positions of the real terms, and the nodes they read
        terms: list[int] = []
        for row, i in enumerate(members.tolist()):
            for e, el in enumerate(elements[i]):
                base = (row * e_w + e) * a_w
                where.extend(range(base, base + len(el)))
                terms.extend(el)
        idx.reshape(-1)[where] = slot[terms]
        groups.append((int(slot[members[0]]), len(members), e_w, a_w, idx.reshape(-1)))
    return LayerPlan(n_leaf + len(nodes), tuple(groups), slot[dag.roots], int(height.max()))
