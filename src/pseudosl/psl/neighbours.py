"""Local conditionals of an autoregressive model: the generic (reference) path.

For a sample ``y`` of length ``n`` and an autoregressive model ``p(y | x)``, the pseudo-likelihood
approximation of the paper (Ahmed et al., NeurIPS 2023) is the fully-factorized

    p~_y(y~) = prod_i p(y~_i | y_{-i}, x),

    p(y_i = c | y_{-i}, x) = p(y^{i<-c} | x) / sum_{c'} p(y^{i<-c'} | x),

where ``y^{i<-c}`` is ``y`` with position ``i`` set to ``c`` (a Hamming-distance-1 neighbour).
:func:`local_conditionals` builds all ``n * k`` neighbours of every sample, evaluates the joint
log-likelihood of each with any ``log_joint`` and takes a ``log_softmax`` over ``c`` per position
(the paper's Algorithm 1).  It is the reference every fast engine is tested against, and the path of
:class:`~pseudosl.psl.engine.LogJointEngine` (a bare ``log_joint`` made an engine by :func:`pseudosl.as_engine`).

Shapes: ``sample (B, n)`` long; ``log_joint(y (N, n), example (N,)) -> (N,)``, every row with the id of
the example it belongs to; result ``(B, n, K)`` where ``K = k`` (all values) or the number of
``candidates`` per position.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .. import checks
from ..checks import check_bool, check_candidates, check_int, check_positions, check_sample

__all__ = ["local_conditionals", "neighbours", "check_sample", "check_positions", "check_candidates",
           "check_log_joint_output", "LogJoint"]

LogJoint = Callable[[Tensor, Tensor], Tensor]  # (y (N, n), example (N,)) -> (N,)


def check_log_joint_output(out: object, rows: int) -> Tensor:
    """A ``log_joint``'s ``(rows,)`` output, refused by name unless floating log-probabilities: ``-inf`` (a sequence
    of probability 0) is legal, NaN and ``+inf`` are not (their values are read on CPU only, as every value check)."""
    if not isinstance(out, Tensor) or out.shape != (rows,):
        raise ValueError(f"log_joint must map (N, n) sequences to (N,) log-likelihoods; "
                         f"got {tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__} for N={rows}")
    if not out.is_floating_point():
        raise TypeError(f"log_joint returned {out.dtype} values; it must return floating log-probabilities "
                        "(e.g. .double() of its result), -inf for impossible sequences")
    if out.numel() and checks.reads_values(out):
        bad = out.detach()
        for name, hit in (("NaN", bad.isnan()), ("+inf", bad == float("inf"))):
            if hit.any():
                raise ValueError(f"log_joint returned {name} for {int(hit.sum())} of {rows} sequences (the first: row "
                                 f"{int(hit.nonzero()[0, 0])}); it must return finite log-probabilities, or -inf for "
                                 "impossible sequences")
    return out


def neighbours(sample: Tensor, candidates: Tensor) -> Tensor:
    """All Hamming-distance-1 neighbours: ``(B, n, K, n)`` with ``out[b, i, c] = sample[b]`` but position ``i``
    set to ``candidates[b, i, c]`` (the sample itself appears wherever its own value is a candidate)."""
    sample = check_sample(sample)
    b, n = sample.shape
    candidates = check_candidates(candidates, b, n, None, sample.device)
    k = candidates.shape[-1]
    out = sample[:, None, None, :].expand(b, n, k, n).clone()
    eye = torch.eye(n, dtype=torch.bool, device=sample.device)[None, :, None, :].expand(b, n, k, n)
    return torch.where(eye, candidates[..., None].expand(b, n, k, n), out)


def local_conditionals(log_joint: LogJoint, sample: Tensor, *, n_values: int | None = None,
                       candidates: Tensor | None = None, chunk_size: int | None = None, recompute: bool = True,
                       positions: Tensor | None = None, fill: float = 0.0) -> Tensor:
    """``log p(y_i = c | y_{-i})`` for every position and value: ``(B, n, K)`` (the paper's Algorithm 1).

    Args:
        log_joint: ``log_joint(y (N, n) long, example (N,) long) -> (N,)``, the joint log-likelihood
            ``log p(y_r | x_{example_r})`` of each row under the input of its example (``example[r] = b``
            for the neighbours of ``sample[b]``).  Rows carry their example, so any chunk is scored right.
        sample: ``(B, n)`` long, the anchor sequences ``y`` (sampled, greedy, or taken from data).
        n_values: ``k``, the values per position (unless ``candidates`` are given).
        candidates: optional ``(n, K)`` or ``(B, n, K)`` long values to consider per position (no repeats);
            the conditional is then normalised over the candidates only.
        chunk_size: evaluate at most this many neighbour sequences per ``log_joint`` call.  With autograd
            enabled and ``recompute=True`` each chunk is wrapped in activation checkpointing, so only the
            ``(N,)`` outputs are kept and the backward pass recomputes a chunk at a time (same gradients,
            RNG state restored, so dropout masks are replayed).
        recompute: see ``chunk_size``.
        positions: optional ``(B, n)`` bool: only these positions' neighbours are scored; elsewhere the
            result is ``fill`` for every value.
        fill: see ``positions``.

    Returns:
        ``(B, n, K)`` log-conditionals; ``result[b, i].logsumexp(-1) == 0`` (where computed).

    Example:
        >>> import torch
        >>> table = torch.randn(3, 3, 3).log_softmax(-1)          # p(y_2 | y_0, y_1), a toy model
        >>> lj = lambda y, example: table[y[:, 0], y[:, 1], y[:, 2]]
        >>> local_conditionals(lj, torch.tensor([[0, 1, 2]]), n_values=3).shape
        torch.Size([1, 3, 3])
    """
    n_values = None if n_values is None else check_int("n_values", n_values, 1)
    sample = check_sample(sample, n_values if candidates is None else None)
    batch, n = sample.shape
    cand = check_candidates(candidates, batch, n, n_values, sample.device)
    k = cand.shape[-1]
    pos = check_positions(positions, batch, n, sample.device)
    chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size, 1, " (or None: one call)")
    recompute = check_bool("recompute", recompute)
    if batch == 0:
        return torch.zeros(0, n, k, device=sample.device)
    flat = neighbours(sample, cand).reshape(-1, n)  # (B*n*K, n), example-major
    example = torch.arange(batch, device=sample.device).repeat_interleave(n * k)
    if pos is not None:  # only the rows of the requested positions
        keep = pos[..., None].expand(batch, n, k).reshape(-1)
        flat, example = flat[keep], example[keep]
    step = chunk_size or max(1, flat.shape[0])
    outs = []
    for start in range(0, flat.shape[0], step):
        chunk, ids = flat[start:start + step], example[start:start + step]
        if chunk_size is not None and recompute and torch.is_grad_enabled():
            out = checkpoint(log_joint, chunk, ids, use_reentrant=False)
        else:
            out = log_joint(chunk, ids)
        outs.append(check_log_joint_output(out, chunk.shape[0]))
    scores = torch.cat(outs) if outs else torch.zeros(0, device=sample.device)
    if pos is None:
        return _check_possible(scores.view(batch, n, k), None).log_softmax(-1)
    full = torch.full((batch, n, k), fill, dtype=scores.dtype, device=scores.device)
    full = _check_possible(full.masked_scatter(pos[..., None].expand(batch, n, k), scores), pos)
    return torch.where(pos[..., None], full.log_softmax(-1), full)


def _check_possible(scores: Tensor, pos: Tensor | None) -> Tensor:
    """Refuse a computed position where ``log_joint`` gave every candidate ``-inf``: its conditional is 0/0 (the
    sample, a neighbour of itself, has probability 0 when its own value is a candidate).  Read on CPU only."""
    if scores.numel() and checks.reads_values(scores):
        dead = (scores.detach() == float("-inf")).all(-1)  # (B, n)
        if pos is not None:
            dead &= pos
        if dead.any():
            b, i = (int(v) for v in dead.nonzero()[0])
            raise ValueError(f"log_joint returned -inf for every candidate at position {i} of sample {b} "
                             f"({int(dead.sum())} such positions), so its conditional there is 0/0 (with every value a "
                             "candidate: the sample itself has probability 0 under the model); anchor on sequences the "
                             "model can produce (e.g. its own samples), or return finite log-probabilities")
    return scores
