"""The Python examples of README.md and docs/*.md run as written, and do what they say."""

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_readme_has_examples():
    assert _blocks(ROOT / "README.md"), "README.md has no python example"


@pytest.fixture
def one_thread():
    """The examples train tiny models: on one thread, as a user's CPU runs them (two threads on a loaded
    2-core machine made them ten times slower); the caller's setting is restored."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("path", [p for p in DOCS if _blocks(p)], ids=lambda p: p.name)
def test_doc_examples_run(path, capsys, one_thread):
    for block in _blocks(path):
        namespace: dict = {}
        exec(compile(block, str(path), "exec"), namespace)
        if "diag" in namespace:  # docs/psl.md: training with the PSL makes samples satisfy the constraint
            assert namespace["diag"].satisfied.float().mean() > 0.8
    if path.name == "README.md":
        assert "P(alpha)" in capsys.readouterr().out
