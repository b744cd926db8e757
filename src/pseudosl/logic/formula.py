"""A small propositional-formula front-end (no torch).

Formulas are immutable DAGs over 0-based Boolean variables ``Var(i)``
(position ``i`` of a Boolean circuit, value 1 = true) built with

    ``a & b``, ``a | b``, ``~a``, ``a.implies(b)``, ``a.iff(b)``,
    ``And(*fs)``, ``Or(*fs)``, ``Not(f)``, ``implies(a, b)``, ``iff(a, b)``, ``true``, ``false``.

``And``/``Or`` flatten nested conjunctions/disjunctions, so ``a & b & c`` is one
3-ary node and long chains do not grow deep.  Nodes are hash-consed: building the same
formula twice gives the same object, so equality is identity and every operation
(hashing, :func:`dag_key`, compilation) is linear in the number of distinct subformulas,
not in the expanded tree (a chain of 40 ``iff`` shares each subformula; as a tree it has
2^40 leaves).  :func:`pseudosl.compile_formula` compiles a formula (or a list of formulas =
a multi-rooted circuit) through PySDD.

Example:
    >>> from pseudosl.logic.formula import variables, iff
    >>> a, b, c = variables(3)
    >>> f = (a | b) & iff(c, ~a)
    >>> f.evaluate((1, 0, 0))
    True
    >>> f is (a | b) & iff(c, ~a)
    True
"""

from __future__ import annotations

import threading
import weakref
from abc import ABC, abstractmethod
from typing import Iterable, Sequence

from .checks import check_int

__all__ = ["Formula", "Var", "Const", "Op", "And", "Or", "Not", "implies", "iff", "true", "false", "variables",
           "dag_key"]

_NODES: "weakref.WeakValueDictionary[tuple, Formula]" = weakref.WeakValueDictionary()
_REPR_LIMIT = 2000
_LOCK = threading.Lock()


def _interned(cls: type, key: tuple, fields: dict[str, object]) -> "Formula":
    """The one live node with ``key`` (children by identity), created with ``fields`` if none exists."""
    with _LOCK:
        node = _NODES.get(key)
        if node is None:
            node = object.__new__(cls)
            for name, value in fields.items():
                object.__setattr__(node, name, value)
            _NODES[key] = node
        return node


class Formula(ABC):
    """Base class of formula nodes: supports ``&``, ``|``, ``~``, ``implies``, ``iff``.

    Nodes are unique (hash-consed), so ``==`` and ``hash`` are those of the object.
    """

    __slots__ = ("__weakref__",)

    # -- connectives ------------------------------------------------------------------------
    def __and__(self, other: "Formula") -> "Formula":
        return And(self, _check_formula(other, "&"))

    def __rand__(self, other: object) -> "Formula":
        return And(_check_formula(other, "&"), self)

    def __or__(self, other: "Formula") -> "Formula":
        return Or(self, _check_formula(other, "|"))

    def __ror__(self, other: object) -> "Formula":
        return Or(_check_formula(other, "|"), self)

    def __invert__(self) -> "Formula":
        return Not(self)

    def implies(self, other: "Formula") -> "Formula":
        """``self -> other`` = ``~self | other``."""
        return Or(Not(self), _check_formula(other, "implies"))

    def iff(self, other: "Formula") -> "Formula":
        """``self <-> other`` = ``(self & other) | (~self & ~other)``."""
        other = _check_formula(other, "iff")
        return Or(And(self, other), And(Not(self), Not(other)))

    def __bool__(self) -> bool:
        raise TypeError("a Formula has no truth value; combine formulas with &, |, ~ "
                        "(not the Python keywords and/or/not), or call .evaluate(assignment)")

    # -- structure ----------------------------------------------------------------------------
    def key(self) -> tuple:
        """A canonical form, linear in the number of distinct subformulas: :func:`dag_key` of ``[self]``."""
        return dag_key([self])

    @abstractmethod
    def max_var(self) -> int:
        """Largest variable index mentioned, ``-1`` if none."""

    def evaluate(self, assignment: Sequence[int]) -> bool:
        """Truth value under ``assignment[i]`` in {0, 1} (or bool) for ``Var(i)`` (each subformula once)."""
        value: dict[Formula, bool] = {}
        for f in _post_order([self]):
            if isinstance(f, Var):
                value[f] = bool(assignment[f.index])
            elif isinstance(f, Const):
                value[f] = f.value
            elif f.op == "not":
                value[f] = not value[f.args[0]]
            else:
                vals = (value[a] for a in f.args)
                value[f] = all(vals) if f.op == "and" else any(vals)
        return value[self]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("formulas are immutable")

    def __copy__(self) -> "Formula":
        return self

    def __deepcopy__(self, memo: dict) -> "Formula":
        return self


class Var(Formula):
    """The 0-based Boolean variable ``X_index`` (true = value 1)."""

    __slots__ = ("index",)

    def __new__(cls, index: int) -> "Var":
        i = check_int("Var index", index, 0, " (variables are 0-based)")
        return _interned(cls, ("var", i), {"index": i})

    def max_var(self) -> int:
        return self.index

    def __reduce__(self):
        return (Var, (self.index,))

    def __repr__(self) -> str:
        return f"Var({self.index})"


