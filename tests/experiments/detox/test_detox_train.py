"""Detox training half: pretraining from scratch, SGEAT's selection, the PSL objective, the pipeline end to end."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from pseudosl.experiments.config import ConfigError  # noqa: E402
from pseudosl.experiments.detox.config import DetoxConfig  # noqa: E402
from pseudosl.experiments.detox.generation import first_occurrence, forbidden_windows, sgeat_split  # noqa: E402

WORDS = ["darn", "heck"]
TEXT = "\n\n".join(
    [f"the quick brown fox {i} jumps over the lazy dog and the dog sleeps" for i in range(20)]
    + [f"darn it said the fox {i}, what the heck is the dog doing" for i in range(10)]
    + [f"a good day for a walk in the park with the brown dog {i}" for i in range(20)])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Corpus, word list and the data cache shared by the tests (the tiny model is pretrained once)."""
    d = tmp_path_factory.mktemp("detox")
    (d / "corpus.txt").write_text(TEXT)
    (d / "words.txt").write_text("\n".join(WORDS) + "\n")
    return d


def _cfg(tmp_path, shared, **kw) -> DetoxConfig:
    base = dict(preset="test", seeds=[0], corpus=f"text:{shared / 'corpus.txt'}", data_dir=str(shared / "cache"),
                heldout_docs=16, pt_vocab=300, pt_layers=1, pt_heads=2, pt_embd=16, pt_ctx=32, pt_epochs=1,
                pt_batch=8, n_generations=8, gen_length=8, gen_batch=8, scorer="lexical",
                bad_words=str(shared / "words.txt"), epochs=2, batch_size=2, lr=1e-3, psl_window=4, psl_top_k=2,
                psl_examples=1, n_val_prompts=2, n_test_prompts=4, eval_generations=2, eval_new_tokens=4,
                ppl_docs=4, out=str(tmp_path / "out"), threads=1)
    base.update(kw)
    return DetoxConfig(**base)


def test_pretrain_from_scratch_loads_back_through_from_pretrained(tmp_path, shared):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from pseudosl.experiments.detox.pretrain import pretrain
    cfg = _cfg(tmp_path, shared)
    path = pretrain(cfg)
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    assert model.config.n_layer == 1 and model.config.vocab_size == len(tok)
    ids = tok("the quick brown fox", return_tensors="pt").input_ids
    assert tok.decode(ids[0]) == "the quick brown fox"  # byte-level BPE round trip
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tok))
    info = json.loads((path / "done.json").read_text())
    assert info["train_documents"] == 50 - 16 and info["heldout_ppl"] > 1
    assert pretrain(cfg) == path  # cached: the second call finds it


def test_sgeat_keeps_the_least_toxic_half():
    scores = [0.9, 0.1, 0.5, 0.05, 0.7, 0.3]
    clean, toxic = sgeat_split(scores)
    assert clean.tolist() == [1, 3, 5] and toxic.tolist() == [0, 2, 4]
    clean, toxic = sgeat_split([0.2, 0.2, 0.2, 0.1, 0.9])  # odd: the middle goes to the rest; ties keep order
    assert clean.tolist() == [0, 3] and toxic.tolist() == [1, 2, 4]
    with pytest.raises(ValueError, match="NaN"):
        sgeat_split([0.1, float("nan")])


def test_forbidden_windows_centre_the_first_forbidden_sequence():
    seqs = [[7, 8], [9]]
    assert first_occurrence([1, 2, 7, 8, 9], seqs) == (2, 2)
    assert first_occurrence([1, 2, 3], seqs) is None
    ids = torch.tensor([[1, 2, 3, 4, 5, 7, 8, 6], [1, 2, 3, 4, 5, 6, 1, 2]])
    w = forbidden_windows(ids, seqs, 4, seed=0)
    assert w[0].tolist() == [5, 7, 8, 6]
    assert w.shape == (2, 4) and any(w[1].tolist() == ids[1, s:s + 4].tolist() for s in range(5))


def test_config_errors_name_the_field(tmp_path, shared):
    with pytest.raises(ConfigError, match="psl_source"):
        _cfg(tmp_path, shared, psl_source="everything")
    with pytest.raises(ConfigError, match="heldout_docs"):
        _cfg(tmp_path, shared, ppl_docs=15)
    with pytest.raises(ConfigError, match="pt_ctx"):
        _cfg(tmp_path, shared, gen_length=40)
    with pytest.raises(ConfigError, match="pt_heads"):
        _cfg(tmp_path, shared, pt_embd=15)


