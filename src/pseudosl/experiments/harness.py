"""The one training harness every experiment runs through.

An experiment is a subclass of :class:`Experiment`: its data, models, objective and metrics.  The
harness owns everything else, the same for every experiment:

* seeds: model ``seed`` seeds torch / numpy / random; the batch order is a function of
  ``(seed, epoch)`` only, so a resumed run sees the same batches;
* run folders: ``runs/<experiment>/<preset>-<content key>/<model>-seed<seed>/checkpoint.pt`` by
  default (the key hashes every config field that changes what is computed, so two presets never
  share a folder); training refuses to replace checkpoints unless ``resume`` or ``overwrite``, locks
  the folder, records its config in ``run.json`` and refuses runs that do not belong together
  (:mod:`pseudosl.experiments.runs`);
* checkpoints after every epoch (config, model, optimizer, RNG states, history, early-stopping
  state), each with the SHA-256 of its bytes, checked before any is used (:mod:`.checkpoints`), and an
  exact ``resume``;
* model selection: with a validation split, the checkpoint of the best validation score
  (:func:`selection_score`, the one rule: ``Experiment.selection_order``, by default its metrics, compared in
  order, so ``metrics[1]`` breaks ties of ``metrics[0]``; higher is better unless the metric is in
  ``Experiment.lower_is_better``; an undefined (NaN) value is the worst; the earlier epoch wins a full
  tie) is the one tested; ``patience`` stops early;
* models that are not trained (``Experiment.trains`` is false, e.g. a pretrained baseline) are only
  evaluated; their checkpoint (epoch 0) is written so that ``eval`` finds them;
* model variants: ``models = ["rnn_psl@psl_weight=0.01", "rnn_psl@psl_weight=0.05"]`` trains a model with
  config overrides (a weight grid in one run); each variant is its own row and folder;
* extra decoders: ``decoders = ["constrained"]`` evaluates every selected checkpoint once more per decoder
  (``Experiment.decoders``), each a row of its own; ``eval --decoders`` adds them to trained runs;
* results: ``results.json`` (config, per-run metrics and curves, mean ± std per row, the paired
  comparisons with their base models, the paper's numbers, machine), ``table.txt`` (table, comparisons,
  how checkpoints were selected, the preset's ``note``), ``curves.png`` and the experiment's example figure
  (tables and statistics: :mod:`pseudosl.experiments.summary`);
* Accelerate: runs unchanged under ``accelerate launch``; only the main process writes files.

The loop itself (:func:`train_run`) reads top to bottom.
"""

from __future__ import annotations

import abc
import copy
import json
import os
import platform
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm.auto import tqdm

from ..errors import PseudoslError, RunFolderError, StorageError
from .checkpoints import CheckpointError, check_continuable, load_checkpoint, load_weights, save_checkpoint
from .config import ConfigError, RunConfig, model_variant, split_model
from .runs import (LOCK, MANIFEST, atomic_path, check_identity, check_manifest, check_out_folder, run_dirs,
                   run_lock, watch_parent, write_manifest)
from .summary import (format_findings, format_report, format_table, model_label, paired_comparisons, row_key, selection_reason,
                      selection_score, summarize, unit)

__all__ = ["Experiment", "Splits", "train", "train_run", "run_folder", "evaluate_checkpoints", "summarize",
           "format_table", "load_checkpoint", "make_accelerator", "CheckpointError", "model_label",
           "selection_score", "unit", "check_decoders"]

C = TypeVar("C", bound=RunConfig)


@dataclass
class Splits:
    """``train`` yields tuples of tensors for the objective; ``val``/``test`` are what ``evaluate`` takes."""

    train: Dataset
    val: Any | None
    test: Any
    description: str = ""


