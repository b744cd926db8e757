"""What a circuit pass may take: the memory free on a device, chunks within a budget, and checks before the work.

A pass without autograd runs in chunks of at most :attr:`pseudosl.Circuit.chunk_bytes` (:func:`chunks`).
What cannot be chunked (a differentiable pass, a query's result) is compared with the memory free on its
device before anything is allocated (:func:`check_fits`): a request that cannot fit, or whose result no
tensor could hold (more than ``2**63 - 1`` values), is a ``MemoryError`` naming its size and the fix.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .logic.errors import check_int

__all__ = ["MAX_ELEMENTS", "Chunks", "chunks", "check_chunk_bytes", "check_fits", "free_bytes"]

MAX_ELEMENTS = 2**63 - 1
"""The most values one tensor can hold (torch sizes are int64)."""


class Chunks(Sequence[slice]):
    """``range(total)`` cut into slices of ``step`` items (one empty slice when ``total = 0``).

    Each slice is made when indexed, so any ``total`` costs nothing to cut (a list of them would
    itself exhaust memory for ``10**30`` items).
    """

    def __init__(self, total: int, step: int) -> None:
        self.total, self.step = total, step
        self._starts = range(0, max(total, 1), step)

    @property
    def count(self) -> int:
        """How many chunks (any number; ``len`` stops at ``sys.maxsize``)."""
        return -(-max(self.total, 1) // self.step)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> slice:  # type: ignore[override]
        start = self._starts[i]
        return slice(start, min(start + self.step, self.total))


def chunks(total: int, bytes_each: int, budget: int) -> Chunks:
    """``range(total)`` in chunks of at most ``budget`` bytes, ``bytes_each`` per item (one item at least;
    items of no bytes, e.g. samples of an empty batch, in one chunk)."""
    return Chunks(total, max(total, 1) if bytes_each <= 0 else max(1, budget // bytes_each))


def check_chunk_bytes(value: object) -> int | None:
    """``value`` as a valid :attr:`pseudosl.Circuit.chunk_bytes`: an int number of bytes >= 1, or None."""
    if value is None:
        return None
    fix = (" (Circuit.chunk_bytes is a number of bytes, or None for the default: 64 MiB on a CPU, 2 GiB on other "
           "devices); write an int, e.g. circuit.chunk_bytes = 64 * 2**20")
    try:
        return check_int("chunk_bytes", value, 1, fix)
    except TypeError as e:
        raise TypeError(f"{e}{fix}") from None


def check_fits(what: str, need: int, device: torch.device, fix: str, *, detail: str = "", elements: int = 0) -> None:
    """Raise ``MemoryError`` when ``need`` bytes exceed the memory free on ``device``, or ``elements`` (the
    values of the largest tensor asked for) exceed :data:`MAX_ELEMENTS`.

    The message reads ``"{what} needs about N GiB{detail}, more than the F GiB free on {device}: {fix}"``.
    """
    if elements > MAX_ELEMENTS:
        raise MemoryError(f"{what} asks for a result of {elements:.3g} values, more than any tensor can hold "
                          f"(2**63 - 1): {fix}")
    free = free_bytes(device)
    if free is not None and need > free:
        raise MemoryError(f"{what} needs about {_gib(need)} GiB{detail}, more than the {_gib(free)} GiB free on "
                          f"{device}: {fix}")


def _gib(n: int) -> str:
    g = n / 2**30
    return f"{g:.1f}" if g < 1e6 else f"{g:.3g}"


def free_bytes(device: torch.device) -> int | None:
    """Memory free for tensors on ``device`` (None where unknown: meta, other accelerators)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":  # Linux; elsewhere unknown
        try:
            with open("/proc/meminfo") as f:
                free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError, IndexError):
            return None
        return min(free, _address_space_left())
    return None


def _address_space_left() -> int:
    """What this process may still map under its address-space limit (``ulimit -v``); unlimited: a huge number."""
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return 1 << 62
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        return max(0, limit - used)
    except (ImportError, OSError, ValueError, IndexError):
        return 1 << 62
