"""Categorical formulas: constraints over positions with ``k`` values, compiled to a decision diagram.

The Boolean front-end (:mod:`.formula`) speaks of true/false variables; here every position ``y_i``
takes one of ``k`` values and the atoms compare values:

    y = positions(6, 3)                              # y[0] .. y[5], each in 0..2
    no_repeat = all_of(y[i] != y[i + 1] for i in range(5))
    starts_low = y[0].isin({0, 1})
    alpha = no_repeat & starts_low & (y[5] == 2).implies(y[4] == 0)

Atoms: ``y[i] == c``, ``y[i] != c``, ``y[i].isin(values)`` (a value set), ``y[i] == y[j]``, ``y[i] != y[j]``;
connectives ``&``, ``|``, ``~``, ``.implies()``, ``.iff()``, :func:`all_of`, :func:`any_of`.  A Python chain such as
``y[0] != y[1] != y[2]`` is refused (Python would silently keep only its last comparison): write ``&``.

Compilation (:func:`categorical_dag`) builds an ordered multi-valued decision diagram: the formula is
conditioned on ``y_v = c`` for the lowest position ``v`` it mentions, for every ``c``; values that leave the
same residual formula share one child, and residual formulas are simplified and hash-consed, so a chain of
local constraints stays ``O(n k)`` nodes.  Every OR node is a decision on one position's values
(deterministic), its children mention later positions only (decomposable); the builder smooths.  A
formula whose residuals do not repeat (e.g. all-different over many positions) grows exponentially:
``max_nodes`` refuses it by name before memory runs out (use :func:`pseudosl.constraints.all_different`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Iterable, overload

from .builder import CircuitBuilder
from .dag import Dag
from .errors import DEFAULT_MAX_VARS, SizeLimitError
from .checks import check_int

__all__ = ["CatFormula", "Position", "Positions", "positions", "all_of", "any_of", "categorical_dag",
           "CategoricalSizeError"]


class CategoricalSizeError(SizeLimitError):
    """The decision diagram of a categorical formula grows beyond ``max_nodes``."""


class CatFormula:
    """A categorical formula (immutable, hash-consed by its canonical key)."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # structural equality of formulas (used by the compiler's cache)
        return isinstance(other, CatFormula) and self.key == other.key

    def __bool__(self) -> bool:
        raise TypeError("a categorical formula has no truth value: combine formulas with &, | and ~ "
                        "(a chain such as y[0] != y[1] != y[2] means (y[0] != y[1]) and (y[1] != y[2]): write it with &)")

    def __and__(self, other: "CatFormula") -> "CatFormula":
        return all_of([self, _formula(other)])

    def __or__(self, other: "CatFormula") -> "CatFormula":
        return any_of([self, _formula(other)])

    def __invert__(self) -> "CatFormula":
        return _not(self)

    def implies(self, other: "CatFormula") -> "CatFormula":
        return any_of([_not(self), _formula(other)])

    def iff(self, other: "CatFormula") -> "CatFormula":
        other = _formula(other)
        return any_of([all_of([self, other]), all_of([_not(self), _not(other)])])

    def positions(self) -> set[int]:
        """The positions the formula mentions."""
        return set(_mentions(self.key, {}))

    def n_values(self) -> set[int]:
        """The numbers of values of the positions it mentions (one, in a well-formed formula)."""
        return _n_values(self.key, set(), set())

    def evaluate(self, values: Iterable[int]) -> bool:
        """The formula's truth value on one assignment ``values[i] = y_i``."""
        return _evaluate(self.key, list(values), {})

    def digest(self) -> str:
        """SHA-256 of the canonical form (children sorted): equal formulas, equal digests, in every process.
        Linear in the distinct subformulas (the compile cache's key)."""
        return _digest(self.key, {}).hex()

    def __repr__(self) -> str:
        """Canonical text (children sorted): equal formulas print alike; cut after ``_SHOW_LIMIT`` characters
        per subformula (a formula with shared subformulas, such as a chain of ``iff``, is exponentially long)."""
        return _show(self.key, {})


# keys: ("T",) / ("F",); ("in", i, k, frozenset values) with 0 < |values| < k; ("eq", i, j, k) with i < j;
# ("not", key) of an "eq" only; ("and", frozenset keys) / ("or", frozenset keys) with >= 2 children
TRUE = CatFormula(("T",))
FALSE = CatFormula(("F",))


