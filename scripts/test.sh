#!/usr/bin/env bash
# The README's test command (CI runs exactly this):
#  1. a fresh environment with a plain install (no extras) runs the main command's --quick preset on a
#     tiny budget, from outside the source tree, so the tests fail whenever the README's main job would;
#  2. .venv with the test extras runs the test suite.
# Torch is pinned to the CPU build through constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
echo "== plain install smoke run (fresh venv, no extras) =="
python3 -m venv "$smoke/venv"
"$smoke/venv/bin/python" -m pip install -q -c constraints.txt "$root"
(cd "$smoke" && PSEUDOSL_CACHE="$smoke/cache" "$smoke/venv/bin/pseudosl" sudoku train --quick \
    --models convnet_sl rnn_psl --n-train 16 --n-val 16 --n-test 8 --epochs 1 --out "$smoke/run" >"$smoke/log" 2>&1) \
  || { cat "$smoke/log"; echo "plain-install smoke run FAILED"; exit 1; }
grep -q "RNN + PSL" "$smoke/log" && test -s "$smoke/run/curves.png" && test -s "$smoke/run/examples.png" \
  || { cat "$smoke/log"; echo "plain-install smoke run wrote no table or figures"; exit 1; }
echo "plain-install smoke run: ok (table and figures written)"
echo "== test suite =="
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test,bench]"
.venv/bin/python -m pytest -q "$@"
