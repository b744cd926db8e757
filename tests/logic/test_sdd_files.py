"""Circuit.from_sdd_file vs PySDD's own weighted model count; malformed files; extreme inputs."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from assertions import lenient_spellings
from oracle import log_prob_reference
from tolerances import ATOL64
from pseudosl import Circuit, compile_cnf
from pseudosl.logic.errors import SizeLimitError
from pseudosl.logic.sdd import SddFormatError

pysdd = pytest.importorskip("pysdd.sdd")

NAMES = ["sudoku_4", "4-grid", "seq_fun"]


def pysdd_log_wmc(root, mgr, lw: np.ndarray) -> tuple[float, np.ndarray]:
    """PySDD log-mode WMC and ``d log WMC / d log w`` (= ``literal_pr`` in log mode), ``(n, 2)``."""
    wmc = root.wmc(log_mode=True)
    n = mgr.var_count()
    for v in range(1, n + 1):
        wmc.set_literal_weight(mgr.literal(v), lw[v - 1, 1])
        wmc.set_literal_weight(mgr.literal(-v), lw[v - 1, 0])
    value = wmc.propagate()
    grad = np.array([[np.exp(wmc.literal_pr(mgr.literal(-v))), np.exp(wmc.literal_pr(mgr.literal(v)))]
                     for v in range(1, n + 1)])
    return value, grad


def load_pysdd(folder, name):
    vtree = pysdd.Vtree.from_file(str(folder / f"{name}.vtree").encode())
    mgr = pysdd.SddManager.from_vtree(vtree)
    return mgr, mgr.read_sdd_file(str(folder / f"{name}.sdd").encode())


@pytest.mark.parametrize("name", NAMES)
def test_matches_pysdd_wmc(bench_circuits, name):
    mgr, root = load_pysdd(bench_circuits, name)
    circuit = Circuit.from_sdd_file(bench_circuits / f"{name}.sdd", bench_circuits / f"{name}.vtree")
    assert circuit.n_vars == mgr.var_count()
    rng = np.random.default_rng(0)
    for trial in range(3):
        # normalised weights, then unnormalised ones
        lw = np.log(rng.uniform(0.05, 1.0, (circuit.n_vars, 2)))
        if trial == 0:
            lw -= np.logaddexp(lw[:, :1], lw[:, 1:])
        want, want_grad = pysdd_log_wmc(root, mgr, lw)
        x = torch.tensor(lw[None], requires_grad=True)
        got = circuit.log_prob(x)
        got.sum().backward()
        assert abs(got.item() - want) < ATOL64 * max(1.0, abs(want))
        np.testing.assert_allclose(x.grad[0].numpy(), want_grad, atol=ATOL64)
        ref = x.detach().clone().requires_grad_()
        log_prob_reference(circuit, ref).sum().backward()
        torch.testing.assert_close(ref.grad, x.grad, atol=ATOL64, rtol=0)


def test_sudoku_cnf_agrees_with_shipped_sdd(bench_circuits, tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    shipped = Circuit.from_sdd_file(bench_circuits / "sudoku_4.sdd", bench_circuits / "sudoku_4.vtree")
    compiled = compile_cnf(bench_circuits / "sudoku_4.cnf")
    assert compiled.n_vars == shipped.n_vars == 64
    x = torch.randn(4, 64, 2, dtype=torch.float64).log_softmax(-1)
    torch.testing.assert_close(compiled.log_prob(x), shipped.log_prob(x), atol=ATOL64, rtol=0)
    # a cache hit gives the same circuit
    assert compile_cnf(bench_circuits / "sudoku_4.cnf").fingerprint() == compiled.fingerprint()


@pytest.mark.parametrize("name", NAMES)
def test_extreme_inputs_have_finite_gradients(bench_circuits, name):
    circuit = Circuit.from_sdd_file(bench_circuits / f"{name}.sdd", bench_circuits / f"{name}.vtree")
    n = circuit.n_vars
    logits = (1e4 * torch.randn(3, n, dtype=torch.float64).sign()).requires_grad_()
    lp = circuit.log_prob(F.logsigmoid(logits))
    lp[torch.isfinite(lp)].sum().backward()
    assert not torch.isnan(lp).any() and torch.isfinite(logits.grad).all()
    # exact zeros: force the first variables (-inf on their other value) along a satisfying
    # prefix found greedily, so log P is finite but many OR children are exactly -inf
    x = torch.randn(3, n, 2, dtype=torch.float64).log_softmax(-1)
    for v in range(min(n, 16)):
        for value in (1, 0):
            trial = x.clone()
            trial[:, v, 1 - value], trial[:, v, value] = float("-inf"), 0.0
            if torch.isfinite(circuit.log_prob(trial)).all():
                x = trial
                break
    assert torch.isneginf(x).sum() == 3 * min(n, 16)
    x.requires_grad_()
    lp = circuit.log_prob(x)
    assert torch.isfinite(lp).all()
    lp.sum().backward()
    assert torch.isfinite(x.grad).all()
    ref = x.detach().clone().requires_grad_()
    log_prob_reference(circuit, ref).sum().backward()
    torch.testing.assert_close(ref.grad, x.grad, atol=ATOL64, rtol=0)


SDD_OK = "sdd 3\nL 0 0 1\nL 1 2 2\nD 2 1 1 0 1\n"
VTREE_OK = "vtree 3\nL 0 1\nL 2 2\nI 1 0 2\n"


@pytest.mark.parametrize("sdd, match", [
    ("sdd 4\nL 0 0 1\nL 1 2 2\nD 2 1 1 0 1\n", "header says 4 nodes but the file has 3; truncated"),
    ("L 0 0 1\n", "expected an integer|no 'sdd N' header"),
    ("sdd 2\nL 0 0 1\nD 1 1 1 0 5\n", "refers to node 5"),
    ("sdd 2\nL 0 0 1\nD 1 1 2 0 0\n", "says 2 elements"),
    ("sdd 1\nL 0 0 x\n", "expected an integer"),
    ("sdd 1\nQ 0 0 1\n", "unknown line"),
    ("sdd 1\nL 0 0 0\n", "literal 0"),
    ("sdd 0\n", r"bad\.sdd:1: header says 0 nodes; an SDD file has at least one"),
    ("sdd 1\nsdd 1\nL 0 0 1\n", r"bad\.sdd:2: second 'sdd N' header"),
    ("c a comment\nsdd 3\nL 0 0 1\nL 0 2 2\nD 2 1 1 0 0\n", r"bad\.sdd:4: node id 0 is defined again \(first on line 3\)"),
    ("sdd 3\nL 0 0 1\nL 1 2 2\nD 2 1 1 0 one\n", r"bad\.sdd:4: field 6 of 'D 2 1 1 0 one': expected a non-negative integer, got 'one'"),
    ("sdd 2\nL 0 0 1\nD 1 1 0\n", "decision node says 0 elements"),
    ("sdd 2\nL 0 x 1\nT 1\n", r"bad\.sdd:2: field 3 of 'L 0 x 1': expected a non-negative integer, got 'x'"),
])
def test_malformed_sdd(tmp_path, sdd, match):
    path = tmp_path / "bad.sdd"
    path.write_text(sdd)
    with pytest.raises(SddFormatError, match=match):
        Circuit.from_sdd_file(path)


@pytest.mark.parametrize("vtree, match", [
    ("vtree 5\nL 0 1\nL 2 2\nI 1 0 2\n", "truncated"),
    ("L 0 1\n", "no 'vtree N' header"),
    ("vtree 3\nL 0 1\nX 2 2\n", "unknown vtree line"),
    ("vtree 3\nL 0\n", "expected an integer"),
])
def test_malformed_vtree(tmp_path, vtree, match):
    (tmp_path / "ok.sdd").write_text(SDD_OK)
    (tmp_path / "bad.vtree").write_text(vtree)
    with pytest.raises(SddFormatError, match=match):
        Circuit.from_sdd_file(tmp_path / "ok.sdd", tmp_path / "bad.vtree")


@st.composite
def pysdd_files(draw) -> tuple[str, str]:
    """The ``.sdd`` and ``.vtree`` texts PySDD writes for a random CNF over 1..5 variables."""
    n = draw(st.integers(1, 5))
    lit = st.integers(1, n).flatmap(lambda v: st.sampled_from([v, -v]))
    clauses = draw(st.lists(st.lists(lit, min_size=1, max_size=3), max_size=5))
    mgr = pysdd.SddManager(n, 0)
    root = mgr.true()
    for clause in clauses:
        disjunction = mgr.false()
        for v in clause:
            disjunction = disjunction | mgr.literal(v)
        root = root & disjunction
    with tempfile.TemporaryDirectory() as tmp:
        root.save(f"{tmp}/f.sdd".encode())
        mgr.vtree().save(f"{tmp}/f.vtree".encode())
        return Path(f"{tmp}/f.sdd").read_text(), Path(f"{tmp}/f.vtree").read_text()


@given(pysdd_files(), st.data())
def test_sdd_numbers_are_read_strictly(files, data):
    """``1_0``, ``+3`` or a non-ASCII digit in any field of an ``.sdd`` or ``.vtree`` file is an error naming the
    file, the line, the field and the token, never the number Python's ``int()`` reads; ``-`` only on a literal."""
    texts = dict(zip(("f.sdd", "f.vtree"), files))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / name for name in texts}
        for name, text in texts.items():
            paths[name].write_text(text)
        Circuit.from_sdd_file(paths["f.sdd"], paths["f.vtree"]).check()  # the control: the files as written load
        name = data.draw(st.sampled_from(sorted(texts)), label="file")
        lines = texts[name].splitlines()
        line = data.draw(st.sampled_from([i for i, t in enumerate(lines) if t and not t.startswith("c")]), label="line")
        fields = lines[line].split()
        at = data.draw(st.integers(1, len(fields) - 1), label="field")
        literal = name == "f.sdd" and fields[0] == "L" and at == 3
        value = int(fields[at])
        token = data.draw(lenient_spellings(abs(value), signs=not literal), label="token")
        fields[at] = "-" + token if value < 0 else token
        lines[line] = " ".join(fields)
        paths[name].write_text("\n".join(lines) + "\n")
        kind = "an integer" if literal else "a non-negative integer"
        with pytest.raises(SddFormatError, match=re.escape(f"{paths[name]}:{line + 1}: field {at + 1} of ") +
                           rf".*: expected {kind}, got {re.escape(repr(fields[at]))}"):
            Circuit.from_sdd_file(paths["f.sdd"], paths["f.vtree"])