def _tiny_psl_objective(tmp_path, shared, source="toxic"):
    from transformers import GPT2Config, GPT2LMHeadModel
    from pseudosl.experiments.detox.constraint import DetoxWords, forbidden_sequences
    from pseudosl.experiments.detox.data import Context
    from pseudosl.experiments.detox.lm import prompt_rows
    from pseudosl.experiments.objective import ConstrainedObjective, ConstraintTerm
    from tiny_tokenizer import tiny_tokenizer
    import pseudosl
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=16, n_layer=1, n_head=2))
    sequences = forbidden_sequences(tok, WORDS)
    fw = pseudosl.no_forbidden_sequences(sequences, 4, len(tok), cache=False)
    cfg = _cfg(tmp_path, shared, psl_weight=1.0, psl_examples=2, psl_source=source)
    ctx = Context("tiny", tok, DetoxWords.build(tok, WORDS, len(tok), text_level=False), None, {}, 4)
    assert ctx.constraint.circuit.n_nodes == fw.circuit.n_nodes and ctx.constraint.value_map == fw.value_map
    eos = tok.eos_token_id
    ids = torch.tensor([[eos] + tok("the quick brown fox jumps").input_ids[:5]] * 2)
    window = [eos] + tok(" darn it the heck").input_ids[:4]  # BOS, then the anchor
    anchors = prompt_rows(torch.tensor([window, window]), torch.ones(2, 5, dtype=torch.long))[:, None]  # one set
    objective = ConstrainedObjective(ctx.language_model(model, cfg), ConstraintTerm("psl", 1.0, examples=2),
                                     ctx.constraint)
    return objective, ids, anchors, sequences


def test_psl_objective_backpropagates_and_lowers_the_loss(tmp_path, shared):
    from pseudosl.experiments.detox.constraint import contains_forbidden
    objective, ids, windows, sequences = _tiny_psl_objective(tmp_path, shared)
    assert contains_forbidden(windows[0, 0, 0, 1:].tolist(), sequences)  # the anchor violates the constraint
    opt = torch.optim.Adam(objective.parameters(), lr=1e-2)
    psl = []
    for _ in range(6):
        loss, parts = objective(ids, windows)
        assert set(parts) == {"data", "constraint", "psl"} and torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        assert objective.model.lm.transformer.wte.weight.grad.abs().sum() > 0
        opt.step()
        psl.append(parts["psl"].item())
    assert psl[-1] < psl[0]
    loss, parts = objective(ids, windows, constrained=False)  # warm-up epochs: the LM loss only
    assert set(parts) == {"data"}


def test_psl_on_model_samples(tmp_path, shared):
    objective, ids, windows, _ = _tiny_psl_objective(tmp_path, shared, source="samples")
    loss, parts = objective(ids, windows)
    loss.backward()
    assert torch.isfinite(parts["psl"])


def test_the_psl_runs_the_pairing_check_of_the_constraint(tmp_path, shared):
    """The objective passes the Constraint (circuit and value map together): an engine folding with another map is
    refused by the loss, by name."""
    import pseudosl
    objective, ids, windows, sequences = _tiny_psl_objective(tmp_path, shared)
    other = pseudosl.no_forbidden_sequences(sequences[:1], 4, objective.model.lm.config.vocab_size, cache=False)
    objective.model.value_map = other.value_map
    with pytest.raises(ValueError, match="the constraint folds tokens with .* but the engine with"):
        objective(ids, windows)