class Position:
    """``y_i``: a position with ``n_values`` values; compare it to get atoms."""

    __slots__ = ("index", "n_values")

    def __init__(self, index: int, n_values: int) -> None:
        self.index = check_int("position", index, low=0)
        self.n_values = check_int("n_values", n_values, low=2)

    def isin(self, values: Iterable[int]) -> CatFormula:
        """``y_i in values``."""
        vals = frozenset(check_int(f"a value of y[{self.index}]", c, low=0) for c in values)
        bad = [c for c in vals if c >= self.n_values]
        if bad:
            raise ValueError(f"value {bad[0]} of y[{self.index}] is out of range 0..{self.n_values - 1}")
        return _in(self.index, self.n_values, vals)

    def __eq__(self, other: object) -> CatFormula:  # type: ignore[override]
        if isinstance(other, Position):
            if other.n_values != self.n_values:
                raise ValueError(f"y[{self.index}] has {self.n_values} values but y[{other.index}] has {other.n_values}")
            if other.index == self.index:
                return TRUE
            i, j = sorted((self.index, other.index))
            return CatFormula(("eq", i, j, self.n_values))
        return self.isin([other])  # type: ignore[list-item]

    def __ne__(self, other: object) -> CatFormula:  # type: ignore[override]
        return _not(self.__eq__(other))

    __hash__ = None  # type: ignore[assignment]  (== builds a formula)

    def __bool__(self) -> bool:
        raise TypeError(f"y[{self.index}] has no truth value: compare it (y[i] == c, y[i] != y[j], y[i].isin(...))")

    def __repr__(self) -> str:
        return f"y[{self.index}]"


class Positions(Sequence[Position]):
    """``y_0, .., y_{n-1}``, each with ``n_values`` values: a sequence that makes each position when indexed,
    so its memory does not grow with ``n`` (the circuit's size is checked where it is compiled)."""

    __slots__ = ("n_positions", "n_values")

    def __init__(self, n_positions: int, n_values: int) -> None:
        self.n_positions = check_int("n_positions", n_positions, low=1)
        self.n_values = check_int("n_values", n_values, low=2)

    def __len__(self) -> int:
        return self.n_positions

    @overload
    def __getitem__(self, i: int) -> Position: ...

    @overload
    def __getitem__(self, i: slice) -> list[Position]: ...

    def __getitem__(self, i: int | slice) -> Position | list[Position]:
        if isinstance(i, slice):
            return [Position(j, self.n_values) for j in range(*i.indices(self.n_positions))]
        j = check_int("a position index", i)
        if not -self.n_positions <= j < self.n_positions:
            raise IndexError(f"y[{j}] is out of range: these positions are y[0] .. y[{self.n_positions - 1}]")
        return Position(j % self.n_positions, self.n_values)

    def __repr__(self) -> str:
        return f"positions({self.n_positions}, {self.n_values})"


def positions(n_positions: int, n_values: int) -> Positions:
    """``[y_0, .., y_{n-1}]``, each with ``n_values`` values (a sequence; ``y[i]``, ``y[1:]``, ``zip(y, y[1:])``)."""
    return Positions(n_positions, n_values)


def all_of(formulas: Iterable[CatFormula]) -> CatFormula:
    """The conjunction (TRUE for none)."""
    return _junction("and", [_formula(f) for f in formulas])


def any_of(formulas: Iterable[CatFormula]) -> CatFormula:
    """The disjunction (FALSE for none)."""
    return _junction("or", [_formula(f) for f in formulas])


# -- construction with simplification ---------------------------------------------------------------
def _formula(f: object) -> CatFormula:
    if not isinstance(f, CatFormula):
        raise TypeError(f"expected a categorical formula (e.g. y[0] != y[1]), got {type(f).__name__} {f!r}")
    return f


def _in(i: int, k: int, values: frozenset[int]) -> CatFormula:
    if not values:
        return FALSE
    if len(values) == k:
        return TRUE
    return CatFormula(("in", i, k, values))


