"""Errors raised by the compilation front-ends, and the one integer check they share (no torch)."""

from __future__ import annotations

import operator

__all__ = ["DimacsFormatError", "UnsatisfiableError", "as_int", "check_int"]


class UnsatisfiableError(ValueError):
    """The constraint has no model; pass ``allow_unsat=True`` to get a FALSE circuit instead."""


class DimacsFormatError(ValueError):
    """A malformed or truncated DIMACS CNF file; the message names ``file:line``."""


def as_int(name: str, value: object) -> int:
    """``value`` as an ``int`` (bools refused); ``TypeError`` naming ``name`` and the value."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None


def check_int(name: str, value: object, low: int, fix: str = "") -> int:
    """``value`` as an ``int >= low``; ``TypeError`` / ``ValueError`` naming ``name``, the value and ``fix``."""
    v = as_int(name, value)
    if v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}{fix}")
    return v