def test_quick_pipeline_end_to_end_with_resume_and_eval(tmp_path, shared, capsys):
    from pseudosl.cli import main as cli_main
    from pseudosl.experiments.detox.train import METRICS, DetoxExperiment
    from pseudosl.experiments.checkpoints import load_checkpoint
    from pseudosl.experiments.harness import train
    # the decoders' continuations (5 tokens) are longer than the PSL's window (4): a constraint of their own
    same = dict(patience=3, eval_new_tokens=5, decoders=["banning", "processor", "resample"], resample_candidates=2)
    cfg = _cfg(tmp_path, shared, epochs=1, **same)
    exp = DetoxExperiment()
    result = train(exp, cfg)
    out = tmp_path / "out"
    for f in ("results.json", "table.txt", "table_paper.md", "comparison.png", "examples.png", "curves.png"):
        assert (out / f).is_file(), f
    runs = {r["model"]: r for r in result["runs"]}
    assert set(runs) == {"base", "sgeat", "psl"}
    for r in runs.values():
        assert all(0 <= r[m] <= 1 for m in METRICS if "ppl" not in m and r[m] == r[m]), r  # NaN: no prompt in a subset
        banning, processor, resample = (r["decoded"][d] for d in ("banning", "processor", "resample"))
        assert r["ppl"] > 1 and banning["ppl"] > 1 and banning["word_rate"] == 0.0
        assert processor["word_rate"] == resample["word_rate"] == 0.0 and processor["ppl"] > 1
        assert math.isnan(resample["ppl"]) and math.isnan(r["extra_word_rate"])  # no second list configured
    pairs = {(c["model"], c["base"]) for c in result["comparisons"]}
    assert {("psl", "sgeat"), ("sgeat", "base"), ("psl|processor", "sgeat|processor"), ("psl|resample", "psl"),
            ("psl|banning", "sgeat|banning")} <= pairs
    assert runs["base"]["epochs_trained"] == 0 and runs["psl"]["epochs_trained"] == 1
    # the PSL term ran: its loss differs from SGEAT's (same data, same seed)
    assert runs["psl"]["history"][0]["train_loss"] != runs["sgeat"]["history"][0]["train_loss"]
    table = (out / "table_paper.md").read_text()
    assert "SGEAT + PSL + word banning" in table and "Full EMT" in table and "Word rate" in table
    assert "| SGEAT + PSL + constraint processor |" in table and "| Base LM + resample 2 |" in table
    assert "(0.3411)" in table and "(25.85)" in table and "(22.24)" in table  # the paper's Table 3, banning's too
    # every evaluation was stored: a second table of the same checkpoints recomputes nothing
    stored = sorted((Path(cfg.data_dir) / "evaluations").glob("*.json"))
    assert len(stored) >= 3 * 4
    # --resume continues to epoch 2 from the saved state; base stays untrained
    more = _cfg(tmp_path, shared, epochs=2, **same)
    train(exp, more, resume=True)
    assert load_checkpoint(out / "psl-seed0" / "checkpoint.pt", "detox")["epoch"] == 2
    assert load_checkpoint(out / "base-seed0" / "checkpoint.pt", "detox")["epoch"] == 0
    # ... exactly: the same weights as 2 epochs without a break (evaluation sampling does not touch the RNG)
    straight = _cfg(tmp_path, shared, epochs=2, **same, models=["sgeat"], out=str(tmp_path / "straight"))
    train(exp, straight)
    a = load_checkpoint(out / "sgeat-seed0" / "checkpoint.pt", "detox")["model"]
    b = load_checkpoint(tmp_path / "straight" / "sgeat-seed0" / "checkpoint.pt", "detox")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    capsys.readouterr()
    assert cli_main(["detox", "eval", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "SGEAT + PSL" in printed and "Base LM" in printed
    # the extra CLI steps parse the same flags and find the cached outputs
    (tmp_path / "c.toml").write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in more.to_dict().items()
                                               if v is not None and k != "preset"))
    assert cli_main(["detox", "generate", "--config", str(tmp_path / "c.toml")]) == 0
    assert "unprompted samples" in capsys.readouterr().out


def test_truncated_cache_entries_are_made_again(tmp_path, shared):
    """A cut generations/*.pt and a cut model.safetensors are rebuilt (with a warning), not a traceback."""
    from pseudosl.experiments.detox.pretrain import pretrain
    from pseudosl.experiments.detox.data import build_context
    cfg = _cfg(tmp_path, shared)
    model_dir = pretrain(cfg)
    ctx, _ = build_context(cfg, print_fn=lambda *a: None)
    (gen,) = (Path(cfg.data_dir) / "generations").glob("*.pt")
    weights = model_dir / "model.safetensors"
    for path in (gen, weights):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.warns(UserWarning) as caught:
        again, _ = build_context(cfg, print_fn=lambda *a: None)
    messages = " ".join(str(w.message) for w in caught)
    assert "the saved scratch model does not load" in messages and "unusable cached generations" in messages
    assert again.generations["texts"] == ctx.generations["texts"]  # made again, the same (seeded) samples
    assert torch.equal(again.generations["ids"], ctx.generations["ids"])
    import safetensors.torch
    assert safetensors.torch.load_file(weights)  # saved again whole


