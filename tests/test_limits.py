"""Bounded cost (issue 19): the compile front-ends refuse oversized inputs by name, before the work,
with limits the caller can raise, and survive a 4 GB address-space limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pseudosl
from pseudosl.constraints import simple_path
from pseudosl.logic.automaton import forbidden_sequences_dfa
from pseudosl.logic.errors import SizeLimitError


def test_automaton_size_is_estimated_before_building():
    with pytest.raises(SizeLimitError, match=r"over 100,000,000 positions needs circuit edges numbering about "
                                             r"[\d,]+, above max_edges=20,000,000"):
        pseudosl.compile_automaton(forbidden_sequences_dfa([[0, 1]], 2), 10**8, cache=False)
    with pytest.raises(SizeLimitError, match="transition table .* above max_edges=20,000,000 .*catch-all value"):
        forbidden_sequences_dfa([[0, 1]], n_values=10**9)
    with pytest.raises(SizeLimitError, match="max_edges=10"):
        pseudosl.compile_automaton(forbidden_sequences_dfa([[0, 1]], 3), 6, cache=False, max_edges=10)
    assert pseudosl.compile_automaton(forbidden_sequences_dfa([[0, 1]], 3), 6, cache=False, max_edges=None).n_vars == 6


def test_simple_path_states_are_bounded():
    with pytest.raises(SizeLimitError, match=r"simple_path 6x6 .*frontier states number [\d,]+, above max_nodes=100"):
        simple_path(6, 6, max_nodes=100, cache=False, progress=False)
    assert simple_path(6, 6, max_nodes=None, cache=False, progress=False).n_vars == 60


HUGE_INPUTS = textwrap.dedent("""
    import sys, numpy as np, pseudosl
    from pseudosl.logic.automaton import forbidden_sequences_dfa
    from pseudosl.logic.formula import Var
    tmp = sys.argv[1]
    open(f"{tmp}/million.cnf", "w").write("p cnf 1000000 1\\n1 0\\n")
    open(f"{tmp}/big.sdd", "w").write(f"sdd 1\\nL 0 0 {2**70}\\n")
    np.savez(f"{tmp}/huge.npz", shape=np.array([2_000_000_000, 2]), kind=np.array([3, 3], np.int8),
             var=np.zeros(2, int), value=np.array([0, 1]), offsets=np.zeros(3, int), children=np.zeros(0, int),
             roots=np.array([0]))
    cases = {
        "p cnf 2000000000 1": lambda: pseudosl.compile_cnf("p cnf 2000000000 1\\n1 0\\n"),
        "1e6-variable DIMACS file": lambda: pseudosl.compile_cnf(f"{tmp}/million.cnf"),
        "Var(10**6)": lambda: pseudosl.compile_formula(Var(10**6)),
        "literal 2**70": lambda: pseudosl.compile_cnf([[2**70]]),
        "CircuitBuilder(10**9)": lambda: pseudosl.CircuitBuilder(10**9),
        "10**8 positions": lambda: pseudosl.compile_automaton(forbidden_sequences_dfa([[0, 1]], 2), 10**8),
        "10**9 values": lambda: forbidden_sequences_dfa([[0, 1]], n_values=10**9),
        ".sdd literal 2**70": lambda: pseudosl.Circuit.from_sdd_file(f"{tmp}/big.sdd"),
        ".npz with 2e9 variables": lambda: pseudosl.Circuit.load(f"{tmp}/huge.npz"),
        "literal 2**70, max_vars=None": lambda: pseudosl.compile_cnf([[2**70]], max_vars=None),
        "Var(2**70), max_vars=None": lambda: pseudosl.compile_formula(Var(2**70), max_vars=None),
        "CircuitBuilder(2**70), no limits": lambda: pseudosl.CircuitBuilder(2**70, max_vars=None, max_nodes=None),
        "y[2**70 - 1]": lambda: pseudosl.compile_categorical(pseudosl.positions(2**70, 2)[-1] == 1),
        "y[2**70 - 1], max_vars=None": lambda: pseudosl.compile_categorical(pseudosl.positions(2**70, 2)[-1] == 1,
                                                                             max_vars=None),
    }
    for name, run in cases.items():
        try:
            run()
            print(name, "-> no error")
        except Exception as e:  # report every failure, named or not
            print(name, "->", type(e).__name__)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is a Linux limit")
def test_huge_inputs_are_named_errors_under_a_4gb_address_space(tmp_path):
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    src = str(Path(pseudosl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
           "PSEUDOSL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", HUGE_INPUTS, str(tmp_path)], capture_output=True, text=True,
                          preexec_fn=limit, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]  # not killed, no MemoryError escaping
    lines = done.stdout.splitlines()
    assert len(lines) == 14, done.stdout
    assert all(line.endswith("-> SizeLimitError") for line in lines), done.stdout
