"""Building circuits node by node (no torch): :class:`CircuitBuilder`.

:class:`CircuitBuilder` hash-conses nodes (identical nodes are built once), folds
constants, and refuses a node that breaks decomposability or determinism when it is made
(see its docs), so the circuits it builds compute exact probabilities.
:meth:`CircuitBuilder.build` smooths every OR node and every root (roots are smoothed over
*all* variables, so the value of a root is the weighted model count over the whole sequence)
and freezes the result into a :class:`~pseudosl.logic.dag.Dag`.  Categorical variables are
exact: the smoothing node of variable ``v`` is ``OR_c [X_v = c]``, never a Bernoulli "odds" leaf.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from . import determinism
from .dag import Dag
from .nodes import AND, CONST, FALSE, LIT, OR, TRUE, bits
from .errors import DEFAULT_MAX_NODES, DEFAULT_MAX_VARS, CircuitError
from .checks import check_bool, check_int, check_limit, check_vars

__all__ = ["CircuitBuilder"]


class CircuitBuilder:
    """Builds a circuit node by node.  Node handles are plain ``int`` ids.

    Every node is valid when it is made, so a finished circuit computes exact probabilities:

    * ``and_`` refuses children that share a variable (a non-decomposable AND would count it
      twice), except literals of one variable with different values, which fold to FALSE;
    * ``or_`` accepts children that exclude each other: literals of one variable; children that
      each fix some variable to values no other child allows (a decision, as SDD elements,
      automata and the DPs of :mod:`pseudosl.constraints` make); or, when neither shows it, an
      exhaustive check over the OR's variables of at most ``max_check_assignments`` assignments.
      Children that can both hold are refused with an assignment that satisfies both;
      ``deterministic=True`` skips the checks for children the caller knows are exclusive.

    Args:
        n_vars: number of positions (an int ``>= 1``, at most ``max_vars``).
        n_values: values per position (an int ``>= 2``; 2 for Booleans, value 1 = true).
        max_vars: refuse more variables (:class:`~pseudosl.logic.errors.SizeLimitError`); ``None``: no limit.
        max_nodes: refuse more than this many nodes (``n_vars * n_values`` leaves included);
            ``None``: no limit.
        max_check_assignments: the largest exhaustive determinism check of one OR node.

    Example:
        >>> b = CircuitBuilder(n_vars=2, n_values=3)
        >>> same = b.or_(*(b.and_(b.literal(0, c), b.literal(1, c)) for c in range(3)))
        >>> dag = b.build([same])
        >>> b.and_(b.literal(0, 1), b.literal(0, 2)) == b.false()      # X0 = 1 and X0 = 2
        True
    """

    def __init__(self, n_vars: int, n_values: int = 2, *, max_vars: int | None = DEFAULT_MAX_VARS,
                 max_nodes: int | None = DEFAULT_MAX_NODES, max_check_assignments: int = 1 << 12) -> None:
        self.n_vars = check_int("n_vars", n_vars, 1, " (the number of positions of the circuit)")
        self.n_values = check_int("n_values", n_values, 2, " (2 for Boolean variables)")
        check_vars("CircuitBuilder: n_vars is", self.n_vars, max_vars)
        check_limit(f"CircuitBuilder: {self.n_vars:,} variables x {self.n_values:,} values make leaves numbering",
                    self.n_vars * self.n_values, max_nodes, "max_nodes")
        self.max_nodes = max_nodes
        self.max_check_assignments = check_int("max_check_assignments", max_check_assignments, 1)
        # node id -> (kind, payload); payload = (var, value) for literals, tuple of children otherwise
        self._kind: list[int] = [CONST, CONST]
        self._payload: list[tuple[int, ...]] = [(0,), (1,)]
        self._index: dict[tuple[int, tuple[int, ...]], int] = {}
        self._mask: list[int] = [0, 0]  # bitset of the variables below each inner node (0 for leaves)
        self._var: dict[int, int] = {}  # literals and ORs of literals of one variable -> that variable
        self._allowed: dict[int, int] = {}  # ORs of literals of one variable -> bitset of their values
        self._head: dict[int, int] = {}  # AND -> a child that is a literal or an OR of literals of one variable

    # -- leaves -----------------------------------------------------------------
    def false(self) -> int:
        return FALSE

    def true(self) -> int:
        return TRUE

    def literal(self, var: int, value: int = 1) -> int:
        """The indicator ``[X_var = value]`` (for Boolean variables ``value=0`` is the negative literal).

        ``var`` and ``value`` are ints (:func:`~pseudosl.logic.checks.check_int`: a float such as 1.7 is
        refused, never truncated)."""
        if type(var) is int and type(value) is int and 0 <= var < self.n_vars and 0 <= value < self.n_values:
            payload = (var, value)  # the common case first
        else:
            payload = (self._check_var(var), self._check_value(var, value))
        node = self._index.get((LIT, payload))
        return self._make(LIT, payload, var=payload[0]) if node is None else node

    def in_set(self, var: int, values: Iterable[int]) -> int:
        """``[X_var in values]``: an OR of value indicators (deterministic by construction)."""
        var = self._check_var(var)
        vals = sorted({self._check_value(var, c) for c in values})
        if len(vals) == self.n_values:
            return TRUE
        return self.or_(*(self.literal(var, c) for c in vals))

    def _check_var(self, var: object) -> int:
        v = check_int("var", var)
        if not 0 <= v < self.n_vars:
            raise ValueError(f"variable {v} is out of range: this circuit has variables 0..{self.n_vars - 1}")
        return v

    def _check_value(self, var: int, value: object) -> int:
        c = check_int(f"the value of variable {var}", value)
        if not 0 <= c < self.n_values:
            raise ValueError(f"value {c} of variable {var} is out of range 0..{self.n_values - 1}")
        return c

    # -- inner nodes --------------------------------------------------------------
    def and_(self, *children: int) -> int:
        """The conjunction of ``children``, which must mention disjoint variables (see the class docs)."""
        kids: set[int] = set()
        for c in children:
            c = self._check_id(c)
            if c == FALSE:
                return FALSE
            if c != TRUE:
                kids.add(c)
        if not kids:
            return TRUE
        if len(kids) == 1:
            return kids.pop()
        key = tuple(sorted(kids))
        node = self._index.get((AND, key))
        if node is not None:
            return node
        seen, head, var_of = 0, None, self._var
        for c in key:
            v = var_of.get(c)
            m = self._mask[c] if v is None else 1 << v
            if seen & m:
                return self._overlapping_and(key)
            seen |= m
            if v is not None and (head is None or v < head[0]):
                head = (v, c)
        node = self._make(AND, key, mask=seen)
        if head is not None:  # its literal (or OR of literals) of the lowest such variable: see or_
            self._head[node] = head[1]
        return node

    def or_(self, *children: int, deterministic: bool = False) -> int:
        """The disjunction of ``children``, which must exclude each other (see the class docs).

        ``deterministic=True`` asserts that no two children hold together and skips the check:
        a wrong assertion gives wrong probabilities.
        """
        if type(deterministic) is not bool:  # (the common case costs one type test: or_ runs once per node)
            deterministic = check_bool("deterministic", deterministic)
        kids: set[int] = set()
        for c in children:
            c = self._check_id(c)
            if c == TRUE:
                return TRUE
            if c != FALSE:
                kids.add(c)
        if not kids:
            return FALSE
        if len(kids) == 1:
            return kids.pop()
        key = tuple(sorted(kids))
        node = self._index.get((OR, key))
        if node is not None:
            return node
        mask, var, taken, literals = 0, -1, 0, True  # var: the common decision variable, -2 if none
        var_of, head_of, allowed_of = self._var, self._head, self._allowed
        for c in key:  # one pass: the variables below, and the check's fast path: a decision on one variable
            v = var_of.get(c)
            mask |= self._mask[c] if v is None else 1 << v
            literals = literals and self._kind[c] == LIT
            if var != -2:
                h = head_of.get(c, c)
                v = var_of.get(h)
                allowed = allowed_of.get(h, 0) or (1 << self._payload[h][1] if v is not None else 0)
                if v is None or (var >= 0 and v != var) or taken & allowed:
                    var = -2
                else:
                    var, taken = v, taken | allowed
        if var < 0 and not deterministic:
            self._check_exclusive(key, mask)
        one_var = var if literals and var >= 0 else None  # literals of one variable: an OR of its values
        return self._make(OR, key, mask=mask, var=one_var)

    def __len__(self) -> int:
        return len(self._kind)

    def _check_id(self, node: int) -> int:
        """``node`` as an ``int`` if it is a node id of this builder (a bool is not)."""
        if type(node) is int and 0 <= node < len(self._kind):  # the common case first
            return node
        node = check_int("a node id", node)
        if not 0 <= node < len(self._kind):
            raise ValueError(f"{node!r} is not a node of this builder (ids 0..{len(self._kind) - 1})")
        return node

    def _make(self, kind: int, payload: tuple[int, ...], mask: int | None = None, var: int | None = None) -> int:
        key = (kind, payload)
        node = self._index.get(key)
        if node is None:
            node = len(self._kind)
            if self.max_nodes is not None and node >= self.max_nodes:
                check_limit("CircuitBuilder: the circuit grows past nodes numbering", node + 1, self.max_nodes,
                            "max_nodes", " (pass it to CircuitBuilder or to the front-end that made it)")
            if var is not None:  # its bitset 1 << var is made when asked (n of them would cost n^2 bits)
                self._var[node] = var
                mask = 0
                if kind == OR:
                    self._allowed[node] = sum(1 << self._payload[c][1] for c in payload)
            elif mask is None and kind in (AND, OR):
                mask = 0
                for c in payload:
                    mask |= self._vars(c)
            self._kind.append(kind)
            self._payload.append(payload)
            self._mask.append(mask or 0)
            self._index[key] = node
        return node

    def _vars(self, node: int) -> int:
        """Bitset of the variables ``node`` mentions (a literal's is made on the fly: no stored 2^v ints)."""
        v = self._var.get(node)
        return self._mask[node] if v is None else 1 << v

    def _overlapping_and(self, kids: tuple[int, ...]) -> int:
        """FALSE for two literals of one variable with different values; else a :class:`CircuitError`."""
        value: dict[int, int] = {}
        for c in kids:
            if self._kind[c] == LIT:
                v, x = self._payload[c]
                if value.setdefault(v, x) != x:
                    return FALSE
        owner: dict[int, int] = {}
        for c in kids:
            for v in bits(self._vars(c)):
                if v in owner:
                    shared = bits(self._vars(owner[v]) & self._vars(c))
                    more = f" (and {len(shared) - 1} more)" if len(shared) > 1 else ""
                    raise CircuitError(
                        f"and_: children {owner[v]} and {c} both mention variable {v}{more}: an AND of children "
                        f"that share variables is not decomposable (its probability would count X{v} twice). "
                        f"Conjoin constraints that overlap as separate roots (b.build([r1, r2])) or compile "
                        f"their conjunction with pseudosl.compile_formula")
                owner[v] = c
        raise AssertionError("overlapping children without a shared variable")  # pragma: no cover

    def _check_exclusive(self, kids: tuple[int, ...], mask: int) -> None:
        """Raise :class:`CircuitError` unless no two of ``kids`` hold on one assignment (past the fast path
        of :meth:`or_`: children that are, or are ANDs with, literals of one variable with disjoint values)."""
        if determinism.separated([determinism.fixed_values(c, self._kind, self._payload, self._var, self._allowed)
                                  for c in kids]):
            return
        variables = bits(mask)
        log_count = len(variables) * math.log2(self.n_values)
        if log_count <= math.log2(self.max_check_assignments):
            overlap = determinism.first_overlap(kids, variables, self.n_values, self._kind, self._payload)
            if overlap is None:
                return
            a, b, where = overlap
            raise CircuitError(
                f"or_: children {a} and {b} both hold when {where}: the OR is not deterministic (its "
                f"probability would count those assignments twice). Make the children exclusive, e.g. "
                f"X0 | X1 as or_(x0, and_(not_x0, x1)), or compile the formula with pseudosl.compile_formula")
        raise CircuitError(
            f"or_: cannot show that its {len(kids)} children exclude each other: they are not a decision "
            f"(children that each fix some variable to values the others do not allow), and checking all "
            f"{self.n_values}^{len(variables)} assignments of its variables is above max_check_assignments="
            f"{self.max_check_assignments}. Build the OR as a decision, raise max_check_assignments, or pass "
            f"deterministic=True if you know no two children hold together")

    # -- freezing -----------------------------------------------------------------
    def build(self, roots: Sequence[int] | int) -> "Dag":
        """Smooth the sub-DAG below ``roots`` and freeze it (roots smoothed over all variables)."""
        roots = [roots] if isinstance(roots, (int, np.integer)) else list(roots)
        if not roots:
            raise ValueError("build() needs at least one root")
        for r in roots:
            self._check_id(r)
        return _smooth_and_freeze(self, [int(r) for r in roots])


def _smooth_and_freeze(b: CircuitBuilder, roots: list[int]) -> "Dag":
    any_node: dict[int, int] = {}

    def anyv(v: int) -> int:
        if v not in any_node:
            any_node[v] = b._make(OR, tuple(b.literal(v, c) for c in range(b.n_values)), var=v)
        return any_node[v]

    def pad(child: int, missing: int) -> int:
        if not missing:
            return child
        extra = [anyv(v) for v in bits(missing)]
        if child == TRUE:
            kids = extra
        elif b._kind[child] == AND:  # flatten: AND(AND(p, s), any) = AND(p, s, any)
            kids = [*b._payload[child], *extra]
        else:
            kids = [child, *extra]
        return kids[0] if len(kids) == 1 else b._make(AND, tuple(sorted(set(kids))), mask=b._vars(child) | missing)

    # smooth OR nodes bottom-up (children of smoothed nodes keep their variable sets)
    smoothed: dict[int, int] = {}
    order = _topological(b, roots)
    for u in order:
        kind = b._kind[u]
        if kind in (CONST, LIT):
            smoothed[u] = u
            continue
        kids = [smoothed[c] for c in b._payload[u]]
        if kind == OR:
            full = b._vars(u)
            kids = [pad(c, full & ~b._vars(c)) for c in kids]
        smoothed[u] = b._make(kind, tuple(sorted(set(kids))), mask=b._vars(u)) if len(set(kids)) > 1 else kids[0]
    all_vars = (1 << b.n_vars) - 1
    new_roots = [r if (r := smoothed[x]) == FALSE else pad(r, all_vars & ~b._vars(r)) for x in roots]
    # TRUE root over zero variables cannot happen: n_vars >= 1 so it is padded.
    return _freeze(b, new_roots)


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
            if b._kind[u] in (AND, OR):
                stack.extend((c, False) for c in b._payload[u] if c not in seen)
    return order


def _freeze(b: CircuitBuilder, roots: list[int]) -> Dag:
    """The sub-DAG below ``roots`` as CSR arrays: FALSE, TRUE, then the nodes children first."""
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
        if k == LIT:
            var[i], value[i] = b._payload[u]
        elif k == CONST:
            value[i] = b._payload[u][0]
        else:
            kids.extend(pos[c] for c in b._payload[u])
        offsets[i + 1] = len(kids)
    return Dag(b.n_vars, b.n_values, kind, var, value, offsets,
               np.array(kids, dtype=np.int64), np.array([pos[r] for r in roots], dtype=np.int64))