@given(pysdd_files())
def test_sdd_files_with_a_byte_order_mark_load_as_without(files):
    with tempfile.TemporaryDirectory() as tmp:
        plain, marked = Path(tmp) / "plain", Path(tmp) / "marked"
        for folder, encoding in ((plain, "ascii"), (marked, "utf-8-sig")):
            folder.mkdir()
            for name, text in zip(("f.sdd", "f.vtree"), files):
                (folder / name).write_text(text, encoding=encoding)
        assert (marked / "f.sdd").read_bytes()[:3] == b"\xef\xbb\xbf"
        want = Circuit.from_sdd_file(plain / "f.sdd", plain / "f.vtree")
        got = Circuit.from_sdd_file(marked / "f.sdd", marked / "f.vtree")
        x = torch.randn(3, want.n_vars, 2, dtype=torch.float64)
        torch.testing.assert_close(got.log_prob(x), want.log_prob(x), atol=0, rtol=0)


def test_well_formed_small_files(tmp_path):
    (tmp_path / "ok.sdd").write_text(SDD_OK)
    (tmp_path / "ok.vtree").write_text(VTREE_OK)
    c = Circuit.from_sdd_file(tmp_path / "ok.sdd", tmp_path / "ok.vtree")  # X1 AND X2
    c.check()
    x = torch.randn(2, 2, 2, dtype=torch.float64).log_softmax(-1)
    torch.testing.assert_close(c.log_prob(x), x[:, 0, 1] + x[:, 1, 1], atol=ATOL64, rtol=0)
    with pytest.raises(SddFormatError, match="uses variable 2"):
        Circuit.from_sdd_file(tmp_path / "ok.sdd", n_vars=1)
    assert issubclass(SddFormatError, ValueError)


