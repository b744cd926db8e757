"""Compilation front-ends: CNF, formulas and automata -> :class:`~pseudosl.Circuit`.

The symbolic work happens in the torch-free :mod:`pseudosl.logic` layer
(:mod:`~pseudosl.logic.cnf`, :mod:`~pseudosl.logic.formula`, :mod:`~pseudosl.logic.automaton`,
one PySDD driver in :mod:`~pseudosl.logic.sddcompile`); these functions validate and
normalise the input, refuse sizes above the caller's limits before any work (``max_vars``,
``max_nodes``, ``max_edges``: :class:`~pseudosl.logic.errors.SizeLimitError`), consult the on-disk
cache (:mod:`pseudosl.cache`, keyed by the normalised content and options) and wrap the result in a
:class:`Circuit`.

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])          # XOR of two Booleans
    >>> c.log_prob(torch.log(torch.tensor([[0.5, 0.5]]))).exp()
    tensor([0.5000])
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .cache import cached_circuit
from .circuit import Circuit
from .logic.automaton import DFA, SparseDFA, forbidden_sequences_sparse_dfa
from .logic.automaton_circuit import automaton_dag
from .logic.categorical import FALSE, CatFormula, categorical_dag
from .logic.cnf import cnf_formula, normalize_clauses, parse_dimacs
from .logic.errors import DEFAULT_MAX_EDGES, DEFAULT_MAX_NODES, DEFAULT_MAX_VARS, UnsatisfiableError
from .logic.checks import check_bool, check_int, check_vars
from .logic.formula import Formula, dag_key
from .logic.sddcompile import VTREE_TYPES, compile_with_pysdd

__all__ = ["compile_cnf", "compile_formula", "compile_categorical", "compile_automaton"]


def compile_cnf(path_or_clauses: str | Path | Sequence[Sequence[int]], n_vars: int | None = None, *,
                vtree: str = "balanced", minimize: bool = True, allow_unsat: bool = False,
                cache: bool = True, max_vars: int | None = DEFAULT_MAX_VARS,
                max_nodes: int | None = DEFAULT_MAX_NODES) -> Circuit:
    """Compile a CNF (a DIMACS file/text, or a list of clauses of nonzero ints) into a Boolean circuit.

    DIMACS variable ``i`` is circuit position ``i - 1``; an empty clause list is TRUE.

    Args:
        path_or_clauses: a path (``str``/``Path``) or text of a DIMACS CNF file
            (see :func:`~pseudosl.logic.cnf.parse_dimacs`), or clauses such as ``[[1, -2], [2, 3]]``.
        n_vars: number of variables; defaults to the header's count (files) or the largest
            variable mentioned (lists).  May exceed it (extra variables are unconstrained).
        vtree: initial PySDD vtree, ``"balanced"``, ``"right"``, ``"left"`` or ``"vertical"``.
        minimize: let PySDD minimize the vtree dynamically while compiling.
        allow_unsat: return a circuit whose root is FALSE (``log_prob = -inf``) for an
            unsatisfiable CNF instead of raising :class:`UnsatisfiableError`.
        cache: use the on-disk compile cache (:mod:`pseudosl.cache`).
        max_vars: refuse more variables than this, before any work (``None``: no limit).
        max_nodes: stop when PySDD holds more SDD nodes than this (``None``: no limit).

    Returns:
        A single-rooted :class:`Circuit` with ``n_vars`` Boolean variables.

    Raises:
        DimacsFormatError: a malformed file, naming ``file:line``.
        SizeLimitError: above ``max_vars`` or ``max_nodes``.
        UnsatisfiableError: no model (unless ``allow_unsat``).
    """
    minimize, allow_unsat = check_bool("minimize", minimize), check_bool("allow_unsat", allow_unsat)
    source = "" if n_vars is not None else " (from the largest variable of the clauses)"
    if isinstance(path_or_clauses, (str, Path)):
        header_vars, clauses = parse_dimacs(path_or_clauses)
        if n_vars is None:
            source = " (from the DIMACS header" + (f" of {path_or_clauses})" if "\n" not in str(path_or_clauses) else ")")
            n_vars = header_vars
        elif (n_vars := check_int("n_vars", n_vars, 1)) < header_vars:
            raise ValueError(f"n_vars={n_vars} is smaller than the {header_vars} variables the DIMACS header declares")
    else:
        clauses = path_or_clauses
    n_vars, clauses = normalize_clauses(clauses, n_vars)
    check_vars(f"compile_cnf: n_vars{source} is", n_vars, max_vars, _VARS_COST)
    _check_vtree(vtree)
    key = ("cnf", n_vars, clauses, vtree, minimize)
    circuit = cached_circuit(key, lambda: Circuit(compile_with_pysdd([cnf_formula(clauses)], n_vars, vtree=vtree,
                                                                     minimize=minimize, max_vars=max_vars,
                                                                     max_nodes=max_nodes)),
                             enabled=cache)
    return _check_sat(circuit, allow_unsat, "the CNF")


def compile_formula(formula_or_list: Formula | Sequence[Formula], n_vars: int | None = None, *,
                    vtree: str = "balanced", minimize: bool = True, allow_unsat: bool = False,
                    cache: bool = True, max_vars: int | None = DEFAULT_MAX_VARS,
                    max_nodes: int | None = DEFAULT_MAX_NODES) -> Circuit:
    """Compile a :class:`~pseudosl.logic.formula.Formula` (or a list: one root per formula) via PySDD.

    Args:
        formula_or_list: a formula over ``Var(i)`` (0-based), or a non-empty list of formulas.
        n_vars: number of Boolean variables; defaults to the largest index used plus one.
        vtree, minimize, allow_unsat, cache, max_vars, max_nodes: as in :func:`compile_cnf`
            (with ``allow_unsat=False`` every root must be satisfiable).

    Returns:
        A :class:`Circuit` with ``n_vars`` Boolean variables and one root per formula.

    Example:
        >>> from pseudosl.logic.formula import variables
        >>> a, b, c = variables(3)
        >>> circuit = compile_formula([a.implies(b), b | c])   # log_prob: (B, 2)
    """
    minimize, allow_unsat = check_bool("minimize", minimize), check_bool("allow_unsat", allow_unsat)
    formulas = [formula_or_list] if isinstance(formula_or_list, Formula) else formula_or_list
    if isinstance(formulas, (str, bytes)) or not isinstance(formulas, Sequence) or not formulas:
        raise TypeError(f"formula_or_list must be a Formula or a non-empty list of Formulas, got {formula_or_list!r}")
    formulas = list(formulas)
    for i, f in enumerate(formulas):
        if not isinstance(f, Formula):
            raise TypeError(f"formula {i} is a {type(f).__name__} ({f!r}), not a Formula")
    largest = max(f.max_var() for f in formulas)
    source = ""
    if n_vars is None:
        if largest < 0:
            raise ValueError("the formulas mention no variable; pass n_vars (>= 1) to size the circuit")
        n_vars, source = largest + 1, f" (from the largest variable, Var({largest}))"
    n_vars = check_int("n_vars", n_vars)
    check_vars(f"compile_formula: n_vars{source} is", n_vars, max_vars, _VARS_COST)
    _check_vtree(vtree)
    key = ("formula", n_vars, dag_key(formulas), vtree, minimize)
    circuit = cached_circuit(key, lambda: Circuit(compile_with_pysdd(formulas, n_vars, vtree=vtree, minimize=minimize,
                                                                     max_vars=max_vars, max_nodes=max_nodes)),
                             enabled=cache)
    return _check_sat(circuit, allow_unsat, "the formula")


def compile_categorical(formula_or_list: CatFormula | Sequence[CatFormula], n_positions: int | None = None, *,
                        n_values: int | None = None, max_nodes: int = 1_000_000, allow_unsat: bool = False,
                        cache: bool = True, max_vars: int | None = DEFAULT_MAX_VARS) -> Circuit:
    """Compile a categorical formula (or a list: one root per formula) over positions with ``k`` values.

    Formulas are written over :func:`~pseudosl.logic.categorical.positions` (``y[i] != y[i + 1]``,
    ``y[i].isin({0, 2})``, ``y[i] == 1``, ``&``, ``|``, ``~``, ``implies``); compiled without SDD into an ordered
    decision diagram (:mod:`pseudosl.logic.categorical`).

    Args:
        formula_or_list: a :class:`~pseudosl.logic.categorical.CatFormula`, or a non-empty list of them.
        n_positions: ``n``; defaults to the largest position mentioned plus one.
        n_values: ``k``; defaults to the positions' number of values.
        max_nodes: refuse (``CategoricalSizeError``) a decision diagram larger than this.
        allow_unsat, cache, max_vars: as in :func:`compile_cnf` (``max_vars`` bounds ``n_positions``).

    Raises:
        UnsatisfiableError: a formula has no model (one that simplifies to FALSE, such as
            ``(y[0] == 1) & (y[0] != 1)`` or ``y[0].isin(set())``, before any work), unless ``allow_unsat``;
            with ``allow_unsat`` a formula list of FALSE only needs ``n_positions`` and ``n_values``
            (FALSE mentions no position to size the circuit by).
        CategoricalSizeError: the decision diagram would exceed ``max_nodes`` nodes.

    Example:
        >>> from pseudosl.logic.categorical import all_of, positions
        >>> y = positions(6, 3)
        >>> circuit = compile_categorical(all_of(y[i] != y[i + 1] for i in range(5)))   # 3 * 2**5 = 96 models
    """
    allow_unsat = check_bool("allow_unsat", allow_unsat)
    formulas = [formula_or_list] if isinstance(formula_or_list, CatFormula) else formula_or_list
    if isinstance(formulas, (str, bytes)) or not isinstance(formulas, Sequence) or not formulas:
        raise TypeError(f"formula_or_list must be a categorical formula or a non-empty list of them, got {formula_or_list!r}")
    formulas = list(formulas)
    for i, f in enumerate(formulas):
        if not isinstance(f, CatFormula):
            raise TypeError(f"formula {i} is a {type(f).__name__} ({f!r}), not a categorical formula "
                            "(build one from pseudosl.logic.categorical.positions)")
    mentioned = set().union(*(f.positions() for f in formulas))
    false = [i for i, f in enumerate(formulas) if f == FALSE]
    if false and not allow_unsat:
        which = "" if len(formulas) == 1 else f" (formula {false[0]})"
        sizes = "" if mentioned else " (with n_positions and n_values)"
        raise UnsatisfiableError(f"the categorical formula{which} is unsatisfiable: it simplifies to FALSE (its "
                                 f"atoms contradict each other, as in (y[0] == 1) & (y[0] != 1) or y[0].isin(set())); "
                                 f"pass allow_unsat=True{sizes} to get a circuit whose log_prob is -inf")
    none = "simplify to TRUE or FALSE and " if not mentioned else ""
    source = ""
    if n_positions is None:
        if not mentioned:
            raise ValueError(f"the formulas {none}mention no position; pass n_positions (>= 1) to size the circuit")
        n_positions, source = max(mentioned) + 1, f" (from the largest position mentioned, y[{max(mentioned)}])"
    if n_values is None:
        ks = set().union(*(f.n_values() for f in formulas))
        if len(ks) != 1:
            raise ValueError("pass n_values: the formulas " + (f"{none}mention no position" if not ks else
                                                              f"mix positions with {sorted(ks)} values"))
        n_values = ks.pop()
    n_positions, n_values = check_int("n_positions", n_positions, 1), check_int("n_values", n_values, 2)
    check_vars(f"compile_categorical: n_positions{source} is", n_positions, max_vars,
               " (a circuit holds n_values leaves per position and smooths every root over all of them)")
    key = ("categorical", n_positions, n_values, max_nodes, tuple(f.digest() for f in formulas))
    circuit = cached_circuit(key, lambda: Circuit(categorical_dag(formulas, n_positions, n_values, max_nodes=max_nodes,
                                                                  max_vars=max_vars)), enabled=cache)
    return _check_sat(circuit, allow_unsat, "the categorical formula")


def compile_automaton(dfa: DFA | SparseDFA, n_positions: int, *, cache: bool = True,
                      max_edges: int | None = DEFAULT_MAX_EDGES) -> Circuit:
    """The circuit "``dfa`` accepts ``y_0 .. y_{n_positions-1}``" over ``dfa.n_values``-valued positions.

    Unrolls the automaton directly (no SDD; see :mod:`pseudosl.logic.automaton_circuit`): per position, a
    tree of value intervals per default row of a :class:`SparseDFA` and per state its exceptions, so the
    circuit grows with ``n_positions * (rows * n_values + exceptions * log n_values)``, not with
    ``states * values``; a :class:`DFA` is stored sparse first (:meth:`SparseDFA.from_dense`).  A DFA
    accepting no sequence of this length gives a FALSE root (``log_prob = -inf``).  Above ``max_edges``
    estimated circuit edges (:func:`~pseudosl.logic.automaton_circuit.automaton_edges`, an upper bound) it is
    a ``SizeLimitError`` before the circuit is built.

    Example:
        >>> from pseudosl.logic.automaton import DFA
        >>> even = DFA.from_transitions(2, 2, 0, {0}, [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0)])
        >>> circuit = compile_automaton(even, 5)        # an even number of ones among 5 Booleans
    """
    if not isinstance(dfa, (DFA, SparseDFA)):
        raise TypeError(f"dfa must be a pseudosl.logic.automaton.DFA or SparseDFA, got {type(dfa).__name__}")
    n_positions = check_int("n_positions", n_positions, low=1)
    sparse = dfa if isinstance(dfa, SparseDFA) else SparseDFA.from_dense(dfa)
    return cached_circuit(("automaton-intervals", sparse.key(), n_positions),
                          lambda: Circuit(automaton_dag(sparse, n_positions, max_edges=max_edges)), enabled=cache)


_VARS_COST = " (a circuit holds two leaves per variable and smooths every root over all of them)"


def _check_vtree(vtree: str) -> None:
    if vtree not in VTREE_TYPES:
        raise ValueError(f"vtree must be one of {VTREE_TYPES}, got {vtree!r}")


def _check_sat(circuit: Circuit, allow_unsat: bool, what: str) -> Circuit:
    if not allow_unsat:
        unsat = [r for r in range(circuit.n_roots) if circuit.dag.is_false(r)]
        if unsat:
            roots = "" if circuit.n_roots == 1 else f" (root {unsat[0]})"
            raise UnsatisfiableError(f"{what}{roots} is unsatisfiable; pass allow_unsat=True to get a "
                                     f"circuit whose log_prob is -inf")
    return circuit
