"""One way in: ``pseudosl.__all__`` is a small list, and every name the examples and the docs' code use from
``pseudosl`` is in it (or is a submodule, such as ``pseudosl.constraints``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pseudosl

ROOT = Path(__file__).resolve().parents[1]


def _code() -> dict[str, str]:
    """The Python the user reads: the examples, and the python blocks of README.md and docs/*.md."""
    out = {p.name: p.read_text() for p in sorted((ROOT / "examples").glob("*.py"))}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        out[doc.name] = "\n".join(re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S))
    return out


def _names(code: str) -> set[str]:
    names = set(re.findall(r"\bpseudosl\.([A-Za-z_]\w*)", code))
    for inside, line in re.findall(r"from pseudosl import (?:\(([^)]*)\)|([^\n]*))", code):
        names.update(n.split(" as ")[0].strip() for n in (inside or line).split(",") if n.strip())
    return names


def test_all_is_small_and_importable():
    assert 15 <= len(pseudosl.__all__) <= 26 and len(set(pseudosl.__all__)) == len(pseudosl.__all__)
    for name in pseudosl.__all__:
        assert getattr(pseudosl, name) is not None


def test_examples_and_docs_use_the_public_names():
    used = {}
    for where, code in _code().items():
        for name in _names(code):
            if name not in pseudosl.__all__ and importlib.util.find_spec(f"pseudosl.{name}") is None:
                used.setdefault(name, []).append(where)
    assert not used, f"names used from pseudosl that are not in pseudosl.__all__ (nor submodules): {used}"


def test_every_file_uses_names_that_exist():
    """Benchmarks and scripts are not imported by the tests: a name they take from ``pseudosl`` must still exist."""
    missing = {}
    for folder in ("src", "tests", "benchmarks", "scripts", "examples"):
        for path in sorted(p for p in (ROOT / folder).rglob("*.py") if p.name != "test_public_api.py"):
            for name in _names(path.read_text()):
                if (not hasattr(pseudosl, name) and name != "__version__"
                        and importlib.util.find_spec(f"pseudosl.{name}") is None):
                    missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"names taken from pseudosl that it does not have: {missing}"


def test_the_checker_sees_names():
    assert _names("import pseudosl\nx = pseudosl.as_engine(m)\nfrom pseudosl import (Circuit,\n  DFA)\n"
                  "from pseudosl import Engine, positions as p\ny = 1") == {"as_engine", "Circuit", "DFA", "Engine", "positions"}
