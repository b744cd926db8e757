"""The one place that drives PySDD: formulas -> SDD -> :class:`~pseudosl.logic.dag.Dag` (no torch).

Every formula is compiled bottom-up with the SDD ``apply`` operations (``conjoin``,
``disjoin``, ``negate``) in an :class:`~pysdd.sdd.SddManager` over a vtree on
``n_vars`` variables (SDD variable ``i + 1`` = circuit position ``i``).  With
``minimize=True`` the manager's automatic garbage collection and dynamic vtree
minimization are on; every SDD node we keep is referenced (``ref``) so it survives
them, and intermediate folds are dereferenced as soon as they are replaced.  The manager's node
count is checked after every operation: above ``max_nodes`` the compilation stops with a
:class:`~pseudosl.logic.errors.SizeLimitError` instead of taking the machine's memory.
"""

from __future__ import annotations

from typing import Sequence

from .dag import Dag
from .errors import DEFAULT_MAX_NODES, DEFAULT_MAX_VARS
from .checks import check_int, check_limit, check_vars
from .formula import Const, Formula, Var, Op
from .sdd import dag_from_pysdd

__all__ = ["VTREE_TYPES", "compile_with_pysdd"]

VTREE_TYPES = ("balanced", "right", "left", "vertical")


def compile_with_pysdd(formulas: Sequence[Formula], n_vars: int, *, vtree: str = "balanced",
                       minimize: bool = True, max_vars: int | None = DEFAULT_MAX_VARS,
                       max_nodes: int | None = DEFAULT_MAX_NODES) -> Dag:
    """Compile ``formulas`` (one root each) into a smooth, deterministic, decomposable :class:`Dag`.

    Args:
        formulas: non-empty sequence of :class:`Formula` over variables ``0 .. n_vars - 1``.
        n_vars: number of Boolean variables of the circuit (``>= 1``).
        vtree: initial vtree shape: ``"balanced"`` (default), ``"right"``, ``"left"`` or ``"vertical"``.
        minimize: enable PySDD's automatic vtree minimization while compiling.
        max_vars: refuse more variables (``None``: no limit).
        max_nodes: stop when PySDD holds more SDD nodes than this (``None``: no limit).

    Raises:
        SizeLimitError: above ``max_vars`` (before any work) or ``max_nodes`` (while compiling).
    """
    from pysdd.sdd import SddManager, Vtree

    if vtree not in VTREE_TYPES:
        raise ValueError(f"vtree must be one of {VTREE_TYPES}, got {vtree!r}")
    n_vars = check_int("n_vars", n_vars, 1)
    check_vars("n_vars is", n_vars, max_vars,
               " (PySDD allocates a vtree and two literals per variable, the circuit two leaves)")
    if not formulas:
        raise ValueError("need at least one formula to compile")
    for f in formulas:
        if f.max_var() >= n_vars:
            raise ValueError(f"formula uses variable {f.max_var()} but n_vars={n_vars} "
                             f"(variables are 0-based); pass n_vars >= {f.max_var() + 1}")
    mgr = SddManager.from_vtree(Vtree(var_count=n_vars, vtree_type=vtree))
    if minimize:
        mgr.auto_gc_and_minimize_on()
    memo: dict[Formula, object] = {}  # formula -> referenced SddNode

    for root in formulas:  # iterative post-order: children compiled before parents
        stack: list[Formula] = [root]
        while stack:
            f = stack[-1]
            if f in memo:
                stack.pop()
                continue
            if isinstance(f, Op):
                todo = [a for a in f.args if a not in memo]
                if todo:
                    stack.extend(todo)
                    continue
            memo[f] = _apply(mgr, f, memo, max_nodes)
            stack.pop()
    return dag_from_pysdd([memo[f] for f in formulas], n_vars=n_vars, max_vars=max_vars)


def _apply(mgr, f: Formula, memo: dict, max_nodes: int | None) -> object:
    """SDD of ``f`` given SDDs of its children in ``memo``; the result is referenced."""
    if isinstance(f, Var):
        node = mgr.literal(f.index + 1)
    elif isinstance(f, Const):
        node = mgr.true() if f.value else mgr.false()
    elif f.op == "not":
        node = mgr.negate(memo[f.args[0]])
    else:
        op = mgr.conjoin if f.op == "and" else mgr.disjoin
        node = memo[f.args[0]]
        for i, arg in enumerate(f.args[1:]):
            nxt = op(node, memo[arg])
            nxt.ref()
            if i > 0:  # node is our own intermediate fold, not a memoised child
                node.deref()
            node = nxt
            _check_size(mgr, max_nodes)
        return node  # already referenced by the fold
    node.ref()
    _check_size(mgr, max_nodes)
    return node


def _check_size(mgr, max_nodes: int | None) -> None:
    if max_nodes is not None and mgr.count() > max_nodes:
        check_limit("compiling through PySDD: the SDD manager holds nodes numbering", mgr.count(), max_nodes,
                    "max_nodes", " (each takes ~100 bytes in PySDD, and the circuit made from them more)")