def _not(f: CatFormula, memo: dict[tuple, CatFormula] | None = None) -> CatFormula:
    """The negation, pushed down to the atoms; each distinct subformula is negated once (``memo``)."""
    key = f.key
    tag = key[0]
    if tag == "T":
        return FALSE
    if tag == "F":
        return TRUE
    if tag == "in":
        return _in(key[1], key[2], frozenset(range(key[2])) - key[3])
    if tag == "eq":
        return CatFormula(("not", key))
    if tag == "not":
        return CatFormula(key[1])
    memo = {} if memo is None else memo
    if key not in memo:
        dual = "or" if tag == "and" else "and"
        memo[key] = _junction(dual, [_not(CatFormula(c), memo) for c in key[1]])
    return memo[key]


def _junction(tag: str, children: list[CatFormula]) -> CatFormula:
    """``and`` / ``or`` of ``children``: flattened, constants folded, value sets of one position merged."""
    unit, zero = (TRUE, FALSE) if tag == "and" else (FALSE, TRUE)
    keys: set[tuple] = set()
    sets: dict[int, tuple[int, frozenset[int]]] = {}
    stack = list(children)
    while stack:
        c = stack.pop()
        key = c.key
        if c == zero:
            return zero
        if c == unit:
            continue
        if key[0] == tag:
            stack.extend(CatFormula(k) for k in key[1])
        elif key[0] == "in":
            i, k, vals = key[1], key[2], key[3]
            if i in sets:
                old = sets[i][1]
                vals = old & vals if tag == "and" else old | vals
            sets[i] = (k, vals)
        else:
            keys.add(key)
    for i, (k, vals) in sets.items():
        atom = _in(i, k, vals)
        if atom == zero:
            return zero
        if atom != unit:
            keys.add(atom.key)
    if not keys:
        return unit
    if len(keys) == 1:
        return CatFormula(next(iter(keys)))
    return CatFormula((tag, frozenset(keys)))


def _condition(key: tuple, var: int, value: int, memo: dict[tuple, CatFormula]) -> CatFormula:
    """``key`` with ``y_var := value``, simplified."""
    if key in memo:
        return memo[key]
    tag = key[0]
    if tag in ("T", "F"):
        out = CatFormula(key)
    elif tag == "in":
        out = (TRUE if value in key[3] else FALSE) if key[1] == var else CatFormula(key)
    elif tag == "eq":
        i, j, k = key[1], key[2], key[3]
        out = _in(j, k, frozenset([value])) if i == var else _in(i, k, frozenset([value])) if j == var else CatFormula(key)
    elif tag == "not":
        out = _not(_condition(key[1], var, value, memo))
    else:
        out = _junction(tag, [_condition(c, var, value, memo) for c in key[1]])
    memo[key] = out
    return out


# The walks below visit each distinct subformula once (``memo`` / ``seen``): a formula is a DAG of keys,
# and a chain of ``iff`` repeats each subformula twice per level (2^n paths, 6n distinct keys).
def _mentions(key: tuple, memo: dict[tuple, frozenset[int]]) -> frozenset[int]:
    if key not in memo:
        tag = key[0]
        memo[key] = (frozenset() if tag in ("T", "F") else frozenset([key[1]]) if tag == "in" else
                     frozenset(key[1:3]) if tag == "eq" else _mentions(key[1], memo) if tag == "not" else
                     frozenset().union(*(_mentions(c, memo) for c in key[1])))
    return memo[key]


def _n_values(key: tuple, found: set[int], seen: set[tuple]) -> set[int]:
    if key in seen:
        return found
    seen.add(key)
    tag = key[0]
    if tag == "in":
        found.add(key[2])
    elif tag == "eq":
        found.add(key[3])
    elif tag == "not":
        _n_values(key[1], found, seen)
    elif tag in ("and", "or"):
        for c in key[1]:
            _n_values(c, found, seen)
    return found


def _evaluate(key: tuple, y: list[int], memo: dict[tuple, bool]) -> bool:
    if key not in memo:
        tag = key[0]
        if tag in ("T", "F"):
            memo[key] = tag == "T"
        elif tag == "in":
            memo[key] = y[key[1]] in key[3]
        elif tag == "eq":
            memo[key] = y[key[1]] == y[key[2]]
        elif tag == "not":
            memo[key] = not _evaluate(key[1], y, memo)
        else:
            parts = (_evaluate(c, y, memo) for c in key[1])
            memo[key] = all(parts) if tag == "and" else any(parts)
    return memo[key]


