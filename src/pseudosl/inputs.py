"""The inputs of a circuit's passes: log-probabilities ``x`` and ``allowed`` masks, checked and brought to
``(B, n, k)`` (see :mod:`pseudosl.circuit` for the conventions).  :class:`~pseudosl.Circuit` calls these with
its ``n_vars`` and ``n_values``; :func:`apply_allowed` is also ``pseudosl.circuit.apply_allowed``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validation
from ._validation import require
from .logic.errors import check_int
from .numerics import log1mexp

__all__ = ["check_shape", "categorical", "check_allowed", "check_root", "apply_allowed"]


def check_shape(x: Tensor, n: int, k: int, device: torch.device) -> bool:
    """Type, layout, device and shape of ``x`` (host-side, free); whether it is the Boolean ``(B, n)`` form."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    _validation.check_dense("x", x)
    _validation.check_device("x", x, device)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor of log-probabilities, got dtype {x.dtype}")
    if x.dim() == 2 and k == 2 and x.shape[1] == n:
        return True
    if x.dim() != 3 or x.shape[1:] != (n, k):
        boolean = f", or (B, {n}) for log P(true) of Boolean variables" if k == 2 else ""
        raise ValueError(f"x must have shape (B, {n}, {k}) ({n} positions with {k} values each){boolean}; "
                         f"got {tuple(x.shape)}")
    return False


def categorical(x: Tensor, boolean: bool, check: bool) -> Tensor:
    """``x`` (shape-checked by :func:`check_shape`; ``boolean``: its ``(B, n)`` form) as ``(B, n, k)``
    log-probabilities, its values checked when ``check`` (no NaN, no ``+inf``, Boolean ``log P(true) <= 0``)."""
    if boolean:
        if check:
            require(~(x > 0).any(), "Boolean input (B, n) holds log P(X = true) and must be <= 0; "
                                     "pass log-probabilities (e.g. F.logsigmoid(logits)), not logits")
        x = torch.stack([log1mexp(x), x], dim=-1)
    if check:
        require(~torch.isnan(x).any(),
                 "x contains NaN; the circuit needs log-probabilities (use -inf for probability 0)")
        require(~torch.isposinf(x).any(), "x contains +inf; log-probabilities are at most 0")
    return x


def check_allowed(allowed: object, shape: tuple[int, int, int], device: torch.device) -> None:
    """Refuse ``allowed`` unless it is a dense bool tensor of ``shape`` (``(B, n, k)``) on ``device``."""
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool tensor, got {getattr(allowed, 'dtype', type(allowed).__name__)}")
    _validation.check_dense("allowed", allowed)
    _validation.check_device("allowed", allowed, device)
    if allowed.shape != shape:
        raise ValueError(f"allowed must have shape (B, n, k) = {shape}, got {tuple(allowed.shape)}")


def check_root(root: object, n_roots: int) -> int:
    """``root`` as the index of one of ``n_roots`` roots (:func:`~pseudosl.logic.errors.check_int`, then the range)."""
    root = check_int("root", root, 0)
    if root >= n_roots:
        raise ValueError(f"root must be an int in 0..{n_roots - 1} (a root of the circuit), got {root}")
    return root


def apply_allowed(log_probs: Tensor, allowed: Tensor | None) -> Tensor:
    """Set ``log_probs`` to ``-inf`` where ``allowed`` is False (``allowed``: bool ``(B, n, k)``)."""
    if allowed is None:
        return log_probs
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool tensor, got {getattr(allowed, 'dtype', type(allowed).__name__)}")
    _validation.check_dense("allowed", allowed)
    _validation.check_device("allowed", allowed, log_probs.device)
    if allowed.shape != log_probs.shape:
        raise ValueError(f"allowed must have the shape of the log-probabilities {tuple(log_probs.shape)}, "
                         f"got {tuple(allowed.shape)}")
    return log_probs.masked_fill(~allowed, float("-inf"))
