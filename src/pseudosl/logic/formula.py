"""A small propositional-formula front-end (no torch).

Formulas are immutable trees over 0-based Boolean variables ``Var(i)``
(position ``i`` of a Boolean circuit, value 1 = true) built with

    ``a & b``, ``a | b``, ``~a``, ``a.implies(b)``, ``a.iff(b)``,
    ``And(*fs)``, ``Or(*fs)``, ``Not(f)``, ``implies(a, b)``, ``iff(a, b)``, ``true``, ``false``.

``And``/``Or`` flatten nested conjunctions/disjunctions, so ``a & b & c`` is one
3-ary node and long chains do not grow deep.  :func:`pseudosl.compile_formula`
compiles a formula (or a list of formulas = a multi-rooted circuit) through PySDD.

Example:
    >>> from pseudosl.logic.formula import variables, iff
    >>> a, b, c = variables(3)
    >>> f = (a | b) & iff(c, ~a)
    >>> f.evaluate((1, 0, 0))
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable, Sequence

from .errors import check_int

__all__ = ["Formula", "Var", "Const", "And", "Or", "Not", "implies", "iff", "true", "false", "variables"]


class Formula(ABC):
    """Base class of formula nodes: supports ``&``, ``|``, ``~``, ``implies``, ``iff``."""

    __slots__ = ("_hash",)

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
    @abstractmethod
    def key(self) -> tuple:
        """A canonical nested-tuple form (used for equality, hashing and the compile cache)."""

    @abstractmethod
    def max_var(self) -> int:
        """Largest variable index mentioned, ``-1`` if none."""

    @abstractmethod
    def evaluate(self, assignment: Sequence[int]) -> bool:
        """Truth value under ``assignment[i]`` in {0, 1} (or bool) for ``Var(i)``."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Formula) and hash(self) == hash(other) and self.key() == other.key()

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = hash(self.key())
            object.__setattr__(self, "_hash", h)
            return h

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("formulas are immutable")


class Var(Formula):
    """The 0-based Boolean variable ``X_index`` (true = value 1)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        i = check_int("Var index", index, 0, " (variables are 0-based)")
        object.__setattr__(self, "index", i)

    def key(self) -> tuple:
        return ("var", self.index)

    def max_var(self) -> int:
        return self.index

    def evaluate(self, assignment: Sequence[int]) -> bool:
        return bool(assignment[self.index])

    def __repr__(self) -> str:
        return f"Var({self.index})"


class Const(Formula):
    """The constant TRUE or FALSE (use the module constants ``true`` / ``false``)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        object.__setattr__(self, "value", bool(value))

    def key(self) -> tuple:
        return ("const", int(self.value))

    def max_var(self) -> int:
        return -1

    def evaluate(self, assignment: Sequence[int]) -> bool:
        return self.value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


true = Const(True)
false = Const(False)


class _Op(Formula):
    """An n-ary connective node: ``op`` in {"and", "or", "not"}."""

    __slots__ = ("op", "args", "_max", "_key")

    def __init__(self, op: str, args: tuple[Formula, ...]) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "_max", max((a.max_var() for a in args), default=-1))
        object.__setattr__(self, "_key", (op, tuple(a.key() for a in args)))  # children's keys are cached too

    def key(self) -> tuple:
        return self._key

    def max_var(self) -> int:
        return self._max

    def evaluate(self, assignment: Sequence[int]) -> bool:
        if self.op == "not":
            return not self.args[0].evaluate(assignment)
        if self.op == "and":
            return all(a.evaluate(assignment) for a in self.args)
        return any(a.evaluate(assignment) for a in self.args)

    def __repr__(self) -> str:
        if self.op == "not":
            return f"~{self.args[0]!r}"
        sep = " & " if self.op == "and" else " | "
        return "(" + sep.join(repr(a) for a in self.args) + ")"


def Not(f: Formula) -> Formula:
    """Negation; ``Not(Not(f))`` is ``f`` and constants fold."""
    f = _check_formula(f, "Not")
    if isinstance(f, Const):
        return false if f.value else true
    if isinstance(f, _Op) and f.op == "not":
        return f.args[0]
    return _Op("not", (f,))


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
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    return tuple(Var(start + i) for i in range(n))


def _nary(op: str, fs: Iterable[object]) -> Formula:
    absorbing, neutral = (false, true) if op == "and" else (true, false)
    args: list[Formula] = []
    for f in fs:
        f = _check_formula(f, "And" if op == "and" else "Or")
        if f == absorbing:
            return absorbing
        if f == neutral:
            continue
        args.extend(f.args if isinstance(f, _Op) and f.op == op else (f,))
    if not args:
        return neutral
    if len(args) == 1:
        return args[0]
    return _Op(op, tuple(args))


def _check_formula(f: object, where: str) -> Formula:
    if isinstance(f, Formula):
        return f
    hint = " (use pseudosl.logic.formula.true / false for constants)" if isinstance(f, (bool, int)) else ""
    raise TypeError(f"{where}: expected a Formula (Var, true, false, or a combination), "
                    f"got {type(f).__name__} {f!r}{hint}")
