"""No import circle in the package: imports flow downward (logic -> circuit -> losses -> psl -> experiments -> cli).

Every ``import`` statement of every module of ``src/pseudosl`` counts, at module level and deferred inside a
function alike: a deferred import hides a circle from the interpreter, not from the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import sub`` names the submodule ``pkg.sub``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


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
