"""The argument checks every layer shares, without torch (the tensor checks are in :mod:`pseudosl.checks`, which
re-exports these).

:func:`check_int` is the one check of an int argument and :func:`check_bool` the one check of a switch (nothing is
read by its truth value: ``"False"`` is not False); :func:`parse_int_token` is the one reader of an integer token of
a text file; :func:`check_limit` / :func:`check_vars` refuse a size above a limit before the work.  Each raises
``TypeError`` / ``ValueError`` (or a :class:`~pseudosl.logic.errors.SizeLimitError`) naming the argument, the value
and the fix.
"""

from __future__ import annotations

import operator
from typing import Iterable, Sequence

import numpy as np

from .errors import VARS_CEILING, SizeLimitError

__all__ = ["check_int", "check_bool", "parse_int_token", "check_limit", "check_vars", "check_states", "check_word",
           "as_array", "check_int_array",
           "check_in_range"]


def check_int(name: str, value: object, low: int | None = None, fix: str = "", *, high: int | None = None) -> int:
    """``value`` as an ``int`` (``>= low`` and ``<= high`` when given): the library's one check of an int argument.

    Takes Python ints, NumPy integer scalars and 0-d integer arrays or tensors; refuses bools, floats
    (even ``2.0``: a float that happens to be whole is still a likely mistake, and truncating ``1.7`` to 1
    would be a silent wrong answer), strings and arrays with more than one element.  ``TypeError`` /
    ``ValueError`` naming ``name``, the value and the fix (``fix`` adds to the ``ValueError``'s).

    Example:
        >>> check_int("k", 3, low=1)
        3
        >>> check_int("k", 1.7)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: k must be an int, got float 1.7; pass an int (convert it explicitly, e.g. round(x), ...)
    """
    if type(value) is int:  # the common case first
        v = value
    else:
        if isinstance(value, bool) or "bool" in str(getattr(value, "dtype", "")):
            raise TypeError(f"{name} must be an int, got the bool {value!r}; pass 0 or 1 as an int if you mean a number")
        try:
            if getattr(value, "ndim", 0) != 0:  # a torch tensor of one element would pass operator.index
                raise TypeError
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}; pass an int (convert it "
                            f"explicitly, e.g. round(x), if you mean a whole number)") from None
    if low is not None and v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}{fix}")
    if high is not None and v > high:
        raise ValueError(f"{name} must be <= {high:,}, got {v:,}{fix}")
    return v


