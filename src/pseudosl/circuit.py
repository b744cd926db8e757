"""The compiled circuit: an ``nn.Module`` that computes log WMC layer by layer.

Input conventions (``B`` = batch, ``n`` = variables, ``k`` = values per variable):

* categorical: ``x`` of shape ``(B, n, k)``, ``x[b, v, c] = log P(X_v = c)``;
* Boolean circuits (``k = 2``) also accept ``(B, n)`` holding ``log P(X_v = true)``;
  ``log P(X_v = false)`` is then ``log1mexp`` of it.  ``(B, n, 2)`` uses index 1 = true.

Output: ``(B,)`` log P(constraint) for a single-rooted circuit, ``(B, R)`` for ``R`` roots.
Inputs need not be normalised: the value is the log weighted model count
``log sum_{y |= alpha} prod_v exp(x[v, y_v])`` over all ``n`` variables.
An empty batch ``(0, n, k)`` gives an empty result.  float16 / bfloat16 inputs are evaluated in
float32 (the result is float32): rounding every node to bfloat16 would move a Sudoku circuit's value
by more than half a nat.

Evaluation keeps every node value in one buffer of shape ``(n_slots, B)``; each
group of nodes of equal height is one ``index_select`` plus dense reductions
(sum over an element's terms, log-sum-exp over a node's elements).
The backward pass is written by hand in the same layout (one ``index_add_`` per
group), which keeps it NaN-free when values are ``-inf``: the weight of a child
of an OR node whose value is ``-inf`` is defined as 0.  The forward pass keeps these weights
``exp(element - node)`` (one ``(count, E, B)`` tensor per OR group) instead of the node buffer,
so the backward pass reads each edge once and gathers nothing.  See
:class:`~pseudosl.logic.dag.LayerPlan` for the grouping (an OR node and the AND
elements only it uses are one sum-of-products row).
"""

from __future__ import annotations

import hashlib
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from . import _validation
from ._validation import require
from .logic.dag import Dag, LayerPlan
from .logic.errors import DEFAULT_MAX_VARS

if TYPE_CHECKING:  # pragma: no cover
    from pysdd.sdd import SddNode

__all__ = ["Circuit"]


class _Evaluate(torch.autograd.Function):
    """The circuit's values with a hand-written backward.

    Every tensor it needs is an argument (``meta`` is a tuple of Python ints), so
    ``torch.compile`` traces it into one graph and CUDA graphs can capture it: nothing in
    either pass reads a tensor value on the host.
    """

    @staticmethod
    def forward(ctx, leaves: Tensor, meta: tuple, n_slots: int, roots: Tensor, *indices: Tensor) -> Tensor:
        weights: list[Tensor | None] = []
        buf = _forward_buffer(leaves, meta, n_slots, indices, weights)  # (n_slots, B)
        ctx.meta = meta
        ctx.n_slots = n_slots
        ctx.n_leaf = leaves.shape[0]
        ctx.save_for_backward(roots, *indices, *weights)
        return buf.index_select(0, roots)  # (R, B)

    @staticmethod
    def backward(ctx, grad_roots: Tensor):  # (R, B)
        roots, *saved = ctx.saved_tensors
        indices, weights = saved[:len(ctx.meta)], saved[len(ctx.meta):]
        batch = grad_roots.shape[1]
        grad = grad_roots.new_zeros(ctx.n_slots, batch)
        grad.index_add_(0, roots, grad_roots)
        for (start, count, n_el, n_term), idx, w in zip(reversed(ctx.meta), reversed(indices), reversed(weights)):
            g = grad[start:start + count].unsqueeze(1)  # (count, 1, B)
            g_el = g if w is None else w * g  # (count, E, B)
            contrib = g_el.unsqueeze(2).expand(count, n_el, n_term, batch)
            grad.index_add_(0, idx, contrib.reshape(-1, batch))
        return (grad[2:2 + ctx.n_leaf], None, None, None) + (None,) * len(indices)


