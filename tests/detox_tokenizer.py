"""A tiny byte-level BPE tokenizer trained in memory (no download), wrapped as a Hugging Face fast tokenizer."""

from __future__ import annotations

from functools import lru_cache

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a darn good heck of a day, said the fox",
    "darn it, the dog ate the heck out of my shoe",
    "frickin weather ruined the picnic again",
    "the brown dog and the quick fox are friends",
    "what the heck is a frickin darn shoe doing here",
] * 4


@lru_cache(maxsize=1)
def tiny_tokenizer(vocab_size: int = 320):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
