"""The argument checks every entry point shares, in one place: the torch-free ones of :mod:`pseudosl.logic.checks`
(:func:`check_int`, the one int check; :func:`check_bool`, the one switch check; sizes and limits), re-exported
here, and the tensor checks: tensors (dense, on the circuit's device, ids in range), a
circuit pass's inputs (log-probabilities ``x`` and ``allowed`` masks, brought to ``(B, n, k)``; see
:mod:`pseudosl.circuit` for the conventions), roots, and the samples, positions and candidates of the
pseudo-semantic loss.

When a check reads a tensor's values: shape and dtype checks cost nothing and always run.  Value checks
(ranges, NaN) read the data: on a GPU that waits for the device (a host synchronisation in every call) and
breaks CUDA-graph capture.  So by default they run on CPU tensors in eager mode only (:func:`reads_values`);
on other devices a bad value surfaces later, as a device-side assert of the indexing op that meets it.
:attr:`pseudosl.Circuit.validate_inputs` overrides the default per circuit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .logic.checks import (as_array, check_bool, check_in_range, check_int, check_int_array, check_limit,
                           check_states, check_vars, check_word, parse_int_token)
from .numerics import log1mexp

__all__ = ["check_int", "check_bool", "parse_int_token", "check_limit", "check_vars", "check_states", "check_word",
           "as_array", "check_int_array", "check_in_range", "reads_values", "require", "check_dense", "check_device",
           "check_ids", "check_shape", "categorical", "check_allowed", "check_root", "apply_allowed", "check_sample",
           "check_candidates", "check_positions", "check_generator"]


def reads_values(x: Tensor) -> bool:
    """Whether the default value checks on ``x`` run: on CPU tensors, outside ``torch.compile``."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def require(ok: Tensor, message: str) -> None:
    """Raise ``ValueError(message)`` unless the bool tensor ``ok`` holds; a device-side assert when traced."""
    if torch.compiler.is_compiling():
        torch._assert_async(ok, message)
    elif not bool(ok):
        raise ValueError(message)


def check_dense(name: str, t: Tensor) -> None:
    """Refuse a sparse (or nested, or other non-strided) tensor ``t`` by ``name``: every query reads every entry.

    Not densified silently: an entry a sparse tensor leaves out is 0, which for log-probabilities means
    probability 1 (and for a mask, False); ``t.to_dense()`` says that it is meant.
    """
    if t.layout != torch.strided or t.is_nested:
        kind = "a nested tensor" if t.is_nested else f"layout {t.layout}"
        raise TypeError(f"{name} must be a dense (strided) tensor, got {kind}: pass {name}.to_dense() if the entries "
                        f"it leaves out (0, i.e. log-probability 0 = probability 1, or False in a mask) are meant")


def check_device(name: str, t: Tensor, device: torch.device) -> None:
    """Refuse ``t`` unless it is on ``device`` (where the circuit's index tensors are), naming both and the fix."""
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the circuit is on {device}: move one to the other "
                         f"({name}.to({str(device)!r}) or circuit.to({name}.device))")


def check_ids(name: str, ids: Tensor, size: int, what: str = "ids") -> None:
    """Refuse ``ids`` (any shape) unless an integer tensor whose values (read where :func:`reads_values`) lie in
    ``0 .. size-1``: as an index a negative id would count from the end and a large one fail deep inside torch."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {what}, got {type(ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of {what}, got dtype {ids.dtype}")
    if ids.numel() and reads_values(ids) and bool((ids < 0).any() | (ids >= size).any()):
        raise ValueError(f"{name} must hold {what} in 0..{size - 1}; got range {int(ids.min())}..{int(ids.max())}")


def check_shape(x: Tensor, n: int, k: int, device: torch.device) -> bool:
    """Type, layout, device and shape of ``x`` (host-side, free); whether it is the Boolean ``(B, n)`` form."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    check_dense("x", x)
    check_device("x", x, device)
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
    check_dense("allowed", allowed)
    check_device("allowed", allowed, device)
    if allowed.shape != shape:
        raise ValueError(f"allowed must have shape (B, n, k) = {shape}, got {tuple(allowed.shape)}")


def check_root(root: object, n_roots: int, *, every_root: bool = False) -> int | None:
    """``root`` as the index of one of a circuit's ``n_roots`` roots (:func:`check_int`, then the range): the one
    check of a ``root=`` argument.

    ``None`` means the only root (``0``) -- refused by name for a circuit of several roots, where a query must be
    told which constraint to answer for -- or, where ``every_root``, every root (returned as ``None``).
    """
    if root is None:
        if every_root:
            return None
        if n_roots != 1:
            raise ValueError(f"this circuit has {n_roots} roots: pass root=r (0 <= r < {n_roots}) to choose the "
                             "constraint (the answer satisfies that root only), or compile the conjunction of the "
                             "constraints into one root")
        return 0
    root = check_int("root", root, 0)
    if root >= n_roots:
        raise ValueError(f"root must be an int in 0..{n_roots - 1} (a root of the circuit), got {root}")
    return root


