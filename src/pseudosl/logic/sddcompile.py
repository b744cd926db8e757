"""The one place that drives PySDD: formulas -> SDD -> :class:`~pseudosl.logic.dag.Dag` (no torch).

Every formula is compiled bottom-up with the SDD ``apply`` operations (``conjoin``,
``disjoin``, ``negate``) in an :class:`~pysdd.sdd.SddManager` over a vtree on
``n_vars`` variables (SDD variable ``i + 1`` = circuit position ``i``).  With
``minimize=True`` the manager's automatic garbage collection and dynamic vtree
minimization are on; every SDD node we keep is referenced (``ref``) so it survives
them, and intermediate folds are dereferenced as soon as they are replaced.
"""

from __future__ import annotations

from typing import Sequence

from .dag import Dag
from .formula import Const, Formula, Var, _Op
from .sdd import dag_from_pysdd

__all__ = ["VTREE_TYPES", "compile_with_pysdd"]

VTREE_TYPES = ("balanced", "right", "left", "vertical")


def compile_with_pysdd(formulas: Sequence[Formula], n_vars: int, *, vtree: str = "balanced",
                       minimize: bool = True) -> Dag:
    """Compile ``formulas`` (one root each) into a smooth, deterministic, decomposable :class:`Dag`.

    Args:
        formulas: non-empty sequence of :class:`Formula` over variables ``0 .. n_vars - 1``.
        n_vars: number of Boolean variables of the circuit (``>= 1``).
        vtree: initial vtree shape: ``"balanced"`` (default), ``"right"``, ``"left"`` or ``"vertical"``.
        minimize: enable PySDD's automatic vtree minimization while compiling.
    """
    from pysdd.sdd import SddManager, Vtree

    if vtree not in VTREE_TYPES:
        raise ValueError(f"vtree must be one of {VTREE_TYPES}, got {vtree!r}")
    if isinstance(n_vars, bool) or not isinstance(n_vars, int) or n_vars < 1:
        raise ValueError(f"n_vars must be a positive int, got {n_vars!r}")
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
            if isinstance(f, _Op):
                todo = [a for a in f.args if a not in memo]
                if todo:
                    stack.extend(todo)
                    continue
            memo[f] = _apply(mgr, f, memo)
            stack.pop()
    return dag_from_pysdd([memo[f] for f in formulas], n_vars=n_vars)


def _apply(mgr, f: Formula, memo: dict) -> object:
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
        return node  # already referenced by the fold
    node.ref()
    return node
