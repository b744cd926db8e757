"""Evaluation protocol: EMT / TP on hand-made score tables, the RealToxicityPrompts loader (named errors
on bad lines), the toxic / non-toxic split and corpus-derived prompts."""

import json

import numpy as np
import pytest

from pseudosl.experiments.detox.metrics import toxicity_metrics
from pseudosl.experiments.detox.prompts import (Prompt, PromptFormatError, corpus_prompts, load_realtoxicityprompts,
                                                split_by_toxicity)


def test_metrics_hand_made_table():
    scores = [[0.1, 0.2, 0.9],   # max 0.9, toxic
              [0.3, 0.4, 0.2],   # max 0.4
              [0.5, 0.0, 0.0],   # max 0.5: toxic (>= 0.5, as in Gehman et al.)
              [0.0, 0.0, 0.0]]   # max 0.0
    m = toxicity_metrics(scores)
    assert m["expected_max_toxicity"] == pytest.approx((0.9 + 0.4 + 0.5 + 0.0) / 4)
    assert m["expected_max_toxicity_std"] == pytest.approx(np.std([0.9, 0.4, 0.5, 0.0]))
    assert m["toxicity_probability"] == pytest.approx(0.5)
    assert (m["n_prompts"], m["n_generations"]) == (4, 3)
    assert toxicity_metrics(scores, threshold=0.95)["toxicity_probability"] == 0.0
    assert toxicity_metrics(np.ones((2, 25)))["toxicity_probability"] == 1.0
    assert toxicity_metrics(scores, scorer="lexical")["scorer"] == "lexical" and "scorer" not in m


def test_metrics_errors():
    with pytest.raises(ValueError, match="shape"):
        toxicity_metrics([0.1, 0.2])
    with pytest.raises(ValueError, match="rectangular"):
        toxicity_metrics([[0.1, 0.2], [0.3]])
    with pytest.raises(ValueError, match=r"scores\[1, 0\] = 1.2"):
        toxicity_metrics([[0.1], [1.2]])
    with pytest.raises(ValueError, match="nan"):
        toxicity_metrics([[float("nan")]])
    with pytest.raises(ValueError, match="threshold"):
        toxicity_metrics([[0.1]], threshold=0)
    with pytest.raises(TypeError, match="scorer"):
        toxicity_metrics([[0.1]], scorer=object())


def _rtp_line(text, tox, challenging=False):
    return json.dumps({"filename": "x.txt", "begin": 0, "end": 10, "challenging": challenging,
                       "prompt": {"text": text, "toxicity": tox, "profanity": 0.1},
                       "continuation": {"text": " rest", "toxicity": 0.2}})


def test_rtp_loader_and_split(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text("\n".join([_rtp_line("Corruption involving", 0.29), "", _rtp_line("You are such a", 0.81, True),
                            _rtp_line("The sky is", None)]) + "\n")
    prompts = load_realtoxicityprompts(p)
    assert prompts == [Prompt("Corruption involving", 0.29, False, "perspective"),
                       Prompt("You are such a", 0.81, True, "perspective"),
                       Prompt("The sky is", None, False, "perspective")]
    with pytest.raises(ValueError, match=r"prompts\[2\]"):
        split_by_toxicity(prompts)
    toxic, clean = split_by_toxicity(prompts[:2])
    assert [x.text for x in toxic] == ["You are such a"] and [x.text for x in clean] == ["Corruption involving"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "'prompt' object"),
    (json.dumps({"prompt": "text"}), "'prompt' object"),
    (json.dumps({"prompt": {"toxicity": 0.1}}), "prompt.text"),
    (json.dumps({"prompt": {"text": "  ", "toxicity": 0.1}}), "prompt.text"),
    (json.dumps({"prompt": {"text": "a", "toxicity": 1.5}}), "prompt.toxicity"),
    (json.dumps({"prompt": {"text": "a", "toxicity": "high"}}), "prompt.toxicity"),
    (json.dumps({"prompt": {"text": "a", "toxicity": 0.1}, "challenging": "yes"}), "challenging"),
])
def test_rtp_bad_lines(tmp_path, line, message):
    p = tmp_path / "prompts.jsonl"
    p.write_text(_rtp_line("fine", 0.1) + "\n" + line + "\n")
    with pytest.raises(PromptFormatError, match=f"prompts.jsonl:2: .*{message}"):
        load_realtoxicityprompts(p)


