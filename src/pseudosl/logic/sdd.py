"""Reading SDDs: the SDD package's text format (``.sdd`` / ``.vtree``) and in-memory PySDD nodes.

SDD variables are 1-based Boolean variables; variable ``i`` becomes position ``i - 1``
of a Boolean (``n_values = 2``) circuit, a positive literal is value 1, a negative one value 0.
A decision node ``D id vtree n {prime sub}*`` becomes ``OR_j (prime_j AND sub_j)``; SDDs are
deterministic and decomposable by construction, and :meth:`CircuitBuilder.build` smooths them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .dag import CircuitBuilder, Dag

if TYPE_CHECKING:  # pragma: no cover
    from pysdd.sdd import SddNode

__all__ = ["SddFormatError", "read_sdd_file", "read_vtree", "read_vtree_var_count", "dag_from_pysdd"]


class SddFormatError(ValueError):
    """A malformed or truncated ``.sdd`` / ``.vtree`` file."""


def read_vtree(path: str | Path) -> dict[int, int]:
    """The nodes of a ``.vtree`` file: node id -> its variable (leaves) or ``0`` (internal nodes)."""
    path = Path(path)
    count = None
    nodes: dict[int, int] = {}
    leaves = 0
    for lineno, line in enumerate(_lines(path), 1):
        tok = line.split()
        if tok[0] == "vtree":
            count = _int(tok, 1, path, lineno)
        elif tok[0] == "L":
            nodes[_int(tok, 1, path, lineno)] = _int(tok, 2, path, lineno)
            leaves += 1
        elif tok[0] == "I":
            nodes[_int(tok, 1, path, lineno)] = 0
        else:
            raise SddFormatError(f"{path}:{lineno}: unknown vtree line {line!r}")
    if count is None:
        raise SddFormatError(f"{path}: no 'vtree N' header; is this a vtree file?")
    if leaves == 0 or 2 * leaves - 1 != count:
        raise SddFormatError(f"{path}: header says {count} vtree nodes but the file has {leaves} leaves "
                             f"(a full binary vtree has 2*leaves-1 nodes); truncated?")
    return nodes


def read_vtree_var_count(path: str | Path) -> int:
    """Number of variables of a ``.vtree`` file (the largest variable id of its leaves)."""
    return max(read_vtree(path).values())


def read_sdd_file(sdd_path: str | Path, vtree_path: str | Path | None = None, n_vars: int | None = None) -> Dag:
    """Parse an ``.sdd`` file into a :class:`Dag` (root = the last node, as the SDD package writes it).

    ``n_vars`` defaults to the vtree's variable count, else the largest variable in the file.
    With a vtree, every node must sit where the vtree says (a literal at the leaf of its variable,
    a decision node at an internal node): a vtree of another SDD is a named error.
    """
    sdd_path = Path(sdd_path)
    vtree = read_vtree(vtree_path) if vtree_path is not None else None
    if vtree is not None and n_vars is None:
        n_vars = max(vtree.values())
    nodes: dict[int, tuple] = {}
    header = None
    order: list[int] = []
    largest = 0
    for lineno, line in enumerate(_lines(sdd_path), 1):
        tok = line.split()
        tag = tok[0]
        if tag == "sdd":
            header = _int(tok, 1, sdd_path, lineno)
            continue
        node_id = _int(tok, 1, sdd_path, lineno)
        if vtree is not None and tag in ("L", "D"):
            _check_vtree_position(tok, vtree, sdd_path, vtree_path, lineno)
        if tag in ("F", "T"):
            nodes[node_id] = (tag,)
        elif tag == "L":
            lit = _int(tok, 3, sdd_path, lineno)
            if lit == 0:
                raise SddFormatError(f"{sdd_path}:{lineno}: literal 0 is not a variable")
            largest = max(largest, abs(lit))
            nodes[node_id] = ("L", lit)
        elif tag == "D":
            k = _int(tok, 3, sdd_path, lineno)
            if len(tok) != 4 + 2 * k:
                raise SddFormatError(f"{sdd_path}:{lineno}: decision node says {k} elements "
                                     f"but has {len(tok) - 4} numbers after its header")
            kids = [int(t) for t in tok[4:]]
            for kid in kids:
                if kid not in nodes:
                    raise SddFormatError(f"{sdd_path}:{lineno}: node {node_id} refers to node {kid} "
                                         f"which is not defined before it")
            nodes[node_id] = ("D", kids)
        else:
            raise SddFormatError(f"{sdd_path}:{lineno}: unknown line {line!r}")
        order.append(node_id)
    if header is None:
        raise SddFormatError(f"{sdd_path}: no 'sdd N' header; is this an SDD file?")
    if len(order) != header:
        raise SddFormatError(f"{sdd_path}: header says {header} nodes but the file has {len(order)}; truncated?")
    if n_vars is None:
        n_vars = max(largest, 1)
    if largest > n_vars:
        raise SddFormatError(f"{sdd_path}: uses variable {largest} but the circuit has only {n_vars} variables")
    b = CircuitBuilder(n_vars, 2)
    made: dict[int, int] = {}
    for node_id in order:
        spec = nodes[node_id]
        if spec[0] == "F":
            made[node_id] = b.false()
        elif spec[0] == "T":
            made[node_id] = b.true()
        elif spec[0] == "L":
            made[node_id] = b.literal(abs(spec[1]) - 1, 1 if spec[1] > 0 else 0)
        else:
            kids = spec[1]
            made[node_id] = b.or_(*(b.and_(made[p], made[s]) for p, s in zip(kids[::2], kids[1::2])))
    return b.build([made[order[-1]]])


def dag_from_pysdd(nodes: "SddNode | Sequence[SddNode]", n_vars: int | None = None) -> Dag:
    """Convert PySDD node(s) of one manager into a :class:`Dag` (several nodes = several roots)."""
    roots = [nodes] if not isinstance(nodes, (list, tuple)) else list(nodes)
    if not roots:
        raise ValueError("dag_from_pysdd needs at least one SddNode")
    manager = roots[0].manager
    if n_vars is None:
        n_vars = max(manager.var_count(), 1)
    b = CircuitBuilder(n_vars, 2)
    made: dict[int, int] = {}

    def convert(root: "SddNode") -> int:
        stack = [root]
        while stack:
            u = stack[-1]
            if u.id in made:
                stack.pop()
                continue
            if u.is_false():
                made[u.id] = b.false()
            elif u.is_true():
                made[u.id] = b.true()
            elif u.is_literal():
                lit = u.literal
                made[u.id] = b.literal(abs(lit) - 1, 1 if lit > 0 else 0)
            else:
                elems = [n for pair in u.elements() for n in pair]  # PySDD gives (prime, sub) pairs
                todo = [e for e in elems if e.id not in made]
                if todo:
                    stack.extend(todo)
                    continue
                made[u.id] = b.or_(*(b.and_(made[p.id], made[s.id]) for p, s in zip(elems[::2], elems[1::2])))
            stack.pop()
        return made[root.id]

    return b.build([convert(r) for r in roots])


def _check_vtree_position(tok: list[str], vtree: dict[int, int], sdd_path: Path, vtree_path, lineno: int) -> None:
    """A literal must sit at the vtree leaf of its variable, a decision node at an internal vtree node."""
    vid = _int(tok, 2, sdd_path, lineno)
    if vid not in vtree:
        raise SddFormatError(f"{sdd_path}:{lineno}: refers to vtree node {vid}, which {vtree_path} does not have; "
                             f"is the vtree the one this SDD was saved with?")
    if tok[0] == "L" and vtree[vid] != abs(_int(tok, 3, sdd_path, lineno)):
        raise SddFormatError(f"{sdd_path}:{lineno}: literal {tok[3]} sits at vtree node {vid}, which {vtree_path} "
                             f"makes the leaf of variable {vtree[vid] or '(none: an internal node)'}; "
                             f"is the vtree the one this SDD was saved with?")
    if tok[0] == "D" and vtree[vid] != 0:
        raise SddFormatError(f"{sdd_path}:{lineno}: decision node at vtree node {vid}, which is a leaf of "
                             f"{vtree_path}; is the vtree the one this SDD was saved with?")


def _lines(path: Path):
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("c"):
                    yield line
    except UnicodeDecodeError as e:
        raise SddFormatError(f"{path}: not a text SDD/vtree file (byte {e.start} is not ASCII); "
                             f"pass the .sdd and .vtree files the SDD package or PySDD wrote") from None


def _int(tok: list[str], i: int, path: Path, lineno: int) -> int:
    try:
        return int(tok[i])
    except (IndexError, ValueError):
        raise SddFormatError(f"{path}:{lineno}: expected an integer in field {i + 1} of {' '.join(tok)!r}") from None
