"""No import circle in the package: imports flow downward (logic -> circuit -> losses -> psl -> experiments -> cli).

Every ``import`` statement of every module of ``src/pseudosl`` counts, at module level and deferred inside a
function alike: a deferred import hides a circle from the interpreter, not from the design.  And no module
imports a private (underscore) name from another: what a module shares is public.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement of module ``name`` (file ``path``) imports from."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import sub`` names the submodule ``pkg.sub``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _target(name, path, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def private_imports(name: str, path: Path, source: str, modules: set[str]) -> list[str]:
    """``from m import _x`` statements of module ``name`` that take a private name ``_x`` from a package module
    ``m``.  A private module (``from . import _version``) and a dunder (``__version__``) are fine, and so is
    a public name under a private local alias (``from m import load as _load``)."""
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom):
            target = _target(name, path, node)
            if target.split(".")[0] != "pseudosl":
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.endswith("__")
                if private and f"{target}.{alias.name}" not in modules:
                    found.append(f"{name}:{node.lineno}: from {target} import {alias.name}")
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in (SRC / "pseudosl").rglob("*.py")}
    return {name: _imports(name, path, set(paths)) for name, path in paths.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt, path)):
                return circle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (circle := visit(node, [])):
            return circle
    return None


def test_the_checker_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_no_module_imports_a_module_that_imports_it_back():
    graph = import_graph()
    assert "pseudosl.cli" in graph and "pseudosl.experiments.registry" in graph["pseudosl.cli"]
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_the_command_line_is_on_top():
    graph = import_graph()
    assert not [m for m, deps in graph.items() if "pseudosl.cli" in deps]


def test_the_private_import_checker_sees_private_names():
    modules = {"pseudosl.logic.dag", "pseudosl.logic.builder", "pseudosl._version", "pseudosl.circuit"}
    path = SRC / "pseudosl" / "logic" / "builder.py"
    code = ("from .dag import _AND, Dag\nfrom .. import _version\nfrom ..circuit import load as _load\n"
            "from pseudosl.circuit import _scored\nfrom numpy import _private\nfrom .._version import __version__\n"
            "def f():\n    from .dag import _bits\n")
    assert private_imports("pseudosl.logic.builder", path, code, modules) == [
        "pseudosl.logic.builder:1: from pseudosl.logic.dag import _AND",
        "pseudosl.logic.builder:4: from pseudosl.circuit import _scored",
        "pseudosl.logic.builder:8: from pseudosl.logic.dag import _bits"]


def test_no_module_imports_a_private_name_from_another():
    paths = {_module_name(p): p for p in (SRC / "pseudosl").rglob("*.py")}
    found = [hit for name, path in sorted(paths.items())
             for hit in private_imports(name, path, path.read_text(), set(paths))]
    assert not found, "private names imported from another module (make them public): " + "; ".join(found)