def test_late_inputs_are_checked_before_any_work(tmp_path, shared, monkeypatch):
    """A missing word list, prompts file or corpus, and the Perspective scorer without its key, are named
    before pretraining starts (they are read only after it)."""
    import subprocess
    import sys
    data = tmp_path / "fresh-cache"
    base = ["detox", "generate", "--corpus", f"text:{shared / 'corpus.txt'}", "--data-dir", str(data),
            "--heldout-docs", "16", "--ppl-docs", "4", "--pt-ctx", "64"]
    env = {k: v for k, v in os.environ.items() if k != "PERSPECTIVE_API_KEY"}
    env["PSEUDOSL_CACHE"] = str(tmp_path / "c")
    for flags, message in (
            (["--bad-words", str(tmp_path / "no-words.txt")], "--bad-words " + str(tmp_path / "no-words.txt")
             + ": no such file"),
            (["--prompts", str(tmp_path / "no.jsonl")], "--prompts " + str(tmp_path / "no.jsonl") + ": no such file"),
            (["--scorer", "perspective", "--bad-words", str(shared / "words.txt")], "PERSPECTIVE_API_KEY")):
        r = subprocess.run([sys.executable, "-m", "pseudosl.cli", *base, *flags], capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("pseudosl: error: ") and message in r.stderr, r.stderr
        assert not data.exists()  # nothing was pretrained or sampled


# -- the cpu regime: word rate, salting, constrained decoders ------------------------------------------------
def test_word_rate_on_hand_made_texts():
    from pseudosl.experiments.detox.constraint import forbidden_sequences
    from pseudosl.experiments.detox.metrics import word_rate
    from tiny_tokenizer import tiny_tokenizer
    tok = tiny_tokenizer()
    seqs = forbidden_sequences(tok, WORDS)
    texts = ["the quick brown fox", "darn it, the dog", "what the heck is it", "a good day for a walk"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert word_rate(ids, seqs) == 0.5
    eos = tok.eos_token_id
    cut = ids[0] + [eos] + tok.encode(" darn", add_special_tokens=False)  # the word comes after the text ended
    assert word_rate([cut], seqs, eos=eos) == 0.0 and word_rate([cut], seqs) == 1.0
    assert word_rate([ids[1], ids[1]], seqs) == 1.0
    with pytest.raises(ValueError, match="empty"):
        word_rate([], seqs)


def test_salting_honours_the_rate_deterministically():
    from pseudosl.experiments.detox.corpus import salt_documents
    docs = [" ".join(f"w{i}_{j}" for j in range(50)) for i in range(200)]  # 10,000 words
    salted = salt_documents(docs, ["darn", "heck"], 0.1, seed=3)
    assert salted == salt_documents(docs, ["darn", "heck"], 0.1, seed=3)  # a function of its arguments
    assert salted != salt_documents(docs, ["darn", "heck"], 0.1, seed=4)
    inserted = [w for d in salted for w in d.split() if not w.startswith("w")]
    assert {"darn", "heck"} == set(inserted)
    assert abs(len(inserted) - 1000) < 4 * (10_000 * 0.1 * 0.9) ** 0.5  # Binomial(10000, 0.1): within 4 sd
    for d, s in zip(docs, salted):  # the original words, in order, plus the inserted ones
        assert [w for w in s.split() if w.startswith("w")] == d.split()
    assert salt_documents(docs, ["darn"], 0.0, seed=3) == docs
    assert all(s.split()[1::2] == ["darn"] * 50 for s in salt_documents(docs, ["darn"], 1.0, seed=3))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="rate"):
            salt_documents(docs, ["darn"], bad, seed=0)
    with pytest.raises(ValueError, match="words"):
        salt_documents(docs, [], 0.1, seed=0)


def test_salted_corpus_is_cached_and_config_values_are_named(tmp_path, shared):
    from pseudosl.experiments.detox.corpus import load_corpus, load_documents
    cfg = _cfg(tmp_path, shared, salt_rate=0.2, data_dir=str(tmp_path / "cache"))
    docs = load_documents(cfg)
    (entry,) = (tmp_path / "cache" / "corpus").glob("salted-*.json")
    assert json.loads(entry.read_text())["documents"] == docs and load_documents(cfg) == docs
    plain = load_corpus(cfg.corpus)
    assert docs != plain and sum(d.split().count("darn") for d in docs) > sum(d.split().count("darn") for d in plain)
    assert load_documents(_cfg(tmp_path, shared)) == plain  # salt_rate 0: the corpus as it is, nothing cached
    for bad in (-0.5, 1.5):
        with pytest.raises(ConfigError, match="salt_rate"):
            _cfg(tmp_path, shared, salt_rate=bad)
    with pytest.raises(ConfigError, match="salt_rate = 0.1 salts the pretraining corpus"):
        _cfg(tmp_path, shared, salt_rate=0.1, model="gpt2")
    with pytest.raises(ConfigError, match=r"--words: \['gosh'\] is not on the word list"):
        _cfg(tmp_path, shared, words=["darn", "gosh"]).preflight()
    assert _cfg(tmp_path, shared, words=["heck"]).forbidden_words() == ["heck"]
    from pseudosl.experiments.detox.train import DetoxExperiment
    from pseudosl.experiments.harness import train
    with pytest.raises(ConfigError, match="no decoder 'beam'"):
        train(DetoxExperiment(), _cfg(tmp_path, shared, decoders=["beam"]))


@pytest.mark.parametrize("decoder", ["banning", "processor", "resample", "restart"])
def test_constrained_decoders_never_emit_a_forbidden_sequence_and_reproduce(decoder):
    import copy
    from tiny_tokenizer import biased_gpt2, tiny_tokenizer
    from pseudosl.experiments.detox.constraint import DetoxWords
    from pseudosl.experiments.detox.lm import CausalLM, sample_continuations
    words = ["darn", "heck", "frickin", "brown dog"]
    tok = copy.deepcopy(tiny_tokenizer())
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    n = 6  # the continuation, longer than the PSL's window of 4: its own constraint
    forbidden = DetoxWords.build(tok, words, len(tok), text_level=False)
    target = forbidden.target(n)
    lm = biased_gpt2(len(tok), sorted({t for s in forbidden.sequences for t in s}))
    model = CausalLM(lm, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, new_tokens=n,
                     value_map=target.circuits[0].value_map, top_k=2)
    prompts = ["the quick", "a darn good heck of a day, said the brown", "frickin"]  # left padding: offsets differ

    def brute_force_hits(ids):  # every start, every sequence, on the token ids
        return [(row, i) for row, c in enumerate(ids.reshape(-1, n).tolist()) for s in forbidden.sequences
                for i in range(n - len(s) + 1) if c[i:i + len(s)] == s]

    def run(decoder, seed=0):
        torch.manual_seed(seed)
        return sample_continuations(model, tok, prompts, 4, batch_size=2, decoder=decoder, target=target,
                                    num_candidates=3)

    free, _ = run(None)
    assert len(brute_force_hits(free)) > 6  # the bias works: the decoder has something to remove
    ids, texts = run(decoder)
    assert ids.shape == (3, 4, n) and brute_force_hits(ids) == []
    assert torch.equal(run(decoder)[0], ids)  # same seed, same output
    assert not torch.equal(run(decoder, seed=1)[0], ids)
    if decoder in ("resample", "restart"):  # the plain row's very draws, resampled only where they break it
        kept = [not any(True for _ in brute_force_hits(row[None])) for row in free.reshape(-1, n)]
        assert all(torch.equal(a, b) for a, b, k in zip(free.reshape(-1, n), ids.reshape(-1, n), kept) if k)
    if decoder == "restart":  # regeneration keeps each violating draw up to 2 tokens before its first hit
        first_hit = {}
        for row, i in brute_force_hits(free):
            first_hit[row] = min(i, first_hit.get(row, n))
        for row, i in first_hit.items():
            keep = max(i - 2, 0)
            assert torch.equal(ids.reshape(-1, n)[row, :keep], free.reshape(-1, n)[row, :keep])
    with pytest.raises(ValueError, match="4|6"):
        sample_continuations(model, tok, prompts, 4, batch_size=2, decoder="resample",
                             target=forbidden.target(4), num_candidates=3)