def _digest(key: tuple, memo: dict[tuple, bytes]) -> bytes:
    """SHA-256 of the canonical form of ``key``: a Merkle hash, children sorted by their digests."""
    if key not in memo:
        tag = key[0]
        if tag in ("in", "eq"):
            text = repr((tag, *key[1:3], *(sorted(key[3]) if tag == "in" else [key[3]])))
        elif tag == "not":
            text = "not " + _digest(key[1], memo).hex()
        elif tag in ("and", "or"):
            text = tag + " " + " ".join(sorted(_digest(c, memo).hex() for c in key[1]))
        else:
            text = tag
        memo[key] = hashlib.sha256(text.encode()).digest()
    return memo[key]


_SHOW_LIMIT = 2000


def _show(key: tuple, memo: dict[tuple, str]) -> str:
    if key in memo:
        return memo[key]
    tag = key[0]
    if tag in ("T", "F"):
        return "TRUE" if tag == "T" else "FALSE"
    if tag == "in":
        vals = sorted(key[3])
        return f"y[{key[1]}] == {vals[0]}" if len(vals) == 1 else f"y[{key[1]}] in {{{', '.join(map(str, vals))}}}"
    if tag == "eq":
        return f"y[{key[1]}] == y[{key[2]}]"
    if tag == "not":
        return f"y[{key[1][1]}] != y[{key[1][2]}]"
    sep = " & " if tag == "and" else " | "
    text = "(" + sep.join(sorted(_show(c, memo) for c in key[1])) + ")"
    memo[key] = text if len(text) <= _SHOW_LIMIT else text[:_SHOW_LIMIT] + " ..."
    return memo[key]


# -- compilation ----------------------------------------------------------------------------------------
def categorical_dag(formulas: CatFormula | Iterable[CatFormula], n_positions: int, n_values: int, *,
                    max_nodes: int = 1_000_000, max_vars: int | None = DEFAULT_MAX_VARS) -> Dag:
    """The circuit over ``n_positions`` positions with ``n_values`` values: one root per formula (see module docs).

    Raises:
        CategoricalSizeError: the decision diagram would exceed ``max_nodes`` nodes.
        SizeLimitError: more than ``max_vars`` positions (``None``: no limit).
        ValueError: a formula mentions a position ``>= n_positions`` or positions with another number of values.
    """
    roots_in = [formulas] if isinstance(formulas, CatFormula) else [_formula(f) for f in formulas]
    if not roots_in:
        raise ValueError("categorical_dag needs at least one formula")
    n_positions = check_int("n_positions", n_positions, low=1)
    n_values = check_int("n_values", n_values, low=2)
    for r, f in enumerate(roots_in):
        mentioned = f.positions()
        if mentioned and max(mentioned) >= n_positions:
            raise ValueError(f"formula {r} mentions y[{max(mentioned)}] but the circuit has positions "
                             f"0..{n_positions - 1}; pass n_positions >= {max(mentioned) + 1}")
        other = f.n_values() - {n_values}
        if other:
            raise ValueError(f"formula {r} compares positions with {sorted(other)[0]} values, but the circuit "
                             f"has n_values={n_values}")
    b = CircuitBuilder(n_positions, n_values, max_vars=max_vars)
    node_of: dict[tuple, int] = {TRUE.key: b.true(), FALSE.key: b.false()}

    def build(f: CatFormula) -> int:
        """Node of ``f`` (iterative over residuals: formulas with many positions do not exhaust the stack)."""
        stack = [f]
        while stack:
            g = stack[-1]
            if g.key in node_of:
                stack.pop()
                continue
            var = min(g.positions())
            children = [_condition(g.key, var, c, {}) for c in range(n_values)]
            todo = [c for c in children if c.key not in node_of]
            if todo:
                stack.extend(todo)
                continue
            by_child: dict[int, list[int]] = {}
            for c, child in enumerate(children):
                by_child.setdefault(node_of[child.key], []).append(c)
            node_of[g.key] = b.or_(*(b.and_(b.in_set(var, vals), node) for node, vals in by_child.items()))
            if len(b) > max_nodes:
                raise CategoricalSizeError(f"the decision diagram exceeds max_nodes={max_nodes} nodes (at position "
                                           f"{var}); the formula's residuals do not repeat (e.g. all-different over "
                                           "many positions): use a dedicated builder, or raise max_nodes")
            stack.pop()
        return node_of[f.key]

    return b.build([build(f) for f in roots_in])

