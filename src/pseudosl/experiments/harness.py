"""The one training harness every experiment runs through: every model and seed of a config, then their table.

An experiment is a subclass of :class:`~.experiment.Experiment`: its data, models, objective and metrics.  The
harness has two entry points, the same for every experiment: :func:`train` (train every model of ``cfg.models`` for
every seed, then write the results) and :func:`evaluate_checkpoints` (re-evaluate the checkpoints under a folder,
one table per config).  Its parts live in modules of their own: the training loop of one model and one seed
(:func:`.loop.train_run`, read top to bottom), run folders (:mod:`.runs`), checkpoints (:mod:`.checkpoints`),
several runs at a time (:mod:`.parallel`), the files of a table (:mod:`.results`) and its statistics
(:mod:`.summary`, :mod:`.convergence`).  Together:

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
* results (:mod:`.results`): ``results.json`` (config, per-run metrics and curves, mean ± std per row, the paired
  comparisons with their base models, the training lengths and the paired differences per epoch, the paper's
  numbers, machine; ``--resume`` checks its shape before recomputing anything), ``table.txt`` (table, comparisons, how checkpoints were selected, how long the runs trained
  and whether they reached the epoch cap still improving, i.e. are not converged, the preset's ``note``),
  ``curves.png``, ``paired_by_epoch.png`` (each constrained model minus its base at every epoch of the budget)
  and the experiment's example figure (tables and statistics: :mod:`pseudosl.experiments.summary`, training
  length and the effect over the budget: :mod:`pseudosl.experiments.convergence`);
* Accelerate: runs unchanged under ``accelerate launch``; only the main process writes files.

"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import PseudoslError, RunFolderError
from ..logic.checks import check_int
from .checkpoints import CheckpointError, check_continuable, load_checkpoint, load_weights, tested_weights
from .config import ConfigError, RunConfig, model_variant
from .decoders import WITH_CANDIDATES
from .experiment import Experiment, Splits
from .loop import evaluate_model, make_accelerator, train_run
from .parallel import train_parallel
from .results import earlier_wall, tables, write_results
from .runs import (LOCK, MANIFEST, check_identity, check_manifest, check_out_folder, run_dirs, run_folder, run_lock,
                   write_manifest)
from .summary import selection_reason, unit

__all__ = ["train", "evaluate_checkpoints", "check_decoders"]


def _prepare_folder(exp: Experiment, cfg: RunConfig, out: Path, resume: bool, overwrite: bool) -> list[float]:
    """Refuse to replace checkpoints silently, to mix configs, or to leave runs out of the folder's results
    (``results.json`` and ``table.txt`` always describe every run of the folder); ``resume`` with nothing to
    resume is an error.  Runs under the folder's lock.  Returns the wall times of the earlier calls that wrote the
    folder's results (``resume``: :func:`.results.earlier_wall`, its shape checked now)."""
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
    return earlier_wall(out) if resume else []


# -- decoders -----------------------------------------------------------------------------------------
def check_decoders(exp: Experiment, decoders: list[str]) -> None:
    """Refuse decoders the experiment does not implement, before any work."""
    bad = [d for d in decoders if d not in exp.decoders]
    if bad:
        known = ", ".join(exp.decoders) or "none (greedy decoding only)"
        raise ConfigError(f"decoders: {exp.name} has no decoder {', '.join(map(repr, bad))}; known: {known}")


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
        return _train(exp, cfg, out, accelerator, resume, [])
    created = not out.exists()
    try:
        with run_lock(out) as stale:
            if stale:
                print(f"{out}: taking over the lock of a run that ended without releasing it ({stale})")
            earlier = _prepare_folder(exp, cfg, out, resume, overwrite)  # before any data is made
            write_manifest(out, exp.name, cfg)
            return _train(exp, cfg, out, accelerator, resume, earlier)
    except PseudoslError:
        if created and out.is_dir() and not any(p.name not in (LOCK, MANIFEST) for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)  # refused before any run wrote to it: leave no empty folder
        raise


def _train(exp: Experiment, cfg: RunConfig, out: Path, accelerator: Any, resume: bool,
           earlier_wall_s: list[float]) -> dict:
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
        runs = train_parallel(exp, cfg, pairs, out, resume)
    else:
        runs = [train_run(exp, cfg, name, seed, splits, accelerator, out, resume=resume) for name, seed in pairs]
    for r in runs:
        accelerator.print(f"[{r['model']} seed {r['seed']}] test " + ", ".join(f"{m} {r[m]:.2f}{unit(exp, m)}"
                                                                          for m in exp.metrics)
                          + f" ({r['wall_s']:.0f}s, CPU {r['cpu_s']:.0f}s)")
    # a resumed table reports every call's wall time
    return write_results(exp, cfg, out, splits, runs, accelerator, _title(exp, cfg, splits),
                         [*earlier_wall_s, time.time() - t0])


