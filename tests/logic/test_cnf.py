"""compile_cnf / parse_dimacs vs brute force; DIMACS errors; the compile cache."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from assertions import assert_boolean_matches_oracle, assert_matches_oracle, lenient_spellings, random_log_weights
from cnfs import cnfs, satisfies
from pseudosl import compile_cnf
from pseudosl.cache import cache_dir, cached_circuit
from pseudosl.logic.cnf import parse_dimacs
from pseudosl.logic.errors import DimacsFormatError, SizeLimitError, UnsatisfiableError


@pytest.fixture(autouse=True, scope="module")
def _cache_in_tmp(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PSEUDOSL_CACHE", str(tmp_path_factory.mktemp("pseudosl-cache")))
        yield


@given(cnfs(), st.sampled_from(["balanced", "right", "left"]), st.booleans(), st.integers(0, 2**31 - 1))
def test_random_cnf_matches_oracle(cnf, vtree, minimize, seed):
    n, clauses = cnf
    truth = oracle.truth_of(lambda y: satisfies(clauses, y), n, 2)
    c = compile_cnf(clauses, n, vtree=vtree, minimize=minimize, allow_unsat=True, cache=False)
    assert (c.n_vars, c.n_values, c.n_roots) == (n, 2, 1)
    c.check()
    assert c.dag.is_false() == (not truth.any())
    np.testing.assert_array_equal(c.dag.evaluate(oracle.assignments(n, 2))[:, 0], truth)
    for normalised in (True, False):
        assert_matches_oracle(c, [truth], random_log_weights(seed, 3, n, 2, normalised))
    logits = 3.0 * torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    assert_boolean_matches_oracle(c, [truth], logits)


def test_unsat_raises_unless_allowed():
    with pytest.raises(UnsatisfiableError, match="allow_unsat=True"):
        compile_cnf([[1], [-1]], cache=False)
    with pytest.raises(UnsatisfiableError):
        compile_cnf([[]], n_vars=2, cache=False)
    c = compile_cnf([[1], [-1]], n_vars=2, allow_unsat=True, cache=False)
    x = torch.zeros(4, 2, dtype=torch.float64, requires_grad=True)
    lp = c.log_prob(torch.nn.functional.logsigmoid(x))
    assert torch.isneginf(lp).all()
    assert issubclass(UnsatisfiableError, ValueError)


def test_empty_clause_list_is_true():
    c = compile_cnf([], n_vars=3, cache=False)
    x = random_log_weights(0, 2, 3, 2, normalised=True)
    torch.testing.assert_close(c.log_prob(x), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="n_vars"):
        compile_cnf([], cache=False)


@pytest.mark.parametrize("bad, err", [
    ([[1, 0]], ValueError), ([[1.5]], TypeError), ([[True]], TypeError), ("1 2 0", FileNotFoundError),
    ([1, 2], TypeError),
])
def test_bad_clauses(bad, err):
    with pytest.raises(err):
        compile_cnf(bad, cache=False)


def test_n_vars_smaller_than_clauses():
    with pytest.raises(ValueError, match="n_vars >= 3"):
        compile_cnf([[1, 3]], n_vars=2, cache=False)
    with pytest.raises(ValueError, match="vtree"):
        compile_cnf([[1, 3]], vtree="diagonal", cache=False)


# -- DIMACS -------------------------------------------------------------------------------------
def test_parse_dimacs_text_and_file(tmp_path):
    text = "c a comment\np cnf 3 3\n1 -2 0 2\n3 0\n-1 0\n%\n0\n"
    assert parse_dimacs(text) == (3, [[1, -2], [2, 3], [-1]])
    path = tmp_path / "f.cnf"
    path.write_text(text)
    assert parse_dimacs(path) == parse_dimacs(str(path)) == (3, [[1, -2], [2, 3], [-1]])
    c = compile_cnf(path, cache=False)
    truth = oracle.truth_of(lambda y: satisfies([[1, -2], [2, 3], [-1]], y), 3, 2)
    np.testing.assert_array_equal(c.dag.evaluate(oracle.assignments(3, 2))[:, 0], truth)


@pytest.mark.parametrize("text, match", [
    ("1 2 0\n", r"<text>:1: clause before the 'p cnf"),
    ("c only comments\nc\n", r"no 'p cnf"),
    ("p cnf 2 1\np cnf 2 1\n1 0\n", r"<text>:2: second 'p cnf' header"),
    ("p cnf two 1\n1 0\n", r"<text>:1: malformed header"),
    ("p dnf 2 1\n1 0\n", r"malformed header"),
    ("p cnf 2 3\n1 0\n2 0\n", r"declares 3 clauses but the file has 2; truncated"),
    ("p cnf 2 1\n1 0\n2 0\n", r"declares 1 clauses but the file has 2"),
    ("p cnf 2 1\n1 3 0\n", r"<text>:2: literal 3 is out of range"),
    ("p cnf 2 1\n1 x 0\n", r"<text>:2: literal: expected an integer, got 'x'"),
    ("p cnf 2 1\n1 2\n", r"<text>:2: the last clause \[1, 2\] is not terminated by 0"),
])
def test_dimacs_errors(text, match):
    with pytest.raises(DimacsFormatError, match=match):
        parse_dimacs(text)


def _dimacs(n: int, clauses: list[list[int]]) -> str:
    return f"p cnf {n} {len(clauses)}\n" + "".join(" ".join(map(str, c + [0])) + "\n" for c in clauses)


@given(cnfs(), st.data())
def test_dimacs_numbers_are_read_strictly(cnf, data):
    """``1_0``, ``+3`` or a non-ASCII digit anywhere (header or literal) is an error naming the line and the token,
    never the number Python's ``int()`` would read; a ``-`` is a number only on a literal."""
    n, clauses = cnf
    lines = _dimacs(n, clauses).splitlines()
    assert parse_dimacs("\n".join(lines) + "\n") == (n, clauses)  # the control: the file as written parses
    line = data.draw(st.integers(0, len(lines) - 1), label="line")
    fields = lines[line].split()
    at = data.draw(st.integers(2, 3) if line == 0 else st.integers(0, len(fields) - 1), label="field")
    value = int(fields[at])
    token = data.draw(lenient_spellings(abs(value), signs=line == 0), label="token")
    fields[at] = "-" + token if value < 0 else token
    lines[line] = " ".join(fields)
    with pytest.raises(DimacsFormatError, match=rf"^<text>:{line + 1}: .*expected an? (non-negative )?integer, "
                                                rf"got {re.escape(repr(fields[at]))}"):
        parse_dimacs("\n".join(lines) + "\n")