def _forward_buffer(leaves: Tensor, meta: Sequence[tuple[int, int, int, int]], n_slots: int,
                    indices: Sequence[Tensor], weights: list[Tensor | None] | None = None) -> Tensor:
    """All node values, ``(n_slots, B)``, from the leaves ``(n*k, B)`` (no autograd).

    With ``weights`` (a list to fill) it also keeps, per group, the derivative of each node with
    respect to its elements, ``exp(element - node)`` ``(count, E, B)`` (0 where the node is ``-inf``;
    None for a group of AND nodes, ``E = 1``): the backward pass then needs no second gather.
    """
    batch = leaves.shape[1]
    buf = leaves.new_empty(n_slots, batch)
    buf[0] = float("-inf")
    buf[1] = 0.0
    buf[2:2 + leaves.shape[0]] = leaves
    eager = not torch.compiler.is_compiling()
    with torch.no_grad():
        for (start, count, n_el, n_term), idx in zip(meta, indices):
            el = _element_values(buf, idx, count, n_el, n_term)
            out = buf[start:start + count]
            if n_el == 1:
                out.copy_(el.squeeze(1))
            elif eager:  # write in place (saves a copy per group)
                torch.logsumexp(el, dim=1, out=out)
            else:  # traced: a plain assignment, which the compiler fuses
                buf[start:start + count] = torch.logsumexp(el, dim=1)
                out = buf[start:start + count]
            if weights is not None:
                weights.append(None if n_el == 1 else
                               el.sub_(out.unsqueeze(1)).exp_().masked_fill_(torch.isneginf(out).unsqueeze(1), 0.0))
    return buf


def _element_values(buf: Tensor, idx: Tensor, count: int, n_el: int, n_term: int) -> Tensor:
    """``(count, E, B)``: each element's log-product, the sum of its terms' rows."""
    terms = buf.index_select(0, idx).view(count, n_el, n_term, -1)
    return terms.sum(2) if n_term > 1 else terms.squeeze(2)


