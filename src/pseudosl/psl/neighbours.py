"""Local conditionals of an autoregressive model: the generic (reference) path.

For a sample ``y`` of length ``n`` and an autoregressive model ``p(y | x)``, the pseudo-likelihood
approximation of the paper (Ahmed et al., NeurIPS 2023) is the fully-factorized

    p~_y(y~) = prod_i p(y~_i | y_{-i}, x),

    p(y_i = c | y_{-i}, x) = p(y^{i<-c} | x) / sum_{c'} p(y^{i<-c'} | x),

where ``y^{i<-c}`` is ``y`` with position ``i`` set to ``c`` (a Hamming-distance-1 neighbour).
:func:`local_conditionals` builds all ``n * k`` neighbours of every sample, evaluates the joint
log-likelihood of each with any callable ``log_joint`` and takes a ``log_softmax`` over ``c``
per position (the paper's Algorithm 1).  It is the reference every fast engine is tested against.

Shapes: ``sample (B, n)`` long; ``log_joint(y (N, n)) -> (N,)``; result ``(B, n, K)`` where ``K = k``
(all values) or the number of ``candidates`` per position.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .. import _validation

__all__ = ["local_conditionals", "neighbours", "check_sample", "LogJoint"]

LogJoint = Callable[[Tensor], Tensor]


def check_sample(sample: Tensor, n_values: int | None = None, name: str = "sample") -> Tensor:
    """Validate a ``(B, n)`` long tensor of values (detached; a 1-D sample is rejected, not guessed)."""
    if not isinstance(sample, Tensor):
        raise TypeError(f"{name} must be a torch.LongTensor of shape (B, n), got {type(sample).__name__}")
    if sample.dtype != torch.long:
        raise TypeError(f"{name} must have dtype torch.long (values, not one-hots or log-probs), got {sample.dtype}")
    if sample.dim() != 2:
        raise ValueError(f"{name} must have shape (B, n); got {tuple(sample.shape)} "
                         "(use sample[None] for a single sequence)")
    if sample.numel() and _validation.reads_values(sample) and (
            sample.min() < 0 or (n_values is not None and sample.max() >= n_values)):
        allowed = f"lie in 0..{n_values - 1}" if n_values is not None else "be >= 0"
        raise ValueError(f"{name} values must {allowed}; got range {int(sample.min())}..{int(sample.max())}")
    return sample.detach()


def _candidates(candidates: Tensor | None, batch: int, n: int, n_values: int | None,
                device: torch.device) -> Tensor:
    """``(B, n, K)`` long candidate values per position (all ``n_values`` values when ``None``)."""
    if candidates is None:
        if n_values is None:
            raise ValueError("local_conditionals needs the number of values: pass n_values=k "
                             "(or candidates=...), or a log_joint with an n_values attribute")
        return torch.arange(n_values, device=device).expand(batch, n, n_values)
    if not isinstance(candidates, Tensor) or candidates.dtype != torch.long:
        raise TypeError("candidates must be a long tensor of shape (n, K) or (B, n, K)")
    if candidates.dim() == 2:
        candidates = candidates.unsqueeze(0).expand(batch, -1, -1)
    if candidates.dim() != 3 or candidates.shape[:2] != (batch, n):
        raise ValueError(f"candidates must have shape ({n}, K) or ({batch}, {n}, K); got {tuple(candidates.shape)}")
    s = candidates.sort(-1).values
    if (s[..., 1:] == s[..., :-1]).any():
        raise ValueError("candidates must not repeat a value within a position (it would be counted twice)")
    return candidates.to(device)


def neighbours(sample: Tensor, candidates: Tensor) -> Tensor:
    """All Hamming-distance-1 neighbours: ``(B, n, K, n)`` with ``out[b, i, c] = sample[b]`` but position ``i``
    set to ``candidates[b, i, c]`` (the sample itself appears wherever its own value is a candidate)."""
    b, n = sample.shape
    k = candidates.shape[-1]
    out = sample[:, None, None, :].expand(b, n, k, n).clone()
    eye = torch.eye(n, dtype=torch.bool, device=sample.device)[None, :, None, :].expand(b, n, k, n)
    return torch.where(eye, candidates[..., None].expand(b, n, k, n), out)


def local_conditionals(log_joint: LogJoint, sample: Tensor, *, chunk_size: int | None = None,
                       candidates: Tensor | None = None, n_values: int | None = None,
                       recompute: bool = True) -> Tensor:
    """``log p(y_i = c | y_{-i})`` for every position and value: ``(B, n, K)``.

    Args:
        log_joint: ``y (N, n) long -> (N,)`` joint log-likelihood ``log p(y | x)``; context ``x`` via closure.
            Any callable works (a probability table, :meth:`RecurrentDecoder.log_joint`, an engine).
        sample: ``(B, n)`` long, the anchor sequences ``y`` (sampled, greedy, or taken from data).
        chunk_size: evaluate at most this many neighbour sequences per ``log_joint`` call.  With autograd
            enabled and ``recompute=True`` each chunk is wrapped in activation checkpointing, so only the
            ``(N,)`` outputs are kept and the backward pass recomputes a chunk at a time (same gradients,
            RNG state restored, so dropout masks are replayed).
        candidates: optional ``(n, K)`` or ``(B, n, K)`` long values to consider per position (no repeats);
            the conditional is then normalised over the candidates only.
        n_values: ``k``; defaults to ``log_joint.n_values`` when present.
        recompute: see ``chunk_size``.

    Returns:
        ``(B, n, K)`` log-conditionals; ``result[b, i].logsumexp(-1) == 0``.

    Example:
        >>> import torch
        >>> table = torch.randn(3, 3, 3).log_softmax(-1)          # p(y_2 | y_0, y_1), a toy model
        >>> lj = lambda y: table[y[:, 0], y[:, 1], y[:, 2]]
        >>> local_conditionals(lj, torch.tensor([[0, 1, 2]]), n_values=3).shape
        torch.Size([1, 3, 3])
    """
    if n_values is None:
        n_values = getattr(log_joint, "n_values", None)
    sample = check_sample(sample, n_values if candidates is None else None)
    batch, n = sample.shape
    cand = _candidates(candidates, batch, n, n_values, sample.device)
    k = cand.shape[-1]
    if batch == 0:
        return torch.zeros(0, n, k, device=sample.device)
    flat = neighbours(sample, cand).reshape(-1, n)  # (B*n*K, n)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    step = chunk_size or flat.shape[0]
    outs = []
    for start in range(0, flat.shape[0], step):
        chunk = flat[start:start + step]
        if chunk_size is not None and recompute and torch.is_grad_enabled():
            out = checkpoint(log_joint, chunk, use_reentrant=False)
        else:
            out = log_joint(chunk)
        if out.shape != (chunk.shape[0],):
            raise ValueError(f"log_joint must map (N, n) sequences to (N,) log-likelihoods; "
                             f"got {tuple(out.shape)} for N={chunk.shape[0]}")
        outs.append(out)
    scores = torch.cat(outs).view(batch, n, k)
    return scores.log_softmax(-1)
