"""Reading SDDs: the SDD package's text format (``.sdd`` / ``.vtree``) and in-memory PySDD nodes.

SDD variables are 1-based Boolean variables; variable ``i`` becomes position ``i - 1``
of a Boolean (``n_values = 2``) circuit, a positive literal is value 1, a negative one value 0.
A decision node ``D id vtree k {prime sub}*`` becomes ``OR_j (prime_j AND sub_j)``;
:meth:`CircuitBuilder.build` smooths the result.

A file is checked, not trusted: its value is exact only when the primes of every decision node
exclude each other, and a hand-edited or foreign file may break that (primes ``x1`` and ``true``
with subs ``x2``, ``x2`` would give 0.75 for a constraint of probability 0.5).

* **With its vtree** (recommended), every node must sit where the vtree says (a literal at the leaf
  of its variable, a decision node at an internal node, its primes in the left subtree and its subs
  in the right one), and the primes of every decision node are checked pairwise exclusive exactly,
  through the vtree (:class:`_PrimeCheck`; polynomial for SDDs, at most ``max_check`` steps).
* **Without it**, each decision node goes through :meth:`CircuitBuilder.or_`'s check: primes that are
  literals or conjunctions of literals (and small nodes, by enumeration) are checked; a node whose
  primes cannot be shown exclusive that way is an :class:`SddFormatError` asking for the vtree.

In-memory PySDD nodes are valid by construction and converted without checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from .builder import CircuitBuilder
from .dag import Dag
from .errors import DEFAULT_MAX_VARS, CircuitError, SddFormatError
from .checks import check_int, check_limit, check_vars, parse_int_token

if TYPE_CHECKING:  # pragma: no cover
    from pysdd.sdd import SddNode

__all__ = ["SddFormatError", "Vtree", "read_sdd_file", "read_vtree", "read_vtree_var_count", "dag_from_pysdd"]

DEFAULT_MAX_CHECK = 50_000_000
"""Default ``max_check`` of :func:`read_sdd_file`: steps of the exact prime check (seconds of work)."""


@dataclass(frozen=True)
class Vtree:
    """The nodes of a ``.vtree`` file: ``var[id]`` for leaves, ``kids[id] = (left, right)`` for internal
    nodes; ``first[id]`` / ``size[id]``: pre-order position and subtree size (for ancestry tests)."""

    var: dict[int, int]
    kids: dict[int, tuple[int, int]]
    first: dict[int, int]
    size: dict[int, int]

    @property
    def n_vars(self) -> int:
        return max(self.var.values())

    def below(self, node: int, top: int) -> bool:
        """Whether vtree node ``node`` is in the subtree of ``top`` (``top`` included)."""
        return self.first[top] <= self.first[node] < self.first[top] + self.size[top]


def read_vtree(path: str | Path) -> Vtree:
    """Parse a ``.vtree`` file (``vtree N``, ``L id var``, ``I id left right``, children before parents)."""
    path = Path(path)
    count = None
    var: dict[int, int] = {}
    kids: dict[int, tuple[int, int]] = {}
    parent: dict[int, int] = {}
    for lineno, line in _lines(path):
        tok = line.split()
        if tok[0] == "vtree":
            count = _int(tok, 1, path, lineno)
            continue
        if tok[0] not in ("L", "I"):
            raise SddFormatError(f"{path}:{lineno}: unknown vtree line {line!r}")
        node = _int(tok, 1, path, lineno)
        if node in var or node in kids:
            raise SddFormatError(f"{path}:{lineno}: vtree node {node} is defined twice")
        if tok[0] == "L":
            v = _int(tok, 2, path, lineno)
            if v < 1 or v in var.values():
                raise SddFormatError(f"{path}:{lineno}: leaf {node} has variable {v}; variables are >= 1 and "
                                     f"each is at one leaf")
            var[node] = v
            continue
        left, right = _int(tok, 2, path, lineno), _int(tok, 3, path, lineno)
        for child in (left, right):
            if child not in var and child not in kids:
                raise SddFormatError(f"{path}:{lineno}: internal node {node} refers to vtree node {child}, "
                                     f"which is not defined before it")
            if child in parent:
                raise SddFormatError(f"{path}:{lineno}: vtree node {child} has two parents "
                                     f"({parent[child]} and {node})")
            parent[child] = node
        kids[node] = (left, right)
    if count is None:
        raise SddFormatError(f"{path}: no 'vtree N' header; is this a vtree file?")
    leaves = len(var)
    if leaves == 0 or 2 * leaves - 1 != count or len(kids) != leaves - 1:
        raise SddFormatError(f"{path}: header says {count} vtree nodes but the file has {leaves} leaves "
                             f"(a full binary vtree has 2*leaves-1 nodes); truncated?")
    (root,) = [u for u in (*var, *kids) if u not in parent]  # leaves - 1 internal nodes, each 2 children
    first: dict[int, int] = {}
    size: dict[int, int] = {}
    stack = [(root, False)]
    while stack:  # pre-order positions, then subtree sizes on the way back
        u, done = stack.pop()
        if done:
            size[u] = 1 + sum(size[c] for c in kids.get(u, ()))
            continue
        first[u] = len(first)
        stack.append((u, True))
        stack.extend((c, False) for c in reversed(kids.get(u, ())))
    return Vtree(var, kids, first, size)


def read_vtree_var_count(path: str | Path) -> int:
    """Number of variables of a ``.vtree`` file (the largest variable id of its leaves)."""
    return read_vtree(path).n_vars


def read_sdd_file(sdd_path: str | Path, vtree_path: str | Path | None = None, n_vars: int | None = None, *,
                  max_vars: int | None = DEFAULT_MAX_VARS, max_check: int | None = DEFAULT_MAX_CHECK) -> Dag:
    """Parse an ``.sdd`` file into a :class:`Dag` (root = the last node, as the SDD package writes it).

    ``n_vars`` defaults to the vtree's variable count, else the largest variable in the file.
    With a vtree, every node must sit where the vtree says and the primes of every decision node
    are checked exclusive exactly (see the module docs; ``max_check`` bounds that work).

    Raises:
        SddFormatError: naming ``file:line`` for a malformed, truncated or inconsistent file,
            a duplicate node id, or primes that overlap (or cannot be shown not to without the vtree).
        SizeLimitError: more than ``max_vars`` variables, or a prime check above ``max_check`` steps.
    """
    sdd_path = Path(sdd_path)
    vtree = read_vtree(vtree_path) if vtree_path is not None else None
    if n_vars is not None:
        n_vars = check_int("n_vars", n_vars, 1)
    elif vtree is not None:
        n_vars = vtree.n_vars
    nodes, lines = _parse_sdd(sdd_path, vtree, vtree_path, max_vars)
    largest = max((abs(spec[1]) for spec in nodes.values() if spec[0] == "L"), default=1)
    if n_vars is None:
        n_vars = largest
    if largest > n_vars:
        raise SddFormatError(f"{sdd_path}: uses variable {largest} but the circuit has only {n_vars} variables")
    check_vars(f"{sdd_path}: n_vars is", n_vars, max_vars)
    checker = _PrimeCheck(nodes, vtree, max_check) if vtree is not None else None
    b = CircuitBuilder(n_vars, 2, max_vars=max_vars)
    made: dict[int, int] = {}
    for node_id, spec in nodes.items():
        if spec[0] in ("F", "T"):
            made[node_id] = b.false() if spec[0] == "F" else b.true()
        elif spec[0] == "L":
            made[node_id] = b.literal(abs(spec[1]) - 1, 1 if spec[1] > 0 else 0)
        else:
            elements = spec[2]
            where = f"{sdd_path}:{lines[node_id]}: decision node {node_id}"
            if checker is not None:
                checker.check(node_id, where, vtree_path)
            try:
                made[node_id] = b.or_(*(b.and_(made[p], made[s]) for p, s in elements), deterministic=checker is not None)
            except CircuitError as e:
                raise SddFormatError(f"{where}: {_element_problem(str(e), vtree is not None)}") from None
    return b.build([made[next(reversed(nodes))]])


def _parse_sdd(path: Path, vtree: Vtree | None, vtree_path, max_vars: int | None
               ) -> tuple[dict[int, tuple], dict[int, int]]:
    """Node id -> ``("F",)``, ``("T",)``, ``("L", literal, vtree)`` or ``("D", vtree, [(prime, sub)])``
    in file order, and node id -> line number."""
    nodes: dict[int, tuple] = {}
    lines: dict[int, int] = {}
    header = None
    for lineno, line in _lines(path):
        tok = line.split()
        tag = tok[0]
        if tag == "sdd":
            if header is not None:
                raise SddFormatError(f"{path}:{lineno}: second 'sdd N' header")
            header = _int(tok, 1, path, lineno)
            if header < 1:
                raise SddFormatError(f"{path}:{lineno}: header says {header} nodes; an SDD file has at least one")
            continue
        if tag not in ("F", "T", "L", "D"):
            raise SddFormatError(f"{path}:{lineno}: unknown line {line!r}")
        node_id = _int(tok, 1, path, lineno)
        if node_id in nodes:
            raise SddFormatError(f"{path}:{lineno}: node id {node_id} is defined again (first on line "
                                 f"{lines[node_id]}); node ids must be unique")
        if vtree is not None and tag in ("L", "D"):
            _check_vtree_position(tok, vtree, path, vtree_path, lineno)
        if tag in ("F", "T"):
            nodes[node_id] = (tag,)
        elif tag == "L":
            lit = _int(tok, 3, path, lineno, negative=True)
            if lit == 0:
                raise SddFormatError(f"{path}:{lineno}: literal 0 is not a variable")
            check_vars(f"{path}:{lineno}: literal {lit} names variable", abs(lit), max_vars)
            nodes[node_id] = ("L", lit, _int(tok, 2, path, lineno))
        else:
            k = _int(tok, 3, path, lineno)
            if k < 1 or len(tok) != 4 + 2 * k:
                raise SddFormatError(f"{path}:{lineno}: decision node says {k} elements but has {len(tok) - 4} "
                                     f"numbers after its header (a decision node has >= 1 (prime, sub) pairs)")
            kids = [_int(tok, j, path, lineno) for j in range(4, 4 + 2 * k)]
            for kid in kids:
                if kid not in nodes:
                    raise SddFormatError(f"{path}:{lineno}: node {node_id} refers to node {kid} "
                                         f"which is not defined before it")
            nodes[node_id] = ("D", _int(tok, 2, path, lineno), list(zip(kids[::2], kids[1::2])))
        lines[node_id] = lineno
    if header is None:
        raise SddFormatError(f"{path}: no 'sdd N' header; is this an SDD file?")
    if len(nodes) != header:
        raise SddFormatError(f"{path}: header says {header} nodes but the file has {len(nodes)}; truncated?")
    return nodes, lines


class _PrimeCheck:
    """Exact check, through the vtree, that the primes of a decision node exclude each other.

    Every node is a function of the variables of its vtree subtree (checked: primes in the left
    subtree, subs in the right one), so for nodes ``a`` at vtree node ``x`` and ``b`` at ``y``:

    * ``x == y``: ``a AND b = OR_{ij} (p_i AND q_j) AND (s_i AND t_j)``, each term over disjoint
      variable sets, so ``a, b`` are disjoint iff every ``(p_i, q_j)`` or ``(s_i, t_j)`` is;
    * ``x`` below the left (right) child of ``y``: iff for every element ``(q, t)`` of ``b``,
      ``a, q`` are disjoint or ``t`` is unsatisfiable (``q`` unsatisfiable or ``a, t`` disjoint);
    * ``x, y`` in different subtrees: iff one of them is unsatisfiable;
    * literals: iff the same variable with opposite signs; TRUE: iff the other is unsatisfiable.

    Answers are memoised; the recursion runs on an explicit stack (vtrees can be deep).
    """

    def __init__(self, nodes: dict[int, tuple], vtree: Vtree, max_check: int | None) -> None:
        self.nodes, self.vtree, self.max_check = nodes, vtree, max_check
        self.memo: dict[tuple, bool] = {}
        self.steps = 0

    def check(self, node_id: int, where: str, vtree_path) -> None:
        """Raise :class:`SddFormatError` unless the elements of decision ``node_id`` are placed right and its
        primes pairwise exclusive."""
        _, v, elements = self.nodes[node_id]
        left, right = self.vtree.kids[v]
        for role, kids, top in (("prime", [p for p, _ in elements], left), ("sub", [s for _, s in elements], right)):
            for kid in kids:
                at = self._position(kid)
                if at is not None and not self.vtree.below(at, top):
                    raise SddFormatError(f"{where}: its {role} {kid} sits at vtree node {at}, outside the "
                                         f"{'left' if role == 'prime' else 'right'} subtree of its vtree node {v} "
                                         f"in {vtree_path}")
        primes = [p for p, _ in elements]
        for i, p in enumerate(primes):
            for q in primes[i + 1:]:
                if not self._solve(("disjoint", min(p, q), max(p, q))):
                    raise SddFormatError(f"{where}: primes {p} and {q} overlap (both hold on some assignment), so "
                                         f"its probability would count those assignments twice; an SDD's primes "
                                         f"exclude each other: the file is not an SDD of {vtree_path}")

    def _position(self, n: int) -> int | None:
        spec = self.nodes[n]
        return spec[2] if spec[0] == "L" else spec[1] if spec[0] == "D" else None

    def _solve(self, query: tuple) -> bool:
        memo = self.memo
        if query in memo:
            return memo[query]
        stack = [(query, self._answer(*query))]
        value = None
        while stack:
            q, gen = stack[-1]
            try:
                sub = gen.send(value)
            except StopIteration as stop:
                memo[q] = value = stop.value
                stack.pop()
                continue
            if sub in memo:
                value = memo[sub]
            else:
                self.steps += 1
                if self.max_check is not None and self.steps > self.max_check:
                    check_limit("read_sdd_file: the exact check of the primes needs steps numbering", self.steps,
                                self.max_check, "max_check")
                stack.append((sub, self._answer(*sub)))
                value = None
        return memo[query]

    def _answer(self, kind: str, *args: int) -> Iterator[tuple]:
        return self._unsat(*args) if kind == "unsat" else self._disjoint(*args)

    def _unsat(self, n: int):
        spec = self.nodes[n]
        if spec[0] != "D":
            return spec[0] == "F"
        for p, s in spec[2]:
            if not ((yield ("unsat", p)) or (yield ("unsat", s))):
                return False
        return True

    def _disjoint(self, a: int, b: int):
        na, nb = self.nodes[a], self.nodes[b]
        if na[0] == "F" or nb[0] == "F":
            return True
        if na[0] == "T" or nb[0] == "T":
            return (yield ("unsat", b if na[0] == "T" else a))
        if na[0] == "L" and nb[0] == "L":
            return na[1] == -nb[1]
        x, y = self._position(a), self._position(b)
        if x == y:  # two decision nodes at one vtree node
            for p, s in na[2]:
                for q, t in nb[2]:
                    if not ((yield _pair(p, q)) or (yield _pair(s, t))):
                        return False
            return True
        vt = self.vtree
        if vt.below(y, x):  # make b the node higher in the vtree
            a, b, na, nb, x, y = b, a, nb, na, y, x
        if vt.below(x, y):
            left, _ = vt.kids[y]
            on_left = vt.below(x, left)
            for q, t in nb[2]:
                if on_left and not ((yield _pair(a, q)) or (yield ("unsat", t))):
                    return False
                if not on_left and not ((yield ("unsat", q)) or (yield _pair(a, t))):
                    return False
            return True
        return (yield ("unsat", a)) or (yield ("unsat", b))  # disjoint variable sets


def _element_problem(message: str, with_vtree: bool) -> str:
    """The builder's objection to a decision node's elements, in the file's terms."""
    overlap = re.search(r"both hold when (.*?): ", message)
    if overlap:
        return (f"two of its elements hold together (when {overlap.group(1)}; X0 is SDD variable 1), so its "
                f"probability would count that twice; an SDD's primes exclude each other")
    if "decomposable" in message:
        return f"a prime and its sub share a variable: {message}"
    if with_vtree:  # pragma: no cover  (primes are checked by _PrimeCheck first)
        return message
    return ("its primes are not literals (or conjunctions of literals), so they can be checked to exclude each other "
            "only through the vtree; pass the .vtree file saved with this SDD (every decision node is then checked "
            "exactly)")


