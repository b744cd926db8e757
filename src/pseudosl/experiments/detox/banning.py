"""Word banning, the decoding baseline: generation that never completes a forbidden token sequence.

Every word is banned in both spellings (without and with a leading space, as in
:func:`~pseudosl.experiments.detox.constraint.forbidden_sequences`) through Hugging Face's own
``bad_words_ids`` (its ``NoBadWordsLogitsProcessor``): at each step the last token of a sequence
whose other tokens end the text so far gets probability 0, so no banned sequence is ever completed
(a single-token sequence is never emitted).  The kwargs combine with any model's ``generate``.

Usage (any Hugging Face tokenizer and causal LM)::

    kwargs = banned_generate_kwargs(tokenizer, ["darn"])      # {"bad_words_ids": [[...], ...]}
    model.generate(input_ids, do_sample=True, max_new_tokens=20, **kwargs)
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from .constraint import forbidden_sequences

__all__ = ["banned_generate_kwargs"]


def banned_generate_kwargs(tokenizer: Any, words: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for ``model.generate`` that ban every word of ``words``: ``{"bad_words_ids": ...}``, the
    token sequences of :func:`~pseudosl.experiments.detox.constraint.forbidden_sequences`."""
    return {"bad_words_ids": forbidden_sequences(tokenizer, words)}


def bad_words_ids(tokenizer: Any, words: Sequence[str]) -> list[list[int]]:
    """Deprecated duplicate of :func:`~pseudosl.experiments.detox.constraint.forbidden_sequences` (same result)."""
    warnings.warn("pseudosl.experiments.detox.banning.bad_words_ids is deprecated: use "
                  "pseudosl.experiments.detox.constraint.forbidden_sequences (same arguments, same sequences)",
                  DeprecationWarning, stacklevel=2)
    return forbidden_sequences(tokenizer, words)