def check_bool(name: str, value: object, none: str = "") -> bool | None:
    """``value`` as a switch: ``True`` or ``False`` (a Python or NumPy bool), or ``None`` where ``none`` says what
    ``None`` means; the library's one check of a switch.

    Anything else is a ``TypeError`` naming ``name`` and the value: a string ``"False"`` is truthy, ``0`` / ``1``
    and ``None`` would be read by their truth value, so none of them is taken for a bool.

    Example:
        >>> check_bool("negate", True)
        True
        >>> check_bool("recompute", None, none="planned") is None
        True
        >>> check_bool("negate", "False")
        Traceback (most recent call last):
        ...
        TypeError: negate must be True or False, got str 'False'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and none:
        return None
    allowed = f"True, False or None ({none})" if none else "True or False"
    raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} {value!r}")


def parse_int_token(token: str, where: str, error: type[ValueError], *, negative: bool = False) -> int:
    """The integer a token of a text file (DIMACS, ``.sdd``, ``.vtree``) spells, read strictly.

    ASCII digits ``0-9``, after one ``-`` only where ``negative`` (no ``+``, no ``_`` as in ``1_0``,
    no other Unicode digits such as ``\u0663``, which Python's ``int()`` would take); else ``error``
    naming ``where`` (``"file:line: what"``) and the token.

    Example:
        >>> parse_int_token("-12", "f.cnf:3: literal", ValueError, negative=True)
        -12
        >>> parse_int_token("1_0", "f.cnf:1: the header's n_vars", ValueError)
        Traceback (most recent call last):
        ...
        ValueError: f.cnf:1: the header's n_vars: expected a non-negative integer, got '1_0' (ASCII digits 0-9 only)
    """
    digits = token[1:] if negative and token[:1] == "-" else token
    if not (digits.isascii() and digits.isdigit()):
        kind, rule = ("an integer", "ASCII digits 0-9 after an optional '-'") if negative else \
            ("a non-negative integer", "ASCII digits 0-9 only")
        raise error(f"{where}: expected {kind}, got {token!r} ({rule})")
    try:
        return int(token)
    except ValueError:  # more digits than int() converts (4300): no count or id of a file is that long
        raise error(f"{where}: the number {token[:20]}... has {len(digits)} digits; no count or id has "
                    f"that many") from None


def check_limit(what: str, size: int, limit: int | None, limit_name: str, why: str = "") -> None:
    """Raise :class:`~pseudosl.logic.errors.SizeLimitError` when ``size > limit`` (``limit=None`` is no limit).

    ``what`` names the quantity and where it comes from (``"the DIMACS header of f.cnf declares
    ... variables"`` reads as ``what = "the DIMACS header of f.cnf declares"``); ``limit_name`` is the
    keyword that raises the limit; ``why`` says what the size would cost.
    """
    if limit is None:
        return
    limit = check_int(limit_name, limit, 1, " (or None for no limit)")
    if size > limit:
        raise SizeLimitError(f"{what} {size:,}, above {limit_name}={limit:,}{why}; pass {limit_name}= a larger "
                             f"value (or None) if you mean it")


def check_vars(what: str, n_vars: int, max_vars: int | None, why: str = "") -> None:
    """:func:`check_limit` of ``max_vars``, then the hard :data:`~pseudosl.logic.errors.VARS_CEILING` that
    ``max_vars=None`` does not lift."""
    check_limit(what, n_vars, max_vars, "max_vars", why)
    if n_vars > VARS_CEILING:
        raise SizeLimitError(f"{what} {n_vars:,}, beyond the {VARS_CEILING:,} variables any circuit can hold even "
                             f"with max_vars=None (two leaves per variable); use fewer variables")


def check_states(name: str, states: Iterable[int], n_states: int) -> frozenset[int]:
    """``states`` as a frozenset of ints, each a state ``0 .. n_states-1``."""
    try:
        listed = list(states)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of int states, got {states!r}") from None
    out = frozenset(check_int(f"{name} state", s) for s in listed)
    bad = sorted(s for s in out if not 0 <= s < n_states)
    if bad:
        raise ValueError(f"{name} state {bad[0]} is out of range 0..{n_states - 1}")
    return out


def check_word(word: Sequence[int], n_values: int) -> list[int]:
    """``word``'s values as ints, each checked to lie in ``0 .. n_values-1`` (a negative one would index from the end)."""
    values = [check_int(f"word[{i}]", c, 0) for i, c in enumerate(word)]
    bad = [c for c in values if c >= n_values]
    if bad:
        raise ValueError(f"word holds value {bad[0]}, outside the automaton's values 0..{n_values - 1}")
    return values


def as_array(name: str, value: object) -> np.ndarray:
    """``np.asarray(value)``, a ragged nesting of lists (rows of different lengths) refused by name."""
    try:
        return np.asarray(value)
    except ValueError:  # NumPy refuses a ragged nesting ("inhomogeneous shape")
        raise ValueError(f"{name} must be a rectangular array; got rows of different lengths") from None


def check_int_array(name: str, value: object, shape: tuple[int | None, ...]) -> np.ndarray:
    """``value`` as an int64 array of ``shape`` (``None``: any length on that axis; ragged rows refused by name)."""
    a = as_array(name, value)
    if a.size == 0:
        a = a.astype(np.int64).reshape([0 if n is None else n for n in shape])
    if a.ndim != len(shape) or any(n is not None and n != m for n, m in zip(shape, a.shape)):
        want = str(tuple("rows" if n is None else n for n in shape)).replace("'", "")
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    return np.array(a, dtype=np.int64)


def check_in_range(name: str, a: np.ndarray, n: int) -> None:
    """Every entry of ``a`` lies in ``0 .. n-1``."""
    bad = np.flatnonzero((a < 0) | (a >= n))
    if bad.size:
        raise ValueError(f"{name} holds {int(a.reshape(-1)[bad[0]])}, outside 0..{n - 1}")
