"""Pretraining a small GPT-2 from scratch (``model = "scratch"``), because no weights can be downloaded.

1. A byte-level BPE tokenizer (Hugging Face ``tokenizers``, GPT-2's scheme: bytes as the base alphabet,
   ``<|endoftext|>`` as BOS = EOS = UNK) is trained on the training documents of the corpus.
2. The documents are tokenized, joined with ``<|endoftext|>`` and cut into blocks of ``pt_ctx`` tokens
   ``(N, pt_ctx)``; held-out documents give the validation/test blocks.
3. A ``GPT2LMHeadModel`` (``pt_layers`` x ``pt_heads`` x ``pt_embd``) trains on the blocks with the LM loss
   through the shared harness (:func:`pseudosl.experiments.harness.train_run`: checkpoints, exact resume,
   progress bars, Accelerate, the checkpoint of the lowest held-out perplexity kept).
4. Model and tokenizer are saved with ``save_pretrained`` to ``<root>/scratch/<key>/model``, so the
   experiment loads them exactly like GPT-2: ``AutoModelForCausalLM.from_pretrained(path)``,
   ``AutoTokenizer.from_pretrained(path)``.

Everything is cached under ``<root>/scratch/<key>`` (``root`` = ``data_dir`` or
``pseudosl.cache.cache_dir()/detox``; ``key`` hashes corpus, split, salting and every ``pt_*`` field); an interrupted
pretraining resumes from its last epoch.  A saved model whose files do not load (a truncated
``model.safetensors``) is saved again from the pretraining checkpoint; an unreadable checkpoint is
trained again.  Two processes never pretrain into one folder at once (the run-folder lock).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from ..checkpoints import CheckpointError, load_checkpoint
from ..config import RunConfig, spec
from ..experiment import Experiment, Splits
from ..loop import make_accelerator, train_run
from ..objective import Objective
from ..runs import run_lock
from .corpus import data_root, load_documents, split_documents

__all__ = ["PretrainConfig", "PretrainExperiment", "train_tokenizer", "token_blocks", "pretrain", "data_root",
           "EOS"]

EOS = "<|endoftext|>"


def train_tokenizer(texts: list[str], vocab_size: int, path: str | Path | None = None) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, as a ``transformers`` GPT-2 tokenizer (saved to ``path``)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast
    if vocab_size < 257:
        raise ValueError(f"vocab_size must be >= 257 (256 bytes + {EOS}), got {vocab_size}")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS], show_progress=False)
    tok = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOS, eos_token=EOS, unk_token=EOS)
    tok.model_max_length = 1 << 20  # the model's context is what limits; the tokenizer never truncates
    if path is not None:
        tok.save_pretrained(str(path))
    return tok


def token_blocks(tokenizer: Any, texts: list[str], block: int, limit: int | None = None) -> Tensor:
    """``(N, block)`` long: the texts tokenized, each followed by EOS, concatenated and cut (remainder dropped)."""
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    for enc in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
        if limit is not None and len(ids) >= limit * block:
            break
    n = len(ids) // block
    if n == 0:
        raise ValueError(f"{len(ids)} tokens make no block of {block}; give more text or a smaller pt_ctx")
    n = min(n, limit) if limit is not None else n
    return torch.tensor(ids[:n * block], dtype=torch.long).view(n, block)


@dataclass
class PretrainConfig(RunConfig):
    """The harness config of a pretraining run (made from a ``DetoxConfig`` by :func:`pretrain`)."""

    MODELS: ClassVar[tuple[str, ...]] = ("gpt2",)
    seeds: list[int] = spec(default_factory=lambda: [0], min=0)
    vocab_size: int = spec(4096, min=257)
    n_layer: int = spec(4, min=1)
    n_head: int = spec(4, min=1)
    n_embd: int = spec(256, min=8)
    n_ctx: int = spec(128, min=2)


class _LMObjective(Objective):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, constrained: bool = True) -> tuple[Tensor, dict[str, Tensor]]:
        loss = self.model(input_ids=ids, labels=ids).loss
        return loss, {}


@torch.no_grad()
def block_perplexity(model: nn.Module, blocks: Tensor, batch_size: int = 32) -> float:
    """``exp`` of the mean token negative log-likelihood of ``blocks (N, L)`` (the first token of a block is context)."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for (x,) in DataLoader(TensorDataset(blocks), batch_size=batch_size):
        x = x.to(device)
        logits = model(input_ids=x).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                reduction="sum")
        total, count = total + nll.item(), count + x[:, 1:].numel()
    return math.exp(total / count)


class PretrainExperiment(Experiment[PretrainConfig]):
    """GPT-2 from scratch on token blocks; metric: held-out perplexity (lower is better)."""

    name = "detox-pretrain"
    config_class = PretrainConfig
    labels = {"gpt2": "GPT-2 (scratch)"}
    metrics = ("ppl",)
    units = {"ppl": ""}
    lower_is_better = frozenset({"ppl"})
    presets = Path(__file__).resolve().parent / "presets"

    def __init__(self, splits: Splits) -> None:
        self.splits = splits  # token blocks of the corpus, made by :func:`pretrain` from the detox config

    def load_data(self, cfg: PretrainConfig) -> Splits:
        return self.splits

    def build_model(self, name: str, cfg: PretrainConfig) -> nn.Module:
        from transformers import GPT2Config, GPT2LMHeadModel
        return GPT2LMHeadModel(GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.n_ctx, n_embd=cfg.n_embd,
                                          n_layer=cfg.n_layer, n_head=cfg.n_head, bos_token_id=0, eos_token_id=0))

    def objective(self, model: nn.Module, name: str, cfg: PretrainConfig) -> nn.Module:
        return _LMObjective(model)

    def optimizer(self, model: nn.Module, cfg: PretrainConfig) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def evaluate(self, model: nn.Module, data: Tensor, cfg: PretrainConfig, accelerator: Any,
                 decoder: str | None = None):
        return {"ppl": block_perplexity(model, data)}, None


