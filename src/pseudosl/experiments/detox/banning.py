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

from typing import Any, Sequence

from .constraint import forbidden_sequences

__all__ = ["bad_words_ids", "banned_generate_kwargs"]


def bad_words_ids(tokenizer: Any, words: Sequence[str]) -> list[list[int]]:
    """The token sequences to ban: each word without and with a leading space, deduplicated."""
    return forbidden_sequences(tokenizer, words)


def banned_generate_kwargs(tokenizer: Any, words: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for ``model.generate`` that ban every word of ``words`` (``{"bad_words_ids": ...}``)."""
    return {"bad_words_ids": bad_words_ids(tokenizer, words)}
