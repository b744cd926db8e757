"""``pseudosl fidelity`` on a tiny GPT-2 saved to disk and on a tiny Sudoku RNN checkpoint."""

import json

import pytest
import torch
from accelerate import Accelerator

from pseudosl.cli import main as cli_main
from pseudosl.experiments.loop import train_run
from pseudosl.experiments.sudoku.config import SudokuConfig
from pseudosl.experiments.sudoku.train import SudokuExperiment
from pseudosl import CausalLMEngine, local_fidelity
from tolerances import RTOL32

WORDS = ["<s>", "<unk>", "the", "cat", "sat", "on", "mat", "a"]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    transformers.logging.set_verbosity_error()
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(WORDS), n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return folder


def _run(argv, capsys):
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "80.89" in out and "KL(p~_y || p)" in out  # the paper's numbers beside ours
    return out


def test_hf_model_exact_and_monte_carlo(tiny_lm, tmp_path, capsys):
    from transformers import AutoModelForCausalLM
    base = ["fidelity", "--hf-model", str(tiny_lm), "--length", "3", "--n-examples", "2", "--seed", "1"]
    _run([*base, "--out", str(tmp_path / "exact")], capsys)
    res = json.loads((tmp_path / "exact" / "fidelity.json").read_text())
    assert res["method"] == "exact" and res["length"] == 3 and len(res["positions"]["model"]) == 3  # 8**3 sequences
    assert (tmp_path / "exact" / "fidelity_positions.png").stat().st_size > 0
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    anchors = torch.tensor(res["anchors"])
    want = local_fidelity(CausalLMEngine(model, torch.zeros(2, 1, dtype=torch.long)), anchors)
    assert res["per_example"]["kl_local_model"] == pytest.approx(want.kl_local_model.tolist(), rel=RTOL32)
    assert res["summary"]["entropy_model"]["mean"] == pytest.approx(want.entropy_model.mean().item(), rel=RTOL32)
    _run([*base, "--method", "mc", "--n-mc", "400", "--out", str(tmp_path / "mc")], capsys)
    mc = json.loads((tmp_path / "mc" / "fidelity.json").read_text())
    assert mc["method"] == "monte-carlo" and mc["n_mc"] == 400 and mc["anchors"] == res["anchors"]
    for key in ("entropy_model", "kl_local_model"):
        for est, se, exact in zip(mc["per_example"][key], mc["per_example"][key + "_se"], res["per_example"][key]):
            assert abs(est - exact) <= 4 * se


def test_hf_model_text_windows(tiny_lm, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("the cat sat on the mat a cat sat on a mat")
    _run(["fidelity", "--hf-model", str(tiny_lm), "--text", str(tmp_path / "t.txt"), "--length", "4",
          "--n-examples", "3", "--method", "mc", "--n-mc", "20", "--out", str(tmp_path / "o")], capsys)
    res = json.loads((tmp_path / "o" / "fidelity.json").read_text())
    text = [WORDS.index(w) for w in "the cat sat on the mat a cat sat on a mat".split()]
    windows = [text[i:i + 4] for i in range(len(text) - 3)]
    assert all(a in windows for a in res["anchors"]) and "t.txt" in res["anchors_from"]


def test_sudoku_checkpoint(tmp_path, capsys):
    exp = SudokuExperiment()
    cfg = SudokuConfig(preset="test", models=["rnn", "convnet"], seeds=[0], n_train=16, n_test=8, epochs=1,
                       batch_size=8, conv_channels=8, conv_layers=1, rnn_hidden=16, rnn_layers=2,
                       data_dir=str(tmp_path / "data"), out=str(tmp_path / "run"), threads=1)
    splits = exp.load_data(cfg)
    for name in ("rnn", "convnet"):
        train_run(exp, cfg, name, 0, splits, Accelerator(), tmp_path / "run")
    out = _run(["fidelity", "--checkpoint", str(tmp_path / "run" / "rnn-seed0" / "checkpoint.pt"), "--n-examples",
                "2", "--n-mc", "30", "--out", str(tmp_path / "f")], capsys)
    assert "Monte-Carlo, 30 draws" in out and "sudoku rnn seed 0" in out
    res = json.loads((tmp_path / "f" / "fidelity.json").read_text())
    assert res["method"] == "monte-carlo" and res["length"] == 81 and len(res["positions"]["local"]) == 81
    anchors = torch.tensor(res["anchors"])
    puzzles = splits.test.puzzles[:2]
    assert ((anchors + 1 == puzzles) | (puzzles == 0)).all()  # the model's samples keep the givens
    assert all(se > 0 for se in res["per_example"]["entropy_model_se"])
    for argv, msg in ((["--checkpoint", str(tmp_path / "run" / "convnet-seed0" / "checkpoint.pt")], "autoregressive"),
                      (["--checkpoint", str(tmp_path / "nope.pt")], "no checkpoint"),
                      (["--checkpoint", str(tmp_path / "nope.pt"), "--length", "3"], "--hf-model only"),
                      (["--hf-model", str(tmp_path / "nope")], "cannot load")):
        with pytest.raises(SystemExit) as e:
            cli_main(["fidelity", *argv, "--out", str(tmp_path / "x")])
        assert e.value.code == 2 and msg in capsys.readouterr().err


def test_hf_model_without_tokenizer(tiny_lm, tmp_path, capsys):
    """A folder with the model only: the prompt is the config's BOS token; --text needs a tokenizer."""
    import shutil
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_lm.iterdir():
        if f.name.startswith(("config", "model", "generation")):
            shutil.copy(f, bare / f.name)
    _run(["fidelity", "--hf-model", str(bare), "--length", "2", "--n-examples", "1", "--out", str(tmp_path / "o")],
         capsys)
    assert json.loads((tmp_path / "o" / "fidelity.json").read_text())["method"] == "exact"
    (tmp_path / "t.txt").write_text("the cat")
    with pytest.raises(SystemExit) as e:
        cli_main(["fidelity", "--hf-model", str(bare), "--text", str(tmp_path / "t.txt"), "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "needs a tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--out", "{file}"], "--out {file}: is a file, not a folder"),
    (["--n-mc", "1"], "--n-mc must be >= 2"),
    (["--length", "0"], "--length must be >= 1"),
    (["--text", "{tmp}/no.txt"], "--text {tmp}/no.txt: no such file"),
])
def test_bad_flags_are_one_line_errors_before_the_model_is_loaded(tmp_path, capsys, flags, message):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    fill = {"file": str(blocker), "tmp": str(tmp_path)}
    argv = ["fidelity", "--hf-model", str(tmp_path / "no-such-model"), *(f.format(**fill) for f in flags)]
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert message.format(**fill) in err and "no-such-model" not in err  # refused before the model is looked for
