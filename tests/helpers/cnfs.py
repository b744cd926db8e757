"""Random CNFs (a hypothesis strategy) and their direct evaluation."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def cnfs(draw):
    n = draw(st.integers(1, 6))
    lit = st.integers(1, n).flatmap(lambda v: st.sampled_from([v, -v]))
    clauses = draw(st.lists(st.lists(lit, min_size=0, max_size=4), max_size=8))
    return n, clauses


def satisfies(clauses, y) -> bool:
    return all(any((y[abs(l) - 1] == 1) == (l > 0) for l in c) for c in clauses)
