"""When the library reads a tensor's values to check them, and how it reports a failed check.

Shape and dtype checks cost nothing and always run.  Value checks (ranges, NaN) read the data: on a
GPU that waits for the device (a host synchronisation in every call) and breaks CUDA-graph capture.
So by default they run on CPU tensors in eager mode only; on other devices a bad value surfaces
later, as a device-side assert of the indexing op that meets it.  :attr:`pseudosl.Circuit.validate_inputs`
overrides the default per circuit.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