def test_strict_number_error_names_the_file(tmp_path):
    path = tmp_path / "f.cnf"
    for text, token in [("p cnf 1_0 1\n1 0\n", "'1_0'"), ("p cnf 3 1\n\uff13 0\n", "'\uff13'"),
                        ("p cnf 3 1\n-\u0663 0\n", "'-\u0663'"), ("p cnf +2 1\n1 0\n", "'+2'")]:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DimacsFormatError, match=re.escape(f"{path}:") + r"\d: .*got " + re.escape(token)):
            compile_cnf(path, cache=False)


@given(cnfs())
def test_a_byte_order_mark_at_the_start_is_skipped(cnf):
    """Windows editors start UTF-8 files with U+FEFF: the file parses as without it (text, and file on disk);
    anywhere else it is a token that is not a number."""
    n, clauses = cnf
    text = _dimacs(n, clauses)
    assert parse_dimacs("\ufeff" + text) == (n, clauses)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bom.cnf"
        path.write_text(text, encoding="utf-8-sig")
        assert path.read_bytes()[:3] == b"\xef\xbb\xbf"
        assert parse_dimacs(path) == parse_dimacs(str(path)) == (n, clauses)
    if clauses and clauses[0]:
        with pytest.raises(DimacsFormatError, match=r"<text>:2: literal: expected an integer, got '\\ufeff"):
            parse_dimacs(text.replace("\n", "\n\ufeff", 1))


def test_binary_dimacs_is_named(tmp_path):
    path = tmp_path / "random.cnf"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DimacsFormatError, match=r"random\.cnf: not a text DIMACS CNF file \(byte 128"):
        compile_cnf(path, cache=False)
    with pytest.raises(DimacsFormatError, match="malformed header"):
        parse_dimacs("p cnf \u00b2 1\n1 0\n")  # a superscript two is a digit to str.isdigit, not to int