# -- decision nodes are checked, not trusted (issue 19) -------------------------------------------------
OVERLAP = "sdd 4\nL 0 0 1\nL 1 2 2\nT 2\nD 3 1 2 0 1 2 1\n"   # (x1 AND x2) OR (TRUE AND x2): P = 0.5, not 0.75


def test_overlapping_primes_are_refused(tmp_path):
    (tmp_path / "bad.sdd").write_text(OVERLAP)
    (tmp_path / "ok.vtree").write_text(VTREE_OK)
    with pytest.raises(SddFormatError, match=r"bad\.sdd:5: decision node 3: two of its elements hold together "
                                             r"\(when X0=1, X1=1"):
        Circuit.from_sdd_file(tmp_path / "bad.sdd")
    with pytest.raises(SddFormatError, match=r"bad\.sdd:5: decision node 3: primes 0 and 2 overlap"):
        Circuit.from_sdd_file(tmp_path / "bad.sdd", tmp_path / "ok.vtree")


def test_literal_primes_load_without_vtree(tmp_path):
    # XOR: (x1 AND ~x2) OR (~x1 AND x2), a decision on x1
    (tmp_path / "xor.sdd").write_text("sdd 5\nL 0 0 1\nL 1 0 -1\nL 2 2 2\nL 3 2 -2\nD 4 1 2 0 3 1 2\n")
    c = Circuit.from_sdd_file(tmp_path / "xor.sdd")
    x = torch.randn(3, 2, 2, dtype=torch.float64)
    want = torch.logaddexp(x[:, 0, 1] + x[:, 1, 0], x[:, 0, 0] + x[:, 1, 1])
    torch.testing.assert_close(c.log_prob(x), want, atol=ATOL64, rtol=0)


