"""The one training harness every experiment runs through: folders, several runs, results, re-evaluation.

An experiment is a subclass of :class:`~.experiment.Experiment`: its data, models, objective and metrics.  The
training loop of one model and one seed is :func:`.loop.train_run` (a file of its own, read top to bottom); the
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
  comparisons with their base models, the training lengths and the paired differences per epoch, the paper's
  numbers, machine), ``table.txt`` (table, comparisons, how checkpoints were selected, how long the runs trained
  and whether they reached the epoch cap still improving, i.e. are not converged, the preset's ``note``),
  ``curves.png``, ``paired_by_epoch.png`` (each constrained model minus its base at every epoch of the budget)
  and the experiment's example figure (tables and statistics: :mod:`pseudosl.experiments.summary`, training
  length and the effect over the budget: :mod:`pseudosl.experiments.convergence`);
* Accelerate: runs unchanged under ``accelerate launch``; only the main process writes files.

"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..errors import PseudoslError, RunFolderError, StorageError
from ..logic.checks import check_int
from .checkpoints import CheckpointError, check_continuable, load_checkpoint, load_weights
from .config import ConfigError, RunConfig, model_variant
from .convergence import EPOCH_RULE, format_training, paired_by_epoch, training_lengths
from .experiment import Experiment, Splits
from .loop import evaluate_model, save, seed_all, train_run
from .runs import (LOCK, MANIFEST, atomic_path, check_identity, check_manifest, check_out_folder, run_dirs,
                   run_lock, watch_parent, write_manifest)
from .summary import (fill_decoder_labels, format_findings, format_table, model_label, paired_comparisons, row_key,
                      selection_reason, selection_score, summarize, unit)

__all__ = ["Experiment", "Splits", "train", "train_run", "run_folder", "evaluate_checkpoints", "summarize",
           "format_table", "load_checkpoint", "make_accelerator", "CheckpointError", "model_label",
           "selection_score", "unit", "check_decoders", "save", "seed_all"]


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
    """Summary, paired comparisons (at the end and per epoch), training lengths and the text of the table for
    ``runs`` (one config)."""
    labels = fill_decoder_labels(exp.decoders, cfg.to_dict())  # "resample {resample_candidates}" -> "resample 16"
    records, rows = _rows(runs, models)
    summary = summarize(records, exp.metrics, rows)
    comparisons = paired_comparisons(exp, records, rows)
    lengths = training_lengths(runs, cfg.epochs)
    training = format_training(exp, lengths, cfg.epochs, cfg.patience, labels)
    findings = format_findings(exp, comparisons, records, cfg.note, exp.selection_order(cfg), labels, training)
    return {"summary": summary, "comparisons": comparisons, "findings": findings,
            "training": {"epochs": cfg.epochs, "patience": cfg.patience, "rows": lengths},
            "paired_by_epoch": {"rule": EPOCH_RULE, "curves": paired_by_epoch(exp, cfg, records, rows)},
            "text": format_table(exp, summary, title, labels) + ("\n\n" + findings if findings else "")}


def _machine() -> dict:
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")  # > cores: the machine was shared
    return {"device": dev, "torch": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_avg_1min": load}


# -- entry points -----------------------------------------------------------------------------------
def _earlier_wall(out: Path) -> list[float]:
    """The wall times of the earlier calls that wrote ``out/results.json`` (none when there is none): a table made
    in parts (``--resume``) reports them all."""
    try:
        earlier = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return []
    calls = earlier.get("wall_s_calls", [earlier.get("wall_s")])
    return [float(w) for w in calls if isinstance(w, (int, float))]


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
    wall_calls = (_earlier_wall(out) if resume else []) + [time.time() - t0]  # a resumed table: every call's wall
    summary = tables["summary"]
    result = {"experiment": exp.name, "config": cfg.to_dict(), "content_key": cfg.content_key(), "summary": summary,
              "comparisons": tables["comparisons"], "findings": tables["findings"], "training": tables["training"],
              "paired_by_epoch": tables["paired_by_epoch"],
              "paper": exp.paper, "wall_s": wall_calls[-1], "wall_s_calls": wall_calls,
              "world_size": accelerator.num_processes,
              "machine": _machine(), "runs": [{k: v for k, v in r.items() if k != "predictions"} for r in runs]}
    if accelerator.is_main_process:
        from .plots import plot_curves, plot_paired_by_epoch
        with atomic_path(out / "results.json") as tmp:
            tmp.write_text(json.dumps(result, indent=2))
        labels = {m: model_label(exp, m) for m in cfg.models}
        with atomic_path(out / "curves.png") as tmp:
            plot_curves(result["runs"], exp.curve_metrics or exp.metrics, tmp, labels=labels,
                        title=f"{exp.name}, preset {cfg.preset}", units=exp.units)
        (out / "paired_by_epoch.png").unlink(missing_ok=True)  # none without pairs: no stale figure either
        if result["paired_by_epoch"]["curves"]:
            with atomic_path(out / "paired_by_epoch.png") as tmp:
                plot_paired_by_epoch(result["paired_by_epoch"]["curves"], tmp, labels=labels,
                                     title=f"{exp.name}, preset {cfg.preset}", rule=EPOCH_RULE)
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
    budget = f"up to {cfg.epochs} epochs, patience {cfg.patience}" if cfg.patience else f"{cfg.epochs} epochs"
    return (f"{exp.name} (test split, {sel}mean ± std over seeds; preset {cfg.preset}, "
            f"config {cfg.content_key()}, {budget})")


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
        load_weights(model, ckpt.get("best_model") or ckpt["model"], path, ckpt["model_name"])
        model = accelerator.unwrap_model(accelerator.prepare(model))
        test = data_cache[cfg.content_key()].test
        metrics, _ = evaluate_model(exp, model, test, run_cfg, accelerator)
        decoded = {d: evaluate_model(exp, model, test, run_cfg, accelerator, decoder=d, seed=ckpt["seed"])[0]
                   for d in cfg.decoders}
        groups.setdefault(key, []).append({"model": ckpt["model_name"], "seed": ckpt["seed"], "epoch": ckpt["epoch"],
                                           "path": str(path), **metrics, "decoded": decoded,
                                           "epochs_trained": ckpt["epoch"],
                                           "selected_epoch": ckpt.get("best_epoch") or ckpt["epoch"],
                                           "stopped_early": bool(ckpt.get("stopped", False)),
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
                       "comparisons": t["comparisons"], "training": t["training"], "runs": runs})
        accelerator.print(t["text"])
    return {"tables": tables}
