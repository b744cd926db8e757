"""compile_formula vs brute force; the formula front-end's API and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oracle
from checks import assert_matches_oracle, random_log_weights
from pseudosl import compile_formula, variables
from pseudosl.logic.errors import UnsatisfiableError
from pseudosl.logic.formula import And, Not, Or, Var, false, iff, implies, true

N = 5


def formulas(n: int = N):
    leaves = st.one_of(st.integers(0, n - 1).map(Var), st.sampled_from([true, false]))

    def extend(kids):
        return st.one_of(
            kids.map(Not), kids.map(lambda f: ~f),
            st.lists(kids, max_size=3).map(lambda fs: And(*fs)),
            st.lists(kids, max_size=3).map(lambda fs: Or(*fs)),
            st.tuples(kids, kids).map(lambda ab: ab[0] & ab[1]),
            st.tuples(kids, kids).map(lambda ab: ab[0] | ab[1]),
            st.tuples(kids, kids).map(lambda ab: implies(*ab)),
            st.tuples(kids, kids).map(lambda ab: ab[0].iff(ab[1])),
        )
    return st.recursive(leaves, extend, max_leaves=10)


@given(st.lists(formulas(), min_size=1, max_size=3), st.integers(0, 2**31 - 1))
def test_random_formulas_match_oracle(fs, seed):
    truths = [oracle.truth_of(f.evaluate, N, 2) for f in fs]
    c = compile_formula(fs, N, allow_unsat=True, cache=False)
    assert (c.n_vars, c.n_roots) == (N, len(fs))
    c.check()
    np.testing.assert_array_equal(c.dag.evaluate(oracle.assignments(N, 2)), np.stack(truths, 1))
    assert_matches_oracle(c, truths, random_log_weights(seed, 3, N, 2, normalised=seed % 2 == 0))


def test_connectives_semantics():
    a, b, c = variables(3)
    cases = {
        a & b: lambda y: y[0] and y[1], a | ~b: lambda y: y[0] or not y[1],
        a.implies(b): lambda y: (not y[0]) or y[1], iff(a, c): lambda y: y[0] == y[2],
        Not(a & b & c): lambda y: not (y[0] and y[1] and y[2]), And(): lambda y: True, Or(): lambda y: False,
    }
    for f, pred in cases.items():
        for y in oracle.assignments(3, 2):
            assert f.evaluate(y) == bool(pred(y)), f


def test_structure_and_equality():
    a, b, c = variables(3)
    assert (a & b & c).args == (a, b, c)  # flattened
    assert a & b == Var(0) & Var(1) and hash(a & b) == hash(Var(0) & Var(1))
    assert ~~a == a and Not(true) == false and (a & false) == false and (a | true) == true
    assert (a & true) == a
    assert variables(2, start=3) == (Var(3), Var(4))


def test_multi_root_and_n_vars():
    a, b = variables(2)
    circuit = compile_formula([a, a.implies(b)], n_vars=4, cache=False)
    assert (circuit.n_vars, circuit.n_roots) == (4, 2)
    x = random_log_weights(0, 2, 4, 2, normalised=True)
    assert circuit.log_prob(x).shape == (2, 2)
    assert compile_formula(a & b, cache=False).n_vars == 2
    with pytest.raises(ValueError, match="n_vars"):
        compile_formula(true, cache=False)
    with pytest.raises(ValueError, match="n_vars >= 2"):
        compile_formula(b, n_vars=1, cache=False)


def test_unsat():
    a, b = variables(2)
    with pytest.raises(UnsatisfiableError, match="root 1"):
        compile_formula([a, b & ~b], cache=False)
    c = compile_formula([a, b & ~b], allow_unsat=True, cache=False)
    assert c.dag.is_false(1) and not c.dag.is_false(0)


@pytest.mark.parametrize("make", [lambda a: a & 1, lambda a: True | a, lambda a: a.implies("b"),
                                  lambda a: And(a, None), lambda a: Not(0), lambda a: iff(a, 2.0)])
def test_type_errors(make):
    with pytest.raises(TypeError, match="expected a Formula"):
        make(Var(0))


def test_misuse_errors():
    with pytest.raises(TypeError, match="no truth value"):
        bool(Var(0))
    with pytest.raises(ValueError, match="0-based"):
        Var(-1)
    with pytest.raises(TypeError):
        Var(1.0)
    with pytest.raises(TypeError, match="not a Formula"):
        compile_formula([Var(0), 3], cache=False)
    with pytest.raises(AttributeError):
        Var(0).index = 2
