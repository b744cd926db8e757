"""``pseudosl fidelity``: how close is the local approximation to the model?  (Paper §5, last paragraph.)

    pseudosl fidelity --checkpoint runs/sudoku/quick-<key>/rnn-seed0/checkpoint.pt
    pseudosl fidelity --hf-model gpt2 --length 10 [--text FILE]

For each of ``--n-examples`` anchors ``y`` it runs :func:`pseudosl.local_fidelity` (exact where ``k**n`` is small,
else Monte-Carlo with ``--n-mc`` draws) and prints the entropy of the model, of ``p~_y`` and ``KL(p~_y || p)`` in
bits, mean ± std over the anchors, beside the paper's GPT-2 numbers (80.89 / 35.08 / 4.8 bits).  It writes
``fidelity.json`` and ``fidelity_positions.png`` (per position: ``H(Y_i | Y_<i)`` of the model beside
``H(p(. | y_-i))`` of the approximation, averaged over the anchors) into ``--out`` (replacing earlier ones).

Sources of ``(model, anchors)``:

* a harness checkpoint: the experiment's :meth:`~pseudosl.experiments.experiment.Experiment.fidelity_inputs`
  (Sudoku: the RNN bound to the first test puzzles; anchors = its own samples, givens kept, eval mode);
* a Hugging Face causal LM (``from_pretrained``; local folders work offline): :class:`pseudosl.CausalLMEngine`
  over the full vocabulary after a BOS prompt; anchors = windows of ``--length`` tokens sampled from the model
  (unbiased ancestral samples: no token is banned), or random windows of the tokenized ``--text`` file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..logic.checks import check_int
from ..psl import CausalLMEngine, Fidelity, local_fidelity
from .runs import atomic_path, make_folder

__all__ = ["FidelityRun", "checkpoint_inputs", "hf_inputs", "run_fidelity", "format_report", "plot_positions", "PAPER"]

PAPER = {"entropy_model": 80.89, "entropy_local": 35.08, "kl_local_model": 4.8}  # GPT-2, paper §5 (bits)
ROWS = {"entropy_model": "model entropy H(p)", "entropy_local": "approximation entropy H(p~_y)",
        "kl_local_model": "KL(p~_y || p)"}


@dataclass
class FidelityRun:
    """A model (engine) bound to ``B`` inputs, its ``(B, n)`` anchors and a description for the report."""

    model: Any
    anchors: Tensor
    source: str
    anchors_from: str
    chunk_size: int = 1 << 14


def checkpoint_inputs(path: str | Path, n_examples: int, device: str) -> FidelityRun:
    """The checkpoint's model (the one its table tested: :func:`.checkpoints.tested_weights`) on its experiment's
    test inputs (its seed's)."""
    from .registry import experiment
    from .checkpoints import CheckpointError, load_checkpoint, tested_weights
    ckpt = load_checkpoint(Path(path))
    if "experiment" not in ckpt:
        raise CheckpointError(f"{path}: the checkpoint does not name its experiment")
    exp = experiment(ckpt["experiment"])
    from .config import model_variant
    base, cfg = model_variant(exp.config_class(**ckpt["config"]), ckpt["model_name"])
    model = exp.build_model(base, cfg)
    model.load_state_dict(tested_weights(ckpt))
    model = model.to(device).eval()
    engine, anchors, how = exp.fidelity_inputs(model, exp.load_data(cfg).of_seed(ckpt["seed"]).test, n_examples)
    return FidelityRun(engine, anchors, f"{exp.name} {ckpt['model_name']} seed {ckpt['seed']} ({path}, "
                                        f"epoch {ckpt['epoch']})", how)


def hf_inputs(name: str, length: int, n_examples: int, device: str, text: str | Path | None = None,
              generator: torch.Generator | None = None) -> FidelityRun:
    """A Hugging Face causal LM after a BOS prompt; anchors sampled from it, or windows of ``text``."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ValueError("--hf-model needs transformers: pip install 'pseudosl[lm]'") from None
    length = check_int("--length", length, 1, " (tokens per window)")
    try:
        model = AutoModelForCausalLM.from_pretrained(name).to(device).eval()
    except OSError as e:  # not a local folder, and not on the hub (or offline)
        raise ValueError(f"--hf-model {name}: cannot load a causal LM ({e})") from None
    vocab = model.get_output_embeddings().weight.shape[0]
    try:
        tok = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, TypeError):
        tok = None
    if tok is not None and not 1 < len(tok) <= vocab:  # e.g. the empty tokenizer made for a folder without one
        tok = None
    bos = tok.bos_token_id if tok is not None and tok.bos_token_id is not None else model.config.bos_token_id
    if bos is None:
        raise ValueError(f"{name}: neither its tokenizer nor its config names a BOS token for the prompt")
    prompt = torch.full((n_examples, 1), bos, dtype=torch.long, device=device)
    engine = CausalLMEngine(model, prompt, chunk_size=512)
    chunk = max(1, (1 << 26) // (length * vocab))  # rows per call: ~256 MB of float32 logits
    if text is None:
        anchors = engine.sample(length=length, generator=generator)  # (n_examples, length): exact samples of p
        return FidelityRun(engine, anchors, f"{name} (V = {vocab})",
                           f"{n_examples} windows of {length} tokens sampled from the model after BOS", chunk)
    if tok is None:
        raise ValueError(f"--text needs a tokenizer, and none could be loaded from {name}")
    ids = torch.tensor(tok(Path(text).read_text())["input_ids"], dtype=torch.long)
    if len(ids) < length:
        raise ValueError(f"--text {text}: {len(ids)} tokens, fewer than --length {length}")
    starts = torch.randint(0, len(ids) - length + 1, (n_examples,), generator=generator, device=generator.device
                           if generator is not None else None).cpu()
    anchors = torch.stack([ids[s:s + length] for s in starts.tolist()]).to(device)
    return FidelityRun(engine, anchors, f"{name} (V = {vocab})",
                       f"{n_examples} random windows of {length} tokens of {Path(text).name}, after BOS", chunk)


def format_report(fid: Fidelity, run: FidelityRun) -> str:
    """The paper-shaped table: the three numbers in bits, mean ± std over anchors, the paper's beside."""
    s = fid.summary()
    how = "exact (enumeration)" if fid.method == "exact" else f"Monte-Carlo, {fid.n_mc} draws per anchor"
    lines = [f"fidelity of the local approximation: {run.source}",
             f"anchors: {run.anchors_from}; n = {run.anchors.shape[1]}; {how}",
             f"{'bits':32}{'ours: mean ± std over anchors':>31}{'mean s.e.':>11}{'paper (GPT-2)':>15}"]
    for key, label in ROWS.items():
        ours = f"{s[key]['mean']:.2f} ± {s[key]['std']:.2f}"
        lines.append(f"{label:32}{ours:>31}{s[key]['se']:>11.2f}{PAPER[key]:>15.2f}")
    return "\n".join(lines)


def plot_positions(fid: Fidelity, path: str | Path, title: str = "") -> None:
    """Per-position entropies averaged over anchors: the model's ``H(Y_i | Y_<i)`` and ``H(p(. | y_-i))``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = fid.entropy_local_positions.shape[1]
    x = list(range(n))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.12 * n + 3), 3.6))
    if fid.entropy_model_positions is not None:
        model = fid.entropy_model_positions.mean(0).cpu()
        ax.plot(x, model, "o-" if n <= 20 else "-", label=f"model: H(y_i | y_<i)  (sum {model.sum():.2f})")
    local = fid.entropy_local_positions.mean(0).cpu()
    ax.plot(x, local, "s-" if n <= 20 else "-", label=f"local approximation: H(y_i | y_-i)  (sum {local.sum():.2f})")
    ax.set(xlabel="position i", ylabel="entropy (bits)", title=title or "per-position entropy, mean over anchors")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=8)  # below the axes: hides no point
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def run_fidelity(run: FidelityRun, out: str | Path, *, n_mc: int = 1000, exact: bool | None = None,
                 generator: torch.Generator | None = None) -> dict:
    """:func:`local_fidelity` on ``run``; writes ``fidelity.json`` and ``fidelity_positions.png``; returns the JSON."""
    fid = local_fidelity(run.model, run.anchors, exact=exact, n_mc=n_mc, generator=generator,
                         chunk_size=run.chunk_size)
    out = Path(out)
    make_folder(out)
    per = {k: getattr(fid, k).tolist() for k in ("entropy_model", "entropy_local", "kl_local_model",
                                                   "entropy_model_se", "kl_local_model_se")}
    result = {"source": run.source, "anchors_from": run.anchors_from, "anchors": run.anchors.tolist(),
              "length": run.anchors.shape[1],
              "n_examples": run.anchors.shape[0], "method": fid.method, "n_mc": fid.n_mc, "units": "bits",
              "summary": fid.summary(), "per_example": per,
              "positions": {"model": None if fid.entropy_model_positions is None
                            else fid.entropy_model_positions.mean(0).tolist(),
                            "local": fid.entropy_local_positions.mean(0).tolist()},
              "paper_gpt2": PAPER, "report": format_report(fid, run)}
    with atomic_path(out / "fidelity.json") as tmp:  # a failed write names the file and leaves no temporary one
        tmp.write_text(json.dumps(result, indent=1))
    with atomic_path(out / "fidelity_positions.png") as tmp:
        plot_positions(fid, tmp, title=run.source.split(" (")[0])
    return result


def reproduce_section(mode: str, runs: Path, figures: Path, results: dict) -> str:
    """The report's fidelity block (``pseudosl reproduce``): every model of the reproduction that has one.

    Each experiment's seed-0 checkpoints of the models its ``fidelity_models`` name (Sudoku: the RNN and RNN + PSL),
    Monte-Carlo (``9**81`` sequences), and the language model an experiment starts from
    (:meth:`~.experiment.Experiment.fidelity_language_model`; detox), on windows of 10 tokens as the paper's GPT-2.
    Quick mode uses 8 anchors and 200 draws (4 for a language model), paper mode 32 and 1000 (16).
    """
    import shutil
    from .config import ConfigError
    from .registry import EXPERIMENTS, experiment
    n_examples, n_mc = (8, 200) if mode == "quick" else (32, 1000)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    blocks = []
    for name in EXPERIMENTS:
        for pattern in experiment(name).fidelity_models:
            for ckpt in sorted((runs / name).glob(f"{pattern}-seed0/checkpoint.pt")):
                model = ckpt.parent.name.removesuffix("-seed0")
                out = runs / "fidelity" / f"{name}-{model}"
                command = f"pseudosl fidelity --checkpoint {ckpt} --n-examples {n_examples} --n-mc {n_mc} --out {out}"
                torch.manual_seed(0)  # as `pseudosl fidelity --seed 0`: the anchors are the model's own samples
                result = run_fidelity(checkpoint_inputs(ckpt, n_examples, device), out, n_mc=n_mc,
                                      generator=torch.Generator(device).manual_seed(0))
                figures.mkdir(parents=True, exist_ok=True)
                png = f"fidelity-{mode}-{name}-{model.replace('@', '-').replace('=', '')}.png"
                shutil.copyfile(out / "fidelity_positions.png", figures / png)
                blocks += [f"Command: `{command}` (seed 0).", "", "```", result["report"], "```", "",
                           f"![per-position entropy, {name.capitalize()} {model}](figures/{png})", ""]
    for name, res in results.items():
        exp = experiment(name)
        try:
            lm = exp.fidelity_language_model(exp.config_class(**res["config"]))
        except (ConfigError, TypeError):  # results of another version of the config: no model to measure
            lm = None
        if lm is None:
            continue
        out = runs / "fidelity" / f"{name}-lm"
        n_lm = 4 if mode == "quick" else 16
        shown = _portable(lm)  # no machine path in the report
        command = f"pseudosl fidelity --hf-model {shown} --length 10 --n-examples {n_lm} --n-mc {n_mc} --out {out}"
        torch.manual_seed(0)
        gen = torch.Generator(device).manual_seed(0)
        run = hf_inputs(lm, 10, n_lm, device, generator=gen)
        run.source = run.source.replace(lm, f"the {name} {mode} preset's language model")  # no machine path
        result = run_fidelity(run, out, n_mc=n_mc, generator=gen)
        figures.mkdir(parents=True, exist_ok=True)
        png = f"fidelity-{mode}-{name}-lm.png"
        shutil.copyfile(out / "fidelity_positions.png", figures / png)
        blocks += [f"Command: `{command}` (seed 0).", "", "```", result["report"], "```", "",
                   f"![per-position entropy, the {name} language model](figures/{png})", ""]
    if not blocks:
        return f"No model to measure: run `pseudosl reproduce --{mode} --only sudoku detox fidelity`."
    return "\n".join(blocks)


def _portable(path: str) -> str:
    """``path`` with the cache folder written as the shell expression that finds it on any machine."""
    from ..cache import cache_dir
    root = str(cache_dir())
    return path.replace(root, "${PSEUDOSL_CACHE:-~/.cache/pseudosl}", 1) if path.startswith(root) else path
