"""Test helpers: a tiny byte-level BPE tokenizer trained in memory (no download), wrapped as a Hugging Face fast
tokenizer, and a tiny random GPT-2 biased towards chosen tokens."""

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


def biased_gpt2(vocab_size: int, favoured: list[int], logit: float = 6.0):
    """A 1-layer random GPT-2 whose next-token distribution puts most mass on ``favoured`` tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=vocab_size, n_positions=64, bos_token_id=0, eos_token_id=0,
                     tie_word_embeddings=False)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        direction = torch.zeros(32)
        direction[0] = 1.0
        model.transformer.ln_f.weight.zero_()      # the final hidden state is always `direction`
        model.transformer.ln_f.bias.copy_(direction)
        model.lm_head.weight.normal_(0.0, 0.1)
        model.lm_head.weight[favoured] += logit * direction
    return model
