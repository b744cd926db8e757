"""The README's Python examples run as written."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "P(alpha)" in capsys.readouterr().out