class Circuit(nn.Module):
    """A smooth, decomposable, deterministic circuit ready for batched log-space evaluation.

    Build one with a front-end (:func:`pseudosl.compile_cnf`, :func:`pseudosl.compile_formula`,
    :meth:`Circuit.from_sdd_file`, :func:`pseudosl.compile_automaton`, the builders in
    :mod:`pseudosl.constraints`) or from a :class:`~pseudosl.logic.CircuitBuilder` via
    :meth:`Circuit.from_dag`.  Index tensors are buffers, so ``.to(device)`` and
    ``state_dict`` work; :meth:`save` / :meth:`load` store the symbolic circuit.

    Example:
        >>> import torch, pseudosl
        >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])   # exactly one of two Booleans
        >>> c.log_prob(torch.log(torch.tensor([[0.5, 0.5]]))).exp()
        tensor([0.5000])
    """

    validate_inputs: bool | None = None
    """Value checks on inputs: ``None`` (default) = on CPU tensors in eager mode only (they would
    synchronise a GPU with the host and break CUDA-graph capture), ``True`` = always, ``False`` = never."""

    def __init__(self, dag: Dag) -> None:
        super().__init__()
        self.dag = dag
        plan: LayerPlan = dag.layer_plan()
        self.n_vars = dag.n_vars
        self.n_values = dag.n_values
        self.n_slots = plan.n_slots
        self.n_layers = plan.n_layers
        self._meta: list[tuple[int, int, int, int]] = []  # (start, count, E, A) per group
        for i, (start, count, n_el, n_term, idx) in enumerate(plan.groups):
            self.register_buffer(f"idx_{i}", torch.as_tensor(idx, dtype=torch.long), persistent=False)
            self._meta.append((start, count, n_el, n_term))
        self.register_buffer("root_rows", torch.as_tensor(plan.roots, dtype=torch.long), persistent=False)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_dag(cls, dag: Dag) -> "Circuit":
        return cls(dag)

    @classmethod
    def from_sdd_file(cls, sdd_path: str | Path, vtree_path: str | Path | None = None,
                      n_vars: int | None = None) -> "Circuit":
        """Load an SDD saved by the SDD package / PySDD (``.sdd``, optionally its ``.vtree``)."""
        from .logic.sdd import read_sdd_file
        return cls(read_sdd_file(sdd_path, vtree_path, n_vars=n_vars))

    @classmethod
    def from_sdd(cls, nodes: "SddNode | Sequence[SddNode]", n_vars: int | None = None) -> "Circuit":
        """Convert in-memory PySDD node(s) (several nodes = a multi-rooted circuit)."""
        from .logic.sdd import dag_from_pysdd
        return cls(dag_from_pysdd(nodes, n_vars=n_vars))

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the symbolic circuit and its checksum to ``path`` (``.npz`` is appended if missing); returns it."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        self.dag.save(path)
        return path

    @classmethod
    def load(cls, path: str | Path, *, max_vars: int | None = DEFAULT_MAX_VARS) -> "Circuit":
        """Read a circuit written by :meth:`save` (the ``.npz`` suffix may be left out): its checksum and
        structure are checked (:meth:`Dag.load`; a bad file is a ``CircuitFormatError`` naming it, one of
        more than ``max_vars`` variables a ``SizeLimitError``)."""
        path = Path(path)
        if not path.exists() and path.with_name(path.name + ".npz").exists():
            path = path.with_name(path.name + ".npz")
        if not path.exists():
            raise FileNotFoundError(f"no saved circuit at {path}")
        return cls(Dag.load(path, max_vars=max_vars))

    def fingerprint(self) -> str:
        """SHA-256 of the symbolic circuit (equal circuits, equal fingerprints)."""
        h = hashlib.sha256()
        for name, a in sorted(self.dag.to_arrays().items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    # -- info ---------------------------------------------------------------------------
    @property
    def n_roots(self) -> int:
        return int(self.root_rows.numel())

    @property
    def n_nodes(self) -> int:
        return self.dag.n_nodes

    @property
    def n_edges(self) -> int:
        return self.dag.n_edges

    def extra_repr(self) -> str:
        return (f"n_vars={self.n_vars}, n_values={self.n_values}, nodes={self.n_nodes}, edges={self.n_edges}, "
                f"roots={self.n_roots}, layers={self.n_layers}, groups={len(self._meta)}")

    def check(self, determinism: bool = True, max_assignments: int = 1 << 20) -> None:
        """Raise :class:`~pseudosl.logic.CircuitError` unless smooth, decomposable (and deterministic)."""
        self.dag.check_smooth()
        self.dag.check_decomposable()
        if determinism:
            self.dag.check_deterministic(max_assignments)

    # -- evaluation -----------------------------------------------------------------------
    def _indices(self) -> list[Tensor]:
        return [getattr(self, f"idx_{i}") for i in range(len(self._meta))]

    def validates(self, x: Tensor) -> bool:
        """Whether the value checks on ``x`` run (see :attr:`validate_inputs`)."""
        if self.validate_inputs is None:
            return _validation.reads_values(x)
        return self.validate_inputs

    def categorical_input(self, x: Tensor) -> Tensor:
        """Check ``x`` and return it as ``(B, n, k)`` log-probabilities (see module docs).

        Type and shape are always checked (on the host, for free).  The value checks (no NaN, no
        ``+inf``, Boolean ``log P(true) <= 0``) read the data, which on a GPU waits for it: they run
        when :meth:`validates` says so, by default on CPU tensors outside ``torch.compile``.
        Under ``torch.compile`` with ``validate_inputs=True`` they are device-side asserts
        (``torch._assert_async``), which stop the program rather than raise a ``ValueError``.
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor of log-probabilities, got dtype {x.dtype}")
        n, k = self.n_vars, self.n_values
        check = self.validates(x)
        if x.dim() == 2 and k == 2 and x.shape[1] == n:
            if check:
                require(~(x > 0).any(), "Boolean input (B, n) holds log P(X = true) and must be <= 0; "
                                         "pass log-probabilities (e.g. F.logsigmoid(logits)), not logits")
            x = torch.stack([_log1mexp(x), x], dim=-1)
        elif x.dim() != 3 or x.shape[1:] != (n, k):
            boolean = f", or (B, {n}) for log P(true) of Boolean variables" if k == 2 else ""
            raise ValueError(f"x must have shape (B, {n}, {k}) ({n} positions with {k} values each){boolean}; "
                             f"got {tuple(x.shape)}")
        if check:
            require(~torch.isnan(x).any(),
                     "x contains NaN; the circuit needs log-probabilities (use -inf for probability 0)")
            require(~torch.isposinf(x).any(), "x contains +inf; log-probabilities are at most 0")
        return x

    def forward(self, x: Tensor) -> Tensor:
        """Log weighted model count of every root: ``(B, R)``.

        Half-precision inputs (float16, bfloat16) are evaluated in float32 and the result is float32:
        a Sudoku circuit sums thousands of terms, and bfloat16's 8-bit mantissa would move the value
        by a nat or more.  An empty batch gives an empty ``(0, R)`` result.
        """
        x = self.categorical_input(x)
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        leaves = x.reshape(x.shape[0], self.n_vars * self.n_values).t()
        if x.shape[0] == 0:  # nothing to evaluate; keep the (empty) result in the graph
            return leaves.t()[:, :1].expand(0, self.n_roots) * 0.0
        if not (torch.is_grad_enabled() and leaves.requires_grad):  # no graph to record
            return _forward_buffer(leaves, self._meta, self.n_slots, self._indices()).index_select(0, self.root_rows).t()
        return _Evaluate.apply(leaves, tuple(self._meta), self.n_slots, self.root_rows, *self._indices()).t()

    def log_prob(self, x: Tensor) -> Tensor:
        """``log P(constraint)`` under the fully-factorized distribution: ``(B,)`` or ``(B, R)``."""
        out = self(x)
        return out[:, 0] if self.n_roots == 1 else out

    def compiled(self, **options: Any) -> Callable[[Tensor], Tensor]:
        """:meth:`log_prob` compiled with ``torch.compile(fullgraph=True, **options)``, once per circuit.

        The compiled function is cached on the circuit (per ``options``) and has a code object of
        its own, so each circuit has its own compile cache: any number of circuits in one process
        stay clear of ``torch._dynamo``'s recompile limit, which counts recompilations per code
        object.  A new batch size recompiles once, after which the batch dimension is dynamic.
        On a GPU, ``mode="reduce-overhead"`` replays the whole pass (forward, and backward when
        it is differentiated) as a CUDA graph, cached per batch shape (a replay reuses its output
        memory: clone a result you keep past the next call).  A function of your own compiled once
        and called with many circuits recompiles per circuit (each is a different graph): compile one
        per circuit, or raise ``torch._dynamo.config.recompile_limit``.

        Example:
            >>> import torch, pseudosl
            >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])
            >>> f = c.compiled()
            >>> f is c.compiled()
            True
        """
        key = repr(sorted(options.items()))  # options may hold dicts (e.g. options={...}), which do not hash
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            cache[key] = torch.compile(_own_code(self.log_prob), fullgraph=True, **options)
        return cache[key]

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_compiled", None)  # compiled functions are rebuilt on demand, never copied or pickled
        return state

    def log_prob_reference(self, x: Tensor) -> Tensor:
        """The same value through plain differentiable torch ops (supports double backward).

        Slower than :meth:`log_prob`; used for entropies and as a cross-check in tests.
        """
        x = self.categorical_input(x)
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        batch = x.shape[0]
        cols = [torch.full((1, batch), float("-inf"), dtype=x.dtype, device=x.device),
                torch.zeros(1, batch, dtype=x.dtype, device=x.device), x.reshape(batch, -1).t()]
        buf = torch.cat(cols)
        for (start, count, n_el, n_term), idx in zip(self._meta, self._indices()):
            el = buf.index_select(0, idx).view(count, n_el, n_term, batch).sum(2)
            out = el.squeeze(1) if n_el == 1 else _safe_logsumexp(el, 1)
            buf = torch.cat([buf, out])
        out = buf.index_select(0, self.root_rows).t()
        return out[:, 0] if self.n_roots == 1 else out


def _own_code(method: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``method`` wrapped in a function with a fresh code object (so a compile cache of its own)."""
    def call(x: Tensor) -> Tensor:
        return method(x)
    return types.FunctionType(call.__code__.replace(), call.__globals__, call.__name__, None, call.__closure__)


def _safe_logsumexp(x: Tensor, dim: int) -> Tensor:
    """log-sum-exp whose gradient is 0 (not NaN) where every term is -inf."""
    m = x.amax(dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.exp(x - m).sum(dim)
    empty = s == 0
    out = torch.log(torch.where(empty, torch.ones_like(s), s)) + m.squeeze(dim)
    return torch.where(empty, torch.full_like(s, float("-inf")), out)


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x <= 0, accurate near 0 (Maechler 2012); exactly -inf at x = 0.

    At x = 0 the derivative is infinite; it is defined as 0 here (the clamp stops it), so a
    probability of exactly 1 gives finite gradients.
    """
    xs = x.clamp(max=-torch.finfo(x.dtype).tiny)
    small = xs > -0.6931471805599453
    a = torch.log(-torch.expm1(torch.where(small, xs, torch.full_like(xs, -1.0))))
    b = torch.log1p(-torch.exp(torch.where(small, torch.full_like(xs, -1.0), xs)))
    return torch.where(x >= 0, torch.full_like(x, float("-inf")), torch.where(small, a, b))