def test_elements_outside_their_vtree_side_are_refused(tmp_path):
    (tmp_path / "ok.vtree").write_text(VTREE_OK)
    (tmp_path / "swapped.sdd").write_text("sdd 3\nL 0 0 1\nL 1 2 2\nD 2 1 1 1 0\n")  # prime x2, sub x1
    with pytest.raises(SddFormatError, match="its prime 1 sits at vtree node 2, outside the left subtree of its "
                                             "vtree node 1"):
        Circuit.from_sdd_file(tmp_path / "swapped.sdd", tmp_path / "ok.vtree")


def test_huge_literal_is_a_size_error(tmp_path):
    (tmp_path / "big.sdd").write_text(f"sdd 1\nL 0 0 {2**70}\n")
    with pytest.raises(SizeLimitError, match=r"big\.sdd:2: literal 1180591620717411303424 names variable .* max_vars"):
        Circuit.from_sdd_file(tmp_path / "big.sdd")


def test_bench_sdd_needs_its_vtree_and_tampering_is_caught(bench_circuits, tmp_path):
    """The exact prime check accepts the SDD package's files (see test_matches_pysdd_wmc) and
    catches a decision node whose second prime is replaced by its first."""
    with pytest.raises(SddFormatError, match="pass the .vtree file saved with this SDD"):
        Circuit.from_sdd_file(bench_circuits / "sudoku_4.sdd")
    lines = (bench_circuits / "sudoku_4.sdd").read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("D ") and int(line.split()[3]) >= 2)
    tok = lines[i].split()
    tok[6] = tok[4]  # element 2's prime := element 1's prime
    lines[i] = " ".join(tok)
    (tmp_path / "tampered.sdd").write_text("\n".join(lines) + "\n")
    with pytest.raises(SddFormatError, match=rf"tampered\.sdd:{i + 1}: decision node {tok[1]}: primes .* overlap"):
        Circuit.from_sdd_file(tmp_path / "tampered.sdd", bench_circuits / "sudoku_4.vtree")
