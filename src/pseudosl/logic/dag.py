"""Symbolic circuits over categorical variables (no torch).

A circuit is a DAG over ``n_vars`` positions, each a categorical variable with
``n_values`` values (Boolean variables are ``n_values = 2``, value 1 = true).
Leaves are the constants FALSE / TRUE and the indicators ``[X_v = c]``;
inner nodes are AND (product) and OR (sum).  Under a fully-factorized weight
``w_v(c)`` the circuit computes its weighted model count

    WMC(node) = sum over complete assignments y that satisfy node of prod_v w_v(y_v)

in one bottom-up pass provided it is

* decomposable: the children of an AND mention disjoint variables,
* deterministic: the children of an OR are mutually exclusive,
* smooth: the children of an OR mention the same variables.

:class:`CircuitBuilder` hash-conses nodes (identical nodes are built once) and
folds constants; :meth:`CircuitBuilder.build` smooths every OR node and every
root (roots are smoothed over *all* variables, so the value of a root is the
weighted model count over the whole sequence) and freezes the result into a
:class:`Dag`.  Categorical variables are exact: the smoothing node of
variable ``v`` is ``OR_c [X_v = c]``, never a Bernoulli "odds" leaf.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

__all__ = ["CircuitBuilder", "Dag", "FALSE", "TRUE", "CircuitError", "LayerPlan"]

FALSE = 0
TRUE = 1
_LIT, _AND, _OR, _CONST = 0, 1, 2, 3


class CircuitError(ValueError):
    """A circuit violates a structural property (decomposability, determinism, ...)."""


class CircuitBuilder:
    """Builds a circuit node by node.  Node handles are plain ``int`` ids.

    Example:
        >>> b = CircuitBuilder(n_vars=2, n_values=3)
        >>> same = b.or_(*(b.and_(b.literal(0, c), b.literal(1, c)) for c in range(3)))
        >>> dag = b.build([same])
    """

    def __init__(self, n_vars: int, n_values: int = 2) -> None:
        if not isinstance(n_vars, int) or n_vars < 1:
            raise ValueError(f"n_vars must be a positive int, got {n_vars!r}")
        if not isinstance(n_values, int) or n_values < 2:
            raise ValueError(f"n_values must be an int >= 2 (2 for Boolean variables), got {n_values!r}")
        self.n_vars = n_vars
        self.n_values = n_values
        # node id -> (kind, payload); payload = (var, value) for literals, tuple of children otherwise
        self._kind: list[int] = [_CONST, _CONST]
        self._payload: list[tuple[int, ...]] = [(0,), (1,)]
        self._index: dict[tuple[int, tuple[int, ...]], int] = {}

    # -- leaves -----------------------------------------------------------------
    def false(self) -> int:
        return FALSE

    def true(self) -> int:
        return TRUE

    def literal(self, var: int, value: int = 1) -> int:
        """The indicator ``[X_var = value]`` (for Boolean variables ``value=0`` is the negative literal)."""
        if not (0 <= var < self.n_vars):
            raise ValueError(f"variable {var} is out of range: this circuit has variables 0..{self.n_vars - 1}")
        if not (0 <= value < self.n_values):
            raise ValueError(f"value {value} of variable {var} is out of range 0..{self.n_values - 1}")
        return self._make(_LIT, (int(var), int(value)))

    def in_set(self, var: int, values: Iterable[int]) -> int:
        """``[X_var in values]``: an OR of value indicators (deterministic by construction)."""
        vals = sorted(set(int(c) for c in values))
        if len(vals) == self.n_values:
            return TRUE
        return self.or_(*(self.literal(var, c) for c in vals))

    # -- inner nodes --------------------------------------------------------------
    def and_(self, *children: int) -> int:
        kids: set[int] = set()
        for c in children:
            self._check_id(c)
            if c == FALSE:
                return FALSE
            if c != TRUE:
                kids.add(c)
        if not kids:
            return TRUE
        if len(kids) == 1:
            return kids.pop()
        return self._make(_AND, tuple(sorted(kids)))

    def or_(self, *children: int) -> int:
        kids: set[int] = set()
        for c in children:
            self._check_id(c)
            if c == TRUE:
                return TRUE
            if c != FALSE:
                kids.add(c)
        if not kids:
            return FALSE
        if len(kids) == 1:
            return kids.pop()
        return self._make(_OR, tuple(sorted(kids)))

    def __len__(self) -> int:
        return len(self._kind)

    def _check_id(self, node: int) -> None:
        if not (isinstance(node, (int, np.integer)) and 0 <= node < len(self._kind)):
            raise ValueError(f"{node!r} is not a node of this builder (ids 0..{len(self._kind) - 1})")

    def _make(self, kind: int, payload: tuple[int, ...]) -> int:
        key = (kind, payload)
        node = self._index.get(key)
        if node is None:
            node = len(self._kind)
            self._kind.append(kind)
            self._payload.append(payload)
            self._index[key] = node
        return node

    # -- freezing -----------------------------------------------------------------
    def build(self, roots: Sequence[int] | int) -> "Dag":
        """Smooth the sub-DAG below ``roots`` and freeze it (roots smoothed over all variables)."""
        roots = [roots] if isinstance(roots, (int, np.integer)) else list(roots)
        if not roots:
            raise ValueError("build() needs at least one root")
        for r in roots:
            self._check_id(r)
        return _smooth_and_freeze(self, [int(r) for r in roots])


def _var_mask(b: CircuitBuilder, node: int, cache: dict[int, int]) -> int:
    """Bitset (Python int) of the variables mentioned below ``node``; iterative post-order."""
    stack = [node]
    while stack:
        u = stack[-1]
        if u in cache:
            stack.pop()
            continue
        kind = b._kind[u]
        if kind == _CONST:
            cache[u] = 0
            stack.pop()
        elif kind == _LIT:
            cache[u] = 1 << b._payload[u][0]
            stack.pop()
        else:
            todo = [c for c in b._payload[u] if c not in cache]
            if todo:
                stack.extend(todo)
            else:
                m = 0
                for c in b._payload[u]:
                    m |= cache[c]
                cache[u] = m
                stack.pop()
    return cache[node]


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


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _smooth_and_freeze(b: CircuitBuilder, roots: list[int]) -> "Dag":
    masks: dict[int, int] = {}
    for r in roots:
        _var_mask(b, r, masks)
    any_node: dict[int, int] = {}

    def anyv(v: int) -> int:
        if v not in any_node:
            any_node[v] = b._make(_OR, tuple(b.literal(v, c) for c in range(b.n_values)))
            masks[any_node[v]] = 1 << v
            for c in range(b.n_values):
                masks[b.literal(v, c)] = 1 << v
        return any_node[v]

    def pad(child: int, missing: int) -> int:
        if not missing:
            return child
        extra = [anyv(v) for v in _bits(missing)]
        if child == TRUE:
            kids = extra
        elif b._kind[child] == _AND:  # flatten: AND(AND(p, s), any) = AND(p, s, any)
            kids = [*b._payload[child], *extra]
        else:
            kids = [child, *extra]
        node = kids[0] if len(kids) == 1 else b._make(_AND, tuple(sorted(set(kids))))
        masks[node] = masks.get(child, 0) | missing
        return node

    # smooth OR nodes bottom-up (children of smoothed nodes keep their variable sets)
    smoothed: dict[int, int] = {}
    order = _topological(b, roots)
    for u in order:
        kind = b._kind[u]
        if kind in (_CONST, _LIT):
            smoothed[u] = u
            continue
        kids = [smoothed[c] for c in b._payload[u]]
        if kind == _OR:
            full = masks[u]
            kids = [pad(c, full & ~masks.get(c, 0)) for c in kids]
        node = b._make(kind, tuple(sorted(set(kids)))) if len(set(kids)) > 1 else kids[0]
        masks[node] = masks[u]
        smoothed[u] = node
    all_vars = (1 << b.n_vars) - 1
    new_roots = [r if (r := smoothed[x]) == FALSE else pad(r, all_vars & ~masks.get(r, 0)) for x in roots]
    # TRUE root over zero variables cannot happen: n_vars >= 1 so it is padded.
    return Dag.from_builder(b, new_roots)


def _topological(b: CircuitBuilder, roots: list[int]) -> list[int]:
    """Nodes below ``roots``, children before parents."""
    seen: set[int] = set()
    order: list[int] = []
    for r in roots:
        stack: list[tuple[int, bool]] = [(r, False)]
        while stack:
            u, done = stack.pop()
            if done:
                order.append(u)
                continue
            if u in seen:
                continue
            seen.add(u)
            stack.append((u, True))
            if b._kind[u] in (_AND, _OR):
                stack.extend((c, False) for c in b._payload[u] if c not in seen)
    return order


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


@dataclass(frozen=True)
class Dag:
    """A frozen, smooth circuit: CSR arrays over nodes in topological order.

    ``kind[i]`` is 0 literal / 1 AND / 2 OR / 3 constant; ``var[i], value[i]``
    hold literals (constants: ``value`` 0 = FALSE, 1 = TRUE);
    the children of node ``i`` are ``children[offsets[i]:offsets[i+1]]``.
    """

    n_vars: int
    n_values: int
    kind: np.ndarray
    var: np.ndarray
    value: np.ndarray
    offsets: np.ndarray
    children: np.ndarray
    roots: np.ndarray
    _plan: list = field(default_factory=list, repr=False, compare=False)

    @staticmethod
    def from_builder(b: CircuitBuilder, roots: list[int]) -> "Dag":
        order = _topological(b, roots)
        order = [FALSE, TRUE] + [u for u in order if u not in (FALSE, TRUE)]
        pos = {u: i for i, u in enumerate(order)}
        kind = np.array([b._kind[u] for u in order], dtype=np.int8)
        var = np.zeros(len(order), dtype=np.int64)
        value = np.zeros(len(order), dtype=np.int64)
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        kids: list[int] = []
        for i, u in enumerate(order):
            k = b._kind[u]
            if k == _LIT:
                var[i], value[i] = b._payload[u]
            elif k == _CONST:
                value[i] = b._payload[u][0]
            else:
                kids.extend(pos[c] for c in b._payload[u])
            offsets[i + 1] = len(kids)
        return Dag(b.n_vars, b.n_values, kind, var, value, offsets,
                   np.array(kids, dtype=np.int64), np.array([pos[r] for r in roots], dtype=np.int64))

    # -- properties ---------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.kind)

    @property
    def n_edges(self) -> int:
        return len(self.children)

    def is_false(self, root: int = 0) -> bool:
        """Whether root ``root`` is the constant FALSE (unsatisfiable)."""
        r = self.roots[root]
        return bool(self.kind[r] == _CONST and self.value[r] == 0)

    def var_masks(self) -> list[int]:
        masks = [0] * self.n_nodes
        for i in range(self.n_nodes):
            k = self.kind[i]
            if k == _LIT:
                masks[i] = 1 << int(self.var[i])
            elif k in (_AND, _OR):
                m = 0
                for c in self.children[self.offsets[i]:self.offsets[i + 1]]:
                    m |= masks[c]
                masks[i] = m
        return masks

    # -- structural checks --------------------------------------------------------
    def check_smooth(self) -> None:
        masks = self.var_masks()
        for i in np.flatnonzero(self.kind == _OR):
            kids = self.children[self.offsets[i]:self.offsets[i + 1]]
            if any(masks[c] != masks[i] for c in kids):
                raise CircuitError(f"OR node {i} is not smooth: its children mention different variables")

    def check_decomposable(self) -> None:
        masks = self.var_masks()
        for i in np.flatnonzero(self.kind == _AND):
            seen = 0
            for c in self.children[self.offsets[i]:self.offsets[i + 1]]:
                if seen & masks[c]:
                    shared = _bits(seen & masks[c])
                    raise CircuitError(f"AND node {i} is not decomposable: variables {shared} appear in two children")
                seen |= masks[c]

    def check_deterministic(self, max_assignments: int = 1 << 20) -> None:
        """Exhaustive check that OR children are mutually exclusive (small circuits only)."""
        truth = self._truth_table(max_assignments)
        for i in range(self.n_nodes):
            if self.kind[i] == _OR:
                kids = self.children[self.offsets[i]:self.offsets[i + 1]]
                overlap = np.sum([truth[c] for c in kids], axis=0) > 1
                if overlap.any():
                    raise CircuitError(f"OR node {i} is not deterministic: two children hold on one assignment")

    def evaluate(self, assignments: np.ndarray) -> np.ndarray:
        """Boolean value of every root on ``assignments`` (``(A, n_vars)`` ints) -> ``(A, n_roots)``."""
        a = np.asarray(assignments)
        if a.ndim != 2 or a.shape[1] != self.n_vars:
            raise ValueError(f"assignments must have shape (A, {self.n_vars}), got {a.shape}")
        truth = self._truth(a)
        return np.stack([truth[r] for r in self.roots], axis=1)

    def _truth_table(self, max_assignments: int) -> list[np.ndarray]:
        total = self.n_values ** self.n_vars
        if total > max_assignments:
            raise ValueError(f"exhaustive check needs {total} assignments, more than max_assignments={max_assignments}")
        grid = np.array(list(itertools.product(range(self.n_values), repeat=self.n_vars)), dtype=np.int64)
        return self._truth(grid)

    def _truth(self, a: np.ndarray) -> list[np.ndarray]:
        truth: list[np.ndarray] = []
        for i in range(self.n_nodes):
            k = self.kind[i]
            if k == _CONST:
                truth.append(np.full(len(a), bool(self.value[i])))
            elif k == _LIT:
                truth.append(a[:, self.var[i]] == self.value[i])
            else:
                kids = [truth[c] for c in self.children[self.offsets[i]:self.offsets[i + 1]]]
                truth.append(np.logical_and.reduce(kids) if k == _AND else np.logical_or.reduce(kids))
        return truth

    # -- evaluation plan ------------------------------------------------------------
    def layer_plan(self) -> LayerPlan:
        """Group the materialised nodes by height and element/term counts (see :class:`LayerPlan`)."""
        if self._plan:
            return self._plan[0]
        k = self.n_values
        n_leaf = 2 + self.n_vars * k
        # plain Python lists in the per-node loop: numpy calls on 2-element arrays cost microseconds each
        kinds, children, offsets = self.kind.tolist(), self.children.tolist(), self.offsets.tolist()
        kids_of = [children[offsets[i]:offsets[i + 1]] for i in range(self.n_nodes)]
        is_root = np.zeros(self.n_nodes, dtype=bool)
        is_root[self.roots] = True
        only_or_parents = np.ones(self.n_nodes, dtype=bool)
        parent_kind = np.repeat(self.kind, np.diff(self.offsets))
        only_or_parents[self.children[parent_kind == _AND]] = False
        inline = ((self.kind == _AND) & only_or_parents & ~is_root).tolist()
        slot = np.full(self.n_nodes, -1, dtype=np.int64)
        consts = self.kind == _CONST
        slot[consts] = self.value[consts]
        lits = self.kind == _LIT
        slot[lits] = 2 + self.var[lits] * k + self.value[lits]
        height = [0] * self.n_nodes
        elements: dict[int, list[list[int]]] = {}
        for i in range(self.n_nodes):  # topological: children first
            kd = kinds[i]
            if kd == _AND:
                height[i] = max(height[c] for c in kids_of[i]) + (0 if inline[i] else 1)
                if not inline[i]:
                    elements[i] = [kids_of[i]]
            elif kd == _OR:
                elements[i] = els = [kids_of[c] if inline[c] else [c] for c in kids_of[i]]
                height[i] = 1 + max(max(height[c] for c in e) for e in els)
        height = np.array(height, dtype=np.int64)
        nodes = np.array(sorted(elements), dtype=np.int64)
        if len(nodes) == 0:
            plan = LayerPlan(n_leaf, (), slot[self.roots], 0)
            self._plan.append(plan)
            return plan
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
        plan = LayerPlan(n_leaf + len(nodes), tuple(groups), slot[self.roots], int(height.max()))
        self._plan.append(plan)
        return plan

    # -- serialisation --------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"shape": np.array([self.n_vars, self.n_values]), "kind": self.kind, "var": self.var,
                "value": self.value, "offsets": self.offsets, "children": self.children, "roots": self.roots}

    @staticmethod
    def from_arrays(arrays: dict[str, np.ndarray]) -> "Dag":
        try:
            n_vars, n_values = (int(x) for x in arrays["shape"])
            return Dag(n_vars, n_values, np.asarray(arrays["kind"], np.int8), np.asarray(arrays["var"], np.int64),
                       np.asarray(arrays["value"], np.int64), np.asarray(arrays["offsets"], np.int64),
                       np.asarray(arrays["children"], np.int64), np.asarray(arrays["roots"], np.int64))
        except KeyError as e:
            raise ValueError(f"not a saved pseudosl circuit: missing array {e}") from None