@pytest.mark.parametrize("source, match", [
    ("p cnf 2000000000 1\n1 0\n", r"n_vars \(from the DIMACS header\) is 2,000,000,000, above max_vars=100,000"),
    ([[2**70]], r"n_vars \(from the largest variable of the clauses\) is 1,180,591,620,717,411,303,424, above max_vars"),
])
def test_huge_cnf_is_refused_before_any_work(source, match):
    with pytest.raises(SizeLimitError, match=match):
        compile_cnf(source)


def test_size_limits_can_be_raised():
    with pytest.raises(SizeLimitError, match="n_vars is 6, above max_vars=5"):
        compile_cnf([[1, 2]], n_vars=6, max_vars=5, cache=False)
    assert compile_cnf([[1, 2]], n_vars=6, max_vars=6, cache=False).n_vars == 6
    clauses = [[v, -(v % 12 + 1)] for v in range(1, 13)] + [[1, 5, 9]]
    with pytest.raises(SizeLimitError, match="compiling through PySDD: .* above max_nodes=10"):
        compile_cnf(clauses, max_nodes=10, cache=False)
    c = compile_cnf(clauses, max_nodes=None, cache=False)
    truth = oracle.truth_of(lambda y: satisfies(clauses, y), 12, 2)
    np.testing.assert_array_equal(c.dag.evaluate(oracle.assignments(12, 2))[:, 0], truth)


def test_dimacs_error_names_file(tmp_path):
    path = tmp_path / "broken.cnf"
    path.write_text("p cnf 2 2\n1 2 0\n")
    with pytest.raises(DimacsFormatError, match=r"broken\.cnf:2: .*truncated"):
        compile_cnf(path, cache=False)
    assert issubclass(DimacsFormatError, ValueError)


# -- cache ----------------------------------------------------------------------------------------
def test_cache_hit_returns_equal_circuit(tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
    clauses = [[1, 2, -3], [-1, 3], [2, 4]]
    first = compile_cnf(clauses)
    files = sorted((tmp_path / "cache").iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no stray temporary files
    calls = []
    again = cached_circuit(("cnf", 4, tuple(map(tuple, clauses)), "balanced", True),
                                    lambda: calls.append(1))
    assert not calls and again.fingerprint() == first.fingerprint()
    assert compile_cnf(clauses).fingerprint() == first.fingerprint()
    # other options -> another entry
    compile_cnf(clauses, vtree="right")
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_cache_rebuilds_corrupt_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    c = compile_cnf([[1, 2]])
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unreadable"):
        again = compile_cnf([[1, 2]])
    assert again.fingerprint() == c.fingerprint()
    assert compile_cnf([[1, 2]]).fingerprint() == c.fingerprint()


def test_cache_disabled_and_bad_build(tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    compile_cnf([[1, 2]], cache=False)
    assert not list(tmp_path.iterdir())
    with pytest.raises(TypeError, match="must return a pseudosl.Circuit"):
        cached_circuit("key", lambda: 3)
    with pytest.raises(TypeError, match="cache key"):
        cached_circuit(object(), lambda: 3)


def test_cache_rebuilds_truncated_tampered_and_swapped_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    xor = compile_cnf([[1, 2], [-1, -2]])
    (entry,) = tmp_path.iterdir()
    good = entry.read_bytes()
    entry.write_bytes(good[:len(good) // 2])  # truncated: BadZipFile / EOFError inside np.load
    with pytest.warns(UserWarning, match="is not a saved pseudosl circuit"):
        assert compile_cnf([[1, 2], [-1, -2]]).fingerprint() == xor.fingerprint()
    with np.load(entry) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["children"] = arrays["children"][::-1].copy()  # tampered, checksum kept
    np.savez(entry, **arrays)
    with pytest.warns(UserWarning, match="fails its checksum"):
        assert compile_cnf([[1, 2], [-1, -2]]).fingerprint() == xor.fingerprint()
    implies = compile_cnf([[-1, 2]])
    (other,) = set(tmp_path.iterdir()) - {entry}
    other.write_bytes(entry.read_bytes())  # a valid circuit under another key
    with pytest.warns(UserWarning, match="holds the circuit saved as"):
        again = compile_cnf([[-1, 2]])
    assert again.fingerprint() == implies.fingerprint() != xor.fingerprint()
    assert compile_cnf([[-1, 2]]).fingerprint() == implies.fingerprint()  # rebuilt and replaced
