"""The frozen circuit (no torch): CSR arrays, their checks, their evaluation plan and file format.

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

:class:`~pseudosl.logic.builder.CircuitBuilder` makes circuits node by node and checks
decomposability and determinism as it goes; every :class:`Dag`, whoever made its arrays (the builder,
a direct compiler, a saved file), is checked when it is constructed by :meth:`Dag.validate`: ids,
order (no cycle), smoothness and decomposability, in linear time.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import secrets
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DEFAULT_MAX_VARS, CircuitError, CircuitFormatError, SizeLimitError, check_vars

__all__ = ["Dag", "FALSE", "TRUE", "CircuitError", "LayerPlan"]

FALSE = 0
TRUE = 1
_LIT, _AND, _OR, _CONST = 0, 1, 2, 3


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
    """A frozen, smooth, decomposable circuit: CSR arrays over nodes in topological order.

    Construction runs :meth:`validate` (linear time): arrays that are not such a circuit raise
    :class:`CircuitError`.  Determinism is the maker's part (the builder checks it node by node).

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

    def __post_init__(self) -> None:
        self.validate()  # a Dag is a valid circuit, whoever made its arrays

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
        """Bitset (a Python int) of the variables below every node (memory ~ nodes x n_vars bits)."""
        kinds, var = self.kind.tolist(), self.var.tolist()
        offsets, children = self.offsets.tolist(), self.children.tolist()
        masks = [0] * self.n_nodes
        for i in range(self.n_nodes):
            k = kinds[i]
            if k == _LIT:
                masks[i] = 1 << var[i]
            elif k != _CONST:
                m = 0
                for c in children[offsets[i]:offsets[i + 1]]:
                    m |= masks[c]
                masks[i] = m
        return masks

    # -- structural checks --------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`CircuitError` unless the arrays form a valid smooth, decomposable circuit.

        Checks the arrays (shapes, kinds, literal values, ids in range, children before their
        parents, so no cycle and no self-reference, no child listed twice, roots in range), then
        smoothness and decomposability in one pass: every variable gets a random 128-bit number
        and every node the sum over the variables below it counted with multiplicity (AND: the
        sum of its children's; OR: its children's, which must be equal).  A root must have every
        variable exactly once; a variable counted twice anywhere below it would show there.  Sums of
        random numbers stand for the variable multisets (a wrong acceptance has probability
        below 2^-120), so it takes time and memory linear in the circuit; a failure is then named
        by the exact checks :meth:`check_decomposable` and :meth:`check_smooth`.  Determinism cannot
        be checked this way (:meth:`check_deterministic` enumerates small circuits).
        """
        self._check_arrays()
        if ((self.kind[self.roots] == _CONST) & (self.value[self.roots] == 0)).all():
            return  # every root is FALSE: nothing else is read
        lits = np.flatnonzero(self.kind == _LIT)
        if len(lits) < self.n_vars:  # before n_vars random numbers are drawn
            raise CircuitError(f"n_vars is {self.n_vars:,} but the circuit has {len(lits):,} literal nodes: its roots "
                               f"cannot mention every variable (roots must be smoothed over all variables)")
        kinds, value = self.kind.tolist(), self.value.tolist()
        offsets, children = self.offsets.tolist(), self.children.tolist()
        rng = random.Random(secrets.randbits(128))  # fresh per check: a crafted file cannot aim at it
        code = [rng.getrandbits(128) for _ in range(self.n_vars)]
        bound = self.n_vars << 128  # above it, some variable is counted more than once
        total: list[int | None] = [0] * self.n_nodes  # None: FALSE (fits anywhere)
        for i, v in zip(lits.tolist(), self.var[lits].tolist()):
            total[i] = code[v]
        for i in range(self.n_nodes):
            k = kinds[i]
            if k == _AND:
                try:
                    t = sum([total[c] for c in children[offsets[i]:offsets[i + 1]]])
                except TypeError:  # a FALSE child: the AND is FALSE
                    t = None
                if t is not None and t > bound:
                    self._name_failure(f"AND node {i} is not decomposable: a variable occurs in two of its children")
                total[i] = t
            elif k == _OR:
                sums = {total[c] for c in children[offsets[i]:offsets[i + 1]]}
                sums.discard(None)  # FALSE children add nothing
                if len(sums) > 1:
                    self._name_failure(f"OR node {i} is not smooth (or not decomposable below): its children "
                                       f"mention different variables")
                total[i] = sums.pop() if sums else None
            elif k == _CONST:
                total[i] = None if value[i] == 0 else 0
        everything = sum(code)
        for r in self.roots.tolist():
            if total[r] is not None and total[r] != everything:
                self._name_failure(f"root node {r} does not mention every one of the {self.n_vars} variables exactly "
                                   f"once: roots must be smoothed over all variables")

    def _check_arrays(self) -> None:
        """Shapes, kinds, literal values and ids of the CSR arrays (vectorised)."""
        arrays = {"kind": self.kind, "var": self.var, "value": self.value, "offsets": self.offsets,
                  "children": self.children, "roots": self.roots}
        for name, a in arrays.items():
            if not isinstance(a, np.ndarray) or a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise CircuitError(f"{name} must be a 1-D integer array, got "
                                   f"{getattr(a, 'dtype', type(a).__name__)} of shape {getattr(a, 'shape', '?')}")
        n = len(self.kind)
        if len(self.var) != n or len(self.value) != n or len(self.offsets) != n + 1:
            raise CircuitError(f"kind, var, value have lengths {n}, {len(self.var)}, {len(self.value)} and offsets "
                               f"{len(self.offsets)}: they must be n_nodes, n_nodes, n_nodes and n_nodes + 1")
        offsets = self.offsets
        n_kids = np.diff(offsets)
        if n == 0 or offsets[0] != 0 or (n_kids < 0).any() or offsets[-1] != len(self.children):
            raise CircuitError(f"offsets must rise from 0 to len(children) = {len(self.children)} over "
                               f"{n} nodes (>= 1), got {offsets[:3].tolist()} ... {offsets[-3:].tolist()}")
        _first_bad(~np.isin(self.kind, (_LIT, _AND, _OR, _CONST)), "node {i} has kind {x} (0 literal, 1 AND, "
                   "2 OR, 3 constant)", self.kind)
        leaf = (self.kind == _LIT) | (self.kind == _CONST)
        _first_bad(leaf & (n_kids > 0), "leaf node {i} has {x} children", n_kids)
        _first_bad(~leaf & (n_kids == 0), "AND/OR node {i} has no children", n_kids)
        lit = self.kind == _LIT
        _first_bad(lit & ((self.var < 0) | (self.var >= self.n_vars)),
                   f"literal node {{i}} has variable {{x}}, outside 0..{self.n_vars - 1}", self.var)
        _first_bad(lit & ((self.value < 0) | (self.value >= self.n_values)),
                   f"literal node {{i}} has value {{x}}, outside 0..{self.n_values - 1}", self.value)
        _first_bad((self.kind == _CONST) & ((self.value < 0) | (self.value > 1)),
                   "constant node {i} has value {x} (0 = FALSE, 1 = TRUE)", self.value)
        parent = np.repeat(np.arange(n), n_kids)
        kids = self.children
        edge = np.flatnonzero((kids < 0) | (kids >= parent))
        if len(edge):
            i, c = int(parent[edge[0]]), int(kids[edge[0]])
            why = ("lists itself as a child" if c == i else
                   f"has child {c}, which is not a node (ids 0..{n - 1})" if not 0 <= c < n else
                   f"has child {c}, which comes after it: children must come before their parents "
                   f"(a cycle, or nodes out of order)")
            raise CircuitError(f"node {i} {why}")
        order = np.lexsort((kids, parent))
        twice = np.flatnonzero((np.diff(parent[order]) == 0) & (np.diff(kids[order]) == 0))
        if len(twice):
            raise CircuitError(f"node {int(parent[order][twice[0]])} lists child {int(kids[order][twice[0]])} twice")
        if len(self.roots) == 0:
            raise CircuitError("a circuit needs at least one root")
        _first_bad((self.roots < 0) | (self.roots >= n), f"root {{i}} is node {{x}}, which is not a node (ids "
                   f"0..{n - 1})", self.roots)

    def _name_failure(self, fallback: str) -> None:
        """Raise the exact check's error (it names the node), else ``fallback``."""
        self.check_decomposable()
        self.check_smooth()
        raise CircuitError(fallback)

    def check_smooth(self) -> None:
        """Raise :class:`CircuitError` unless every OR's children mention the same variables."""
        masks = self.var_masks()
        kinds, offsets, children = self.kind.tolist(), self.offsets.tolist(), self.children.tolist()
        false = set(np.flatnonzero((self.kind == _CONST) & (self.value == 0)).tolist())  # FALSE adds nothing
        for i in range(self.n_nodes):
            if kinds[i] == _OR:
                kids = children[offsets[i]:offsets[i + 1]]
                if any(masks[c] != masks[i] for c in kids if c not in false):
                    raise CircuitError(f"OR node {i} is not smooth: its children mention different variables")

    def check_decomposable(self) -> None:
        """Raise :class:`CircuitError` unless the children of every AND mention disjoint variables."""
        masks = self.var_masks()
        kinds, offsets, children = self.kind.tolist(), self.offsets.tolist(), self.children.tolist()
        for i in range(self.n_nodes):
            if kinds[i] == _AND:
                seen = 0
                for c in children[offsets[i]:offsets[i + 1]]:
                    if seen & masks[c]:
                        shared = _bits(seen & masks[c])
                        raise CircuitError(f"AND node {i} is not decomposable: variables {shared} appear in two "
                                           f"children")
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

    def check_or_nodes(self, max_check_assignments: int = 1 << 12) -> None:
        """Raise :class:`CircuitError` unless the children of every OR node provably exclude each other
        (determinism), shown as :meth:`CircuitBuilder.or_ <pseudosl.logic.builder.CircuitBuilder.or_>` shows it:
        literals of one variable with different values; children separated by the values they fix (a decision,
        as SDD elements with literal primes, automata and the builders make); or, failing those, no two holding
        on any of the at most ``max_check_assignments`` assignments of the OR's variables.  A deterministic OR
        that none of these shows (e.g. an SDD element whose prime is a larger formula) is refused too.
        """
        kinds, var, value = self.kind.tolist(), self.var.tolist(), self.value.tolist()
        offsets, children = self.offsets.tolist(), self.children.tolist()
        one_var: dict[int, tuple[int, int]] = {}  # OR of literals of one variable -> (variable, bitset of values)

        def facts(node: int) -> dict[int, int]:
            """Variables ``node`` fixes -> the values it allows (its literals, one-variable ORs, and ANDs below)."""
            out: dict[int, int] = {}
            stack = [node]
            while stack:
                u = stack.pop()
                if kinds[u] == _LIT:
                    out[var[u]] = 1 << value[u]
                elif kinds[u] == _AND:
                    stack.extend(children[offsets[u]:offsets[u + 1]])
                elif u in one_var:
                    out[one_var[u][0]] = one_var[u][1]
            return out

        masks: list[int] | None = None
        for i in range(self.n_nodes):
            if kinds[i] != _OR:
                continue
            live = [c for c in children[offsets[i]:offsets[i + 1]] if not (kinds[c] == _CONST and value[c] == 0)]
            if all(kinds[c] == _LIT for c in live) and len({var[c] for c in live}) == 1:
                values = [value[c] for c in live]
                if len(set(values)) < len(values):
                    raise CircuitError(f"OR node {i} is not deterministic: two of its children are the literal "
                                       f"X{var[live[0]]}={max(values, key=values.count)}")
                one_var[i] = (var[live[0]], sum(1 << x for x in values))
                continue
            if len(live) < 2 or _separated([facts(c) for c in live]):
                continue
            masks = self.var_masks() if masks is None else masks
            variables = _bits(masks[i])
            if len(variables) * np.log2(self.n_values) > np.log2(max_check_assignments):
                raise CircuitError(
                    f"OR node {i}: cannot show that its {len(live)} children exclude each other: they are not a "
                    f"decision (children that each fix some variable to values the others do not allow), and "
                    f"checking all {self.n_values}^{len(variables)} assignments of its variables is above "
                    f"max_check_assignments={max_check_assignments}")
            grid = np.array(list(itertools.product(range(self.n_values), repeat=len(variables))), dtype=np.int64)
            full = np.zeros((len(grid), self.n_vars), dtype=np.int64)
            full[:, variables] = grid
            held = np.stack([self._node_truth(c, full) for c in live])
            both = np.flatnonzero(held.sum(0) > 1)
            if len(both):
                a, b = (live[j] for j in np.flatnonzero(held[:, both[0]])[:2])
                where = ", ".join(f"X{v}={int(x)}" for v, x in zip(variables, grid[both[0]]))
                raise CircuitError(f"OR node {i} is not deterministic: its children {a} and {b} both hold when "
                                   f"{where} (its probability would count that twice)")

    def _node_truth(self, node: int, a: np.ndarray) -> np.ndarray:
        """Truth of ``node`` on the assignments ``a`` (``(A, n_vars)``), evaluating only the nodes below it."""
        truth: dict[int, np.ndarray] = {}
        stack = [node]
        while stack:
            u = stack[-1]
            if u in truth:
                stack.pop()
                continue
            k = self.kind[u]
            if k == _CONST:
                truth[u] = np.full(len(a), bool(self.value[u]))
            elif k == _LIT:
                truth[u] = a[:, self.var[u]] == self.value[u]
            else:
                kids = self.children[self.offsets[u]:self.offsets[u + 1]].tolist()
                todo = [c for c in kids if c not in truth]
                if todo:
                    stack.extend(todo)
                    continue
                reduce = np.logical_and.reduce if k == _AND else np.logical_or.reduce
                truth[u] = reduce([truth[c] for c in kids])
            stack.pop()
        return truth[node]

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
    def from_arrays(arrays: dict[str, np.ndarray], *, max_vars: int | None = DEFAULT_MAX_VARS) -> "Dag":
        """The circuit of :meth:`to_arrays`' arrays, checked by :meth:`validate` (CircuitError if invalid)."""
        missing = [k for k in ("shape", "kind", "var", "value", "offsets", "children", "roots") if k not in arrays]
        if missing:
            raise CircuitError(f"not a saved pseudosl circuit: missing array {missing[0]!r}")
        shape = np.asarray(arrays["shape"])
        if shape.shape != (2,) or shape.dtype.kind not in "iu":
            raise CircuitError(f"shape must hold two integers (n_vars, n_values), got {shape!r}")
        n_vars, n_values = (int(x) for x in shape)
        if n_vars < 1 or n_values < 2:
            raise CircuitError(f"shape says n_vars={n_vars}, n_values={n_values}; need n_vars >= 1, n_values >= 2")
        check_vars("the circuit's n_vars is", n_vars, max_vars)
        raw = {k: np.asarray(arrays[k]) for k in ("kind", "var", "value", "offsets", "children", "roots")}
        for name, a in raw.items():  # before the casts: a float or 2-D array is refused, not truncated
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise CircuitError(f"{name} must be a 1-D integer array, got {a.dtype} of shape {a.shape}")
        _first_bad((raw["kind"] < 0) | (raw["kind"] > _CONST), "node {i} has kind {x} (0 literal, 1 AND, 2 OR, "
                   "3 constant)", raw["kind"])
        return Dag(n_vars, n_values, raw.pop("kind").astype(np.int8), *(a.astype(np.int64) for a in raw.values()))

    def save(self, path: str | Path, *, label: str = "") -> None:
        """Write the arrays, ``label`` and their SHA-256 checksum to ``path`` (an ``.npz`` file)."""
        arrays = self.to_arrays()
        np.savez_compressed(path, **arrays, label=np.array(label), checksum=np.array(_checksum(arrays, label)))

    @staticmethod
    def load(path: str | Path, *, label: str | None = None, max_vars: int | None = DEFAULT_MAX_VARS,
             deterministic: bool = False) -> "Dag":
        """Read a circuit written by :meth:`save`; :class:`CircuitFormatError` naming ``path`` when it is
        unreadable, truncated, fails its checksum, holds another ``label`` (when one is asked for) or
        is not a valid circuit (:meth:`validate`).

        A file with a checksum was written by :meth:`save` from a :class:`Dag` (determinism is its maker's
        part, as for every Dag).  A file without one was made elsewhere: its OR nodes must also pass
        :meth:`check_or_nodes`, unless ``deterministic=True`` takes the caller's word that they are deterministic."""
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
            raise CircuitFormatError(f"{path} is not a saved pseudosl circuit ({type(e).__name__}: {e}); "
                                     f"save circuits with Circuit.save, or delete the file to rebuild it") from None
        stored = str(arrays.pop("label", ""))
        checksum = arrays.pop("checksum", None)
        if checksum is not None and str(checksum) != _checksum(arrays, stored):
            raise CircuitFormatError(f"{path} fails its checksum: it was modified or corrupted after it was saved; "
                                     f"delete it (a cached circuit is then rebuilt)")
        if label is not None and stored != label:
            raise CircuitFormatError(f"{path} holds the circuit saved as {stored!r}, not {label!r}")
        try:
            dag = Dag.from_arrays(arrays, max_vars=max_vars)
            if checksum is None and not deterministic:
                dag.check_or_nodes()
            return dag
        except CircuitError as e:
            fix = ("; it has no checksum (Circuit.save writes one), so its OR nodes were checked: pass "
                   "deterministic=True if it comes from a compiler whose OR nodes are deterministic"
                   if checksum is None and not deterministic and "OR node" in str(e) else "")
            raise CircuitFormatError(f"{path} is not a valid pseudosl circuit: {e}{fix}") from None
        except SizeLimitError as e:
            raise SizeLimitError(f"{path}: {e}") from None


def _checksum(arrays: dict[str, np.ndarray], label: str) -> str:
    """SHA-256 of ``label`` and the arrays (names, dtypes, shapes and bytes)."""
    h = hashlib.sha256(b"pseudosl-dag\0" + label.encode() + b"\0")
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _first_bad(bad: np.ndarray, message: str, values: np.ndarray) -> None:
    """Raise :class:`CircuitError` formatting ``message`` with the first index ``i`` where ``bad`` holds."""
    where = np.flatnonzero(bad)
    if len(where):
        i = int(where[0])
        raise CircuitError(message.format(i=i, x=values[i].item()))


def _separated(facts: list[dict[int, int]]) -> bool:
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