class Experiment(abc.ABC, Generic[C]):
    """What an experiment adds to the harness.  Metrics are percentages, higher is better, unless
    ``units`` names another unit (e.g. ``{"cost_ratio": "x"}``), ``lower_is_better`` lists them, or
    ``selection_order`` (the validation order) says otherwise.

    ``baselines`` pairs a constrained model with its base (``{"rnn_psl": "rnn"}``): every table then
    reports their per-seed difference with a 95 % interval and a verdict
    (:func:`pseudosl.experiments.summary.paired_comparisons`).  ``decoders`` names extra test-time decoders
    (``{"constrained": "constrained"}``: config name -> label suffix, which may name config fields in braces,
    ``"resample {resample_candidates}"``, filled from the table's config) that ``evaluate(..., decoder=name)``
    implements; ``cfg.decoders`` picks some, each adds a row per model from the same checkpoints.  The harness
    seeds torch, numpy and Python with the run's seed before each decoder's evaluation.
    """

    name: str                                  # folder under runs/, e.g. "sudoku"
    config_class: type[C]
    labels: dict[str, str]                     # model name -> table label
    metrics: tuple[str, ...]                   # table columns; selection on validation compares them in order
    paper: dict[str, dict[str, float]] = {}    # model -> metric -> the paper's value
    units: dict[str, str] = {}                 # metric -> unit shown in tables and plots (default "%")
    lower_is_better: frozenset[str] = frozenset()  # metrics where smaller is better (for model selection)
    selection_metrics: tuple[str, ...] = ()    # validation order of the default selection (default: ``metrics``)
    baselines: dict[str, str] = {}             # constrained model -> its base model, compared seed by seed
    comparison_metrics: tuple[str, ...] = ()  # the metrics compared seed by seed (default: ``metrics``)
    decoders: dict[str, str] = {}              # extra test-time decoders: name -> label suffix of their rows
    presets: Path                              # folder of the shipped <name>.toml presets
    curve_metrics: tuple[str, ...] = ()        # metrics plotted in curves.png (default: all of ``metrics``)
    test_curves: bool = True                   # evaluate the test split at every evaluation (False: at the end only)
    actions: dict[str, str] = {}               # extra CLI steps (name -> help), run by ``run_action``

    def preset_path(self, name: str) -> Path:
        """The shipped preset ``<name>.toml``, or a named error listing the known ones."""
        from .config import preset_path
        return preset_path(self.presets, name)

    @abc.abstractmethod
    def load_data(self, cfg: C) -> Splits: ...

    @abc.abstractmethod
    def build_model(self, name: str, cfg: C) -> nn.Module: ...

    @abc.abstractmethod
    def objective(self, model: nn.Module, name: str, cfg: C) -> nn.Module:
        """A module whose ``forward(*batch, constrained=bool)`` returns ``(loss, parts)``.

        ``parts`` maps names to detached scalars (logged in the progress bar).  Wrapping the
        loss in a module lets ``accelerator.prepare`` (DDP) see every parameter use.
        """

    @abc.abstractmethod
    def evaluate(self, model: nn.Module, data: Any, cfg: C, accelerator: Any) -> tuple[dict[str, float], Any]:
        """Metrics (``metrics`` keys at least) and the predictions on ``data``; the model is in eval mode.

        An experiment with ``decoders`` also takes ``decoder=<name>`` (called only with a name it lists)."""

    def optimizer(self, model: nn.Module, cfg: C) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def plot_examples(self, test: Any, predictions: dict[str, Any], path: Path) -> None:
        """Optional figure of a few test predictions per model (the first seed of each)."""

    def fidelity_inputs(self, model: nn.Module, test: Any, n_examples: int) -> tuple[Any, Tensor, str]:
        """For ``pseudosl fidelity`` (autoregressive models): an engine bound to the first ``n_examples`` test
        inputs, the ``(B, n)`` anchors to approximate around, and how the anchors were drawn (one line)."""
        raise ValueError(f"pseudosl fidelity does not support the {self.name} experiment (no autoregressive model)")

    def selection_order(self, cfg: C | None = None) -> list[str]:
        """The validation metrics that select a checkpoint, in order (:func:`selection_score`, the one rule)."""
        return list(self.selection_metrics or self.metrics)

    def trains(self, name: str, cfg: C) -> bool:
        """Whether model ``name`` is trained (False: evaluated as built, e.g. a pretrained baseline)."""
        return True

    def report(self, result: dict, out: Path) -> None:
        """Optional extra outputs (tables, figures) from the final ``results.json`` content, main process only."""

    def run_action(self, action: str, cfg: C) -> None:
        """Run the extra step ``action`` (one of ``actions``), e.g. ``pseudosl detox pretrain``."""
        raise ValueError(f"{self.name}: unknown action {action!r}; choose from train, eval, {', '.join(self.actions)}")


