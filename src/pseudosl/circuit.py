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
``mpe(x, allowed, root=)``        the maximiser ``y*`` and ``w(y*)``                        ``(B, n)``, ``(B,)``
``sample(x, S, allowed, root=)``  ``S`` exact draws from ``q(y | alpha)``, ``w(y)``, ``log Z``  ``(S, B, n)``, ...
``marginals(x, allowed, root=)``  ``P(y_v = c | alpha) = d log Z / d x[b, v, c]``          ``(B, n, k)``
================================  ======================================================  =====================

``log_prob`` gives one value per root (``(B, R)`` for ``R`` roots).  The assignment queries answer for
one constraint: ``root=r`` picks root ``r`` of a multi-rooted circuit (required there; a single root is
the default).  Where ``alpha AND allowed`` has no model for an example (``log Z = -inf``) there is
nothing to return, and the queries say so with a sentinel instead of an arbitrary assignment: values
``-1`` and ``w = -inf`` (``mpe``, ``sample``), all-zero marginals.  Queries run without autograd.
An empty batch gives empty results.  float16 / bfloat16 inputs are evaluated in float32 (results are
float32): rounding every node to bfloat16 would move a Sudoku circuit's value by more than half a nat.

Evaluation keeps every node value in one buffer of shape ``(n_slots, B)``, group by group of equal height; the
queries are the two layer loops of :mod:`pseudosl.semirings` (bottom-up under a semiring, top-down with weights that
decide the query).

Memory: passes without autograd run in chunks of at most :attr:`Circuit.chunk_bytes`; a pass or result that cannot
fit is refused with a ``MemoryError`` naming its size before anything is allocated (:mod:`pseudosl.memory`).

Derivatives: the hand-written backward is itself differentiable.  Under ``create_graph=True`` it is the
gradient of :func:`~pseudosl.semirings.evaluate_differentiable` (plain autograd ops), so second and
higher derivatives are exact; a plain ``backward()`` runs the fast top-down pass only.

Example:
    >>> import torch, pseudosl
    >>> c = pseudosl.compile_cnf([[1, 2], [-1, -2]])      # exactly one of two Booleans
    >>> x = torch.tensor([[0.9, 0.8]]).log()                 # q(X_v = true), a batch of one
    >>> c.log_prob(x).exp()                                  # 0.9 * 0.2 + 0.1 * 0.8
    tensor([0.2600])
    >>> c.mpe(x).values                                      # the most probable model
    tensor([[1, 0]])
    >>> c.marginals(x)[:, :, 1]                              # q(X_v = true | alpha)
    tensor([[0.6923, 0.3077]])
    >>> s = c.sample(x, 1000, generator=torch.Generator().manual_seed(0))
    >>> s.values.shape                                       # (S, B, n)
    torch.Size([1000, 1, 2])
    >>> bool((s.values.sum(-1) == 1).all())                  # every sample satisfies alpha
    True
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from . import checks, memory, semirings, torchcompile
from .semirings import MPE, Samples
from .checks import apply_allowed, check_root
from .logic import dagfile
from .logic.dag import Dag, LayerPlan
from .logic.errors import DEFAULT_MAX_VARS
from .logic.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    from pysdd.sdd import SddNode

