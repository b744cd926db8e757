"""Node kinds and variable bitsets, shared by every maker and reader of circuits (no torch).

A circuit's node has one of four kinds: a literal ``[X_v = c]`` (:data:`LIT`), an AND (product,
:data:`AND`), an OR (sum, :data:`OR`) or a constant (:data:`CONST`: value 0 = FALSE, 1 = TRUE).  The
builder and the frozen :class:`~pseudosl.logic.dag.Dag` put the constants first, so node :data:`FALSE`
is 0 and node :data:`TRUE` is 1.  Sets of variables are Python ints used as bitsets (bit ``v`` = ``X_v``).

Example:
    >>> bits(0b1010)
    [1, 3]
"""

from __future__ import annotations

__all__ = ["LIT", "AND", "OR", "CONST", "FALSE", "TRUE", "bits"]

LIT, AND, OR, CONST = 0, 1, 2, 3
"""The node kinds (``Dag.kind`` holds them)."""

FALSE = 0
"""The id of the constant FALSE (and the value of a FALSE constant node)."""
TRUE = 1
"""The id of the constant TRUE (and the value of a TRUE constant node)."""


def bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, lowest first (the variables of a bitset)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
