"""The detox constraint: word lists, both spellings of each word, and the folded automaton circuit
agree with a direct substring check on random token windows of a trained BPE vocabulary (the library's
mechanism, ``pseudosl.no_forbidden_sequences``, is tested on every window of tiny alphabets in
tests/tokens/test_constraint_object.py)."""

import json
import random

import pytest
import torch

from tiny_tokenizer import tiny_tokenizer
import pseudosl
from pseudosl.experiments.detox.constraint import DetoxWords, contains_forbidden, forbidden_sequences
from pseudosl.experiments.detox.words import default_words_path, load_words

WORDS = ["darn", "heck", "frickin", "brown dog", "xyzzy"]


def circuit_accepts(fw, windows: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the circuit's value on token-id windows (B, L), through the value map, in float64."""
    values = fw.value_map.to_values(windows)
    x = torch.log(torch.nn.functional.one_hot(values, fw.value_map.n_values).double())
    lp = fw.circuit.log_prob(x)
    assert ((lp == 0) | torch.isneginf(lp)).all()
    return lp == 0


def test_load_words(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text("# LDNOOBW-style list\n darn \n\nheck\ndarn\n# end\n2 girls 1 cup\n", encoding="utf-8")
    assert load_words(p) == ["darn", "heck", "2 girls 1 cup"]
    j = tmp_path / "w.json"
    j.write_text(json.dumps(["a", "b", "a"]))
    assert load_words(j) == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_words(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="no entry"):
        load_words(tmp_path / "empty.txt")
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="list of strings"):
        load_words(tmp_path / "bad.json")
    with pytest.raises(TypeError, match="path"):
        load_words(3)


def test_default_words():
    pytest.importorskip("leoprofanity")
    assert default_words_path().is_file()
    words = load_words()
    assert len(words) > 200 and "anal" in words and len(set(words)) == len(words)


def test_both_spellings():
    tok = tiny_tokenizer()
    seqs = forbidden_sequences(tok, ["darn", "heck", "darn"])
    expected = []
    for w in ["darn", "heck"]:
        for v in (w, " " + w):
            ids = tok.encode(v, add_special_tokens=False)
            assert tok.decode(ids) == v
            if ids not in expected:
                expected.append(ids)
    assert seqs == expected
    assert tok.encode("darn", add_special_tokens=False) != tok.encode(" darn", add_special_tokens=False)
    with pytest.raises(ValueError, match="word 1"):
        forbidden_sequences(tok, ["darn", "  "])
    with pytest.raises(TypeError, match="words"):
        forbidden_sequences(tok, "darn")


def test_contains_forbidden():
    assert contains_forbidden([1, 2, 3], [[2, 3]]) and not contains_forbidden([1, 3, 2], [[2, 3]])
    assert contains_forbidden([5], [[5]]) and not contains_forbidden([], [[5]])
    with pytest.raises(ValueError, match="non-empty"):
        contains_forbidden([1], [[]])


def test_circuit_random_windows_real_tokenizer():
    tok = tiny_tokenizer()
    words = DetoxWords.build(tok, WORDS, len(tok), text_level=False)
    fw = words.window(8)
    assert words.window(8) is fw  # compiled once per length
    assert fw.stats["n_sequences"] == len(words.sequences) == len({tuple(s) for s in words.sequences})
    assert fw.stats["n_tokens"] == len({t for s in words.sequences if len(s) <= 8 for t in s})
    assert fw.stats["nodes"] == fw.circuit.n_nodes > 0 and fw.circuit.n_vars == 8
    rng = random.Random(0)
    vocab = len(tok)
    windows = []
    for _ in range(3000):  # random tokens with forbidden sequences (or their prefixes) spliced in
        w = [rng.randrange(vocab) for _ in range(8)]
        for _ in range(rng.randrange(3)):
            s = rng.choice(words.sequences)
            s = s[:rng.randint(1, len(s))] if rng.random() < 0.5 else s
            at = rng.randrange(9 - min(len(s), 8))
            w[at:at + len(s)] = s[:8 - at]
        windows.append(w[:8])
    windows = torch.tensor(windows)
    direct = torch.tensor([not contains_forbidden(w, words.sequences) for w in windows.tolist()])
    assert torch.equal(circuit_accepts(fw, windows), direct)
    assert torch.equal(fw.satisfied(windows), direct)  # the library's check, through the same value map
    assert torch.equal(words.automaton.satisfied(windows), direct)  # the streaming processor's automaton too
    assert 0.1 < direct.float().mean() < 0.9
    assert isinstance(fw, pseudosl.Constraint) and fw.vocab_size == vocab
    assert words.automaton.value_map == fw.value_map  # one folding for the window and the stream


def test_first_violation_locates_the_first_word_at_both_levels():
    tok = tiny_tokenizer()
    for level in (False, True):
        words = DetoxWords.build(tok, WORDS, len(tok), text_level=level)
        clean = tok.encode(" the quick fox is fine", add_special_tokens=False)
        bad = tok.encode(" the quick darn fox", add_special_tokens=False)
        assert words.first_violation(clean) is None
        start, length = words.first_violation(bad)
        word = tok.encode(" darn", add_special_tokens=False)
        first = next(i for i in range(len(bad)) if bad[i:i + len(word)] == word)
        assert first <= start <= first + len(word), (level, start, first)  # on the word, or the token that ends it
        assert not words.holds_word(bad[:start]) or level  # nothing forbidden before it
