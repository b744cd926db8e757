"""compile_formula vs brute force; the formula front-end's API and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from tolerances import ATOL64_FEW_OPS
from assertions import assert_matches_oracle, random_log_weights
from pseudosl import compile_formula, variables
from pseudosl.logic.errors import SizeLimitError, UnsatisfiableError
from pseudosl.logic.formula import And, Not, Or, Var, dag_key, false, iff, implies, true

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


def _iff_chain(n: int):
    f = Var(0)
    for i in range(1, n):
        f = f.iff(Var(i))  # f appears twice in each step: 2^n leaves as a tree, 6n nodes as a DAG
    return f


def test_iff_chain_is_linear_and_compiles(tmp_path, monkeypatch):
    """Issue 19: hashing and keys were rebuilt over the expanded tree (n = 20: 10 s, 40: hours)."""
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    f = _iff_chain(40)
    assert f is _iff_chain(40) and f == _iff_chain(40)  # hash-consed: equal formulas are one object
    assert len(dag_key([f])) <= 6 * 40  # per variable: Var, ~Var, ~f, two ANDs and an OR
    assert f.evaluate([1] * 40) and not f.evaluate([1] * 39 + [0])  # 40 ones: even parity of zeros
    c = compile_formula(f)  # through the cache: its key is the linear dag_key
    p = torch.rand(40, dtype=torch.float64).clamp(0.05, 0.95)
    want = p[0]
    for i in range(1, 40):  # P(f_i) = P(f_{i-1}) p_i + (1 - P(f_{i-1})) (1 - p_i)
        want = want * p[i] + (1 - want) * (1 - p[i])
    torch.testing.assert_close(c.log_prob(p.log()[None]).exp()[0], want, atol=ATOL64_FEW_OPS, rtol=0)
    assert compile_formula(_iff_chain(40)).fingerprint() == c.fingerprint()  # a cache hit


def test_dag_key_is_canonical_and_formulas_pickle():
    a, b = variables(2)
    assert dag_key([a & b, a]) == (("var", 0), ("var", 1), ("and", 0, 1), ("roots", 2, 0))
    assert dag_key([a | b]) != dag_key([b | a])
    import copy
    import pickle
    f = (a & ~b).implies(b)
    assert pickle.loads(pickle.dumps(f)) is f and copy.deepcopy(f) is f


def test_huge_variable_index_is_refused():
    with pytest.raises(SizeLimitError, match=r"n_vars \(from the largest variable, Var\(1000000\)\) is 1,000,001"):
        compile_formula(Var(10**6), cache=False)
    with pytest.raises(SizeLimitError, match="max_vars"):
        compile_formula(Var(0), n_vars=10**6, cache=False)
    assert compile_formula(Var(3), max_vars=4, cache=False).n_vars == 4
