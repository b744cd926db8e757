"""Categorical formulas (``pseudosl.positions``, ``pseudosl.compile_categorical``) against brute-force enumeration."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

import oracle
from tolerances import ATOL64, RTOL64, ATOL64_FEW_OPS
import pseudosl
from pseudosl.logic.categorical import CategoricalSizeError, CatFormula, all_of, any_of, positions


def _random_formula(rng: random.Random, y: list, depth: int) -> CatFormula:
    k = y[0].n_values
    if depth == 0 or rng.random() < 0.3:
        i, j = rng.randrange(len(y)), rng.randrange(len(y))
        kind = rng.randrange(5)
        if kind == 0:
            return y[i] == rng.randrange(k)
        if kind == 1:
            return y[i] != rng.randrange(k)
        if kind == 2:
            return y[i].isin(rng.sample(range(k), rng.randint(0, k)))
        return y[i] == y[j] if kind == 3 else y[i] != y[j]
    parts = [_random_formula(rng, y, depth - 1) for _ in range(rng.randint(1, 3))]
    op = rng.randrange(5)
    if op == 0:
        return all_of(parts)
    if op == 1:
        return any_of(parts)
    if op == 2:
        return ~parts[0]
    if op == 3:
        return parts[0].implies(parts[-1])
    return parts[0].iff(parts[-1])


@given(n=st.integers(1, 4), k=st.integers(2, 4), seed=st.integers(0, 10**6))
def test_random_formulas_match_enumeration(n, k, seed):
    rng = random.Random(seed)
    y = positions(n, k)
    formulas = [_random_formula(rng, y, 3) for _ in range(2)]
    truths = [oracle.truth_of(f.evaluate, n, k) for f in formulas]
    circuit = pseudosl.compile_categorical(formulas, n, n_values=k, allow_unsat=True, cache=False)
    assert circuit.n_roots == 2 and circuit.n_vars == n and circuit.n_values == k
    x = torch.randn(3, n, k, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    got = circuit.log_prob(x)
    for r, truth in enumerate(truths):
        torch.testing.assert_close(got[:, r], oracle.log_wmc(truth, x), atol=ATOL64, rtol=RTOL64)
    ys = torch.as_tensor(oracle.assignments(n, k))
    sat = pseudosl.sample_satisfies(pseudosl.Circuit(circuit.dag), ys) if all(t.any() for t in truths) else None
    if sat is not None:
        assert sat.tolist() == (truths[0] & truths[1]).tolist()


def test_adjacent_different_is_small_and_exact():
    n, k = 6, 3
    y = pseudosl.positions(n, k)
    alpha = all_of(y[i] != y[i + 1] for i in range(n - 1))
    circuit = pseudosl.compile_categorical(alpha, cache=False)
    assert circuit.log_prob(torch.zeros(1, n, k)).exp().item() == pytest.approx(96)  # 3 * 2**5 models
    truth = oracle.truth_of(lambda a: all(a[i] != a[i + 1] for i in range(n - 1)), n, k)
    x = torch.randn(2, n, k, dtype=torch.float64)
    torch.testing.assert_close(circuit.log_prob(x), oracle.log_wmc(truth, x))
    long = pseudosl.positions(200, 5)
    big = pseudosl.compile_categorical(all_of(long[i] != long[i + 1] for i in range(199)), cache=False)
    assert big.n_nodes < 200 * 5 * 10  # O(n k) decision nodes: residuals repeat


def test_value_sets_and_mixed_atoms():
    y = positions(3, 4)
    f = y[0].isin({0, 1}) & (y[1] == y[2]) & ~(y[2] == 3) | (y[0] == 3).implies(y[1] != 0)
    truth = oracle.truth_of(f.evaluate, 3, 4)
    circuit = pseudosl.compile_categorical(f, cache=False)
    x = torch.randn(4, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(circuit.log_prob(x), oracle.log_wmc(truth, x))
    assert repr(y[1] != 2) == "y[1] in {0, 1, 3}" and repr(y[2] == y[0]) == "y[0] == y[2]"


def test_canonical_text_does_not_depend_on_the_order_of_construction():
    """The text and the cache key (a digest) are canonical: children sorted, not in (hash-seeded) set order."""
    y = positions(4, 3)
    parts = [y[0] != y[1], y[2].isin({0, 2}) | (y[3] == y[1]), ~(y[1] == 2), (y[3] == 0).implies(y[2] == y[0])]
    orders = (parts, parts[::-1], parts[1:] + parts[:1])
    assert len({all_of(p).digest() for p in orders}) == 1
    texts = {repr(all_of(p)) for p in orders}
    assert texts == {"((y[0] == y[2] | y[3] in {1, 2}) & (y[1] == y[3] | y[2] in {0, 2}) & y[0] != y[1] & "
                     "y[1] in {0, 1})"}


def test_errors_are_named():
    y = positions(3, 3)
    with pytest.raises(TypeError, match="combine formulas with &"):
        y[0] != y[1] != y[2]  # noqa: B015  (a chain keeps only its last comparison in Python)
    with pytest.raises(TypeError, match="no truth value"):
        bool(y[0])
    with pytest.raises(ValueError, match=r"value 3 of y\[1\] is out of range 0\.\.2"):
        y[1] == 3  # noqa: B015
    with pytest.raises(ValueError, match="has 3 values but y.0. has 4"):
        y[1] == positions(1, 4)[0]  # noqa: B015
    with pytest.raises(ValueError, match=r"mentions y\[2\] but the circuit has positions 0\.\.1"):
        pseudosl.compile_categorical(y[2] == 1, 2, cache=False)
    with pytest.raises(pseudosl.logic.errors.UnsatisfiableError, match="unsatisfiable"):
        pseudosl.compile_categorical((y[0] == 1) & (y[0] == 2), 3, n_values=3, cache=False)  # FALSE once built
    with pytest.raises(TypeError, match="not a categorical formula"):
        pseudosl.compile_categorical([y[0] == 1, pseudosl.variables(1)[0]], cache=False)
    with pytest.raises(TypeError, match="expected a categorical formula"):
        (y[0] == 1) & True  # noqa: B015
    many = positions(12, 12)
    with pytest.raises(CategoricalSizeError, match="max_nodes=2000"):
        pseudosl.compile_categorical(all_of(many[i] != many[j] for i in range(12) for j in range(i)),
                                     max_nodes=2000, cache=False)


@st.composite
def contradictions(draw):
    """``(n, k, formula)``: a formula that simplifies to FALSE when written, in one of several ways."""
    n, k = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    y = positions(n, k)
    i, j, c = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.integers(0, k - 1))
    some = draw(st.sets(st.integers(0, k - 1), min_size=1, max_size=k - 1))
    return n, k, draw(st.sampled_from([
        (y[i] == c) & (y[i] != c), y[i].isin(set()), y[i].isin(some) & ~y[i].isin(some), ~(y[i] == y[i]),
        all_of([y[j] != y[i], (y[i] == c) & (y[i] == (c + 1) % k)]), any_of([]), (y[i] == c).iff(y[i] != c)]))


@given(contradictions(), st.booleans(), st.integers(0, 2**31 - 1))
def test_a_formula_that_simplifies_to_false_is_unsatisfiable(contradiction, in_a_list, seed):
    """It was "pass n_positions" (FALSE mentions no position): now UnsatisfiableError naming the formula, or with
    allow_unsat (and the sizes) the FALSE circuit, log_prob -inf as the brute force says."""
    n, k, false = contradiction
    y = positions(n, k)
    formulas = [y[n - 1] != 0, false] if in_a_list else false
    which = r" \(formula 1\)" if in_a_list else ""
    for sizes in ({}, {"n_positions": n, "n_values": k}):
        with pytest.raises(pseudosl.logic.errors.UnsatisfiableError,
                           match=rf"the categorical formula{which} is unsatisfiable: it simplifies to FALSE"):
            pseudosl.compile_categorical(formulas, **sizes, cache=False)
    circuit = pseudosl.compile_categorical(formulas, n, n_values=k, allow_unsat=True, cache=False)
    assert circuit.dag.is_false(circuit.n_roots - 1)
    x = torch.randn(2, n, k, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    truth = oracle.truth_of(false.evaluate, n, k)
    assert not truth.any()
    torch.testing.assert_close(circuit.log_prob(x)[..., -1] if in_a_list else circuit.log_prob(x),
                               oracle.log_wmc(truth, x))
    if not in_a_list:
        with pytest.raises(ValueError, match="simplify to TRUE or FALSE and mention no position; pass n_positions"):
            pseudosl.compile_categorical(false, allow_unsat=True, cache=False)


def test_one_constraint_three_ways():
    """"No two adjacent positions equal", written as a formula, with the builder and as an automaton: one circuit
    function (the same probability under any weights)."""
    n, k = 5, 3
    y = pseudosl.positions(n, k)
    formula = pseudosl.compile_categorical(all_of(y[i] != y[i + 1] for i in range(n - 1)), cache=False)
    b = pseudosl.CircuitBuilder(n, k)
    after = {c: b.true() for c in range(k)}  # after[c]: "positions i.. differ pairwise-adjacently, given y_{i-1} = c"
    for i in reversed(range(1, n)):
        after = {c: b.or_(*(b.and_(b.literal(i, d), after[d]) for d in range(k) if d != c)) for c in range(k)}
    builder = pseudosl.Circuit(b.build(b.or_(*(b.and_(b.literal(0, c), after[c]) for c in range(k)))))
    # states: 0 = start, 1 + c = "last value c"; no transition repeats the last value (missing = rejecting)
    edges = [(0, c, 1 + c) for c in range(k)] + [(1 + c, d, 1 + d) for c in range(k) for d in range(k) if d != c]
    automaton = pseudosl.compile_automaton(pseudosl.DFA.from_transitions(k + 1, k, 0, range(1, k + 1), edges), n,
                                           cache=False)
    x = torch.randn(6, n, k, dtype=torch.float64)
    want = oracle.log_wmc(oracle.truth_of(lambda a: all(a[i] != a[i + 1] for i in range(n - 1)), n, k), x)
    for circuit in (formula, builder, automaton):
        torch.testing.assert_close(circuit.log_prob(x), want)
    assert np.isclose(formula.log_prob(torch.zeros(1, n, k)).exp().item(), k * (k - 1) ** (n - 1))


def test_shared_subformulas_are_walked_once():
    """Issue 19: a chain of iff repeats each subformula twice per level (2^n paths, 6n distinct nodes);
    negation, evaluation, the text and the cache key visit each distinct subformula once."""
    y = positions(16, 2)

    def chain():
        f = y[0] == 1
        for i in range(1, 16):
            f = f.iff(y[i] == 1)
        return f

    f = chain()
    assert len(repr(f)) <= 2010  # the text is cut, not 2^16 atoms long
    assert f.digest() == chain().digest() != (~f).digest()
    ones = [1] * 16
    assert f.evaluate(ones) and not f.evaluate(ones[:-1] + [0]) and (~f).evaluate(ones[:-1] + [0])
    c = pseudosl.compile_categorical(f, cache=False)
    p = torch.rand(16, dtype=torch.float64).clamp(0.05, 0.95)
    want = p[0]
    for i in range(1, 16):  # P(f_i) = P(f_{i-1}) p_i + (1 - P(f_{i-1})) (1 - p_i)
        want = want * p[i] + (1 - want) * (1 - p[i])
    x = torch.stack([(1 - p).log(), p.log()], -1)[None]
    torch.testing.assert_close(c.log_prob(x).exp()[0], want, atol=ATOL64_FEW_OPS, rtol=0)


def test_positions_are_made_when_indexed():
    y = pseudosl.positions(2**70, 3)  # no memory for 2^70 positions is taken
    assert len(pseudosl.positions(5, 3)) == 5 and repr(y[-1]) == f"y[{2**70 - 1}]" and y[3].n_values == 3
    assert [repr(p) for p in pseudosl.positions(5, 3)[1:3]] == ["y[1]", "y[2]"]
    assert [repr(p) for p in pseudosl.positions(3, 3)] == ["y[0]", "y[1]", "y[2]"]
    for bad in (2**70, -2**70 - 1):
        with pytest.raises(IndexError, match=r"out of range: these positions are y\[0\] \.\. "
                                             r"y\[1180591620717411303423\]"):
            y[bad]
    with pytest.raises(TypeError, match="a position index must be an int, got str"):
        y["a"]
    with pytest.raises(ValueError, match="n_values must be >= 2, got 1"):
        pseudosl.positions(3, 1)
