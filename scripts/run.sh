#!/usr/bin/env bash
# Install pseudosl into .venv (a plain install: no extras; torch pinned to the CPU build) and run the
# main job: the Sudoku experiment's --quick preset, the CPU regime (4x4 boards, the four models of the
# paper's Table 1, the PSL on every example) with 2 seeds.  It prints the results table, the paired
# comparisons with their bases and a note on what the numbers show, and writes
# runs/sudoku/quick-<config key>/ (results.json, table.txt, curves.png, examples.png, checkpoints).
# Extra arguments go to `pseudosl sudoku train` (e.g. --overwrite to run it again in the same folder).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e .
.venv/bin/pseudosl sudoku train --quick "$@"