class Const(Formula):
    """The constant TRUE or FALSE (use the module constants ``true`` / ``false``)."""

    __slots__ = ("value",)

    def __new__(cls, value: bool) -> "Const":
        v = bool(value)
        return _interned(cls, ("const", v), {"value": v})

    def max_var(self) -> int:
        return -1

    def __reduce__(self):
        return (Const, (self.value,))

    def __repr__(self) -> str:
        return "true" if self.value else "false"


true = Const(True)
false = Const(False)


class Op(Formula):
    """An n-ary connective node: ``op`` in {"and", "or", "not"}."""

    __slots__ = ("op", "args", "_max")

    def __new__(cls, op: str, args: tuple[Formula, ...]) -> "Op":
        args = tuple(args)
        return _interned(cls, (op, *map(id, args)),  # children are unique nodes: their ids name them
                         {"op": op, "args": args, "_max": max((a.max_var() for a in args), default=-1)})

    def max_var(self) -> int:
        return self._max

    def __reduce__(self):
        return (Op, (self.op, self.args))

    def __repr__(self) -> str:
        """The expanded formula, cut after ``_REPR_LIMIT`` characters (a DAG can be exponentially long)."""
        out: list[str] = []
        size = 0
        stack: list[Formula | str] = [self]
        while stack and size <= _REPR_LIMIT:
            item = stack.pop()
            if isinstance(item, Op) and item.op == "not":
                stack.append(item.args[0])
                item = "~"
            elif isinstance(item, Op):
                sep = " & " if item.op == "and" else " | "
                stack.append(")")
                for i, a in enumerate(reversed(item.args)):  # popped as: a0, sep, a1, ..., ")"
                    stack.extend([sep, a] if i else [a])
                item = "("
            piece = item if isinstance(item, str) else repr(item)
            out.append(piece)
            size += len(piece)
        return "".join(out) + (" ..." if stack else "")


def dag_key(formulas: Sequence[Formula]) -> tuple:
    """A canonical form of ``formulas`` (shared subformulas listed once), for the compile cache.

    The distinct subformulas in post-order, each ``("var", i)``, ``("const", 0 | 1)`` or
    ``(op, *positions of its arguments)``, then ``("roots", *positions)``: two lists of formulas have
    equal keys iff they are the same formulas.  Linear in the number of distinct subformulas.
    """
    position: dict[Formula, int] = {}
    nodes: list[tuple] = []
    for f in _post_order(formulas):
        position[f] = len(nodes)
        if isinstance(f, Var):
            nodes.append(("var", f.index))
        elif isinstance(f, Const):
            nodes.append(("const", int(f.value)))
        else:
            nodes.append((f.op, *(position[a] for a in f.args)))
    nodes.append(("roots", *(position[f] for f in formulas)))
    return tuple(nodes)


def _post_order(roots: Iterable[Formula]) -> list[Formula]:
    """The distinct subformulas below ``roots``, arguments before the formulas using them (iterative)."""
    seen: set[Formula] = set()
    order: list[Formula] = []
    for root in roots:
        stack: list[tuple[Formula, bool]] = [(root, False)]
        while stack:
            f, done = stack.pop()
            if done:
                order.append(f)
                continue
            if f in seen:
                continue
            seen.add(f)
            stack.append((f, True))
            if isinstance(f, Op):
                stack.extend((a, False) for a in reversed(f.args) if a not in seen)
    return order


def Not(f: Formula) -> Formula:
    """Negation; ``Not(Not(f))`` is ``f`` and constants fold."""
    f = _check_formula(f, "Not")
    if isinstance(f, Const):
        return false if f.value else true
    if isinstance(f, Op) and f.op == "not":
        return f.args[0]
    return Op("not", (f,))


def And(*fs: Formula) -> Formula:
    """Conjunction (``And()`` is ``true``); nested conjunctions are flattened, constants fold."""
    return _nary("and", fs)


def Or(*fs: Formula) -> Formula:
    """Disjunction (``Or()`` is ``false``); nested disjunctions are flattened, constants fold."""
    return _nary("or", fs)


def implies(a: Formula, b: Formula) -> Formula:
    """``a -> b``."""
    return _check_formula(a, "implies").implies(b)


def iff(a: Formula, b: Formula) -> Formula:
    """``a <-> b``."""
    return _check_formula(a, "iff").iff(b)


def variables(n: int, start: int = 0) -> tuple[Var, ...]:
    """``n`` variables ``Var(start), ..., Var(start + n - 1)``: ``a, b, c = variables(3)``."""
    return tuple(Var(start + i) for i in range(check_int("n", n, 0)))


def _nary(op: str, fs: Iterable[object]) -> Formula:
    absorbing, neutral = (false, true) if op == "and" else (true, false)
    args: list[Formula] = []
    for f in fs:
        f = _check_formula(f, "And" if op == "and" else "Or")
        if f == absorbing:
            return absorbing
        if f == neutral:
            continue
        args.extend(f.args if isinstance(f, Op) and f.op == op else (f,))
    if not args:
        return neutral
    if len(args) == 1:
        return args[0]
    return Op(op, tuple(args))


def _check_formula(f: object, where: str) -> Formula:
    if isinstance(f, Formula):
        return f
    hint = " (use pseudosl.logic.formula.true / false for constants)" if isinstance(f, (bool, int)) else ""
    raise TypeError(f"{where}: expected a Formula (Var, true, false, or a combination), "
                    f"got {type(f).__name__} {f!r}{hint}")
