"""The training loop: one model, one seed (:func:`train_run`), read top to bottom.

Build the model, its objective (:meth:`Experiment.objective`) and optimizer; resume from the checkpoint if asked;
then per epoch: batches in an order fixed by ``(seed, epoch)``, a step per batch, the validation and test metrics
every ``eval_every`` epochs, model selection on the validation split (:func:`.summary.selection_score`, the one rule)
and early stopping (``patience``), and a checkpoint.  Finally the selected checkpoint is tested, greedily and with
every extra decoder of ``cfg.decoders``.  The loop runs under an ``accelerate.Accelerator``
(:func:`make_accelerator`).  Folders, several runs, results and tables: :mod:`.harness`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset
from tqdm.auto import tqdm

from .checkpoints import check_continuable, load_checkpoint, load_weights, save_checkpoint
from .config import RunConfig, model_variant
from .experiment import Experiment, Splits
from .summary import selection_reason, selection_score

__all__ = ["train_run", "evaluate_model", "checkpoint_path", "make_accelerator", "save", "seed_all"]


def make_accelerator():
    """An ``accelerate.Accelerator``; without a GPU a gloo CPU group under ``accelerate launch``."""
    from accelerate import Accelerator
    # without a GPU, Accelerator() ignores a torchrun / accelerate-launch world of several processes;
    # cpu=True makes it a gloo MULTI_CPU group (and a plain single process otherwise)
    return Accelerator(cpu=not torch.cuda.is_available())


# -- seeds and RNG state --------------------------------------------------------------------------
def seed_all(seed: int) -> None:
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if s["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def checkpoint_path(out: Path, name: str, seed: int) -> Path:
    return out / f"{name}-seed{seed}" / "checkpoint.pt"


# -- one model, one seed --------------------------------------------------------------------------
def train_run(exp: Experiment, cfg: RunConfig, name: str, seed: int, splits: Splits, accelerator: Any,
              out: Path, resume: bool = False) -> dict:
    """Train ``name`` with ``seed``; returns test metrics (of the selected checkpoint), history, predictions, the
    epochs trained, the selected epoch and whether the patience stop ended the run (``stopped_early``)."""
    ckpt_path = checkpoint_path(out, name, seed)
    shared, (base, cfg) = cfg, model_variant(cfg, name)  # a variant "name@field=value" trains with its overrides
    splits = splits.of_seed(seed)  # a split drawn per model seed: this seed's
    seed_all(seed)
    model = exp.build_model(base, cfg)
    objective = exp.objective(model, base, cfg)
    optimizer = exp.optimizer(model, cfg)
    state = {"epoch": 0, "history": [], "wall_s": 0.0, "cpu_s": 0.0, "best": None, "best_epoch": 0,
             "best_model": None, "bad_evals": 0, "stopped": False}
    if resume and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path, exp.name)
        check_continuable(ckpt, shared, name, seed, ckpt_path)
        load_weights(model, ckpt["model"], ckpt_path, name)
        if ckpt["optimizer"] is not None:  # None: packed as finished (pseudosl.experiments.archive), never trains on
            optimizer.load_state_dict(ckpt["optimizer"])
        state.update({k: ckpt[k] for k in state if k in ckpt})
        set_rng_state(ckpt["rng"])
        accelerator.print(f"[{name} seed {seed}] resumed from {ckpt_path} at epoch {state['epoch']}")
    elif resume:
        accelerator.print(f"[{name} seed {seed}] nothing to resume at {ckpt_path}: training from scratch")
    objective, optimizer = accelerator.prepare(objective, optimizer)
    unwrapped = lambda: accelerator.unwrap_model(objective).model  # noqa: E731

    for epoch in range(state["epoch"], cfg.epochs if exp.trains(base, cfg) else 0):
        if state["stopped"]:
            break
        t0, c0 = time.time(), time.process_time()  # wall and this process's CPU time (shared machines: both)
        # the batch order is a function of (seed, epoch) only, so a resumed run sees the same batches
        order = torch.randperm(len(splits.train), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        loader = accelerator.prepare(DataLoader(Subset(splits.train, order.tolist()), batch_size=cfg.batch_size))
        constrained = epoch + 1 >= cfg.constraint_start_epoch  # SL/PSL warm-up
        objective.train()
        total, count = torch.zeros((), device=accelerator.device), 0
        part_sums: dict[str, Tensor] = {}  # per-epoch means of the objective's parts (data term, constraint term)
        bar = tqdm(loader, desc=f"{name} s{seed} ep {epoch + 1}/{cfg.epochs}", leave=False,
                   disable=not accelerator.is_main_process)
        for i, batch in enumerate(bar):
            loss, parts = objective(*batch, constrained=constrained)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            optimizer.step()
            total, count = total + loss.detach(), count + 1
            for k, v in parts.items():
                part_sums[k] = part_sums.get(k, 0) + v.detach().float()
            if i % 10 == 0 or i + 1 == len(loader):  # a host sync only every 10 steps
                bar.set_postfix(loss=f"{total.item() / count:.4f}", **{k: f"{float(v):.3f}" for k, v in parts.items()})
        record: dict[str, float] = {"epoch": epoch + 1,
                                    "train_loss": accelerator.gather(total.reshape(1) / count).mean().item()}
        record.update({f"train_{k}": accelerator.gather(v.reshape(1) / count).mean().item() for k, v in part_sums.items()})
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            for split, data in (("val", splits.val), ("test", splits.test if exp.test_curves else None)):
                if data is not None:
                    record.update({f"{split}_{k}": v for k, v in evaluate_model(exp, unwrapped(), data, cfg, accelerator)[0].items()})
            if splits.val is not None:  # model selection and early stopping on the validation split
                score = selection_score(exp, {k[4:]: v for k, v in record.items() if k.startswith("val_")}, cfg)
                if state["best"] is None or score > state["best"]:
                    state.update(best=score, best_epoch=epoch + 1, bad_evals=0,
                                 best_model={k: v.detach().cpu().clone() for k, v in unwrapped().state_dict().items()})
                else:
                    state["bad_evals"] += 1
                    state["stopped"] = cfg.patience is not None and state["bad_evals"] >= cfg.patience
        state["wall_s"] += time.time() - t0
        state["cpu_s"] += time.process_time() - c0
        state["history"].append(record)
        state["epoch"] = epoch + 1
        accelerator.print(f"[{name} seed {seed}] epoch {epoch + 1}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in record.items() if k != "epoch")
            + (f" (early stop: best val epoch {state['best_epoch']})" if state["stopped"] else ""))
        save(exp, shared, name, seed, state, unwrapped(), optimizer, ckpt_path, accelerator)
    if not exp.trains(base, cfg) and not ckpt_path.exists():  # an untrained model: its epoch-0 checkpoint
        save(exp, shared, name, seed, state, unwrapped(), optimizer, ckpt_path, accelerator)

    model = unwrapped()
    on_validation = cfg.test_checkpoint == "best_validation"  # else: test the model at the last epoch
    if on_validation and state["best_model"] is not None:  # the checkpoint selected on the validation split (a run
        model.load_state_dict(state["best_model"])           # packed as finished holds it as its model already)
    metrics, pred = evaluate_model(exp, model, splits.test, cfg, accelerator)
    decoded = {d: evaluate_model(exp, model, splits.test, cfg, accelerator, decoder=d, seed=seed)[0] for d in cfg.decoders}
    return {"model": name, "seed": seed, **metrics, "epochs_trained": state["epoch"],
            "selected_epoch": state["best_epoch"] if on_validation and state["best_epoch"] else state["epoch"],
            "stopped_early": bool(state["stopped"]),
            "selected_on": selection_reason(exp, cfg, state["history"], state["best_epoch"]) if on_validation else "",
            "decoded": decoded, "history": state["history"], "wall_s": state["wall_s"], "cpu_s": state["cpu_s"],
            "predictions": pred}


def save(exp: Experiment, cfg: RunConfig, name: str, seed: int, state: dict, model: nn.Module,
         optimizer: torch.optim.Optimizer, ckpt_path: Path, accelerator: Any) -> None:
    if accelerator.is_main_process:
        ckpt_path.parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all, with its SHA-256; never by a worker whose parent has ended (runs.atomic_path)
        save_checkpoint({**state, "experiment": exp.name, "config": cfg.to_dict(), "model_name": name, "seed": seed,
                         "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state()},
                        ckpt_path)
    accelerator.wait_for_everyone()


@torch.no_grad()
def evaluate_model(exp: Experiment, model: nn.Module, data: Any, cfg: RunConfig, accelerator: Any,
                   decoder: str | None = None, seed: int = 0):
    """``exp.evaluate`` in eval mode; an extra decoder starts from torch's RNG seeded with the run's ``seed``
    (numpy's and Python's too), so a sampling decoder's row is reproducible, whichever decoders ran before it."""
    was_training = model.training
    model.eval()
    try:
        if decoder is None:
            return exp.evaluate(model, data, cfg, accelerator)
        seed_all(seed)
        return exp.evaluate(model, data, cfg, accelerator, decoder=decoder)
    finally:
        model.train(was_training)