# -- seeds and RNG state --------------------------------------------------------------------------
def _seed_all(seed: int) -> None:
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if s["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def make_accelerator():
    """An ``accelerate.Accelerator``; without a GPU a gloo CPU group under ``accelerate launch``."""
    from accelerate import Accelerator
    # without a GPU, Accelerator() ignores a torchrun / accelerate-launch world of several processes;
    # cpu=True makes it a gloo MULTI_CPU group (and a plain single process otherwise)
    return Accelerator(cpu=not torch.cuda.is_available())


# -- folders and checkpoints ----------------------------------------------------------------------
def run_folder(exp: Experiment, cfg: RunConfig) -> Path:
    """``cfg.out``, or ``runs/<experiment>/<preset>-<content key>``."""
    return Path(cfg.out) if cfg.out else Path("runs") / exp.name / f"{cfg.preset}-{cfg.content_key()}"


def _ckpt_path(out: Path, name: str, seed: int) -> Path:
    return out / f"{name}-seed{seed}" / "checkpoint.pt"


def _prepare_folder(exp: Experiment, cfg: RunConfig, out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to replace checkpoints silently, to mix configs, or to leave runs out of the folder's results
    (``results.json`` and ``table.txt`` always describe every run of the folder); ``resume`` with nothing to
    resume is an error.  Runs under the folder's lock."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    found = run_dirs(out)
    mine = {f"{name}-seed{seed}" for name in cfg.models for seed in cfg.seeds}
    others = sorted(set(found) - mine)
    if others:
        raise RunFolderError(f"{out} also holds the runs {', '.join(others[:4])}{' ...' if len(others) > 4 else ''}, "
                             f"which are not among --models {' '.join(cfg.models)} x --seeds "
                             f"{' '.join(map(str, cfg.seeds))}; its results would leave them out: list them too "
                             f"(with --resume), or pass another --out")
    existing = [found[d] for d in sorted(set(found) & mine)]
    if resume and not existing:
        raise ConfigError(f"--resume: nothing to resume under {out} (no <model>-seed<seed>/checkpoint.pt for "
                          f"models {cfg.models}, seeds {cfg.seeds}); drop --resume to start")
    if existing and not resume and not overwrite:
        raise ConfigError(f"{out} already holds {len(existing)} checkpoint(s) (e.g. {existing[0]}); "
                          f"pass --resume to continue them, --overwrite to replace them, or another --out")
    if overwrite:
        for p in existing:
            shutil.rmtree(p.parent)
        (out / MANIFEST).unlink(missing_ok=True)
    check_manifest(out, exp.name, cfg.content_key(), f"--out {out}")
    if resume:  # every checkpoint is this run's and can reach cfg.epochs: refused now, not after the data is made
        for name in cfg.models:
            for seed in cfg.seeds:
                if (path := found.get(f"{name}-seed{seed}")) is not None:
                    check_continuable(load_checkpoint(path, exp.name), cfg, name, seed, path)


# -- one model, one seed --------------------------------------------------------------------------
def train_run(exp: Experiment, cfg: RunConfig, name: str, seed: int, splits: Splits, accelerator: Any,
              out: Path, resume: bool = False) -> dict:
    """Train ``name`` with ``seed``; returns test metrics (of the selected checkpoint), history, predictions."""
    ckpt_path = _ckpt_path(out, name, seed)
    shared, (base, cfg) = cfg, model_variant(cfg, name)  # a variant "name@field=value" trains with its overrides
    _seed_all(seed)
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
        _set_rng_state(ckpt["rng"])
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
                    record.update({f"{split}_{k}": v for k, v in _evaluate(exp, unwrapped(), data, cfg, accelerator)[0].items()})
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
        _save(exp, shared, name, seed, state, unwrapped(), optimizer, ckpt_path, accelerator)
    if not exp.trains(base, cfg) and not ckpt_path.exists():  # an untrained model: its epoch-0 checkpoint
        _save(exp, shared, name, seed, state, unwrapped(), optimizer, ckpt_path, accelerator)

    model = unwrapped()
    if state["best_model"] is not None:  # test the checkpoint selected on the validation split
        model.load_state_dict(state["best_model"])
    metrics, pred = _evaluate(exp, model, splits.test, cfg, accelerator)
    decoded = {d: _evaluate(exp, model, splits.test, cfg, accelerator, decoder=d, seed=seed)[0] for d in cfg.decoders}
    return {"model": name, "seed": seed, **metrics, "epochs_trained": state["epoch"],
            "selected_epoch": state["best_epoch"] or state["epoch"],
            "selected_on": selection_reason(exp, cfg, state["history"], state["best_epoch"]),
            "decoded": decoded, "history": state["history"], "wall_s": state["wall_s"], "cpu_s": state["cpu_s"],
            "predictions": pred}


def _save(exp: Experiment, cfg: RunConfig, name: str, seed: int, state: dict, model: nn.Module,
          optimizer: torch.optim.Optimizer, ckpt_path: Path, accelerator: Any) -> None:
    if accelerator.is_main_process:
        ckpt_path.parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all, with its SHA-256; never by a worker whose parent has ended (runs.atomic_path)
        save_checkpoint({**state, "experiment": exp.name, "config": cfg.to_dict(), "model_name": name, "seed": seed,
                         "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": _rng_state()},
                        ckpt_path)
    accelerator.wait_for_everyone()


@torch.no_grad()
def _evaluate(exp: Experiment, model: nn.Module, data: Any, cfg: RunConfig, accelerator: Any,
              decoder: str | None = None, seed: int = 0):
    """``exp.evaluate`` in eval mode; an extra decoder starts from torch's RNG seeded with the run's ``seed``
    (numpy's and Python's too), so a sampling decoder's row is reproducible, whichever decoders ran before it."""
    was_training = model.training
    model.eval()
    try:
        if decoder is None:
            return exp.evaluate(model, data, cfg, accelerator)
        _seed_all(seed)
        return exp.evaluate(model, data, cfg, accelerator, decoder=decoder)
    finally:
        model.train(was_training)


def check_decoders(exp: Experiment, decoders: list[str]) -> None:
    """Refuse decoders the experiment does not implement, before any work."""
    bad = [d for d in decoders if d not in exp.decoders]
    if bad:
        known = ", ".join(exp.decoders) or "none (greedy decoding only)"
        raise ConfigError(f"decoders: {exp.name} has no decoder {', '.join(map(repr, bad))}; known: {known}")


# -- summary ----------------------------------------------------------------------------------------
def _rows(runs: list[dict], models: list[str]) -> tuple[list[dict], list[str]]:
    """Per-run records of every table row (a model's greedy decoding, then each extra decoder) and the rows."""
    records, keys = [], []
    decoders = list(dict.fromkeys(d for r in runs for d in r.get("decoded", {})))
    for decoder in [None, *decoders]:
        for name in models:
            key = row_key(name, decoder)
            for r in runs:
                if r["model"] == name and (decoder is None or decoder in r.get("decoded", {})):
                    metrics = r["decoded"][decoder] if decoder else {}
                    records.append({**{k: v for k, v in r.items() if k != "decoded"}, **metrics, "model": key})
                    keys.append(key)
    return records, list(dict.fromkeys(keys))


def _tables(exp: Experiment, cfg: RunConfig, runs: list[dict], models: list[str], title: str) -> dict:
    """Summary, paired comparisons and the text of the table for ``runs`` (one config)."""
    exp = _with_decoder_labels(exp, cfg)
    records, rows = _rows(runs, models)
    summary = summarize(records, exp.metrics, rows)
    comparisons = paired_comparisons(exp, records, rows)
    findings = format_findings(exp, comparisons, records, cfg.note, exp.selection_order(cfg))
    return {"summary": summary, "comparisons": comparisons, "findings": findings,
            "text": format_table(exp, summary, title) + ("\n\n" + findings if findings else "")}


def _with_decoder_labels(exp: Experiment, cfg: RunConfig) -> Experiment:
    """``exp`` with its decoder labels filled from ``cfg``: ``"resample {resample_candidates}"`` -> ``"resample 16"``."""
    if not any("{" in label for label in exp.decoders.values()):
        return exp
    view = copy.copy(exp)
    view.decoders = {d: label.format(**cfg.to_dict()) for d, label in exp.decoders.items()}
    return view


def _machine() -> dict:
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")  # > cores: the machine was shared
    return {"device": dev, "torch": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_avg_1min": load}


# -- entry points -----------------------------------------------------------------------------------
def train(exp: Experiment, cfg: RunConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Train every model of ``cfg.models`` for every seed, then write results, table and figures.

    The run folder is locked while the runs write it (the main process holds the lock); the folder, the
    machine (``cfg.preflight()``) and every checkpoint to resume are checked before any data is made."""
    cfg.preflight()  # threads, jobs and the data set's memory fit this machine: checked before anything uses them
    check_decoders(exp, cfg.decoders)
    out = run_folder(exp, cfg)
    check_out_folder(out)
    accelerator = make_accelerator()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if not accelerator.is_main_process:  # the main process checks and locks the folder (a refusal ends the launch)
        return _train(exp, cfg, out, accelerator, resume)
    created = not out.exists()
    try:
        with run_lock(out) as stale:
            if stale:
                print(f"{out}: taking over the lock of a run that ended without releasing it ({stale})")
            _prepare_folder(exp, cfg, out, resume, overwrite)  # before any data is made
            write_manifest(out, exp.name, cfg)
            return _train(exp, cfg, out, accelerator, resume)
    except PseudoslError:
        if created and out.is_dir() and not any(p.name not in (LOCK, MANIFEST) for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)  # refused before any run wrote to it: leave no empty folder
        raise


def _train(exp: Experiment, cfg: RunConfig, out: Path, accelerator: Any, resume: bool) -> dict:
    t0 = time.time()
    splits = exp.load_data(cfg)
    if cfg.patience is not None and splits.val is None:
        raise ConfigError(f"patience = {cfg.patience} stops early on the validation split, but {exp.name} has none "
                          f"with this config; configure one or drop patience")
    accelerator.print(f"{exp.name}: {splits.description}; out: {out}")
    pairs = [(name, seed) for name in cfg.models for seed in cfg.seeds]
    if cfg.jobs > 1 and accelerator.num_processes > 1:
        raise ConfigError(f"jobs = {cfg.jobs} runs several trainings in worker processes; under a multi-process "
                          f"launch ({accelerator.num_processes} processes) use jobs = 1")
    if cfg.jobs > 1 and len(pairs) > 1:
        runs = _train_parallel(exp, cfg, pairs, out, resume)
    else:
        runs = [train_run(exp, cfg, name, seed, splits, accelerator, out, resume=resume) for name, seed in pairs]
    for r in runs:
        accelerator.print(f"[{r['model']} seed {r['seed']}] test " + ", ".join(f"{m} {r[m]:.2f}{unit(exp, m)}"
                                                                          for m in exp.metrics)
                          + f" ({r['wall_s']:.0f}s, CPU {r['cpu_s']:.0f}s)")
    tables = _tables(exp, cfg, runs, cfg.models, _title(exp, cfg, splits))
    summary = tables["summary"]
    result = {"experiment": exp.name, "config": cfg.to_dict(), "content_key": cfg.content_key(), "summary": summary,
              "comparisons": tables["comparisons"], "findings": tables["findings"],
              "paper": exp.paper, "wall_s": time.time() - t0, "world_size": accelerator.num_processes,
              "machine": _machine(), "runs": [{k: v for k, v in r.items() if k != "predictions"} for r in runs]}
    if accelerator.is_main_process:
        from .plots import plot_curves
        with atomic_path(out / "results.json") as tmp:
            tmp.write_text(json.dumps(result, indent=2))
        with atomic_path(out / "curves.png") as tmp:
            plot_curves(result["runs"], exp.curve_metrics or exp.metrics, tmp,
                        labels={m: model_label(exp, m) for m in cfg.models}, title=f"{exp.name}, preset {cfg.preset}",
                        units=exp.units)
        first: dict[str, Any] = {}
        for r in runs:
            first.setdefault(r["model"], r["predictions"])
        with atomic_path(out / "examples.png") as tmp:
            exp.plot_examples(splits.test, first, tmp)
        table = tables["text"]
        with atomic_path(out / "table.txt") as tmp:
            tmp.write_text(table + "\n")
        print(table)
        try:
            exp.report(result, out)
        except OSError as e:
            raise StorageError(f"could not write the {exp.name} report under {out}: {e}; free space there or pass "
                               f"another --out") from None
        written = ", ".join(str(p) for p in sorted(out.glob("*.*")) if p.suffix in (".json", ".png", ".txt"))
        print(f"wrote {written} ({result['wall_s']:.0f}s in all)")
    return result


def _worker(exp: Experiment, cfg: RunConfig, name: str, seed: int, out: Path, resume: bool) -> dict:
    """One (model, seed) run in a worker process: its own accelerator, data from the disk cache."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    accelerator = make_accelerator()
    return train_run(exp, cfg, name, seed, exp.load_data(cfg), accelerator, out, resume=resume)


def _worker_pool(n: int):
    """``n`` spawned worker processes that end with this process (``kill -9`` too; :func:`runs.watch_parent`:
    on Linux the kernel kills them at once) and never write a file after it.  The workers start in the thread
    that submits the first tasks, and Linux ties them to that thread: submit from the main thread."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=watch_parent,
                               initargs=(os.getpid(),))


def _train_parallel(exp: Experiment, cfg: RunConfig, pairs: list[tuple[str, int]], out: Path, resume: bool) -> list[dict]:
    """``cfg.jobs`` runs at a time in spawned processes (they share the GPU); results in ``pairs`` order."""
    with _worker_pool(min(cfg.jobs, len(pairs))) as pool:
        futures = [pool.submit(_worker, exp, cfg, name, seed, out, resume) for name, seed in pairs]
        try:
            return [f.result() for f in tqdm(futures, desc=f"{exp.name}: {len(pairs)} runs, {cfg.jobs} at a time")]
        except BaseException:  # one run failed: start no further run; those running finish under the lock
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _title(exp: Experiment, cfg: RunConfig, splits: Splits) -> str:
    sel = "checkpoint selected on validation, " if splits.val is not None else ""
    return (f"{exp.name} (test split, {sel}mean ± std over seeds; preset {cfg.preset}, "
            f"config {cfg.content_key()}, {cfg.epochs} epochs)")


def evaluate_checkpoints(exp: Experiment, out: str | Path, decoders: list[str] | None = None,
                         resample_candidates: int | None = None) -> dict:
    """Re-evaluate every checkpoint under ``out`` (recursively); one table per distinct config.

    Runs are grouped by their config's content key and epochs, so checkpoints of different presets
    or settings are never averaged into one row.  Every checkpoint must hold the model and seed its folder
    names and the config of its run folder's ``run.json``; one (model, seed) found twice for one config
    (a copied folder) is refused, naming both, rather than counted as two seeds.  ``decoders`` (default:
    each checkpoint's ``cfg.decoders``) adds a row per extra decoder, without retraining;
    ``resample_candidates`` (default: each run's) sets ``K`` of the ``resample`` decoder.
    """
    if decoders is not None:
        check_decoders(exp, decoders)
    if resample_candidates is not None:
        if "resample" not in exp.decoders:
            raise ValueError(f"resample_candidates = {resample_candidates}: {exp.name} has no resample decoder")
        if isinstance(resample_candidates, bool) or not isinstance(resample_candidates, int) or resample_candidates < 1:
            raise ValueError(f"resample_candidates = {resample_candidates!r}: give a positive number of candidates K")
    accelerator = make_accelerator()
    paths = sorted(Path(out).rglob("checkpoint.pt"))
    if not paths:
        raise CheckpointError(f"no checkpoints under {out} (looked for */checkpoint.pt); train first "
                              f"(pseudosl {exp.name} train)")
    groups: dict[tuple, list[dict]] = {}
    cfgs: dict[tuple, RunConfig] = {}
    data_cache: dict[str, Splits] = {}
    seen: dict[tuple, Path] = {}
    checked: list[tuple[Path, tuple, RunConfig]] = []
    for path in paths:  # every checkpoint checked before the first is evaluated
        ckpt = load_checkpoint(path, exp.name)
        check_identity(ckpt, path)
        cfg = exp.config_class(**ckpt["config"])
        check_manifest(path.parent.parent, exp.name, cfg.content_key(), str(path))
        if not 0 <= ckpt["epoch"] <= cfg.epochs:
            raise CheckpointError(f"{path}: at epoch {ckpt['epoch']} of a run configured for {cfg.epochs} epochs "
                                  f"(tampered, or copied from another run?); delete it or train it again")
        if decoders is not None:
            cfg.decoders = list(decoders)
        if resample_candidates is not None:
            cfg.resample_candidates = resample_candidates  # test time only: not in the content key
        check_decoders(exp, cfg.decoders)
        key = (cfg.content_key(), cfg.epochs)  # early-stopped and untrained runs stay in their table
        if (first := seen.setdefault((*key, ckpt["model_name"], ckpt["seed"]), path)) != path:
            raise CheckpointError(f"{path} and {first} are both {ckpt['model_name']} seed {ckpt['seed']} of config "
                                  f"{key[0]} ({key[1]} epochs): one run would count as two seeds; eval one of their "
                                  f"folders (--out) or delete the copy")
        cfgs[key] = cfg
        checked.append((path, key, cfg))
    for path, key, cfg in checked:
        ckpt = load_checkpoint(path, exp.name)
        if cfg.content_key() not in data_cache:
            data_cache[cfg.content_key()] = exp.load_data(cfg)
        base, run_cfg = model_variant(cfg, ckpt["model_name"])
        model = exp.build_model(base, run_cfg)
        load_weights(model, ckpt.get("best_model") or ckpt["model"], path, ckpt["model_name"])
        model = accelerator.unwrap_model(accelerator.prepare(model))
        test = data_cache[cfg.content_key()].test
        metrics, _ = _evaluate(exp, model, test, run_cfg, accelerator)
        decoded = {d: _evaluate(exp, model, test, run_cfg, accelerator, decoder=d, seed=ckpt["seed"])[0]
                   for d in cfg.decoders}
        groups.setdefault(key, []).append({"model": ckpt["model_name"], "seed": ckpt["seed"], "epoch": ckpt["epoch"],
                                           "path": str(path), **metrics, "decoded": decoded,
                                           "selected_on": selection_reason(exp, run_cfg, ckpt["history"],
                                                                           ckpt.get("best_epoch", 0))})
        accelerator.print(f"{path}: epoch {ckpt['epoch']}, " + ", ".join(f"{m} {metrics[m]:.2f}{unit(exp, m)}"
                                                                        for m in exp.metrics))
    tables = []
    for key, runs in groups.items():
        cfg = cfgs[key]
        stopped = sorted({r["epoch"] for r in runs} - {key[1]})
        done = f", some runs stopped at epoch {', '.join(map(str, stopped))} of {key[1]}" if stopped else ""
        title = f"{exp.name} (test split; preset {cfg.preset}, config {key[0]}{done})"
        t = _tables(exp, cfg, runs, list(dict.fromkeys(r["model"] for r in runs)), title)
        tables.append({"config": cfg.to_dict(), "content_key": key[0], "epochs": key[1], "summary": t["summary"],
                       "comparisons": t["comparisons"], "runs": runs})
        accelerator.print(t["text"])
    return {"tables": tables}