def check_generator(generator: object, device: torch.device) -> None:
    """Refuse ``generator`` unless None or a ``torch.Generator`` on ``device``'s type (where ``x`` is)."""
    if generator is not None and (not isinstance(generator, torch.Generator)
                                  or generator.device.type != device.type):
        raise ValueError(f"generator must be a torch.Generator on {device.type} (where x is), got "
                         f"{generator.device if isinstance(generator, torch.Generator) else type(generator).__name__}")


def apply_allowed(log_probs: Tensor, allowed: Tensor | None) -> Tensor:
    """Set ``log_probs`` to ``-inf`` where ``allowed`` is False (``allowed``: bool ``(B, n, k)``)."""
    if allowed is None:
        return log_probs
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool tensor, got {getattr(allowed, 'dtype', type(allowed).__name__)}")
    check_dense("allowed", allowed)
    check_device("allowed", allowed, log_probs.device)
    if allowed.shape != log_probs.shape:
        raise ValueError(f"allowed must have the shape of the log-probabilities {tuple(log_probs.shape)}, "
                         f"got {tuple(allowed.shape)}")
    return log_probs.masked_fill(~allowed, float("-inf"))


def check_sample(sample: Tensor, n_values: int | None = None, name: str = "sample") -> Tensor:
    """Validate a ``(B, n)`` long tensor of values (detached; a 1-D sample is rejected, not guessed)."""
    if not isinstance(sample, Tensor):
        raise TypeError(f"{name} must be a torch.LongTensor of shape (B, n), got {type(sample).__name__}")
    if sample.dtype != torch.long:
        raise TypeError(f"{name} must have dtype torch.long (values, not one-hots or log-probs), got {sample.dtype}")
    if sample.dim() != 2:
        raise ValueError(f"{name} must have shape (B, n); got {tuple(sample.shape)} "
                         "(use sample[None] for a single sequence)")
    if sample.numel() and reads_values(sample) and (
            sample.min() < 0 or (n_values is not None and sample.max() >= n_values)):
        allowed = f"lie in 0..{n_values - 1}" if n_values is not None else "be >= 0"
        raise ValueError(f"{name} values must {allowed}; got range {int(sample.min())}..{int(sample.max())}")
    return sample.detach()


def check_candidates(candidates: Tensor | None, batch: int, n: int, n_values: int | None,
                     device: torch.device) -> Tensor:
    """``(B, n, K)`` long candidate values per position (all ``n_values`` values when ``None``), refused by name
    (shape, width, repeats, values outside ``0 .. n_values-1``) before any model runs."""
    if candidates is None:
        if n_values is None:
            raise ValueError("local_conditionals needs the number of values: pass n_values=k (or candidates=...)")
        return torch.arange(n_values, device=device).expand(batch, n, n_values)
    if not isinstance(candidates, Tensor) or candidates.dtype != torch.long:
        raise TypeError("candidates must be a long tensor of shape (n, K) or (B, n, K), got "
                        f"{candidates.dtype if isinstance(candidates, Tensor) else type(candidates).__name__}")
    if candidates.dim() == 2:
        candidates = candidates.unsqueeze(0).expand(batch, -1, -1)
    if candidates.dim() != 3 or candidates.shape[:2] != (batch, n):
        raise ValueError(f"candidates must have shape ({n}, K) or ({batch}, {n}, K); got {tuple(candidates.shape)}")
    k = candidates.shape[-1]
    if k < 1 or (n_values is not None and k > n_values):
        most = f"..{n_values}" if n_values is not None else ""
        raise ValueError(f"candidates must hold 1{most} values per position (the conditional is normalised over "
                         f"them); got K={k} (shape {tuple(candidates.shape)})")
    if candidates.numel() and reads_values(candidates):
        low, high = int(candidates.min()), int(candidates.max())
        if low < 0 or (n_values is not None and high >= n_values):
            allowed = f"0..{n_values - 1}" if n_values is not None else ">= 0"
            raise ValueError(f"candidates must be values {allowed} (the model's values per position); got "
                             f"range {low}..{high}")
        s = candidates.sort(-1).values
        if (s[..., 1:] == s[..., :-1]).any():
            raise ValueError("candidates must not repeat a value within a position (it would be counted twice)")
    return candidates.to(device)


def check_positions(positions: Tensor | None, b: int, n: int, device: torch.device) -> Tensor | None:
    """A ``(B, n)`` bool mask of the positions to compute, on ``device`` (``None`` = all)."""
    if positions is None:
        return None
    if not isinstance(positions, Tensor) or positions.dtype != torch.bool:
        raise TypeError("positions must be a bool tensor of shape (B, n)")
    if positions.shape != (b, n):
        raise ValueError(f"positions must have the sample's shape ({b}, {n}); got {tuple(positions.shape)}")
    return positions.to(device)
