"""Built-in constraints vs brute force; the 27-root Sudoku all_different circuit."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from assertions import assert_matches_oracle, random_log_weights
from pseudosl import CircuitBuilder, Circuit
from pseudosl.constraints import (all_different, at_most_k, compile_all_different, compile_at_most_k,
                                  compile_exactly_k, compile_exactly_one, exactly_k, exactly_one)


@st.composite
def groups(draw, n):
    return draw(st.lists(st.permutations(range(n)).flatmap(
        lambda p: st.integers(0, n).map(lambda m: p[:m])), min_size=1, max_size=3))


@given(st.integers(1, 6).flatmap(lambda n: st.tuples(st.just(n), groups(n))), st.integers(0, 7),
       st.integers(0, 2**31 - 1))
def test_counting_constraints_match_oracle(n_groups, k, seed):
    n, gs = n_groups
    x = random_log_weights(seed, 2, n, 2, normalised=seed % 2 == 0)
    cases = [
        (compile_exactly_one(n, gs), lambda g, y: sum(y[v] for v in g) == 1),
        (compile_exactly_k(n, gs, k), lambda g, y: sum(y[v] for v in g) == k),
        (compile_at_most_k(n, gs, k), lambda g, y: sum(y[v] for v in g) <= k),
    ]
    for circuit, pred in cases:
        circuit.check()
        truths = [oracle.truth_of(lambda y, g=g: pred(g, y), n, 2) for g in gs]
        assert_matches_oracle(circuit, truths, x)


@given(st.integers(1, 4), st.integers(2, 4), st.data())
def test_all_different_matches_oracle(n, k, data):
    gs = data.draw(groups(n))
    values = data.draw(st.none() | st.lists(st.integers(0, k - 1), min_size=1, unique=True))
    allowed = set(range(k)) if values is None else set(values)
    circuit = compile_all_different(n, k, gs, values)
    circuit.check()
    truths = [oracle.truth_of(lambda y, g=g: len({y[p] for p in g}) == len(g) and all(y[p] in allowed for p in g),
                              n, k) for g in gs]
    assert_matches_oracle(circuit, truths, random_log_weights(data.draw(st.integers(0, 999)), 2, n, k, True))


def test_constraints_share_one_builder():
    b = CircuitBuilder(5)
    disjoint = b.and_(exactly_one(b, [0, 1]), at_most_k(b, [2, 3, 4], 1))
    c = Circuit(b.build([disjoint, exactly_k(b, [1, 2], 1)]))  # overlapping constraints: separate roots
    c.check()
    truths = [oracle.truth_of(lambda y: y[0] + y[1] == 1 and y[2] + y[3] + y[4] <= 1, 5, 2),
              oracle.truth_of(lambda y: y[1] + y[2] == 1, 5, 2)]
    assert_matches_oracle(c, truths, random_log_weights(0, 3, 5, 2, False))


def test_edge_cases():
    b = CircuitBuilder(3, 2)
    assert exactly_k(b, [0, 1], 3) == b.false()
    assert at_most_k(b, [0, 1], 2) == b.true()
    assert exactly_k(b, [], 0) == b.true() and exactly_one(b, []) == b.false()
    c = CircuitBuilder(3, 2)
    assert all_different(c, [0, 1, 2], values=[0, 1]) == c.false()
    assert c.build([all_different(c, [0])]).evaluate(oracle.assignments(3, 2)).all()


@pytest.mark.parametrize("call, err, match", [
    (lambda b: exactly_one(b, [0, 0]), ValueError, "listed twice"),
    (lambda b: exactly_one(b, [0, 7]), ValueError, "variable 7 is out of range"),
    (lambda b: exactly_k(b, [0, 1], -1), ValueError, "k must be >= 0"),
    (lambda b: at_most_k(b, [0, 1], 1.5), TypeError, "k must be an int"),
    (lambda b: exactly_one(b, 3), TypeError, "sequence"),
    (lambda b: exactly_one(CircuitBuilder(2, 3), [0, 1]), ValueError, "n_values=3"),
    (lambda b: all_different(b, [0, 1], values=[0, 5]), ValueError, "value 5 is out of range"),
])
def test_errors(call, err, match):
    with pytest.raises(err, match=match):
        call(CircuitBuilder(3, 2))


# -- Sudoku: 27 all_different groups over 81 cells with 9 values ------------------------------------
ROWS = [[9 * r + c for c in range(9)] for r in range(9)]
COLS = [[9 * r + c for r in range(9)] for c in range(9)]
BOXES = [[9 * (3 * br + r) + 3 * bc + c for r in range(3) for c in range(3)] for br in range(3) for bc in range(3)]
GROUPS = ROWS + COLS + BOXES


@pytest.fixture(scope="module")
def sudoku():
    start = time.perf_counter()
    circuit = compile_all_different(81, 9, GROUPS)
    return circuit, time.perf_counter() - start


def test_sudoku_circuit_shape(sudoku):
    circuit, _ = sudoku  # (build time is measured by benchmarks, never asserted in tests)
    assert circuit.n_roots == 27 and circuit.n_vars == 81 and circuit.n_values == 9


def test_sudoku_one_hot_grids(sudoku):
    circuit, _ = sudoku
    rng = np.random.default_rng(0)
    base = np.array([[(3 * (r % 3) + r // 3 + c) % 9 for c in range(9)] for r in range(9)])
    grids = [base, base[:, [2, 0, 1, 3, 4, 5, 8, 7, 6]]]  # the pattern; permuting columns within stacks
    relabel = rng.permutation(9)
    grids.append(relabel[base])  # relabelling values keeps a solution valid
    grids.append(base[[1, 0, 2, 3, 4, 5, 6, 7, 8]])  # swapping rows within a band keeps it valid
    broken = base.copy()
    broken[0, 0], broken[0, 1] = broken[0, 1], broken[0, 0]  # breaks two columns, keeps the row
    grids.append(broken)
    grids += [rng.integers(0, 9, (9, 9)) for _ in range(3)]
    y = np.stack([g.reshape(81) for g in grids])  # (B, 81)
    x = torch.log(torch.nn.functional.one_hot(torch.as_tensor(y), 9).double())  # 0 / -inf
    lp = circuit.log_prob(x)  # (B, 27)
    want = np.array([[len(set(yy[g])) == 9 for g in GROUPS] for yy in y])
    assert want[:4].all() and not want[4].all()
    np.testing.assert_array_equal((lp == 0).numpy(), want)
    np.testing.assert_array_equal(torch.isneginf(lp).numpy(), ~want)


def test_sudoku_uniform_probability(sudoku):
    circuit, _ = sudoku
    x = torch.full((1, 81, 9), -np.log(9.0), dtype=torch.float64)
    from math import factorial, log
    torch.testing.assert_close(circuit.log_prob(x), torch.full((1, 27), log(factorial(9)) - 9 * log(9),
                                                                  dtype=torch.float64))
