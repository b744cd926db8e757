"""The circuit's two layer loops, written once and parameterised by a semiring (torch-struct style).

A compiled circuit is evaluated group by group (:class:`~pseudosl.logic.layers.LayerPlan`): node values
live in one buffer ``(n_slots, N)`` (``N`` columns: batch rows, or samples times rows), and group ``g``
computes rows ``start : start + count`` from the index tensor ``idx`` ``(count, E, A)``::

    element[i, e] = sum_a buf[idx[i, e, a]]                  (the product, in log space)
    node[i]       = semiring.sum_e element[i, e]             (count, N)

:func:`bottom_up` is that loop.  The semiring says what the sum over elements is:

* ``"log"`` (:data:`LOG`): log-sum-exp, so a root holds ``log sum_{y |= alpha} prod_v q_v(y_v)``;
* ``"max"`` (:data:`MAX`): max, so a root holds ``max_{y |= alpha} sum_v log q_v(y_v)`` (the MPE value).

Asked to, it keeps per OR group the derivative of each node with respect to its elements, which is
what the way back down needs: the log semiring ``exp(element - node)`` ``(count, E, N)`` (0 where the
node is ``-inf``), the max semiring the index of the best element ``(count, N)`` (one-hot weights).

:func:`top_down` is the one loop back down: every node hands its value ``g`` to the terms of its
elements, weighted by ``w[i, e]`` (one ``index_add_`` per group), or to the terms of one chosen
element only (a ``scatter_add_`` per term).  The weights decide the query:

* the kept log weights: the gradient of the roots (the backward pass; with a 1 at a root the leaves
  receive the marginals ``P(y_v = c | alpha)``);
* the max semiring's choices: the gradient of the max, i.e. the MPE assignment;
* a choice drawn from the kept log weights (:func:`sampled_choices`): an exact sample of
  ``q(. | alpha)``, top-down (each node chooses an element with probability ``exp(element - node)``).

:func:`evaluate_differentiable` is :func:`bottom_up` out of place, in plain differentiable torch ops
(each semiring's :meth:`Semiring.sum_differentiable`): autograd differentiates it to any order.
:class:`Evaluate`'s backward is :func:`top_down` when no graph is recorded (``loss.backward()``) and
the gradient of that path when one is (``create_graph=True``: second derivatives, Hessian-vector
products, gradient penalties), so derivatives of every order are exact.

In a decomposable circuit a sample's choices reach every variable's leaves exactly once (two
paths to one node would meet at an AND whose children share that node's variables), so the leaves
of one column hold a single 1 per variable.  Nothing here reads a tensor value on the host.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .numerics import safe_logsumexp

__all__ = ["MPE", "Samples", "LOG", "MAX", "Semiring", "semiring", "bottom_up", "top_down", "sampled_choices", "evaluate_differentiable",
           "leaf_values", "scored", "safe_logsumexp", "Evaluate", "FirstOrderOnly"]

Meta = Sequence[tuple[int, int, int, int]]  # (start, count, E, A) per group


class Semiring:
    """How a node sums its elements (the product is always ``+`` in log space), and what it keeps."""

    name = ""

    @staticmethod
    def sum_into(el: Tensor, buf: Tensor, start: int, count: int, eager: bool, keep: bool) -> Tensor | None:
        """Write ``sum_e el[:, e]`` into ``buf[start:start + count]``; if ``keep``, return the top-down weights
        (:func:`top_down`): ``(count, E, N)`` derivatives, or ``(count, N)`` choices."""
        raise NotImplementedError

    @staticmethod
    def sum_differentiable(el: Tensor) -> Tensor:
        """``(count, N)``: ``sum_e el[:, e]`` of ``el`` ``(count, E, N)``, out of place, differentiable to any order."""
        raise NotImplementedError


class _Log(Semiring):
    name = "log"

    @staticmethod
    def sum_into(el: Tensor, buf: Tensor, start: int, count: int, eager: bool, keep: bool) -> Tensor | None:
        out = buf[start:start + count]
        if eager:  # write in place (saves a copy per group)
            torch.logsumexp(el, dim=1, out=out)
        else:  # traced: a plain assignment, which the compiler fuses
            buf[start:start + count] = torch.logsumexp(el, dim=1)
            out = buf[start:start + count]
        if not keep:
            return None
        return el.sub_(out.unsqueeze(1)).exp_().masked_fill_(torch.isneginf(out).unsqueeze(1), 0.0)

    @staticmethod
    def sum_differentiable(el: Tensor) -> Tensor:
        return safe_logsumexp(el, 1)


class _Max(Semiring):
    name = "max"

    @staticmethod
    def sum_into(el: Tensor, buf: Tensor, start: int, count: int, eager: bool, keep: bool) -> Tensor | None:
        best, arg = el.max(dim=1)  # ties: any maximiser
        buf[start:start + count] = best
        return arg if keep else None

    @staticmethod
    def sum_differentiable(el: Tensor) -> Tensor:
        return el.max(dim=1).values  # the gradient goes to the element sum_into chooses


LOG: Semiring = _Log()
MAX: Semiring = _Max()
_BY_NAME = {s.name: s for s in (LOG, MAX)}


def semiring(name: str) -> Semiring:
    """The semiring called ``name`` (``"log"`` or ``"max"``); anything else is a ``ValueError`` naming it."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown semiring {name!r}: use one of {sorted(_BY_NAME)}")
    return _BY_NAME[name]


