"""DIMACS CNF: parsing and clause validation (no torch).

A CNF over ``n`` Boolean variables is a list of clauses, each a list of nonzero
ints: ``+i`` is the literal ``X_{i-1} = 1`` and ``-i`` is ``X_{i-1} = 0``
(DIMACS variables are 1-based, circuit positions 0-based).  The CNF is

    alpha(x) = AND_clauses OR_{l in clause} l(x)

an empty clause list is TRUE and an empty clause is FALSE.
:func:`pseudosl.compile_cnf` compiles one through PySDD.

Example:
    >>> parse_dimacs("p cnf 2 2\\n1 2 0\\n-1 -2 0\\n")
    (2, [[1, 2], [-1, -2]])
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import DimacsFormatError
from .checks import check_int, parse_int_token
from .formula import And, Formula, Not, Or, Var

__all__ = ["DimacsFormatError", "parse_dimacs", "normalize_clauses", "cnf_formula"]

_BOM = "\ufeff"


def parse_dimacs(path_or_text: str | Path) -> tuple[int, list[list[int]]]:
    """Parse a DIMACS CNF file (or its text) into ``(n_vars, clauses)``.

    A :class:`~pathlib.Path`, or a one-line ``str`` naming a file, is read from disk; a
    ``str`` with a newline (or starting with ``p cnf``) is parsed as the file's text.
    Comment lines (``c ...``) are skipped, a ``%`` line (SATLIB) ends the clauses and a UTF-8
    byte-order mark at the start is skipped.  Clauses may span lines and several may share a line;
    each ends with ``0``.  Numbers are read strictly (:func:`~pseudosl.logic.checks.parse_int_token`):
    ASCII digits, a ``-`` only on literals; ``+3``, ``1_0`` or a non-ASCII digit is an error, not 3 or 10.

    Raises:
        DimacsFormatError: naming ``file:line`` for a missing, malformed or duplicate
            ``p cnf`` header, a token that is not a (strict) integer, a variable outside ``1..n_vars``,
            a last clause without its terminating ``0``, or a clause count that differs
            from the header's (e.g. a truncated file).
    """
    if isinstance(path_or_text, Path) or ("\n" not in path_or_text
                                          and not path_or_text.lstrip(_BOM).lstrip().startswith("p cnf")):
        path = Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"no DIMACS file at {path} (to parse text, pass a str containing newlines)")
        name, text = str(path), _read_text(path)
    else:
        name, text = "<text>", path_or_text
    text = text.removeprefix(_BOM)  # editors on Windows start UTF-8 files with one
    n_vars = n_clauses = None
    header_line = 0
    clauses: list[list[int]] = []
    current: list[int] = []
    current_line = 0
    lineno = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        tok = line.split()
        if not tok or tok[0] == "c" or tok[0].startswith("c"):
            continue
        if tok[0] == "%":
            break
        if tok[0] == "p":
            if n_vars is not None:
                raise DimacsFormatError(f"{name}:{lineno}: second 'p cnf' header (the first is on line {header_line})")
            if len(tok) != 4 or tok[1] != "cnf":
                raise DimacsFormatError(f"{name}:{lineno}: malformed header {line.strip()!r}; "
                                        f"expected 'p cnf <n_vars> <n_clauses>' with non-negative integers")
            n_vars, n_clauses = (parse_int_token(t, f"{name}:{lineno}: malformed header {line.strip()!r}: {what}",
                                                 DimacsFormatError) for t, what in zip(tok[2:], ("<n_vars>", "<n_clauses>")))
            header_line = lineno
            continue
        if n_vars is None:
            raise DimacsFormatError(f"{name}:{lineno}: clause before the 'p cnf <n_vars> <n_clauses>' header")
        for t in tok:
            lit = parse_int_token(t, f"{name}:{lineno}: literal", DimacsFormatError, negative=True)
            if lit == 0:
                clauses.append(current)
                current = []
                continue
            if abs(lit) > n_vars:
                raise DimacsFormatError(f"{name}:{lineno}: literal {lit} is out of range: the header "
                                        f"declares variables 1..{n_vars}")
            if not current:
                current_line = lineno
            current.append(lit)
    if n_vars is None:
        raise DimacsFormatError(f"{name}: no 'p cnf <n_vars> <n_clauses>' header; is this a DIMACS CNF file?")
    if current:
        raise DimacsFormatError(f"{name}:{current_line}: the last clause {current} is not terminated by 0; truncated?")
    if len(clauses) != n_clauses:
        raise DimacsFormatError(f"{name}:{lineno}: the header (line {header_line}) declares {n_clauses} clauses "
                                f"but the file has {len(clauses)}" + ("; truncated?" if len(clauses) < n_clauses else ""))
    return n_vars, clauses


def normalize_clauses(clauses: Sequence[Sequence[int]], n_vars: int | None = None
                      ) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """Validate a clause list and return ``(n_vars, clauses as tuples of int)``.

    ``n_vars`` defaults to the largest variable mentioned; it must be ``>= 1``.
    """
    if isinstance(clauses, (str, bytes)) or not isinstance(clauses, Sequence):
        raise TypeError(f"clauses must be a list of lists of nonzero ints, got {type(clauses).__name__}")
    out = []
    largest = 0
    for i, clause in enumerate(clauses):
        if isinstance(clause, (str, bytes)) or not isinstance(clause, Sequence):
            raise TypeError(f"clause {i} must be a list of nonzero ints, got {type(clause).__name__} {clause!r}")
        lits = []
        for lit in clause:
            lit = check_int(f"clause {i} literal", lit)
            if lit == 0:
                raise ValueError(f"clause {i} contains 0; literals are nonzero (DIMACS variables are 1-based, "
                                 f"and the terminating 0 is not part of a clause list)")
            largest = max(largest, abs(lit))
            lits.append(lit)
        out.append(tuple(lits))
    if n_vars is None:
        n_vars = largest
        if n_vars < 1:
            raise ValueError("the clauses mention no variable; pass n_vars (>= 1) to size the circuit")
    elif (n_vars := check_int("n_vars", n_vars, 1, " (the number of variables)")) < largest:
        raise ValueError(f"the clauses use variable {largest} but n_vars={n_vars}; pass n_vars >= {largest}")
    return n_vars, tuple(out)


def cnf_formula(clauses: Sequence[Sequence[int]]) -> Formula:
    """The :class:`Formula` ``AND_c OR_{l in c} l`` of (validated) DIMACS clauses."""
    return And(*(Or(*(Var(l - 1) if l > 0 else Not(Var(-l - 1)) for l in c)) for c in clauses))


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DimacsFormatError(f"{path}: not a text DIMACS CNF file (byte {e.start} is not UTF-8 text); pass a "
                                f"'p cnf <n_vars> <n_clauses>' file, or a clause list") from None