def _title(exp: Experiment, cfg: RunConfig, splits: Splits) -> str:
    sel = ("the model at the last epoch, " if cfg.test_checkpoint == "last" else
           "checkpoint selected on validation, " if splits.val is not None else "")
    budget = budget_words(cfg)
    return (f"{exp.name} (test split, {sel}mean ± std over seeds; preset {cfg.preset}, "
            f"config {cfg.content_key()}, {budget})")


def budget_words(cfg: RunConfig) -> str:
    """``"up to 100 epochs, patience 10"``, ``"80 epochs"``, ``"80 epochs (read again with patience 10)"``."""
    if cfg.patience:
        return f"up to {cfg.epochs} epochs, patience {cfg.patience}"
    return f"{cfg.epochs} epochs" + (f" (read again with patience {cfg.patience_reading})"
                                     if cfg.patience_reading else "")


def evaluate_checkpoints(exp: Experiment, out: str | Path, decoders: list[str] | None = None,
                         resample_candidates: int | None = None) -> dict:
    """Re-evaluate every checkpoint under ``out`` (recursively); one table per distinct config.

    Runs are grouped by their config's content key and epochs, so checkpoints of different presets
    or settings are never averaged into one row.  Every checkpoint must hold the model and seed its folder
    names and the config of its run folder's ``run.json``; one (model, seed) found twice for one config
    (a copied folder) is refused, naming both, rather than counted as two seeds.  ``decoders`` (default:
    each checkpoint's ``cfg.decoders``) adds a row per extra decoder, without retraining;
    ``resample_candidates`` (default: each run's) sets ``K`` of the ``resample`` and ``restart`` decoders.
    """
    if decoders is not None:
        check_decoders(exp, decoders)
    if resample_candidates is not None:
        if not WITH_CANDIDATES & set(exp.decoders):
            raise ValueError(f"resample_candidates = {resample_candidates}: {exp.name} has no decoder that draws "
                             f"candidates ({', '.join(sorted(WITH_CANDIDATES))})")
        resample_candidates = check_int("resample_candidates", resample_candidates, 1, " (a number of candidates K)")
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
        load_weights(model, tested_weights(ckpt), path, ckpt["model_name"])
        model = accelerator.unwrap_model(accelerator.prepare(model))
        test = data_cache[cfg.content_key()].of_seed(ckpt["seed"]).test
        last = cfg.test_checkpoint == "last" or not ckpt.get("best_model")
        metrics, _ = evaluate_model(exp, model, test, run_cfg, accelerator)
        decoded = {d: evaluate_model(exp, model, test, run_cfg, accelerator, decoder=d, seed=ckpt["seed"])[0]
                   for d in cfg.decoders}
        groups.setdefault(key, []).append({"model": ckpt["model_name"], "seed": ckpt["seed"], "epoch": ckpt["epoch"],
                                           "path": str(path), **metrics, "decoded": decoded,
                                           "epochs_trained": ckpt["epoch"],
                                           "selected_epoch": (ckpt["epoch"] if last else ckpt.get("best_epoch")
                                                              or ckpt["epoch"]),
                                           "stopped_early": bool(ckpt.get("stopped", False)),
                                           "selected_on": "" if last else selection_reason(
                                               exp, run_cfg, ckpt["history"], ckpt.get("best_epoch", 0))})
        accelerator.print(f"{path}: epoch {ckpt['epoch']}, " + ", ".join(f"{m} {metrics[m]:.2f}{unit(exp, m)}"
                                                                        for m in exp.metrics))
    per_config = []
    for key, runs in groups.items():
        cfg = cfgs[key]
        stopped = sorted({r["epoch"] for r in runs} - {key[1]})
        done = f", some runs stopped at epoch {', '.join(map(str, stopped))} of {key[1]}" if stopped else ""
        title = f"{exp.name} (test split; preset {cfg.preset}, config {key[0]}{done})"
        t = tables(exp, cfg, runs, list(dict.fromkeys(r["model"] for r in runs)), title)
        per_config.append({"config": cfg.to_dict(), "content_key": key[0], "epochs": key[1], "summary": t["summary"],
                           "comparisons": t["comparisons"], "training": t["training"], "runs": runs})
        accelerator.print(t["text"])
    return {"tables": per_config}
