"""Word banning through Hugging Face ``generate``: a tiny GPT-2 biased towards the forbidden tokens
emits them constantly without banning and never completes a banned sequence with it."""

import pytest
import torch

from tiny_tokenizer import biased_gpt2, tiny_tokenizer
from pseudosl.experiments.detox.banning import banned_generate_kwargs
from pseudosl.experiments.detox.constraint import contains_forbidden, forbidden_sequences

WORDS = ["darn", "heck", "frickin", "brown dog", "xyzzy"]


def _samples(model, tok, n: int, **kwargs) -> list[list[int]]:
    prompt = torch.full((n, 1), tok.eos_token_id)
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=0,
                         max_new_tokens=24, min_new_tokens=24, pad_token_id=tok.eos_token_id, **kwargs)
    return out[:, 1:].tolist()


def test_bad_words_ids_both_spellings():
    tok = tiny_tokenizer()
    ids = forbidden_sequences(tok, WORDS)
    for w in WORDS:
        assert tok.encode(w, add_special_tokens=False) in ids and tok.encode(" " + w, add_special_tokens=False) in ids
    assert banned_generate_kwargs(tok, WORDS) == {"bad_words_ids": ids}


def test_banning_never_emits_a_banned_sequence():
    tok = tiny_tokenizer()
    banned = forbidden_sequences(tok, WORDS)
    assert any(len(s) > 1 for s in banned) and any(len(s) == 1 for s in banned)
    model = biased_gpt2(len(tok), sorted({t for s in banned for t in s}))
    torch.manual_seed(1)
    free = _samples(model, tok, 100)
    assert sum(contains_forbidden(s, banned) for s in free) > 90  # the bias works: banning has work to do
    torch.manual_seed(1)
    kept = _samples(model, tok, 500, **banned_generate_kwargs(tok, WORDS))
    assert not any(contains_forbidden(s, banned) for s in kept)
    # the multi-token words' first tokens are still emitted (banning is per sequence, not per token)
    firsts = {s[0] for s in banned if len(s) > 1} - {s[0] for s in banned if len(s) == 1}
    assert any(t in firsts for s in kept for t in s)


def test_the_old_bad_words_ids_name_warns_and_returns_forbidden_sequences():
    from pseudosl.experiments.detox.banning import bad_words_ids

    tok = tiny_tokenizer()
    with pytest.warns(DeprecationWarning, match="use pseudosl.experiments.detox.constraint.forbidden_sequences"):
        old = bad_words_ids(tok, WORDS)
    assert old == forbidden_sequences(tok, WORDS)
