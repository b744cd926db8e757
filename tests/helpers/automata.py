"""Random DFAs (a hypothesis strategy) and their direct simulation."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from pseudosl import DFA


@st.composite
def dfas(draw):
    n_states = draw(st.integers(1, 4))
    k = draw(st.integers(2, 3))
    delta = np.array(draw(st.lists(st.integers(0, n_states - 1), min_size=n_states * k,
                                   max_size=n_states * k))).reshape(n_states, k)
    accepting = draw(st.frozensets(st.integers(0, n_states - 1)))
    return DFA(n_states, k, draw(st.integers(0, n_states - 1)), accepting, delta)


def simulate(delta, start, accepting, word) -> bool:
    s = start
    for c in word:
        s = delta[s][c]
    return s in accepting
