"""Errors raised by the compilation front-ends (no torch)."""

from __future__ import annotations

__all__ = ["DimacsFormatError", "UnsatisfiableError"]


class UnsatisfiableError(ValueError):
    """The constraint has no model; pass ``allow_unsat=True`` to get a FALSE circuit instead."""


class DimacsFormatError(ValueError):
    """A malformed or truncated DIMACS CNF file; the message names ``file:line``."""
