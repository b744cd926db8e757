"""One memory vocabulary (:mod:`pseudosl.memory`, issue 40 item 3): one free-memory function (a GPU's free memory;
on a CPU ``MemAvailable`` within the cgroup limit and ``ulimit -v``), one way to write a size, budgets in bytes named
``memory_budget`` on circuits and engines."""

from __future__ import annotations

import builtins
import io

import pytest
import torch

import pseudosl
from pseudosl import memory
from pseudosl.memory import check_budget, format_bytes, free_bytes


def _fake_files(monkeypatch, files: dict[str, str]) -> None:
    """``open`` of the listed paths reads the given text; other paths are missing."""
    real = builtins.open

    def fake(path, *args, **kwargs):
        if str(path) in files:
            return io.StringIO(files[str(path)])
        if str(path).startswith(("/proc/", "/sys/")):
            raise FileNotFoundError(path)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", fake)


@pytest.mark.parametrize("available_kib, cgroup_max, cgroup_current, want", [
    (8 << 20, "max", "0", 8 << 30),                            # no cgroup limit: MemAvailable
    (8 << 20, str(3 << 30), str(1 << 30), 2 << 30),           # the cgroup leaves 2 GiB of its 3
    (1 << 20, str(64 << 30), str(1 << 30), 1 << 30),          # the machine has less than the cgroup allows
    (8 << 20, str(1 << 30), str(5 << 30), 0)])                # over its limit already: nothing free
def test_free_bytes_on_a_cpu_is_memavailable_within_the_cgroup_limit(monkeypatch, available_kib, cgroup_max,
                                                                      cgroup_current, want):
    _fake_files(monkeypatch, {"/proc/meminfo": f"MemTotal: 99999999 kB\nMemAvailable: {available_kib} kB\n",
                              "/sys/fs/cgroup/memory.max": cgroup_max + "\n",
                              "/sys/fs/cgroup/memory.current": cgroup_current + "\n"})
    monkeypatch.setattr(memory, "_address_space_left", lambda: None)
    assert free_bytes("cpu") == want == free_bytes(torch.device("cpu"))


def test_free_bytes_without_meminfo_falls_back_to_the_physical_memory(monkeypatch):
    _fake_files(monkeypatch, {})
    monkeypatch.setattr(memory, "_address_space_left", lambda: None)
    got = free_bytes("cpu")
    assert got is None or got > 0
    assert free_bytes("meta") is None


def test_the_experiments_ask_the_same_function():
    """The config's preflight has no free-memory function of its own (it was ``config.available_memory``)."""
    from pseudosl.experiments import config
    assert config.free_bytes is memory.free_bytes and not hasattr(config, "available_memory")
    assert config.format_bytes is memory.format_bytes


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1000, "1000 B"), (1536, "1.5 KiB"), (5 * 2**20, "5.0 MiB"),
                                     (int(9.1 * 2**30), "9.1 GiB"), (3 * 2**40, "3.0 TiB"), (2**50, "1.0 PiB"),
                                     (2**62, "4.0 EiB"), (10**30, "8.67e+11 EiB")])
def test_one_way_to_write_a_size(n, text):
    assert format_bytes(n) == text


def test_budgets_are_bytes_named_memory_budget_everywhere():
    circuit = pseudosl.compile_cnf([[1, 2]], cache=False)
    assert not hasattr(circuit, "chunk_bytes")
    circuit.memory_budget = 1 << 20
    assert circuit.memory_budget == 1 << 20
    assert check_budget(None) is None and check_budget(7) == 7
    with pytest.raises(TypeError, match=r"memory_budget must be an int, got str '1G'.* \(engine\.memory_budget is a "
                                        r"number of bytes, or None for the default: a quarter\); write an int"):
        check_budget("1G", "engine.memory_budget", "a quarter")
    with pytest.raises(ValueError, match="memory_budget must be >= 1, got -3"):
        check_budget(-3)
