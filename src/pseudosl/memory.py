"""The library's memory vocabulary: the memory free on a device, budgets in bytes, chunks within a budget, one way
to write a size, and checks before the work.

:func:`free_bytes` is the one answer to "how much memory is free" (a GPU's free memory; on a CPU ``MemAvailable``
within the process's cgroup limit and its address-space limit); :func:`format_bytes` the one way to write a size.
A budget is a number of bytes named ``memory_budget`` wherever it appears (:attr:`pseudosl.Circuit.memory_budget`,
``CausalLMEngine(memory_budget=)``), checked by :func:`check_budget`; a number of rows per model call is named
``chunk_size``.

A pass without autograd runs in chunks of at most :attr:`pseudosl.Circuit.memory_budget` bytes (:func:`chunks`).
What cannot be chunked (a differentiable pass, a query's result) is compared with the memory free on its
device before anything is allocated (:func:`check_fits`): a request that cannot fit, or whose result no
tensor could hold (more than ``2**63 - 1`` values), is a ``MemoryError`` naming its size and the fix.

A circuit pass (:class:`PassPlanner`) needs about ``itemsize x B x (n_slots + largest gather)`` bytes, plus the
weights it keeps (``sum count x E`` per row) when it goes back down.  Passes without autograd (``log_prob`` under
``torch.no_grad()``, the queries) run in chunks of the batch (and of the samples), filling one preallocated result;
a differentiable ``log_prob`` whose estimate exceeds the memory free on its device, or a query whose result would
not fit (``sample``'s ``(S, B, n)``), is refused before anything is allocated.
"""

from __future__ import annotations

import os
from typing import Sequence

import torch

from .logic.checks import check_int

__all__ = ["MAX_ELEMENTS", "Chunks", "chunks", "chunk_limit", "check_budget", "check_fits", "free_bytes", "format_bytes",
           "PassPlanner", "result_dtype", "itemsize", "release_freed_cpu_memory"]

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


def check_budget(value: object, where: str = "memory_budget", default: str = "") -> int | None:
    """``value`` as a ``memory_budget``: an int number of bytes >= 1, or None (the default, which ``default`` says);
    a float (``1e6``), a string (``"64MB"``) or 0 is refused naming ``where`` (how it was set)."""
    if value is None:
        return None
    fix = (f" ({where} is a number of bytes, or None for the default{': ' + default if default else ''}); write an "
           f"int, e.g. {where} = 64 * 2**20")
    try:
        return check_int("memory_budget", value, 1, fix)
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
        raise MemoryError(f"{what} needs about {format_bytes(need)}{detail}, more than the {format_bytes(free)} free "
                          f"on {device}: {fix}")


def chunk_limit(memory_budget: int | None, device: torch.device) -> int:
    """The bytes of one chunk of a circuit pass: ``memory_budget``, or by default 64 MiB on a CPU and 2 GiB on other
    devices."""
    if memory_budget is not None:
        return memory_budget
    return 1 << 26 if device.type == "cpu" else 1 << 31


def result_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype of a pass on ``x`` (half precision is evaluated in float32)."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def itemsize(x: torch.Tensor) -> int:
    """Bytes per value of a pass on ``x``."""
    return torch.finfo(result_dtype(x)).bits // 8


class PassPlanner:
    """The memory a circuit's passes take: per batch row ``pass_slots`` values (the node buffer and the largest
    gather), plus ``kept_slots`` (the weights kept to go back down) when a pass keeps them; checks before the work
    against ``budget``, the bytes of one chunk (:func:`chunk_limit`)."""

    def __init__(self, pass_slots: int, kept_slots: int) -> None:
        self.pass_slots, self.kept_slots = pass_slots, kept_slots

    def row_bytes(self, x: torch.Tensor, keep: bool) -> int:
        """Estimated working bytes per batch row of a pass (keeping the weights to go back down or not)."""
        return itemsize(x) * (self.pass_slots + (self.kept_slots if keep else 0))

    def check_pass(self, x: torch.Tensor, budget: int) -> None:
        """Refuse, before allocating, a differentiable pass larger than the memory free on ``x``'s device."""
        need = x.shape[0] * self.row_bytes(x, keep=True)
        if need <= budget or torch.compiler.is_compiling():
            return
        check_fits(
            f"log_prob of a batch of {x.shape[0]} rows with gradients", need, x.device,
            f"pass smaller batches, or evaluate without gradients (under torch.no_grad() the batch runs in chunks "
            f"of circuit.memory_budget = {budget} bytes)",
            detail=f" ({self.pass_slots} node and term values plus {self.kept_slots} kept weights per row, "
                   f"{need // x.shape[0]} bytes)")

    def check_result(self, what: str, x: torch.Tensor, result: str, values: int, value_bytes: int, chunk_rows: int,
                     keep: bool, fix: str, budget: int) -> None:
        """Refuse, before any work, a query whose result (``values`` values of ``value_bytes`` bytes in all, in
        the tensors ``result``) and one chunk's pass exceed the memory free on ``x``'s device, or a tensor."""
        need = value_bytes + chunk_rows * self.row_bytes(x, keep)
        if need <= budget and values <= MAX_ELEMENTS:
            return  # within one chunk's budget: no need to ask the device
        check_fits(what, need, x.device, fix, detail=f" for its result {result} and one chunk of {chunk_rows} "
                   f"rows", elements=values)


def format_bytes(n: float) -> str:
    """A size as people read it: ``1536`` -> ``'1.5 KiB'``, ``3 * 2**30`` -> ``'3.0 GiB'``; beyond 1024 PiB in
    EiB with three significant digits (``'8.67e+11 EiB'``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB" if n < 1e3 else f"{n:.3g} EiB"


def free_bytes(device: torch.device | str) -> int | None:
    """The memory free for new tensors on ``device`` (None where unknown: meta, other accelerators): a GPU's free
    memory; on a CPU (Linux) ``MemAvailable``, within this process's cgroup (v2) limit and its address-space limit
    (``ulimit -v``), or the physical memory where ``/proc/meminfo`` is missing."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    available = _meminfo_available()
    found = [b for b in (available if available is not None else _physical_memory(), _cgroup_room(),
                         _address_space_left()) if b is not None]
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _cgroup_room() -> int | None:
    """The memory left under this process's cgroup (v2) limit, ``None`` without one."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, int(limit) - int(f.read()))
    except (OSError, ValueError):
        return None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _address_space_left() -> int | None:
    """What this process may still map under its address-space limit (``ulimit -v``); ``None`` when unlimited."""
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        return max(0, limit - used)
    except (ImportError, OSError, ValueError, IndexError):
        return None


_LIBC: object = None


def release_freed_cpu_memory() -> bool:
    """Hand the CPU memory that freed tensors left in the C allocator's heap back to the system (glibc's
    ``malloc_trim(0)``); ``False`` where there is no glibc (a no-op).

    Work that allocates and frees blocks of varying sizes many times (the causal-LM engine's neighbour chunks) makes
    glibc keep the freed blocks: the process's resident memory grows well past what is live (measured on
    SmolLM2: 5 GiB and growing, against 0.3 GiB with large blocks returned at once).  Trimming between such pieces
    of work keeps it at what is live; it only releases memory that nothing uses.
    """
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes
            import ctypes.util
            name = ctypes.util.find_library("c")
            libc = ctypes.CDLL(name) if name else None
            _LIBC = libc if libc is not None and hasattr(libc, "malloc_trim") else False
        except OSError:
            _LIBC = False
    if _LIBC is False:
        return False
    _LIBC.malloc_trim(0)  # type: ignore[attr-defined]
    return True
