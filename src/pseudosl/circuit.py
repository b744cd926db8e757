"""The compiled circuit: an ``nn.Module`` that answers queries on a constraint layer by layer.

Input conventions (``B`` = batch, ``n`` = variables, ``k`` = values per variable):

* categorical: ``x`` of shape ``(B, n, k)``, ``x[b, v, c] = log q_v(c)``;
* Boolean circuits (``k = 2``) also accept ``(B, n)`` holding ``log q_v(true)``;
  ``log q_v(false)`` is then ``log1mexp`` of it.  ``(B, n, 2)`` uses index 1 = true;
* ``allowed``: an optional bool ``(B, n, k)`` mask of unit constraints ``y_v in {c : allowed[b, v, c]}``
  conjoined with ``alpha`` (it sets the disallowed inputs to ``-inf``; the circuit stays valid).

Inputs need not be normalised.  With ``w(y) = sum_v x[b, v, y_v]`` (``log q(y)`` for normalised ``x``):

================================  ======================================================  =====================
query                             value                                                   shape
================================  ======================================================  =====================
``log_prob(x, allowed)``          ``log Z = log sum_{y |= alpha} exp w(y)``                ``(B,)``, ``(B, R)``
``forward(x, semiring="max")``    ``max_{y |= alpha} w(y)``                                ``(B, R)``
``condition(x, allowed, root)``   :class:`Conditioned`: ``q(y | alpha AND allowed)``, below
``.log_partition``                ``log Z`` of the root                                    ``(B,)``
``.mpe()``                        the maximiser ``y*`` and ``w(y*)``                        ``(B, n)``, ``(B,)``
``.sample(S)``                    ``S`` exact draws from ``q(y | alpha)``, ``w(y)``, ``log Z``  ``(S, B, n)``, ...
``.marginals``                    ``P(y_v = c | alpha) = d log Z / d x[b, v, c]``          ``(B, n, k)``
================================  ======================================================  =====================

``circuit.mpe(x, allowed, root=r)``, ``sample(x, S, allowed=, root=)`` and ``marginals(x, allowed, root=)`` are
``circuit.condition(x, allowed, r)``'s queries in one call.  ``log_prob`` gives one value per root (``(B, R)`` for
``R`` roots).  The assignment queries answer for one constraint: ``root=r`` picks root ``r`` of a multi-rooted
circuit (required there; a single root is the default).  Where ``alpha AND allowed`` has no model for an example (``log Z = -inf``) there is
nothing to return, and the queries say so with a sentinel instead of an arbitrary assignment: values
``-1`` and ``w = -inf`` (``mpe``, ``sample``), all-zero marginals.  Queries run without autograd.
An empty batch gives empty results.  float16 / bfloat16 inputs are evaluated in float32 (results are
float32): rounding every node to bfloat16 would move a Sudoku circuit's value by more than half a nat.

Evaluation keeps every node value in one buffer of shape ``(n_slots, B)``, group by group of equal height; the
queries are the two layer loops of :mod:`pseudosl.semirings` (bottom-up under a semiring, top-down with weights that
decide the query).

Memory: passes without autograd run in chunks of at most :attr:`Circuit.memory_budget` bytes; a pass or result that
cannot fit is refused with a ``MemoryError`` naming its size before anything is allocated (:mod:`pseudosl.memory`).

Derivatives: the hand-written backward is itself differentiable.  Under ``create_graph=True`` it is the
gradient of :func:`~pseudosl.semirings.evaluate_differentiable` (plain autograd ops), so second and
higher derivatives are exact; a plain ``backward()`` runs the fast top-down pass only.

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])      # exactly one of two Booleans
    >>> x = torch.tensor([[0.9, 0.8]]).log()                 # q(X_v = true), a batch of one
    >>> c.log_prob(x).exp()                                  # 0.9 * 0.2 + 0.1 * 0.8
    tensor([0.2600])
    >>> q = c.condition(x)                                   # q(y | alpha), the batch cut into chunks once
    >>> q.mpe().values                                       # the most probable model
    tensor([[1, 0]])
    >>> q.marginals[:, :, 1]                                 # q(X_v = true | alpha)
    tensor([[0.6923, 0.3077]])
    >>> s = q.sample(1000, generator=torch.Generator().manual_seed(0))
    >>> s.values.shape                                       # (S, B, n)
    torch.Size([1000, 1, 2])
    >>> bool((s.values.sum(-1) == 1).all())                  # every sample satisfies alpha
    True
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from . import checks, memory, semirings, torchcompile
from .semirings import MPE, Samples
from .checks import apply_allowed
from .logic import dagfile
from .logic.dag import Dag, LayerPlan
from .logic.errors import DEFAULT_MAX_VARS
from .logic.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    from pysdd.sdd import SddNode

__all__ = ["Circuit", "Conditioned", "MPE", "Samples"]


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

    _validate_inputs: bool | None = None

    @property
    def validate_inputs(self) -> bool | None:
        """Value checks on inputs: ``None`` (default) = on CPU tensors in eager mode only (they would
        synchronise a GPU with the host and break CUDA-graph capture), ``True`` = always, ``False`` = never.
        Anything else (``"no"``, ``0``) is refused when assigned: a truthy string would turn the checks on."""
        return self._validate_inputs

    @validate_inputs.setter
    def validate_inputs(self, value: bool | None) -> None:
        self._validate_inputs = checks.check_bool("validate_inputs", value,
                                                  none="the default: on CPU tensors in eager mode")

    _memory_budget: int | None = None

    @property
    def memory_budget(self) -> int | None:
        """Working memory (bytes) of one chunk of a pass without autograd: larger batches (and sample counts)
        are evaluated in chunks of this size, exactly.  ``None`` (default): 64 MiB on a CPU, where chunks
        that size run faster than one large pass (2.4x on the Sudoku circuit at batch 2048, see
        docs/benchmarks.md), 2 GiB on other devices.  Set it per circuit, to an int (``64 * 2**20``) or
        None; anything else (``1e6``, ``"64MB"``, ``0``) is refused when assigned."""
        return self._memory_budget

    @memory_budget.setter
    def memory_budget(self, value: int | None) -> None:
        self._memory_budget = memory.check_budget(value, "circuit.memory_budget", "64 MiB on a CPU, 2 GiB elsewhere")

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
        self._root_slots: list[int] = [int(r) for r in plan.roots]
        # values per batch row: the node buffer and the largest gather of a pass; the weights kept for going down
        self._memory = memory.PassPlanner(plan.n_slots + max((c * e * a for _, c, e, a in self._meta), default=0),
                                          sum(c * e for _, c, e, _ in self._meta if e > 1))

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
        path = dagfile.npz_path(path)
        self.dag.save(path)
        return path

    @classmethod
    def load(cls, path: str | Path, *, max_vars: int | None = DEFAULT_MAX_VARS,
             deterministic: bool = False) -> "Circuit":
        """Read a circuit written by :meth:`save` (the ``.npz`` suffix may be left out): its checksum and
        structure are checked (:meth:`Dag.load`; a bad file is a ``CircuitFormatError`` naming it, one of
        more than ``max_vars`` variables a ``SizeLimitError``).  A file without a checksum (not written by
        :meth:`save`) must also show deterministic OR nodes (:meth:`Dag.check_or_nodes`), unless
        ``deterministic=True``."""
        return cls(Dag.load(dagfile.saved_path(path), max_vars=max_vars, deterministic=deterministic))

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
        determinism = checks.check_bool("determinism", determinism)
        self.dag.check_smooth()
        self.dag.check_decomposable()
        if determinism:
            self.dag.check_deterministic(max_assignments)

    # -- evaluation -----------------------------------------------------------------------
    def _indices(self) -> list[Tensor]:
        return [getattr(self, f"idx_{i}") for i in range(len(self._meta))]

    def validates(self, x: Tensor) -> bool:
        """Whether the value checks on ``x`` run (see :attr:`validate_inputs`)."""
        return checks.reads_values(x) if self.validate_inputs is None else self.validate_inputs

    def categorical_input(self, x: Tensor) -> Tensor:
        """Check ``x`` and return it as ``(B, n, k)`` log-probabilities (see module docs).

        Type and shape are always checked (on the host, for free).  The value checks (no NaN, no
        ``+inf``, Boolean ``log P(true) <= 0``) read the data, which on a GPU waits for it: they run
        when :meth:`validates` says so, by default on CPU tensors outside ``torch.compile``.
        Under ``torch.compile`` with ``validate_inputs=True`` they are device-side asserts
        (``torch._assert_async``), which stop the program rather than raise a ``ValueError``.
        """
        boolean = checks.check_shape(x, self.n_vars, self.n_values, self.root_rows.device)
        return checks.categorical(x, boolean, self.validates(x))

    def _prepared(self, x: Tensor, allowed: Tensor | None, rows: slice) -> Tensor:
        """Rows ``rows`` of ``x`` as checked ``(b, n, k)`` log-weights, ``allowed`` applied, half precision in float32."""
        whole = rows.stop - rows.start == x.shape[0]  # (no view to make: the common case)
        xc = self.categorical_input(x if whole else x[rows])
        if allowed is not None:
            xc = apply_allowed(xc, allowed if whole else allowed[rows])
        return xc.float() if xc.dtype in (torch.float16, torch.bfloat16) else xc

    def _leaves(self, xc: Tensor) -> Tensor:  # (n*k, b): the leaf rows of the node buffer
        return xc.reshape(xc.shape[0], self.n_vars * self.n_values).t()

    def _budget(self, device: torch.device) -> int:
        """The bytes of one chunk of a pass on ``device`` (:attr:`memory_budget` or its default)."""
        return memory.chunk_limit(self.memory_budget, device)

    def forward(self, x: Tensor, semiring: str = "log") -> Tensor:
        """Every root's value under ``semiring``: ``(B, R)``.

        ``"log"`` (default): the log weighted model count ``log sum_{y |= alpha} exp(sum_v x[b, v, y_v])``;
        ``"max"``: ``max_{y |= alpha} sum_v x[b, v, y_v]`` (its gradient is the MPE assignment, one-hot).
        Half-precision inputs (float16, bfloat16) are evaluated in float32 and the result is float32:
        a Sudoku circuit sums thousands of terms, and bfloat16's 8-bit mantissa would move the value
        by a nat or more.  An empty batch gives an empty ``(0, R)`` result.  Without a graph to record
        the batch runs in chunks of :attr:`memory_budget`; with one, a batch too large for the free
        memory is a ``MemoryError`` (see the module docs).
        """
        sr = semirings.semiring(semiring)
        checks.check_shape(x, self.n_vars, self.n_values, self.root_rows.device)
        if x.shape[0] == 0:  # nothing to evaluate; keep the (empty) result in the graph
            return self._leaves(self._prepared(x, None, slice(0, 0))).t()[:, :1].expand(0, self.n_roots) * 0.0
        if torch.is_grad_enabled() and x.requires_grad:
            self._memory.check_pass(x, self._budget(x.device))
            leaves = self._leaves(self._prepared(x, None, slice(0, x.shape[0])))
            return semirings.Evaluate.apply(leaves, sr.name, tuple(self._meta), self.n_slots, self.root_rows,
                                            *self._indices()).t()
        chunks = memory.chunks(x.shape[0], self._memory.row_bytes(x, keep=False), self._budget(x.device))
        if len(chunks) > 1:  # the result is made once and filled chunk by chunk
            b, r = x.shape[0], self.n_roots
            self._memory.check_result(f"log_prob of a batch of {b} rows", x, f"({b}, {r})", b * r,
                                      b * r * memory.itemsize(x), chunks[0].stop - chunks[0].start, keep=False,
                                      fix="pass smaller batches", budget=self._budget(x.device))
        out = None
        for rows in chunks:
            part = semirings.bottom_up(self._leaves(self._prepared(x, None, rows)), self._meta, self.n_slots,
                                       self._indices(), sr).index_select(0, self.root_rows).t()
            if len(chunks) == 1:
                return part
            if out is None:
                out = part.new_empty(x.shape[0], self.n_roots)
            out[rows] = part
        return out

    def log_prob(self, x: Tensor, allowed: Tensor | None = None) -> Tensor:
        """``log P(alpha AND allowed)`` under the fully-factorized ``x``: ``(B,)``, or ``(B, R)`` for ``R`` roots."""
        if allowed is not None:
            x = apply_allowed(self.categorical_input(x), allowed)
        out = self(x)
        return out[:, 0] if self.n_roots == 1 else out

    # -- queries on one root: the conditioned distribution ---------------------------------------
    def condition(self, x: Tensor, allowed: Tensor | None = None, root: int | None = None) -> "Conditioned":
        """``q(y | alpha_root AND allowed)`` under the fully-factorized ``x`` (``(B, n, k)`` log-weights, or ``(B, n)``
        ``log q(true)`` for a Boolean circuit; ``allowed``: bool ``(B, n, k)`` unit constraints; ``root``: default the
        only one): a :class:`Conditioned`, whose queries share its checks and its chunks of the batch."""
        return Conditioned(self, x, allowed, root)

    def mpe(self, x: Tensor, allowed: Tensor | None = None, *, root: int | None = None) -> MPE:
        """:meth:`Conditioned.mpe` of ``condition(x, allowed, root)``: the most probable model, per example."""
        return self.condition(x, allowed, root).mpe()

    def sample(self, x: Tensor, num_samples: int = 1, *, allowed: Tensor | None = None, root: int | None = None,
               generator: torch.Generator | None = None) -> Samples:
        """:meth:`Conditioned.sample` of ``condition(x, allowed, root)``: ``num_samples`` exact draws per example."""
        return self.condition(x, allowed, root).sample(num_samples, generator=generator)

    def marginals(self, x: Tensor, allowed: Tensor | None = None, *, root: int | None = None) -> Tensor:
        """:attr:`Conditioned.marginals` of ``condition(x, allowed, root)``: ``(B, n, k)``."""
        return self.condition(x, allowed, root).marginals

    def compiled(self, **options: Any) -> Callable[[Tensor], Tensor]:
        """:meth:`log_prob` compiled with ``torch.compile(fullgraph=True, **options)``, once per circuit.

        A code object of its own per circuit keeps any number of circuits clear of ``torch._dynamo``'s recompile
        limit; differentiable once (see :mod:`pseudosl.torchcompile` for the caching, CUDA graphs and limits).

        Example:
            >>> import torch, pseudosl
            >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])
            >>> f = c.compiled()
            >>> f is c.compiled()
            True
        """
        return torchcompile.compiled_once(self, self.log_prob, options)

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop(torchcompile.CACHE, None)  # compiled functions are rebuilt on demand, never copied or pickled
        return state


class Conditioned:
    """``q(y | alpha_r AND allowed) = q(y) [y |= alpha_r AND allowed] / Z`` for root ``r`` of a circuit under the
    fully-factorized ``x`` (:meth:`Circuit.condition`; torch-struct's conditioned distribution).

    The inputs are checked and the batch cut into chunks of :attr:`Circuit.memory_budget` once; each query runs
    its passes chunk by chunk (:mod:`pseudosl.semirings`) into one result, refused first if it cannot fit.  Where
    there is no model (``Z = 0``): values ``-1`` and log-weights ``-inf`` (``mpe``, ``sample``), zero marginals.
    ``log_partition`` is :meth:`Circuit.log_prob`'s value (differentiable); the other queries run without autograd.
    """

    def __init__(self, circuit: Circuit, x: Tensor, allowed: Tensor | None, root: int | None) -> None:
        checks.check_shape(x, circuit.n_vars, circuit.n_values, circuit.root_rows.device)
        if allowed is not None:
            checks.check_allowed(allowed, (x.shape[0], circuit.n_vars, circuit.n_values), x.device)
        self.circuit, self.x, self.allowed = circuit, x, allowed
        self.root = checks.check_root(root, circuit.n_roots)
        self._slot = circuit._root_slots[self.root]
        keep = circuit._memory.row_bytes(x, keep=True)  # a query keeps the weights to go back down
        self.chunks = memory.chunks(x.shape[0], keep, circuit._budget(x.device))

    @cached_property
    def log_partition(self) -> Tensor:
        """``(B,)`` ``log Z = log P(alpha_r AND allowed)`` (:meth:`Circuit.log_prob` of the root)."""
        out = self.circuit.log_prob(self.x, self.allowed)
        return out if out.dim() == 1 else out[:, self.root]

    @torch.no_grad()
    def mpe(self) -> MPE:
        """The most probable model per example: ``values`` ``(B, n)`` int64, a maximiser ``y* = argmax_{y |= alpha_r
        AND allowed} sum_v x[b, v, y_v]`` (ties: any maximiser), and ``log_prob`` ``(B,)`` its log-weight
        ``sum_v x[b, v, y*_v]``.  Where there is no model: values ``-1`` and ``log_prob`` ``-inf``."""
        x, (b, n) = self.x, (self.x.shape[0], self.circuit.n_vars)
        self._check_result(f"mpe of a batch of {b} rows", f"values ({b}, {n}) int64", b * n,
                           b * (8 * n + memory.itemsize(x)))
        out = MPE(x.new_empty(b, n, dtype=torch.long), x.new_empty(b, dtype=memory.result_dtype(x)))
        for rows in self.chunks:
            xc, buf, kept = self._up(rows, semirings.MAX)
            values = semirings.leaf_values(self._down(buf, xc.shape[0], kept.__getitem__), n,
                                           self.circuit.n_values).unsqueeze(0)
            v, lp = semirings.scored(xc, values, torch.isneginf(buf[self._slot]))
            out.values[rows], out.log_prob[rows] = v[0], lp[0]
        return out

    @torch.no_grad()
    def sample(self, num_samples: int = 1, *, generator: torch.Generator | None = None) -> Samples:
        """``S = num_samples`` exact draws per example, top-down after one bottom-up pass (``generator`` on ``x``'s
        device; the same state, inputs and :attr:`Circuit.memory_budget` give the same draws): :class:`Samples`
        ``values (S, B, n)`` int64, ``log_prob (S, B) = sum_v x[b, v, y_v]`` and ``log_partition (B,) = log Z``, so
        ``log_prob - log_partition`` is ``log q(y | alpha_r AND allowed)``.  Exact up to the precision of ``x``."""
        x, n = self.x, self.circuit.n_vars
        big_s, big_b = check_int("num_samples", num_samples, 1), x.shape[0]
        checks.check_generator(generator, x.device)
        self._check_result(f"sample of {big_s} draws for each of {big_b} rows",
                           f"values ({big_s}, {big_b}, {n}) int64 and log_prob ({big_s}, {big_b})",
                           max(big_s * big_b * n, big_s), big_s * big_b * (8 * n + memory.itemsize(x)),
                           fix="draw fewer samples per call (num_samples, e.g. in a loop) or pass smaller batches")
        dtype = memory.result_dtype(x)
        out = Samples(x.new_empty(big_s, big_b, n, dtype=torch.long), x.new_empty(big_s, big_b, dtype=dtype),
                      x.new_empty(big_b, dtype=dtype))
        for rows in self.chunks:
            xc, buf, kept = self._up(rows, semirings.LOG)
            b = xc.shape[0]
            draw_bytes = b * self.circuit._memory.row_bytes(xc, keep=False)
            for draws in memory.chunks(big_s, draw_bytes, self.circuit._budget(x.device)):
                s = draws.stop - draws.start
                leaf_rows = self._down(buf, s * b, lambda g: None if kept[g] is None else
                                       semirings.sampled_choices(kept[g], s, generator))
                values = semirings.leaf_values(leaf_rows, n, self.circuit.n_values).reshape(s, b, n)
                v, lp = semirings.scored(xc, values, torch.isneginf(buf[self._slot]))
                out.values[draws, rows], out.log_prob[draws, rows] = v, lp
            out.log_partition[rows] = buf[self._slot]
        return out

    @cached_property
    @torch.no_grad()
    def marginals(self) -> Tensor:
        """``(B, n, k)``: ``P(y_v = c | alpha_r AND allowed)``, the gradient of ``log Z`` with respect to ``x`` (one
        top-down pass of the hand-written backward), not differentiable itself.  Each ``[b, v]`` row sums to 1; where
        there is no model, the example's marginals are all 0."""
        x, shape = self.x, (self.x.shape[0], self.circuit.n_vars, self.circuit.n_values)
        size = shape[0] * shape[1] * shape[2]
        self._check_result(f"marginals of a batch of {shape[0]} rows", f"{shape}", size, size * memory.itemsize(x))
        out = x.new_empty(shape, dtype=memory.result_dtype(x))
        for rows in self.chunks:
            xc, buf, kept = self._up(rows, semirings.LOG)
            mu = self._down(buf, xc.shape[0], kept.__getitem__).t().reshape(xc.shape)
            out[rows] = mu.masked_fill(torch.isneginf(buf[self._slot]).view(-1, 1, 1), 0.0)
        return out

    # -- the passes ------------------------------------------------------------------------------
    def _check_result(self, what: str, result: str, values: int, value_bytes: int,
                      fix: str = "pass smaller batches") -> None:
        """Refuse, before any work, a result (and one chunk's pass) that cannot fit (``PassPlanner.check_result``)."""
        c, first = self.circuit, self.chunks[0]
        c._memory.check_result(what, self.x, result, values, value_bytes, first.stop - first.start, keep=True,
                               fix=fix, budget=c._budget(self.x.device))

    def _up(self, rows: slice, sr: semirings.Semiring) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """Rows ``rows`` as checked ``(b, n, k)`` log-weights, their node buffer ``(n_slots, b)`` under ``sr`` and
        the weights each group kept for the way down."""
        c, kept = self.circuit, []
        xc = c._prepared(self.x, self.allowed, rows)
        return xc, semirings.bottom_up(c._leaves(xc), c._meta, c.n_slots, c._indices(), sr, kept), kept

    def _down(self, like: Tensor, n_cols: int, weights: Callable[[int], Tensor | None]) -> Tensor:
        """The leaf rows ``(n*k, n_cols)`` that a top-down pass from the root (seeded with 1) reaches."""
        c = self.circuit
        seed = like.new_zeros(c.n_slots, n_cols)
        seed[self._slot] = 1.0
        return semirings.top_down(seed, c._meta, c._indices(), weights)[2:2 + c.n_vars * c.n_values]
