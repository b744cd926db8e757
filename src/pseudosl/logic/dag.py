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

Node kinds are in :mod:`~pseudosl.logic.nodes`, the determinism proof in :mod:`~pseudosl.logic.determinism`,
the evaluation plan in :mod:`~pseudosl.logic.layers` and the file format in :mod:`~pseudosl.logic.dagfile`.

:class:`~pseudosl.logic.builder.CircuitBuilder` makes circuits node by node and checks
decomposability and determinism as it goes; every :class:`Dag`, whoever made its arrays (the builder,
a direct compiler, a saved file), is checked when it is constructed by :meth:`Dag.validate`: ids,
order (no cycle), smoothness and decomposability, in linear time.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import dagfile, determinism
from .errors import DEFAULT_MAX_VARS, CircuitError, CircuitFormatError, SizeLimitError
from .checks import check_bool, check_vars
from .layers import LayerPlan, plan_layers
from .nodes import AND, CONST, FALSE, LIT, OR, TRUE, bits

__all__ = ["Dag", "FALSE", "TRUE", "CircuitError", "LayerPlan"]

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
        return bool(self.kind[r] == CONST and self.value[r] == 0)

    def var_masks(self) -> list[int]:
        """Bitset (a Python int) of the variables below every node (memory ~ nodes x n_vars bits)."""
        kinds, var = self.kind.tolist(), self.var.tolist()
        offsets, children = self.offsets.tolist(), self.children.tolist()
        masks = [0] * self.n_nodes
        for i in range(self.n_nodes):
            k = kinds[i]
            if k == LIT:
                masks[i] = 1 << var[i]
            elif k != CONST:
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
        if ((self.kind[self.roots] == CONST) & (self.value[self.roots] == 0)).all():
            return  # every root is FALSE: nothing else is read
        lits = np.flatnonzero(self.kind == LIT)
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
            if k == AND:
                try:
                    t = sum([total[c] for c in children[offsets[i]:offsets[i + 1]]])
                except TypeError:  # a FALSE child: the AND is FALSE
                    t = None
                if t is not None and t > bound:
                    self._name_failure(f"AND node {i} is not decomposable: a variable occurs in two of its children")
                total[i] = t
            elif k == OR:
                sums = {total[c] for c in children[offsets[i]:offsets[i + 1]]}
                sums.discard(None)  # FALSE children add nothing
                if len(sums) > 1:
                    self._name_failure(f"OR node {i} is not smooth (or not decomposable below): its children "
                                       f"mention different variables")
                total[i] = sums.pop() if sums else None
            elif k == CONST:
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
        _first_bad(~np.isin(self.kind, (LIT, AND, OR, CONST)), "node {i} has kind {x} (0 literal, 1 AND, "
                   "2 OR, 3 constant)", self.kind)
        leaf = (self.kind == LIT) | (self.kind == CONST)
        _first_bad(leaf & (n_kids > 0), "leaf node {i} has {x} children", n_kids)
        _first_bad(~leaf & (n_kids == 0), "AND/OR node {i} has no children", n_kids)
        lit = self.kind == LIT
        _first_bad(lit & ((self.var < 0) | (self.var >= self.n_vars)),
                   f"literal node {{i}} has variable {{x}}, outside 0..{self.n_vars - 1}", self.var)
        _first_bad(lit & ((self.value < 0) | (self.value >= self.n_values)),
                   f"literal node {{i}} has value {{x}}, outside 0..{self.n_values - 1}", self.value)
        _first_bad((self.kind == CONST) & ((self.value < 0) | (self.value > 1)),
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
        false = set(np.flatnonzero((self.kind == CONST) & (self.value == 0)).tolist())  # FALSE adds nothing
        for i in range(self.n_nodes):
            if kinds[i] == OR:
                kids = children[offsets[i]:offsets[i + 1]]
                if any(masks[c] != masks[i] for c in kids if c not in false):
                    raise CircuitError(f"OR node {i} is not smooth: its children mention different variables")

    def check_decomposable(self) -> None:
        """Raise :class:`CircuitError` unless the children of every AND mention disjoint variables."""
        masks = self.var_masks()
        kinds, offsets, children = self.kind.tolist(), self.offsets.tolist(), self.children.tolist()
        for i in range(self.n_nodes):
            if kinds[i] == AND:
                seen = 0
                for c in children[offsets[i]:offsets[i + 1]]:
                    if seen & masks[c]:
                        shared = bits(seen & masks[c])
                        raise CircuitError(f"AND node {i} is not decomposable: variables {shared} appear in two "
                                           f"children")
                    seen |= masks[c]

    def check_deterministic(self, max_assignments: int = 1 << 20) -> None:
        """Exhaustive check that OR children are mutually exclusive (small circuits only)."""
        total = self.n_values ** self.n_vars
        if total > max_assignments:
            raise ValueError(f"exhaustive check needs {total} assignments, more than max_assignments={max_assignments}")
        truth = self._truth(determinism.assignments(self.n_values, self.n_vars))
        for i in range(self.n_nodes):
            if self.kind[i] == OR:
                kids = self.children[self.offsets[i]:self.offsets[i + 1]]
                overlap = np.sum([truth[c] for c in kids.tolist()], axis=0) > 1
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
        payload = self.payload()
        or_var: dict[int, int] = {}  # OR of literals of one variable -> that variable
        or_allowed: dict[int, int] = {}  # ... -> the bitset of their values
        masks: list[int] | None = None
        for i in range(self.n_nodes):
            if kinds[i] != OR:
                continue
            live = [c for c in children[offsets[i]:offsets[i + 1]] if not (kinds[c] == CONST and value[c] == 0)]
            if all(kinds[c] == LIT for c in live) and len({var[c] for c in live}) == 1:
                values = [value[c] for c in live]
                if len(set(values)) < len(values):
                    raise CircuitError(f"OR node {i} is not deterministic: two of its children are the literal "
                                       f"X{var[live[0]]}={max(values, key=values.count)}")
                or_var[i], or_allowed[i] = var[live[0]], sum(1 << x for x in values)
                continue
            if len(live) < 2 or determinism.separated([determinism.fixed_values(c, kinds, payload, or_var, or_allowed)
                                                       for c in live]):
                continue
            masks = self.var_masks() if masks is None else masks
            variables = bits(masks[i])
            if len(variables) * np.log2(self.n_values) > np.log2(max_check_assignments):
                raise CircuitError(
                    f"OR node {i}: cannot show that its {len(live)} children exclude each other: they are not a "
                    f"decision (children that each fix some variable to values the others do not allow), and "
                    f"checking all {self.n_values}^{len(variables)} assignments of its variables is above "
                    f"max_check_assignments={max_check_assignments}")
            overlap = determinism.first_overlap(live, variables, self.n_values, kinds, payload)
            if overlap is not None:
                a, b, where = overlap
                raise CircuitError(f"OR node {i} is not deterministic: its children {a} and {b} both hold when "
                                   f"{where} (its probability would count that twice)")

    def evaluate(self, assignments: np.ndarray) -> np.ndarray:
        """Boolean value of every root on ``assignments`` (``(A, n_vars)`` ints) -> ``(A, n_roots)``."""
        a = np.asarray(assignments)
        if a.ndim != 2 or a.shape[1] != self.n_vars:
            raise ValueError(f"assignments must have shape (A, {self.n_vars}), got {a.shape}")
        truth = self._truth(a)
        return np.stack([truth[r] for r in self.roots.tolist()], axis=1)

    def _truth(self, a: np.ndarray) -> dict[int, np.ndarray]:
        """Truth of every node on the assignments ``a`` (``(A, n_vars)``)."""
        return determinism.truth_below(range(self.n_nodes), self.kind.tolist(), self.payload(), a, range(self.n_vars))

    def payload(self) -> list[tuple[int, ...]]:
        """Per node: ``(var, value)`` of a literal, ``(value,)`` of a constant, the children of an AND or OR
        (the lists :mod:`~pseudosl.logic.determinism` reads)."""
        kinds, var, value = self.kind.tolist(), self.var.tolist(), self.value.tolist()
        offsets, children = self.offsets.tolist(), self.children.tolist()
        return [(var[i], value[i]) if k == LIT else (value[i],) if k == CONST
                else tuple(children[offsets[i]:offsets[i + 1]]) for i, k in enumerate(kinds)]

    # -- evaluation plan ------------------------------------------------------------
    def layer_plan(self) -> LayerPlan:
        """Group the materialised nodes by height and element/term counts (see :class:`LayerPlan`), once."""
        if not self._plan:
            self._plan.append(plan_layers(self))
        return self._plan[0]

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
        _first_bad((raw["kind"] < 0) | (raw["kind"] > CONST), "node {i} has kind {x} (0 literal, 1 AND, 2 OR, "
                   "3 constant)", raw["kind"])
        return Dag(n_vars, n_values, raw.pop("kind").astype(np.int8), *(a.astype(np.int64) for a in raw.values()))

    def save(self, path: str | Path, *, label: str = "") -> None:
        """Write the arrays, ``label`` and their SHA-256 checksum to ``path`` (an ``.npz`` file,
        :mod:`~pseudosl.logic.dagfile`)."""
        dagfile.write_arrays(path, self.to_arrays(), label)

    @staticmethod
    def load(path: str | Path, *, label: str | None = None, max_vars: int | None = DEFAULT_MAX_VARS,
             deterministic: bool = False) -> "Dag":
        """Read a circuit written by :meth:`save`; :class:`CircuitFormatError` naming ``path`` when it is
        unreadable, truncated, fails its checksum, holds another ``label`` (when one is asked for) or
        is not a valid circuit (:meth:`validate`).

        A file with a checksum was written by :meth:`save` from a :class:`Dag` (determinism is its maker's
        part, as for every Dag).  A file without one was made elsewhere: its OR nodes must also pass
        :meth:`check_or_nodes`, unless ``deterministic=True`` takes the caller's word that they are deterministic."""
        deterministic = check_bool("deterministic", deterministic)
        arrays, checksummed = dagfile.read_arrays(path, label)
        try:
            dag = Dag.from_arrays(arrays, max_vars=max_vars)
            if not checksummed and not deterministic:
                dag.check_or_nodes()
            return dag
        except CircuitError as e:
            fix = ("; it has no checksum (Circuit.save writes one), so its OR nodes were checked: pass "
                   "deterministic=True if it comes from a compiler whose OR nodes are deterministic"
                   if not checksummed and not deterministic and "OR node" in str(e) else "")
            raise CircuitFormatError(f"{path} is not a valid pseudosl circuit: {e}{fix}") from None
        except SizeLimitError as e:
            raise SizeLimitError(f"{path}: {e}") from None


def _first_bad(bad: np.ndarray, message: str, values: np.ndarray) -> None:
    """Raise :class:`CircuitError` formatting ``message`` with the first index ``i`` where ``bad`` holds."""
    where = np.flatnonzero(bad)
    if len(where):
        i = int(where[0])
        raise CircuitError(message.format(i=i, x=values[i].item()))

