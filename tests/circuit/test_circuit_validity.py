"""Circuits are valid or refused (issue 19): the builder checks each node as it is made, a Dag made
from arrays is validated, saved circuits carry a checksum, and the limits refuse oversized builds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from assertions import NOT_INTS, random_log_weights
from tolerances import ATOL64
from pseudosl import Circuit, CircuitBuilder
from pseudosl.logic import CircuitError, Dag
from pseudosl.logic.automaton import DFA, automaton_node
from pseudosl.logic.cnf import normalize_clauses
from pseudosl.logic.dag import FALSE
from pseudosl.logic.formula import variables
from pseudosl.psl import RecurrentDecoder
from pseudosl.tokens.value_map import ValueMap
from pseudosl.logic.errors import CircuitFormatError, SizeLimitError
from pseudosl.logic.checks import check_int

N, K = 3, 3


# -- the builder ----------------------------------------------------------------------------------
def test_conflicting_literals_fold_to_false():
    b = CircuitBuilder(2, 2)
    assert b.and_(b.literal(0, 1), b.literal(0, 0)) == FALSE  # X0 = 1 and X0 = 0: P = 0, not 0.25
    assert b.and_(b.literal(0, 1), b.literal(0, 1), b.literal(1, 0)) == b.and_(b.literal(0, 1), b.literal(1, 0))
    circuit = Circuit(b.build(b.and_(b.literal(0, 1), b.literal(0, 0))))
    assert torch.isneginf(circuit.log_prob(torch.full((1, 2, 2), 0.5).log())).all()


def test_non_decomposable_and_is_refused():
    b = CircuitBuilder(3, 2)
    x0_or_x1 = b.or_(b.literal(0, 1), b.and_(b.literal(0, 0), b.literal(1, 1)))
    with pytest.raises(CircuitError, match=r"and_: children \d+ and \d+ both mention variable 0: .*not decomposable"):
        b.and_(x0_or_x1, b.literal(0, 1))
    b3 = CircuitBuilder(3, 3)
    with pytest.raises(CircuitError, match="separate roots"):  # an OR of values of X1 and a literal of X1
        b3.and_(b3.in_set(1, [0, 1]), b3.literal(1, 0), b3.literal(2, 1))


def test_overlapping_or_is_refused_with_an_assignment():
    b = CircuitBuilder(2, 2)
    with pytest.raises(CircuitError, match=r"both hold when X0=1, X1=1: the OR is not deterministic"):
        b.or_(b.literal(0, 1), b.literal(1, 1))  # P would be 1.0 for a constraint of probability 0.75
    root = b.or_(b.literal(0, 1), b.literal(1, 1), deterministic=True)  # the caller's word is taken
    assert root > 1


def test_exclusive_ors_are_accepted_and_exact():
    b = CircuitBuilder(N, K)
    lit = b.literal
    decision = b.or_(*(b.and_(lit(0, c), lit(1, (c + 1) % K)) for c in range(K)))   # a decision on X0
    separated = b.or_(b.and_(lit(0, 0), lit(1, 0)), b.and_(lit(0, 0), lit(1, 1)), lit(0, 1))  # on X0, then X1
    overlapping_sets = b.or_(b.and_(b.in_set(0, [0, 1]), lit(1, 0)), b.and_(b.in_set(0, [1, 2]), lit(1, 1)))
    circuit = Circuit(b.build([decision, separated, overlapping_sets]))  # the last: exclusive on X1 only
    truths = [oracle.truth_of(f, N, K) for f in (lambda y: y[1] == (y[0] + 1) % K,
                                                 lambda y: (y[0] == 0 and y[1] in (0, 1)) or y[0] == 1,
                                                 lambda y: (y[0] in (0, 1) and y[1] == 0) or (y[0] in (1, 2) and y[1] == 1))]
    x = random_log_weights(0, 4, N, K, normalised=False)
    want = torch.stack([oracle.log_wmc(t, x) for t in truths], 1)
    torch.testing.assert_close(circuit.log_prob(x), want, atol=ATOL64, rtol=0)


def test_unprovable_or_above_the_check_limit_is_refused():
    b = CircuitBuilder(12, 2, max_check_assignments=1 << 10)
    left = b.and_(*(b.literal(v, 1) for v in range(6)))
    right = b.and_(*(b.literal(v, 1) for v in range(6, 12)))
    with pytest.raises(CircuitError, match=r"cannot show .* 2\^12 assignments .* max_check_assignments=1024"):
        b.or_(left, right)
    b.max_check_assignments = 1 << 12
    with pytest.raises(CircuitError, match="both hold when"):
        b.or_(left, right)


@pytest.mark.parametrize("args, err, match", [
    ((True,), TypeError, "n_vars must be an int, got the bool True"),
    ((2, True), TypeError, "n_values must be an int, got the bool True"),
    ((0,), ValueError, "n_vars must be >= 1"),
    ((2.0,), TypeError, "n_vars must be an int"),
    ((10**6,), SizeLimitError, "n_vars is 1,000,000, above max_vars=100,000"),
    ((10, 10**7), SizeLimitError, "leaves numbering 100,000,000, above max_nodes"),
])
def test_builder_arguments(args, err, match):
    with pytest.raises(err, match=match):
        CircuitBuilder(*args)


# every int argument goes through check_int: a float is refused, never truncated
_INT_ARGUMENTS = {
    "literal var": (lambda b, x: b.literal(x, 1), "var"),
    "literal value": (lambda b, x: b.literal(0, x), "the value of variable 0"),
    "in_set var": (lambda b, x: b.in_set(x, [0, 1]), "var"),
    "in_set values": (lambda b, x: b.in_set(1, [0, x]), "the value of variable 1"),
    "and_ child": (lambda b, x: b.and_(b.literal(0, 1), x), "a node id"),
    "or_ child": (lambda b, x: b.or_(x), "a node id"),
    "build root": (lambda b, x: b.build([x]), "a node id"),
    "n_vars": (lambda b, x: CircuitBuilder(x, 3), "n_vars"),
    "n_values": (lambda b, x: CircuitBuilder(2, x), "n_values"),
    "max_nodes": (lambda b, x: CircuitBuilder(2, 3, max_nodes=x), "max_nodes"),
    "max_vars": (lambda b, x: CircuitBuilder(2, 3, max_vars=x), "max_vars"),
    "max_check_assignments": (lambda b, x: CircuitBuilder(2, 3, max_check_assignments=x), "max_check_assignments"),
}


@given(st.sampled_from(sorted(_INT_ARGUMENTS)), NOT_INTS)
def test_every_int_argument_of_the_builder_refuses_non_ints(argument, bad):
    """``b.literal(0, 1.7)`` was value 1 and ``b.in_set(0, [0.9, 2.2])`` {0, 2}: now a TypeError naming the
    argument, the value and the fix, for every int argument and every kind of non-int (whole floats too)."""
    call, name = _INT_ARGUMENTS[argument]
    b = CircuitBuilder(2, 3)
    with pytest.raises(TypeError) as error:
        call(b, bad)
    message = str(error.value)
    assert message.startswith(f"{name} must be an int, got ") and repr(bad) in message and "pass " in message


@given(st.integers(0, 1), st.integers(0, 2), st.sampled_from([np.int8, np.int64, np.uint16, np.array, torch.tensor]))
def test_integer_scalars_of_numpy_and_torch_are_ints(var, value, make):
    b = CircuitBuilder(2, 3)
    node = b.literal(var, value)
    assert b.literal(make(var), make(value)) == node
    assert b.in_set(make(var), [make(value)]) == node == b.or_(make(node)) == b.and_(make(node))
    assert b.in_set(var, np.array([value, value])) == node  # an array's elements are numpy ints
    assert CircuitBuilder(make(2), make(3)).n_values == 3


_PARITY = [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0)]
_FRONT_END_INTS = {  # other call sites that took int() or operator.index: now check_int, so they refuse alike
    "automaton_node position": (lambda x: automaton_node(CircuitBuilder(3, 2), DFA.from_transitions(2, 2, 0, {0}, _PARITY),
                                                         [0, x]), "a position"),
    "DFA accepting state": (lambda x: DFA.from_transitions(2, 2, 0, [x], _PARITY), "accepting state"),
    "variables n": (lambda x: variables(x), "n"),
    "clause literal": (lambda x: normalize_clauses([[1, x]]), "clause 0 literal"),
    "clause n_vars": (lambda x: normalize_clauses([[1]], x), "n_vars"),
    "ValueMap token": (lambda x: ValueMap([3, x], vocab_size=10), "a token"),
    "RecurrentDecoder length": (lambda x: RecurrentDecoder(n_values=3, length=x, hidden_size=4), "length"),
}


@given(st.sampled_from(sorted(_FRONT_END_INTS)), NOT_INTS)
def test_other_int_arguments_refuse_non_ints(argument, bad):
    call, name = _FRONT_END_INTS[argument]
    with pytest.raises(TypeError, match=f"^{name} must be an"):
        call(bad)


@given(st.one_of(st.integers(), NOT_INTS), st.integers(-3, 3), st.integers(3, 9))
def test_check_int_is_the_one_strict_check(value, low, high):
    """``check_int`` on every value: ints in ``low .. high`` pass unchanged, other ints are a ValueError naming the
    bound, everything else a TypeError."""
    if isinstance(value, int) and not isinstance(value, bool):
        if low <= value <= high:
            out = check_int("x", value, low, high=high)
            assert out == value and type(out) is int
        else:
            match = f"x must be >= {low}, got {value}" if value < low else f"x must be <= {high}, got {value:,}"
            with pytest.raises(ValueError, match=match):
                check_int("x", value, low, high=high)
    else:
        with pytest.raises(TypeError, match="x must be an int, got "):
            check_int("x", value, low, high=high)


def test_builder_node_limit():
    b = CircuitBuilder(4, 2, max_nodes=11)  # FALSE, TRUE, 8 literals, then one AND
    with pytest.raises(SizeLimitError, match="grows past nodes numbering 12, above max_nodes=11"):
        for v in range(4):
            b.literal(v, 0), b.literal(v, 1)
        b.and_(b.literal(0, 1), b.literal(1, 1))
        b.and_(b.literal(2, 1), b.literal(3, 1))


def _expressions():
    leaf = st.one_of(st.tuples(st.just("lit"), st.integers(0, N - 1), st.integers(0, K - 1)),
                     st.tuples(st.just("set"), st.integers(0, N - 1), st.frozensets(st.integers(0, K - 1))),
                     st.sampled_from([("true",), ("false",)]))
    return st.recursive(leaf, lambda kids: st.tuples(st.sampled_from(["and", "or"]),
                                                     st.lists(kids, min_size=2, max_size=3)), max_leaves=8)


def _build(b: CircuitBuilder, e) -> int:
    if e[0] == "lit":
        return b.literal(e[1], e[2])
    if e[0] == "set":
        return b.in_set(e[1], e[2])
    if e[0] in ("true", "false"):
        return b.true() if e[0] == "true" else b.false()
    kids = [_build(b, k) for k in e[1]]
    return b.and_(*kids) if e[0] == "and" else b.or_(*kids)


def _holds(e, y) -> bool:
    if e[0] == "lit":
        return y[e[1]] == e[2]
    if e[0] == "set":
        return y[e[1]] in e[2]
    if e[0] in ("true", "false"):
        return e[0] == "true"
    vals = [_holds(k, y) for k in e[1]]
    return all(vals) if e[0] == "and" else any(vals)


@given(_expressions(), st.integers(0, 2**31 - 1))
def test_random_builder_programs_are_exact_or_refused(expr, seed):
    b = CircuitBuilder(N, K)
    try:
        root = _build(b, expr)
    except CircuitError:
        return  # refused by name: fine (the check is exhaustive at this size, so never a valid node)
    circuit = Circuit(b.build(root))
    circuit.dag.validate()
    circuit.check()
    truth = oracle.truth_of(lambda y: _holds(expr, y), N, K)
    x = random_log_weights(seed, 2, N, K, normalised=False)
    torch.testing.assert_close(circuit.log_prob(x), oracle.log_wmc(truth, x), atol=ATOL64, rtol=0)


# -- Dag.validate: circuits made from arrays ----------------------------------------------------------
def _xor_arrays() -> dict[str, np.ndarray]:
    b = CircuitBuilder(2, 2)
    return b.build(b.or_(b.and_(b.literal(0, 1), b.literal(1, 0)), b.and_(b.literal(0, 0), b.literal(1, 1)))).to_arrays()


def _raw(kinds, var, value, children, roots, n_vars=2) -> dict[str, np.ndarray]:
    return {"shape": np.array([n_vars, 2]), "kind": np.array(kinds, np.int8), "var": np.array(var),
            "value": np.array(value), "offsets": np.cumsum([0] + [len(c) for c in children]),
            "children": np.array([c for cs in children for c in cs], dtype=np.int64), "roots": np.array(roots)}


LITS = dict(kinds=[3, 3, 0, 0, 0, 0], var=[0, 0, 0, 0, 1, 1], value=[0, 1, 1, 0, 1, 0])  # F T x0 ~x0 x1 ~x1


def _with(*inner, roots, n_vars=2):
    """The six leaves of LITS plus inner nodes ``(kind, children)``."""
    kinds = LITS["kinds"] + [k for k, _ in inner]
    children = [[]] * 6 + [c for _, c in inner]
    return _raw(kinds, LITS["var"] + [0] * len(inner), LITS["value"] + [0] * len(inner), children, roots, n_vars)


def _tamper(name, index, value):
    def make():
        a = _xor_arrays()
        a[name] = a[name].copy()
        a[name][index] = value
        return a
    return make


@pytest.mark.parametrize("make, match", [
    (_tamper("children", -1, 8), "node 8 lists itself as a child"),      # the root refers to itself
    (_tamper("children", 0, 8), "has child 8, which comes after it"),    # a cycle / wrong order
    (_tamper("children", 0, 99), "has child 99, which is not a node"),
    (_tamper("children", 0, -1), "has child -1, which is not a node"),
    (_tamper("kind", 6, 7), "node 6 has kind 7"),
    (_tamper("var", 2, 5), r"literal node 2 has variable 5, outside 0..1"),
    (_tamper("value", 2, 2), r"literal node 2 has value 2, outside 0..1"),
    (_tamper("roots", 0, 40), "root 0 is node 40, which is not a node"),
    (_tamper("offsets", 3, 9), "offsets must rise from 0"),
    (lambda: {**_xor_arrays(), "children": _xor_arrays()["children"].astype(float)}, "1-D integer array"),
    (lambda: {k: v for k, v in _xor_arrays().items() if k != "roots"}, "missing array 'roots'"),
    (lambda: _with((1, [2, 4]), (2, [6, 6]), roots=[7]), "node 7 lists child 6 twice"),
    (lambda: _with((1, [2, 3]), roots=[6]), r"AND node 6 is not decomposable: variables \[0\]"),
    (lambda: _with((2, [2, 4]), roots=[6]), "OR node 6 is not smooth"),
    (lambda: _with((1, [2, 4]), (1, [3, 5]), (2, [6, 7]), (1, [6, 6]), roots=[8]), "node 9 lists child 6 twice"),
    (lambda: {**_xor_arrays(), "shape": np.array([50, 2])}, "n_vars is 50 but the circuit has 4 literal nodes"),
    (lambda: _raw(LITS["kinds"], LITS["var"], LITS["value"], [[]] * 6, [2]),
     "root node 2 does not mention every one of the 2 variables"),
])
def test_invalid_arrays_are_refused_by_name(make, match):
    with pytest.raises(CircuitError, match=match):
        Dag.from_arrays(make())


def test_valid_arrays_and_size_limit():
    dag = Dag.from_arrays(_xor_arrays())
    dag.validate()
    a = _xor_arrays()
    a["shape"] = np.array([2_000_000_000, 2])
    with pytest.raises(SizeLimitError, match="max_vars"):
        Dag.from_arrays(a)
    ok = _with((1, [2, 4]), (1, [3, 5]), (2, [0, 6, 7]), roots=[8])  # x0 x1 | ~x0 ~x1 (| FALSE, which adds 0)
    Dag.from_arrays(ok).validate()


# -- saved circuits ------------------------------------------------------------------------------------
def _saved(tmp_path, name: str = "c") -> Circuit:
    b = CircuitBuilder(3, 3)
    root = b.or_(*(b.and_(b.literal(0, c), b.literal(1, c)) for c in range(3)))
    circuit = Circuit(b.build(root))
    circuit.save(tmp_path / name)
    return circuit


def _rewrite(path, change, keep_checksum: bool) -> None:
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    change(arrays)
    if not keep_checksum:
        arrays.pop("checksum")
    np.savez(path, **arrays)


def test_self_referencing_saved_circuit_is_refused(tmp_path):
    _saved(tmp_path)
    path = tmp_path / "c.npz"
    root = lambda a: int(a["roots"][0])  # noqa: E731
    _rewrite(path, lambda a: a["children"].__setitem__(a["offsets"][root(a)], root(a)), keep_checksum=False)
    with pytest.raises(CircuitFormatError, match=r"c\.npz is not a valid pseudosl circuit: node \d+ lists itself"):
        Circuit.load(path)


def test_tampered_truncated_and_foreign_files_are_named(tmp_path):
    circuit = _saved(tmp_path)
    path = tmp_path / "c.npz"
    assert Circuit.load(path).fingerprint() == circuit.fingerprint()
    good = path.read_bytes()
    _rewrite(path, lambda a: a["children"].__setitem__(0, a["children"][1]), keep_checksum=True)
    with pytest.raises(CircuitFormatError, match="fails its checksum"):
        Circuit.load(path)
    path.write_bytes(good)
    _rewrite(path, lambda a: a["roots"].__setitem__(0, 10**6), keep_checksum=False)
    with pytest.raises(CircuitFormatError, match="root 0 is node 1000000"):
        Circuit.load(path)
    for cut in (len(good) // 2, 40, 0):
        path.write_bytes(good[:cut])
        with pytest.raises(CircuitFormatError, match="is not a saved pseudosl circuit"):
            Circuit.load(path)
    path.write_bytes(good)
    with pytest.raises(CircuitFormatError, match="holds the circuit saved as '', not 'key'"):
        Dag.load(path, label="key")
    assert issubclass(CircuitFormatError, ValueError)


def test_exhaustive_check_agrees_with_validate():
    """validate() accepts what the builder makes; the exhaustive checks pass on it too."""
    b = CircuitBuilder(3, 2)
    for r in itertools.product(range(2), repeat=3):
        b.and_(*(b.literal(v, c) for v, c in enumerate(r)))
    dag = b.build(b.or_(*(b.and_(*(b.literal(v, c) for v, c in enumerate(r))) for r in [(0, 0, 1), (1, 0, 0)])))
    dag.validate()
    dag.check_smooth()
    dag.check_decomposable()
    dag.check_deterministic()


# -- determinism of circuits made elsewhere ---------------------------------------------------------------
@pytest.mark.parametrize("inner, roots, match", [
    # x0 | x1 as (x0 AND any x1) OR (x0 AND x1): both hold when x0 = x1 = 1 (P = 0.75 counted as 1.0)
    (((2, [4, 5]), (1, [2, 6]), (1, [2, 4]), (1, [3, 5]), (2, [7, 8, 9])), [10],
     r"OR node 10 is not deterministic: its children 7 and 8 both hold when X0=1, X1=1"),
    # (X0 = 1 OR X0 = 1) AND any x1, the two literals being two nodes (node 6 is made a second X0 = 1 below)
    (((0, []), (2, [2, 6]), (2, [4, 5]), (1, [7, 8])), [9],
     "OR node 7 is not deterministic: two of its children are the literal X0=1"),
])
def test_loaded_files_without_a_checksum_need_deterministic_or_nodes(tmp_path, inner, roots, match):
    arrays = _with(*inner, roots=roots)
    arrays["value"][6] = 1  # (the first case has an OR there: its value is not read)
    dag = Dag.from_arrays(arrays)  # smooth and decomposable: made from arrays, determinism is the maker's part
    truth = [bool(v) for v in dag.evaluate(np.array(list(itertools.product(range(2), repeat=dag.n_vars))))[:, 0]]
    x = random_log_weights(0, 3, dag.n_vars, 2, normalised=True)
    assert not torch.allclose(Circuit(dag).log_prob(x), oracle.log_wmc(np.array(truth), x))  # a wrong value
    np.savez(tmp_path / "made.npz", **arrays)
    with pytest.raises(CircuitFormatError, match=match + r".*no checksum .*pass deterministic=True"):
        Circuit.load(tmp_path / "made.npz")
    Circuit.load(tmp_path / "made.npz", deterministic=True)  # the caller's word
    Circuit(dag).save(tmp_path / "saved")
    Circuit.load(tmp_path / "saved")  # written by Circuit.save: its checksum stands for its maker


def test_loaded_decisions_without_a_checksum_are_accepted_and_exact(tmp_path):
    """What the builders make passes the OR check: decisions, separated children, one-variable ORs."""
    import pseudosl
    from pseudosl.logic.categorical import all_of
    y = pseudosl.positions(5, 3)
    made = [pseudosl.compile_categorical(all_of(y[i] != y[i + 1] for i in range(4)), cache=False),
            pseudosl.constraints.compile_all_different(4, 4, range(4)),
            pseudosl.compile_cnf([[1, 2, 3], [-1, -2], [-2, -3], [-1, -3], [4, 5]], vtree="right", cache=False),
            Circuit(Dag.from_arrays(_xor_arrays()))]
    for i, circuit in enumerate(made):
        np.savez(tmp_path / f"{i}.npz", **circuit.dag.to_arrays())
        loaded = Circuit.load(tmp_path / f"{i}.npz")
        assert loaded.fingerprint() == circuit.fingerprint()


def test_or_check_refuses_what_it_cannot_show_and_checks_small_ors_exhaustively():
    # (x0 AND x1) OR (~x0 AND x1) OR (any x0 AND ~x1): no single variable separates all three, but they exclude
    # each other: shown by splitting on x1, then x0
    ok = _with((2, [2, 3]), (1, [2, 4]), (1, [3, 4]), (1, [6, 5]), (2, [7, 8, 9]), roots=[10])
    Dag.from_arrays(ok).check_or_nodes()
    # (x0 XNOR x1) OR (x0 XOR x1): its children are ORs that fix no variable; 2^2 assignments show them exclusive
    b = CircuitBuilder(2, 2)
    l = b.literal  # noqa: E741
    even = b.or_(b.and_(l(0, 1), l(1, 1)), b.and_(l(0, 0), l(1, 0)))
    odd = b.or_(b.and_(l(0, 1), l(1, 0)), b.and_(l(0, 0), l(1, 1)))
    dag = b.build(b.or_(even, odd, deterministic=True))
    dag.check_or_nodes()
    with pytest.raises(CircuitError, match=r"OR node \d+: cannot show that its 2 children exclude each other.*all "
                                           r"2\^2 assignments .* above max_check_assignments=2"):
        dag.check_or_nodes(max_check_assignments=2)  # refused, not guessed
