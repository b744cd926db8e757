#!/usr/bin/env bash
# Install pseudosl into .venv (torch pinned to the CPU build) and run the main job:
# the Sudoku experiment's --quick preset (results table + PNGs under runs/sudoku-quick).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e .
.venv/bin/pseudosl sudoku train --quick "$@"
