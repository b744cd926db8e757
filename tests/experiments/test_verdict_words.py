"""Every verdict word in the generated blocks of the docs agrees with the interval printed beside it.

A comparison cell reads ``+4.36 [-1.79, +10.51] n.d.``: "better" only when the interval lies on the metric's better
side of 0, "worse" only on its other side, "n.d." (not distinguishable) when it holds 0 or there is no interval
(one seed).  The blocks are written by ``pseudosl reproduce ... --write-docs``; this test reads them as they are
committed (docs/results.md, docs/reproduction.md), so a block edited by hand, or produced by a formatter that
words a verdict wrongly, fails here.  Printed bounds are rounded to 2 decimals, so a bound printed as 0.00 may sit
on either side of 0.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pseudosl.experiments.summary import format_comparisons, paired_comparisons
from pseudosl.experiments.warcraft.train import WarcraftExperiment

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"<!-- BEGIN (\S+) -->(.*?)<!-- END \1 -->", re.S)
CELL = re.compile(r"(?P<mean>[+-]\d+\.\d+)(?: \[(?P<lo>[+-]\d+\.\d+), (?P<hi>[+-]\d+\.\d+)\])? "
                  r"(?P<word>better|worse|n\.d\.)|(?P<none>–)")
HEADER = re.compile(r"(\S+) \((?:points|x|[^)]*)\)")
PRIMARY = re.compile(r"Primary comparison .*?, (?P<metric>\w+): (?P<mean>[+-]\d+\.\d+)[^[]*\[(?P<lo>[+-]\d+\.\d+), "
                     r"(?P<hi>[+-]\d+\.\d+)\] over \d+ paired seeds, p = \S+: (?P<word>better|worse|n\.d\.) ")


def agrees(word: str, lo: float | None, hi: float | None, lower_is_better: bool) -> bool:
    """Whether ``word`` is the verdict of the printed interval ``[lo, hi]`` (``None``: no interval)."""
    if lo is None:
        return word == "n.d."
    if lower_is_better:
        lo, hi = -hi, -lo
    return {"better": lo >= 0, "worse": hi <= 0, "n.d.": lo <= 0 <= hi}[word]


def lower_is_better(intro: str, metric: str) -> bool:
    """The comparison table's intro names the lower-is-better metrics: "(cost_ratio: lower is better)", or "(lower
    is better for every metric)"."""
    if "lower is better for every metric" in intro:
        return True
    named = re.search(r"\(([^()]*): lower is better\)", intro)
    return bool(named) and metric in [m.strip() for m in named.group(1).split(",")]


def check_block(text: str) -> int:
    """Assert every comparison cell and primary sentence of a block; returns how many it checked."""
    checked, metrics, intro = 0, [], ""
    for line in text.splitlines():
        if line.startswith("better / worse: beyond the interval"):
            intro = line
        if line.startswith("Comparison ") and " seeds " in line:
            metrics = HEADER.findall(line)
            continue
        if line.startswith("Primary comparison"):
            m = PRIMARY.search(line)
            assert m, line
            assert agrees(m["word"], float(m["lo"]), float(m["hi"]), lower_is_better(intro, m["metric"])), line
            checked += 1
            continue
        cells = [c for c in CELL.finditer(line)]
        if not metrics or " vs " not in line or not cells:
            if not line.strip():
                metrics = []
            continue
        assert len(cells) == len(metrics), (line, metrics)
        for metric, c in zip(metrics, cells):
            if c["none"]:
                continue
            lo, hi = (float(c["lo"]), float(c["hi"])) if c["lo"] else (None, None)
            assert agrees(c["word"], lo, hi, lower_is_better(intro, metric)), (metric, line)
            checked += 1
    return checked


@pytest.mark.parametrize("document", ["results.md", "reproduction.md"])
def test_every_verdict_word_in_the_generated_blocks_agrees_with_its_interval(document):
    blocks = BLOCK.findall((DOCS / document).read_text())
    assert blocks
    checked = {key: check_block(body) for key, body in blocks}
    for key in ("cpu:sudoku", "cpu:warcraft") if document == "results.md" else ("quick:sudoku", "quick:warcraft"):
        assert checked[key] > 0, key  # the comparisons were found and read


def test_the_checker_catches_a_wrong_word():
    exp = WarcraftExperiment()  # cost_ratio is lower-is-better
    runs = [{"model": m, "seed": s, "exact": e, "consistent": e, "cost_ratio": c, "edge_f1": e}
            for s in range(4) for m, e, c in (("resnet", 50.0 + s, 1.2), ("resnet_sl", 55.0 + 2 * s, 1.1 - 0.01 * s))]
    text = format_comparisons(exp, paired_comparisons(exp, runs, ["resnet", "resnet_sl"]))
    assert check_block(text) == 4 and "better" in text
    assert agrees("better", -0.2, -0.1, lower_is_better=True) and not agrees("better", -0.2, -0.1, False)
    for wrong in (text.replace(" better", " worse", 1), text.replace(" better", " n.d.", 1)):
        with pytest.raises(AssertionError):
            check_block(wrong)