def _key(cfg: Any) -> str:
    fields = {k: v for k, v in cfg.to_dict().items()
              if k.startswith("pt_") or k in ("corpus", "doc_sentences", "heldout_docs", "data_seed")}
    if cfg.salt_rate:  # an unsalted corpus keeps the key it had before salting existed
        fields["salt"] = {"rate": cfg.salt_rate, "words": cfg.forbidden_words()}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def pretrain(cfg: Any, accelerator: Any = None) -> Path:
    """Pretrain (or find cached) the scratch GPT-2 of a ``DetoxConfig``; returns the ``from_pretrained`` folder."""
    folder = data_root(cfg.data_dir) / "scratch" / _key(cfg)
    model_dir = folder / "model"
    if _saved_model_loads(model_dir):
        return model_dir
    accelerator = accelerator or make_accelerator()
    with run_lock(folder) if accelerator.is_main_process else nullcontext():  # every process trains (DDP)
        _pretrain(cfg, folder, model_dir, accelerator)
    return model_dir


def _saved_model_loads(model_dir: Path) -> bool:
    """``done.json`` is there and the saved files open (a truncated file makes them be saved again)."""
    if not (model_dir / "done.json").is_file():
        return False
    from safetensors import safe_open
    try:
        json.loads((model_dir / "done.json").read_text())
        json.loads((model_dir / "config.json").read_text())
        for f in model_dir.glob("*.safetensors"):
            with safe_open(str(f), "pt"):  # the header covers the whole file, or it is truncated
                pass
        return True
    except Exception as e:  # OSError, JSONDecodeError, SafetensorError
        warnings.warn(f"{model_dir}: the saved scratch model does not load ({type(e).__name__}: {str(e)[:160]}); "
                      f"saving it again from its pretraining checkpoint")
        (model_dir / "done.json").unlink(missing_ok=True)
        return False


def _pretrain(cfg: Any, folder: Path, model_dir: Path, accelerator: Any) -> None:
    """Tokenizer, blocks, the harness run (resumed if it has a checkpoint), and the saved model with ``done.json``."""
    train_docs, heldout = split_documents(load_documents(cfg), cfg.heldout_docs, cfg.data_seed)
    tok_dir = folder / "tokenizer"
    if accelerator.is_main_process and not (tok_dir / "tokenizer.json").is_file():
        accelerator.print(f"detox pretrain: training a {cfg.pt_vocab}-token byte-level BPE on {len(train_docs)} documents")
        train_tokenizer(train_docs, cfg.pt_vocab, tok_dir)
    accelerator.wait_for_everyone()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    train_blocks = token_blocks(tok, train_docs, cfg.pt_ctx, cfg.pt_blocks)
    val_blocks = token_blocks(tok, heldout, cfg.pt_ctx)
    pcfg = PretrainConfig(preset=cfg.preset, epochs=cfg.pt_epochs, batch_size=cfg.pt_batch, lr=cfg.pt_lr,
                          weight_decay=0.0, threads=cfg.threads, vocab_size=len(tok), n_layer=cfg.pt_layers,
                          n_head=cfg.pt_heads, n_embd=cfg.pt_embd, n_ctx=cfg.pt_ctx)
    exp = PretrainExperiment(Splits(TensorDataset(train_blocks), val_blocks, val_blocks))
    out = folder / "train"
    ckpt_path = out / "gpt2-seed0" / "checkpoint.pt"
    resume = ckpt_path.is_file()
    if resume and accelerator.is_main_process:
        try:
            load_checkpoint(ckpt_path, exp.name)
        except CheckpointError as e:  # a cache entry: trained again rather than refused
            warnings.warn(f"{e}; pretraining again")
            shutil.rmtree(ckpt_path.parent)
    accelerator.wait_for_everyone()
    resume = ckpt_path.is_file()
    accelerator.print(f"detox pretrain: GPT-2 {cfg.pt_layers}x{cfg.pt_heads}x{cfg.pt_embd} on {len(train_blocks)} blocks "
                      f"of {cfg.pt_ctx} tokens ({len(val_blocks)} held out), {cfg.pt_epochs} epochs -> {model_dir}")
    result = train_run(exp, pcfg, "gpt2", 0, exp.load_data(pcfg), accelerator, out, resume=resume)
    if accelerator.is_main_process:
        ckpt = load_checkpoint(out / "gpt2-seed0" / "checkpoint.pt", exp.name)
        model = exp.build_model("gpt2", pcfg)
        model.load_state_dict(ckpt.get("best_model") or ckpt["model"])
        model.config.bos_token_id = model.config.eos_token_id = tok.eos_token_id
        model.generation_config.bos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.eos_token_id
        model.save_pretrained(str(model_dir))
        tok.save_pretrained(str(model_dir))
        info = {"corpus": cfg.corpus, "train_documents": len(train_docs), "train_blocks": len(train_blocks),
                "heldout_ppl": result["ppl"], "epochs": result["epochs_trained"], "selected_epoch": result["selected_epoch"],
                "parameters": sum(p.numel() for p in model.parameters()), "wall_s": result["wall_s"]}
        (model_dir / "done.json").write_text(json.dumps(info, indent=2))
        accelerator.print(f"detox pretrain: held-out perplexity {result['ppl']:.2f}; saved {model_dir}")
    accelerator.wait_for_everyone()
