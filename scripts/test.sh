#!/usr/bin/env bash
# Install pseudosl with its test extras into .venv (torch pinned to the CPU build) and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test,bench]"
.venv/bin/python -m pytest -q "$@"
