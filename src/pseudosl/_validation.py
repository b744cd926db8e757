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
