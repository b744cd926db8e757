#!/usr/bin/env bash
# Install pseudosl into .venv (a plain install: no extras; torch pinned to the CPU build) and run the
# main job: the Sudoku experiment's --quick preset.  It prints the results table and writes
# runs/sudoku/quick-<config key>/ (results.json, table.txt, curves.png, examples.png, checkpoints).
# Extra arguments go to `pseudosl sudoku train` (e.g. --overwrite to run it again in the same folder).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e .
.venv/bin/pseudosl sudoku train --quick "$@"
