"""The library's named errors and its size limits (no torch).

:class:`PseudoslError` is the base of every error the library names (the bottom layer defines it, so that every
layer above can derive from it; :mod:`pseudosl.errors` re-exports it with the command line's errors).  Each also
derives from the built-in type callers already catch, and its message names the argument or file, the value
and the fix:

* :class:`CircuitError`: a circuit violates a structural property (a non-decomposable AND,
  an OR whose children can both hold, a cycle, an out-of-range id, ...);
* :class:`SizeLimitError`: an input would build something larger than a limit the caller
  can raise (``max_vars``, ``max_nodes``, ``max_edges``), refused before the work;
* :class:`DimacsFormatError`, :class:`SddFormatError`, :class:`CircuitFormatError`: malformed,
  truncated or tampered DIMACS, ``.sdd``/``.vtree`` and saved-circuit (``.npz``) files;
* :class:`UnsatisfiableError`: the constraint has no model.

The checks that raise them live in :mod:`pseudosl.logic.checks`.
"""

from __future__ import annotations

__all__ = ["PseudoslError", "CircuitError", "CircuitFormatError", "DimacsFormatError", "SddFormatError",
           "SizeLimitError", "UnsatisfiableError", "DEFAULT_MAX_VARS", "DEFAULT_MAX_NODES", "DEFAULT_MAX_EDGES",
           "VARS_CEILING", "STATES_CEILING"]

DEFAULT_MAX_VARS = 100_000
"""Default ``max_vars`` of the front-ends: a circuit holds two leaves per Boolean variable, and a root
smoothed over 10^5 variables is already a 10^5-child node; the limit catches typos such as ``Var(10**6)``
or ``p cnf 2000000000 1`` before they take the machine's memory."""

VARS_CEILING = 2**31 - 1
"""The most variables any front-end or loader takes, even with ``max_vars=None``: beyond it PySDD's
integers overflow, and the two leaves per variable alone would take over 400 GB."""

STATES_CEILING = 2**31 - 1
"""The most states an automaton (:class:`~pseudosl.logic.automaton.DFA`, :class:`~pseudosl.logic.automaton.SparseDFA`)
takes: its per-state tables (the default row of each state, the live states) alone would take over 16 GB."""

DEFAULT_MAX_NODES = 20_000_000
"""Default ``max_nodes``: nodes held by PySDD while compiling, by a :class:`CircuitBuilder`, or the
states of :func:`~pseudosl.logic.simpath.simple_path_dag` (the unbounded 12 x 12 grid: 9.7M nodes)."""

DEFAULT_MAX_EDGES = 20_000_000
"""Default ``max_edges`` of the automaton compilers: estimated circuit edges (or DFA table entries),
each ~100 bytes while building; the limit is about 2 GB."""


class PseudoslError(Exception):
    """A failure the user can fix; the message says what, where and how."""


class CircuitError(PseudoslError, ValueError):
    """A circuit violates a structural property (decomposability, determinism, smoothness, ids)."""


class SizeLimitError(PseudoslError, ValueError):
    """An input would build something larger than a limit (``max_vars``, ``max_nodes``, ``max_edges``);
    the message names the limit and how to raise it."""


class UnsatisfiableError(PseudoslError, ValueError):
    """The constraint has no model (the compilers: pass ``allow_unsat=True`` to get a FALSE circuit instead), or,
    in :func:`pseudosl.generation.constrained_sample`, no model the model gives probability above 0."""


class DimacsFormatError(PseudoslError, ValueError):
    """A malformed or truncated DIMACS CNF file; the message names ``file:line``."""


class SddFormatError(PseudoslError, ValueError):
    """A malformed, truncated or inconsistent ``.sdd`` / ``.vtree`` file; the message names ``file:line``."""


class CircuitFormatError(PseudoslError, ValueError):
    """A saved circuit (``.npz``) that is not one: truncated, tampered, or saved under another cache key."""