def bottom_up(leaves: Tensor, meta: Meta, n_slots: int, indices: Sequence[Tensor], sr: Semiring = LOG,
              kept: list[Tensor | None] | None = None) -> Tensor:
    """All node values, ``(n_slots, N)``, from the leaves ``(n*k, N)`` (no autograd).

    With ``kept`` (a list to fill) each group appends what :func:`top_down` needs (None for a group of
    AND nodes, ``E = 1``): the backward pass then needs no second gather.
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
            if n_el == 1:
                buf[start:start + count].copy_(el.squeeze(1))
                k = None
            else:
                k = sr.sum_into(el, buf, start, count, eager, kept is not None)
            if kept is not None:
                kept.append(k)
    return buf


def evaluate_differentiable(leaves: Tensor, meta: Meta, indices: Sequence[Tensor], roots: Tensor,
                            sr: Semiring = LOG) -> Tensor:
    """The roots' values ``(R, N)`` from the leaves ``(n*k, N)`` in plain differentiable torch ops.

    The loop of :func:`bottom_up` out of place: autograd records it, so it has derivatives of every
    order (NaN-free where values are ``-inf``, as the hand-written backward).  Each group's values are
    appended to the buffer (a copy of it per group, and autograd keeps every element value): slower
    and larger than :class:`Evaluate`, which uses it only to differentiate its own backward.
    """
    batch = leaves.shape[1]
    buf = torch.cat([leaves.new_full((1, batch), float("-inf")), leaves.new_zeros(1, batch), leaves])
    for (start, count, n_el, n_term), idx in zip(meta, indices):
        el = _element_values(buf, idx, count, n_el, n_term)
        buf = torch.cat([buf, el.squeeze(1) if n_el == 1 else sr.sum_differentiable(el)])  # rows start:start+count
    return buf.index_select(0, roots)


def _element_values(buf: Tensor, idx: Tensor, count: int, n_el: int, n_term: int) -> Tensor:
    """``(count, E, N)``: each element's log-product, the sum of its terms' rows."""
    terms = buf.index_select(0, idx).view(count, n_el, n_term, -1)
    return terms.sum(2) if n_term > 1 else terms.squeeze(2)


def top_down(grad: Tensor, meta: Meta, indices: Sequence[Tensor],
             weights: Callable[[int], Tensor | None]) -> Tensor:
    """Fill ``grad`` ``(n_slots, N)`` (seeded at the roots) downwards, in place, and return it.

    Each group, last first, hands every node's value to the terms of its elements: ``weights(g)`` is

    * None (a group of AND nodes, ``E = 1``): to every term;
    * a float ``(count, E, N)`` tensor: ``w[i, e] * grad[node i]`` to the terms of element ``e``;
    * an int64 ``(count, N)`` tensor of choices: ``grad[node i]`` to the terms of element ``choice[i]``
      only (the same as one-hot weights, with ``E`` times less to add).
    """
    batch = grad.shape[1]
    for g in reversed(range(len(meta))):
        start, count, n_el, n_term = meta[g]
        w = weights(g)
        node = grad[start:start + count].unsqueeze(1)  # (count, 1, N)
        if w is not None and w.dtype == torch.long:  # choices
            if n_el > n_term:  # add to the chosen element's terms only
                terms = indices[g].view(count, n_el, n_term)
                src = node.squeeze(1).clone()  # (count, N), apart from grad's memory
                for a in range(n_term):
                    grad.scatter_add_(0, terms[:, :, a].gather(1, w), src)  # rows of the chosen elements' term a
                continue
            # few elements, many terms: one-hot weights and one index_add_ are faster (measured on a CPU)
            w = (torch.arange(n_el, device=w.device).view(1, n_el, 1) == w.unsqueeze(1)).to(grad.dtype)
        g_el = node if w is None else w * node  # (count, E, N)
        contrib = g_el.unsqueeze(2).expand(count, n_el, n_term, batch)
        grad.index_add_(0, indices[g], contrib.reshape(count * n_el * n_term, batch))
    return grad


def sampled_choices(kept: Tensor, n_samples: int, generator: torch.Generator | None) -> Tensor:
    """``(count, S * N)``: an element drawn per node and sample from the log weights ``(count, E, N)``.

    Column ``s * N + j`` is sample ``s`` of column ``j``.  The draw inverts the cumulative weights with
    one uniform per node and sample: element ``e`` is chosen when ``cum[e - 1] <= u * cum[-1] < cum[e]``,
    which needs ``w[e] > 0``, so a zero-weight (impossible) element is never chosen.  A node of value
    ``-inf`` (all weights 0) gets the last element: it is on a sample's path only when the whole example
    has no model, which the caller reports.
    """
    count, n_el, batch = kept.shape
    cum = kept.cumsum(1)  # (count, E, N)
    u = torch.rand(count, n_samples, batch, generator=generator, dtype=kept.dtype, device=kept.device)
    u = u * cum[:, -1:, :]  # (count, S, N)
    choice = (cum[:, :-1].unsqueeze(2) <= u.unsqueeze(1)).sum(1)  # (count, S, N)
    return choice.view(count, n_samples * batch)


def leaf_values(leaf_rows: Tensor, n: int, k: int) -> Tensor:
    """``(N, n)`` values from leaf rows ``(n*k, N)`` (a top-down pass's) holding one 1 per variable and column."""
    values = torch.arange(k, dtype=leaf_rows.dtype, device=leaf_rows.device).view(1, -1, 1)
    return (leaf_rows.view(n, k, -1) * values).sum(1).t().long()


def scored(xc: Tensor, values: Tensor, unsat: Tensor) -> tuple[Tensor, Tensor]:
    """Assignments ``(S, b, n)`` and their log-weights ``(S, b)`` under ``xc`` ``(b, n, k)``; sentinels (-1,
    ``-inf``) where ``unsat``."""
    log_prob = xc.unsqueeze(0).expand(values.shape[0], *xc.shape).gather(3, values.unsqueeze(3)).squeeze(3).sum(2)
    return (values.masked_fill(unsat.view(1, -1, 1), -1),
            log_prob.masked_fill(unsat.view(1, -1), float("-inf")))


class Evaluate(torch.autograd.Function):
    """The roots' values ``(R, N)`` under a semiring, with the backward pass of :func:`top_down`.

    Every tensor it needs is an argument (``meta`` is a tuple of Python ints, ``name`` a string), so
    ``torch.compile`` traces it into one graph and CUDA graphs can capture it: nothing in either pass
    reads a tensor value on the host.

    The backward pass is differentiable: where autograd records it (``create_graph=True``, so grad mode
    is on inside it) it is the gradient of :func:`evaluate_differentiable` at the saved leaves instead of
    :func:`top_down`, the same values to rounding, so second (and higher) derivatives are exact.  Without
    ``create_graph`` the fast :func:`top_down` runs and nothing more is kept than the weights.
    """

    @staticmethod
    def forward(ctx, leaves: Tensor, name: str, meta: tuple, n_slots: int, roots: Tensor, *indices: Tensor) -> Tensor:
        kept: list[Tensor | None] = []
        buf = bottom_up(leaves, meta, n_slots, indices, semiring(name), kept)  # (n_slots, N)
        ctx.name, ctx.meta, ctx.n_slots = name, meta, n_slots
        ctx.save_for_backward(leaves, roots, *indices, *kept)
        return buf.index_select(0, roots)  # (R, N)

    @staticmethod
    def backward(ctx, grad_roots: Tensor):  # (R, N)
        leaves, roots, *saved = ctx.saved_tensors
        indices, kept = saved[:len(ctx.meta)], saved[len(ctx.meta):]
        if torch.is_grad_enabled():  # create_graph=True: a backward autograd can differentiate again
            values = evaluate_differentiable(leaves, ctx.meta, indices, roots, semiring(ctx.name))
            grad_leaves, = torch.autograd.grad(values, leaves, grad_roots, create_graph=True)
        else:
            grad = grad_roots.new_zeros(ctx.n_slots, grad_roots.shape[1])
            grad.index_add_(0, roots, grad_roots)
            grad_leaves = top_down(grad, ctx.meta, indices, lambda g: kept[g])[2:2 + leaves.shape[0]]
        return (grad_leaves, None, None, None, None) + (None,) * len(indices)


class FirstOrderOnly(torch.autograd.Function):
    """The identity, whose backward refuses ``create_graph=True`` by name; it guards :meth:`Circuit.compiled`.

    ``torch.compile`` traces :class:`Evaluate`'s backward once, with no graph recorded, so a second
    derivative through a compiled pass would silently miss the circuit's part (backends ``eager`` and
    ``aot_eager``; inductor refuses with a message about donated buffers).
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("circuit.compiled() is differentiable once: torch.compile traces the circuit's backward "
                               "pass without recording a graph, so create_graph=True (second derivatives, gradient "
                               "penalties, Hessian-vector products) through it would be wrong; call circuit.log_prob "
                               "(not compiled), whose derivatives of every order are exact")
        return grad


class MPE(NamedTuple):
    """:meth:`pseudosl.Circuit.mpe`: a most probable model per example."""

    values: Tensor
    """``(B, n)`` int64; ``-1`` where the constraint has no model."""
    log_prob: Tensor
    """``(B,)`` ``sum_v x[b, v, values[b, v]]``; ``-inf`` where the constraint has no model."""


class Samples(NamedTuple):
    """:meth:`pseudosl.Circuit.sample`: ``S`` exact samples of ``q(. | alpha AND allowed)`` per example."""

    values: Tensor
    """``(S, B, n)`` int64; ``-1`` where the constraint has no model."""
    log_prob: Tensor
    """``(S, B)`` ``sum_v x[b, v, y_v]`` of each sample; ``-inf`` where the constraint has no model."""
    log_partition: Tensor
    """``(B,)`` ``log P(alpha AND allowed)``: ``log_prob - log_partition`` = ``log q(y | alpha AND allowed)``."""