__all__ = ["Circuit", "MPE", "Samples", "apply_allowed", "check_root"]


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
        self._validate_inputs = checks.check_validate_inputs(value)

    _chunk_bytes: int | None = None

    @property
    def chunk_bytes(self) -> int | None:
        """Working memory (bytes) of one chunk of a pass without autograd: larger batches (and sample counts)
        are evaluated in chunks of this size, exactly.  ``None`` (default): 64 MiB on a CPU, where chunks
        that size run faster than one large pass (2.4x on the Sudoku circuit at batch 2048, see
        docs/benchmarks.md), 2 GiB on other devices.  Set it per circuit, to an int (``64 * 2**20``) or
        None; anything else (``1e6``, ``"64MB"``, ``0``) is refused when assigned."""
        return self._chunk_bytes

    @chunk_bytes.setter
    def chunk_bytes(self, value: int | None) -> None:
        self._chunk_bytes = memory.check_chunk_bytes(value)

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
            return checks.reads_values(x)
        return self.validate_inputs

    def _check_shape(self, x: Tensor) -> bool:
        """Type and shape of ``x`` (host-side, free); whether it is the Boolean ``(B, n)`` form."""
        return checks.check_shape(x, self.n_vars, self.n_values, self.root_rows.device)

    def categorical_input(self, x: Tensor) -> Tensor:
        """Check ``x`` and return it as ``(B, n, k)`` log-probabilities (see module docs).

        Type and shape are always checked (on the host, for free).  The value checks (no NaN, no
        ``+inf``, Boolean ``log P(true) <= 0``) read the data, which on a GPU waits for it: they run
        when :meth:`validates` says so, by default on CPU tensors outside ``torch.compile``.
        Under ``torch.compile`` with ``validate_inputs=True`` they are device-side asserts
        (``torch._assert_async``), which stop the program rather than raise a ``ValueError``.
        """
        boolean = self._check_shape(x)
        return checks.categorical(x, boolean, self.validates(x))

    def _prepared(self, x: Tensor, allowed: Tensor | None, rows: slice) -> Tensor:
        """Rows ``rows`` of ``x`` as checked ``(b, n, k)`` log-weights, ``allowed`` applied, half precision in float32."""
        whole = rows.stop - rows.start == x.shape[0]  # (no view to make: the common case)
        xc = self.categorical_input(x if whole else x[rows])
        if allowed is not None:
            xc = apply_allowed(xc, allowed if whole else allowed[rows])
        return xc.float() if xc.dtype in (torch.float16, torch.bfloat16) else xc

    def _leaves(self, xc: Tensor) -> Tensor:
        """``(n*k, b)``: the leaf rows of the node buffer."""
        return xc.reshape(xc.shape[0], self.n_vars * self.n_values).t()

    def _chunk_limit(self, device: torch.device) -> int:
        return memory.chunk_limit(self.chunk_bytes, device)

    def _chunks(self, total: int, bytes_each: int, device: torch.device) -> memory.Chunks:
        """``range(total)`` cut into slices of at most :attr:`chunk_bytes` (one item at least), made lazily."""
        return memory.chunks(total, bytes_each, self._chunk_limit(device))

    def _row_bytes(self, x: Tensor, keep: bool) -> int:
        """Estimated working bytes per batch row of a pass (keeping the weights to go back down or not)."""
        return self._memory.row_bytes(x, keep)

    def forward(self, x: Tensor, semiring: str = "log") -> Tensor:
        """Every root's value under ``semiring``: ``(B, R)``.

        ``"log"`` (default): the log weighted model count ``log sum_{y |= alpha} exp(sum_v x[b, v, y_v])``;
        ``"max"``: ``max_{y |= alpha} sum_v x[b, v, y_v]`` (its gradient is the MPE assignment, one-hot).
        Half-precision inputs (float16, bfloat16) are evaluated in float32 and the result is float32:
        a Sudoku circuit sums thousands of terms, and bfloat16's 8-bit mantissa would move the value
        by a nat or more.  An empty batch gives an empty ``(0, R)`` result.  Without a graph to record
        the batch runs in chunks of :attr:`chunk_bytes`; with one, a batch too large for the free
        memory is a ``MemoryError`` (see the module docs).
        """
        sr = semirings.semiring(semiring)
        self._check_shape(x)
        if x.shape[0] == 0:  # nothing to evaluate; keep the (empty) result in the graph
            return self._leaves(self._prepared(x, None, slice(0, 0))).t()[:, :1].expand(0, self.n_roots) * 0.0
        if torch.is_grad_enabled() and x.requires_grad:
            self._memory.check_pass(x, self._chunk_limit(x.device))
            leaves = self._leaves(self._prepared(x, None, slice(0, x.shape[0])))
            return semirings.Evaluate.apply(leaves, sr.name, tuple(self._meta), self.n_slots, self.root_rows,
                                            *self._indices()).t()
        chunks = self._chunks(x.shape[0], self._row_bytes(x, keep=False), x.device)
        if len(chunks) > 1:  # the result is made once and filled chunk by chunk
            b, r = x.shape[0], self.n_roots
            self._memory.check_result(f"log_prob of a batch of {b} rows", x, f"({b}, {r})", b * r,
                                      b * r * memory.itemsize(x), chunks[0].stop - chunks[0].start, keep=False,
                                      fix="pass smaller batches", budget=self._chunk_limit(x.device))
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

    # -- queries on one root: MPE, samples, marginals -------------------------------------------
    def _root_slot(self, root: int | None) -> int:
        return self._root_slots[checks.pick_root(root, self.n_roots)]

    def _check_query(self, x: Tensor, allowed: Tensor | None) -> None:
        self._check_shape(x)
        if allowed is not None:
            checks.check_allowed(allowed, (x.shape[0], self.n_vars, self.n_values), x.device)

    def _up(self, leaves: Tensor, sr: semirings.Semiring) -> tuple[Tensor, list[Tensor | None]]:
        """The node buffer ``(n_slots, b)`` under ``sr`` and the weights each group kept for the way down."""
        kept: list[Tensor | None] = []
        return semirings.bottom_up(leaves, self._meta, self.n_slots, self._indices(), sr, kept), kept

    def _down(self, like: Tensor, slot: int, n_cols: int, weights: Callable[[int], Tensor | None]) -> Tensor:
        """The leaf rows ``(n*k, n_cols)`` that a top-down pass from root ``slot`` (seeded with 1) reaches."""
        seed = like.new_zeros(self.n_slots, n_cols)
        seed[slot] = 1.0
        return semirings.top_down(seed, self._meta, self._indices(), weights)[2:2 + self.n_vars * self.n_values]

    @torch.no_grad()
    def mpe(self, x: Tensor, allowed: Tensor | None = None, *, root: int | None = None) -> MPE:
        """The most probable assignment that satisfies the constraint (and ``allowed``), per example.

        Args:
            x: ``(B, n, k)`` log-probabilities (or ``(B, n)`` ``log q(true)`` for a Boolean circuit).
            allowed: optional bool ``(B, n, k)`` unit constraints conjoined with the constraint.
            root: which root of a multi-rooted circuit (default: the only one).

        Returns:
            :class:`MPE` ``(values, log_prob)``: ``values`` ``(B, n)`` int64, a maximiser
            ``y* = argmax_{y |= alpha AND allowed} sum_v x[b, v, y_v]`` (ties: any maximiser), and
            ``log_prob`` ``(B,)`` its log-weight ``sum_v x[b, v, y*_v]``.  Where there is no model:
            values ``-1`` and ``log_prob`` ``-inf``.
        """
        self._check_query(x, allowed)
        slot = self._root_slot(root)
        b, n = x.shape[0], self.n_vars
        chunks = self._chunks(b, self._row_bytes(x, keep=True), x.device)
        self._memory.check_result(f"mpe of a batch of {b} rows", x, f"values ({b}, {n}) int64", b * n,
                                  b * (8 * n + memory.itemsize(x)), chunks[0].stop - chunks[0].start, keep=True,
                                  fix="pass smaller batches", budget=self._chunk_limit(x.device))
        out = MPE(x.new_empty(b, n, dtype=torch.long), x.new_empty(b, dtype=memory.result_dtype(x)))
        for rows in chunks:
            xc = self._prepared(x, allowed, rows)
            buf, kept = self._up(self._leaves(xc), semirings.MAX)
            leaf_rows = self._down(buf, slot, xc.shape[0], kept.__getitem__)
            values = semirings.leaf_values(leaf_rows, self.n_vars, self.n_values).unsqueeze(0)
            v, lp = semirings.scored(xc, values, torch.isneginf(buf[slot]))
            out.values[rows], out.log_prob[rows] = v[0], lp[0]
        return out

    @torch.no_grad()
    def sample(self, x: Tensor, num_samples: int = 1, *, allowed: Tensor | None = None, root: int | None = None,
               generator: torch.Generator | None = None) -> Samples:
        """Exact samples from ``q(y | alpha AND allowed)``, ``num_samples`` per example, drawn top-down.

        Args:
            x: ``(B, n, k)`` log-probabilities (or ``(B, n)`` ``log q(true)`` for a Boolean circuit);
                they need not be normalised.
            num_samples: ``S``, samples per example (the bottom-up pass runs once for all of them).
            allowed: optional bool ``(B, n, k)`` unit constraints conjoined with the constraint.
            root: which root of a multi-rooted circuit (default: the only one).
            generator: a ``torch.Generator`` on ``x``'s device (default: the global one).  The same
                generator state, inputs and :attr:`chunk_bytes` give the same samples.

        Returns:
            :class:`Samples` ``(values, log_prob, log_partition)``: ``values`` ``(S, B, n)`` int64,
            ``log_prob`` ``(S, B)`` = ``sum_v x[b, v, y_v]`` of each sample, and ``log_partition`` ``(B,)``
            = ``log P(alpha AND allowed)``, so ``log_prob - log_partition`` is ``log q(y | alpha AND allowed)``.
            Where there is no model: values ``-1``, ``log_prob`` and ``log_partition`` ``-inf``.
            Exact up to the floating-point precision of ``x`` (one uniform draw per node and sample).
        """
        self._check_query(x, allowed)
        num_samples = check_int("num_samples", num_samples, 1)
        checks.check_generator(generator, x.device)
        slot = self._root_slot(root)
        big_s, big_b, n = num_samples, x.shape[0], self.n_vars
        chunks = self._chunks(big_b, self._row_bytes(x, keep=True), x.device)
        self._memory.check_result(f"sample of {big_s} draws for each of {big_b} rows", x,
                                  f"values ({big_s}, {big_b}, {n}) int64 and log_prob ({big_s}, {big_b})",
                                  max(big_s * big_b * n, big_s), big_s * big_b * (8 * n + memory.itemsize(x)),
                                  chunks[0].stop - chunks[0].start, keep=True, budget=self._chunk_limit(x.device),
                                  fix="draw fewer samples per call (num_samples, e.g. in a loop) "
                                      "or pass smaller batches")
        dtype = memory.result_dtype(x)
        out = Samples(x.new_empty(big_s, big_b, n, dtype=torch.long), x.new_empty(big_s, big_b, dtype=dtype),
                      x.new_empty(big_b, dtype=dtype))
        for rows in chunks:
            xc = self._prepared(x, allowed, rows)
            buf, kept = self._up(self._leaves(xc), semirings.LOG)
            b = xc.shape[0]
            for draws in self._chunks(big_s, b * self._row_bytes(xc, keep=False), x.device):
                s = draws.stop - draws.start
                leaf_rows = self._down(buf, slot, s * b, lambda g: None if kept[g] is None else
                                       semirings.sampled_choices(kept[g], s, generator))
                values = semirings.leaf_values(leaf_rows, n, self.n_values).reshape(s, b, n)
                v, lp = semirings.scored(xc, values, torch.isneginf(buf[slot]))
                out.values[draws, rows], out.log_prob[draws, rows] = v, lp
            out.log_partition[rows] = buf[slot]
        return out

    @torch.no_grad()
    def marginals(self, x: Tensor, allowed: Tensor | None = None, *, root: int | None = None) -> Tensor:
        """``(B, n, k)``: ``P(y_v = c | alpha AND allowed)`` under the fully-factorized ``x``.

        The gradient of ``log P(alpha AND allowed)`` with respect to ``x`` (one top-down pass of the
        hand-written backward), not differentiable itself.  Each ``[b, v]`` row sums to 1; where there is
        no model, the example's marginals are all 0.  ``root`` picks the root of a multi-rooted circuit.
        """
        self._check_query(x, allowed)
        slot = self._root_slot(root)
        shape = (x.shape[0], self.n_vars, self.n_values)
        chunks = self._chunks(shape[0], self._row_bytes(x, keep=True), x.device)
        self._memory.check_result(f"marginals of a batch of {shape[0]} rows", x, f"{shape}",
                                  shape[0] * shape[1] * shape[2], shape[0] * shape[1] * shape[2] * memory.itemsize(x),
                                  chunks[0].stop - chunks[0].start, keep=True, fix="pass smaller batches",
                                  budget=self._chunk_limit(x.device))
        out = x.new_empty(shape, dtype=memory.result_dtype(x))
        for rows in chunks:
            xc = self._prepared(x, allowed, rows)
            buf, kept = self._up(self._leaves(xc), semirings.LOG)
            mu = self._down(buf, slot, xc.shape[0], kept.__getitem__).t().reshape(xc.shape)
            out[rows] = mu.masked_fill(torch.isneginf(buf[slot]).view(-1, 1, 1), 0.0)
        return out

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

    def log_prob_reference(self, x: Tensor) -> Tensor:
        """The same value through plain differentiable torch ops (:func:`~pseudosl.semirings.evaluate_differentiable`).

        Slower than :meth:`log_prob`, whose derivatives of every order are the same; a cross-check in tests.
        """
        x = self.categorical_input(x)
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        out = semirings.evaluate_differentiable(self._leaves(x), self._meta, self._indices(), self.root_rows).t()
        return out[:, 0] if self.n_roots == 1 else out