def _pair(a: int, b: int) -> tuple:
    return ("disjoint", min(a, b), max(a, b))


def dag_from_pysdd(nodes: "SddNode | Sequence[SddNode]", n_vars: int | None = None, *,
                   max_vars: int | None = DEFAULT_MAX_VARS) -> Dag:
    """Convert PySDD node(s) of one manager into a :class:`Dag` (several nodes = several roots).

    PySDD's nodes are SDDs, deterministic by construction: their decisions are not re-checked."""
    roots = [nodes] if not isinstance(nodes, (list, tuple)) else list(nodes)
    if not roots:
        raise ValueError("dag_from_pysdd needs at least one SddNode")
    manager = roots[0].manager
    if n_vars is None:
        n_vars = max(manager.var_count(), 1)
    b = CircuitBuilder(n_vars, 2, max_vars=max_vars)
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
                made[u.id] = b.or_(*(b.and_(made[p.id], made[s.id]) for p, s in zip(elems[::2], elems[1::2])),
                                   deterministic=True)
            stack.pop()
        return made[root.id]

    return b.build([convert(r) for r in roots])


def _check_vtree_position(tok: list[str], vtree: Vtree, sdd_path: Path, vtree_path, lineno: int) -> None:
    """A literal must sit at the vtree leaf of its variable, a decision node at an internal vtree node."""
    vid = _int(tok, 2, sdd_path, lineno)
    if vid not in vtree.var and vid not in vtree.kids:
        raise SddFormatError(f"{sdd_path}:{lineno}: refers to vtree node {vid}, which {vtree_path} does not have; "
                             f"is the vtree the one this SDD was saved with?")
    if tok[0] == "L" and vtree.var.get(vid) != abs(_int(tok, 3, sdd_path, lineno, negative=True)):
        raise SddFormatError(f"{sdd_path}:{lineno}: literal {tok[3]} sits at vtree node {vid}, which {vtree_path} "
                             f"makes the leaf of variable {vtree.var.get(vid) or '(none: an internal node)'}; "
                             f"is the vtree the one this SDD was saved with?")
    if tok[0] == "D" and vid in vtree.var:
        raise SddFormatError(f"{sdd_path}:{lineno}: decision node at vtree node {vid}, which is a leaf of "
                             f"{vtree_path}; is the vtree the one this SDD was saved with?")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, stripped line)`` of the lines that are neither blank nor comments (a UTF-8
    byte-order mark at the start is skipped, as in DIMACS files)."""
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    data = path.read_bytes()
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:  # UTF-8, not ASCII: a stray non-ASCII character is then named with its line, as a bad token
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise SddFormatError(f"{path}: not a text SDD/vtree file (byte {bom + e.start} is not UTF-8 text); pass the "
                             f".sdd and .vtree files the SDD package or PySDD wrote") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("c"):
            yield lineno, line


def _int(tok: list[str], i: int, path: Path, lineno: int, *, negative: bool = False) -> int:
    """Field ``i`` of a line, a strict integer (:func:`~pseudosl.logic.checks.parse_int_token`); ``negative``
    only for literals."""
    where = f"{path}:{lineno}: field {i + 1} of {' '.join(tok)!r}"
    if i >= len(tok):
        raise SddFormatError(f"{where}: expected an integer, but the line has {len(tok)} fields")
    return parse_int_token(tok[i], where, SddFormatError, negative=negative)