def test_rtp_missing_or_empty(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompts.jsonl"):
        load_realtoxicityprompts(tmp_path / "prompts.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(PromptFormatError, match="no prompt"):
        load_realtoxicityprompts(tmp_path / "empty.jsonl")


class Shouty:
    """Scores a text by its share of upper-case words; counts its calls."""

    name = "shouty"

    def __init__(self):
        self.calls = 0

    def score(self, texts):
        self.calls += 1
        return [sum(w.isupper() for w in t.split()) / len(t.split()) for t in texts]


CORPUS = ["The weather was fine all day long in the little town. WHY ARE YOU ALWAYS SO LOUD AT NIGHT, NEIGHBOUR?",
          "Short one. The committee met on Tuesday to discuss the budget for next year! "
          "Nobody could remember where the keys to the old garden shed had gone.",
          "The weather was fine all day long in the little town."]


def test_corpus_prompts():
    scorer = Shouty()
    prompts = corpus_prompts(CORPUS, scorer, n=4, seed=0, min_words=3, max_words=8)
    assert scorer.calls == 1 and len(prompts) == len({p.text for p in prompts}) == 4
    assert {p.text for p in prompts} == {"The weather was fine all", "WHY ARE YOU ALWAYS", "The committee met on Tuesday to",
                                         "Nobody could remember where the keys"}
    assert all(p.scorer == "shouty" and not p.challenging for p in prompts)
    toxic, clean = split_by_toxicity(prompts)
    assert [p.text for p in toxic] == ["WHY ARE YOU ALWAYS"] and len(clean) == 3
    again = corpus_prompts(CORPUS, Shouty(), n=4, seed=0, min_words=3, max_words=8)
    assert again == prompts
    assert [p.text for p in corpus_prompts(CORPUS, Shouty(), n=2, seed=1, min_words=3, max_words=8)] != []
    with pytest.raises(ValueError, match="fewer than n=5"):
        corpus_prompts(CORPUS, Shouty(), n=5, seed=0, min_words=3, max_words=8)
    with pytest.raises(ValueError, match="min_words"):
        corpus_prompts(CORPUS, Shouty(), n=1, seed=0, min_words=5, max_words=2)
    with pytest.raises(TypeError, match="scorer"):
        corpus_prompts(CORPUS, object(), n=1, seed=0)


def test_the_word_rate_regex_is_each_words_pattern():
    """``words_regex`` (one alternation, the word rate's check on a text) finds a word exactly where
    ``pseudosl.logic.words.contains_word`` (the library's specification, one pattern per word) does; it also takes
    entries the automaton refuses (non-ASCII), matched by their text."""
    import random
    from pseudosl.experiments.detox.metrics import words_regex
    from pseudosl.logic.words import contains_word
    words = ["bad", "so bad", "ba", "dab", "a-b", "x.y"]
    regex = words_regex(words)
    rng = random.Random(0)
    alphabet = ["bad", "so", " ", "a", "b", "d", "-", ".", "x", "y", "B", "AD", "1", "é", ",", "dab"]
    hits = 0
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 8)))
        truth = contains_word(text, words)
        hits += truth
        assert bool(regex.search(text)) == truth, text
    assert 300 < hits < 2700
    finger = "\N{REVERSED HAND WITH MIDDLE FINGER EXTENDED}"
    assert words_regex(["bad", finger]).search(f"well {finger}!") and not words_regex([finger]).search("well")
    with pytest.raises(ValueError, match="non-empty"):
        words_regex([])
