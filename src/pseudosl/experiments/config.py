"""Experiment configuration shared by every experiment: one typed dataclass, checked field by field.

An experiment subclasses :class:`RunConfig` and adds its fields.  Every field is checked against
its annotation when the object is built (from TOML, flags or code), before any data is made or a
model trained: ``lr = "0.001"``, ``epochs = true`` or ``models = "convnet"`` are named errors that
give the field, the bad value, the expected type and the allowed range.  Ranges and choices live
in the field's metadata (:func:`spec`); cross-field rules go in ``check()``.

Presets are TOML files shipped beside each experiment (``presets/<name>.toml``); every key is a
field.  The config is saved inside every checkpoint and in ``results.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomllib

from ..errors import PseudoslError
from ..logic.checks import check_bool, check_int
from ..memory import format_bytes, free_bytes

__all__ = ["RunConfig", "ConfigError", "spec", "load_config", "preset_path", "RUN_FREE_FIELDS", "split_model",
           "model_variant", "check_device", "usable_cpus", "check_parallelism", "check_memory"]

C = TypeVar("C", bound="RunConfig")


class ConfigError(PseudoslError, ValueError):
    """A config field or flag holds a value of the wrong type or out of range, or names a file, device or
    key this machine does not have."""


def spec(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
         min: float | None = None, max: float | None = None, choices: tuple | None = None,
         help: str = "", run_free: bool = False) -> Any:
    """A dataclass field with a checked range (``min``/``max``, inclusive) or set of ``choices``.

    For list fields the range and the choices apply to every element.  ``run_free``: the field does not change
    what a training run computes (e.g. a setting of an extra test-time decoder), like :data:`RUN_FREE_FIELDS`.
    """
    meta = {"min": min, "max": max, "choices": choices, "help": help, "run_free": run_free}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


# Fields that do not change what a run computes: they are left out of the run's content key,
# may differ on --resume, and runs that differ only in them are one row of a table.
RUN_FREE_FIELDS = frozenset({"preset", "models", "seeds", "epochs", "out", "eval_every", "threads", "data_dir", "jobs",
                             "note", "decoders"})


@dataclass
class RunConfig:
    """Fields every experiment has.  Subclass it with ``@dataclass`` and add the experiment's own."""

    preset: str = "custom"
    models: list[str] = spec(default_factory=list, help="which models to train")
    seeds: list[int] = spec(default_factory=lambda: [0, 1, 2], min=0, help="model seeds (mean ± std over them)")
    epochs: int = spec(10, min=1)
    batch_size: int = spec(64, min=1)
    lr: float = spec(3e-4, min=0.0)
    weight_decay: float = spec(0.0, min=0.0, help="L2 weight decay of the Adam optimizer (torch.optim.Adam's weight_decay)")
    patience: int | None = spec(None, min=1, help="early stopping: evaluations without a better validation score")
    test_checkpoint: str = spec("best_validation", choices=("best_validation", "last"), run_free=True,
                                help="which model the table tests: best_validation (the checkpoint of the best "
                                     "validation score, if there is a validation split) or last (the model at the "
                                     "last epoch: every row read at a common budget; validation is still evaluated)")
    patience_reading: int | None = spec(None, min=1, run_free=True,
                                        help="also read every run as early stopping with this patience would have "
                                             "tested it (from its validation history, after training): a second "
                                             "table of the paired comparisons")
    constraint_start_epoch: int = spec(1, min=1, help="SL/PSL from this epoch on (1-based)")
    eval_every: int = spec(1, min=1, help="validation/test metrics every k epochs (for the curves)")
    out: str | None = spec(None, help="output folder (default runs/<experiment>/<preset>-<content key>)")
    threads: int | None = spec(None, min=1, help="torch.set_num_threads; at most the CPUs this process may use")
    jobs: int = spec(1, min=1, help="train this many (model, seed) runs at once in worker processes "
                                    "(they share the device; one process each); jobs and jobs x threads at most "
                                    "two per CPU")
    decoders: list[str] = spec(default_factory=list, help="extra test-time decoders, each adding a row per model "
                                                          "from the same checkpoints (the experiment's decoders)")
    note: str = spec("", help="printed under the table: what the numbers of this preset show (presets set it)")
    resample_candidates: int = spec(16, min=1, run_free=True,
                                    help="decoder 'resample': candidates K per example of locally constrained "
                                         "resampling (pseudosl.constrained_sample); test time only")

    # subclasses set this to the experiment's model names (a ClassVar, not a field)
    MODELS: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.models:
            self.models = list(self.MODELS)
        bad = [m for m in self.models if split_model(m)[0] not in self.MODELS]
        if bad:
            raise ConfigError(f"models: unknown {bad}; choose from {', '.join(self.MODELS)} "
                              f"(a variant is name@field=value,...)")
        if len(set(self.models)) != len(self.models):
            raise ConfigError(f"models: {self.models} repeats a model")
        for m in self.models:
            model_variant(self, m)  # every override names a field and holds a valid value
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds: {self.seeds} repeats a seed")
        if not self.seeds:
            raise ConfigError("seeds: give at least one seed")
        if self.patience is not None and self.validation_size() == 0:
            raise ConfigError(f"patience = {self.patience} stops early on the validation split, but n_val = 0 (none): "
                              f"set n_val (e.g. --n-val 1000) or drop patience")
        if self.patience_reading is not None and self.validation_size() == 0:
            raise ConfigError(f"patience_reading = {self.patience_reading} reads the validation history, but n_val = 0 "
                              f"(none): set n_val (e.g. --n-val 1000) or drop patience_reading")
        if self.test_checkpoint == "last" and self.patience is not None:
            raise ConfigError(f"test_checkpoint = 'last' reads every run at the last of its {self.epochs} epochs, but "
                              f"patience = {self.patience} ends runs early: drop patience (patience_reading reads the "
                              f"runs as early stopping would have) or test best_validation")
        if self.constraint_start_epoch > self.epochs:
            raise ConfigError(f"constraint_start_epoch = {self.constraint_start_epoch} is past the last epoch "
                              f"(epochs = {self.epochs}): the constrained models would train without their loss; "
                              f"lower it or raise epochs")
        self.check()

    def check(self) -> None:
        """Cross-field rules of a subclass (raise :class:`ConfigError`)."""

    def validation_size(self) -> int | None:
        """Examples of the validation split (model selection, ``patience``): a subclass returns its field (``n_val``),
        0 for none; ``None``: sized otherwise (the harness then finds out when the data is made)."""
        return None

    def preflight(self) -> None:
        """Checks of this machine that the run needs (CPUs for ``threads`` and ``jobs``, memory for the data set,
        files, folders, API keys), cheap, run before any work by ``harness.train`` and the CLI's extra steps
        (raise :class:`ConfigError` naming the field and the fix).  :meth:`check` stays free of the machine, so a
        saved config loads anywhere.  A subclass that adds checks calls ``super().preflight()`` first."""
        check_parallelism(self.threads, self.jobs)
        needs = self.memory_needs()
        if needs is not None:
            make, hold, what = needs
            runs = len(self.models) * len(self.seeds)
            workers = min(self.jobs, runs) if self.jobs > 1 and runs > 1 else 0  # parallel.train_parallel's pool
            check_memory(make + workers * hold, what + (f" (made once, then held by {workers} worker processes "
                                                        f"too)" if workers else ""),
                         "lower them (or --jobs), or free memory")

    def memory_needs(self) -> tuple[int, int, str] | None:
        """``(bytes to make the data set, bytes a process holds once it is made, what it is)``, e.g. ``(..., ...,
        "n_train + n_test + n_val = 3,000,000 generated 9x9 puzzles")``, estimated from the sizes asked for;
        ``None``: not estimated (loaded data, small data)."""
        return None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def run_free_fields(cls) -> frozenset[str]:
        """:data:`RUN_FREE_FIELDS` and the fields of ``cls`` declared with ``spec(..., run_free=True)``."""
        return RUN_FREE_FIELDS | {f.name for f in dataclasses.fields(cls) if f.metadata.get("run_free")}

    def content_key(self) -> str:
        """8 hex digits naming what the runs compute (every field but :meth:`run_free_fields`)."""
        free = self.run_free_fields()
        d = {k: v for k, v in self.to_dict().items() if k not in free}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:8]


# -- model variants -------------------------------------------------------------------------------
def split_model(spec: str) -> tuple[str, dict[str, Any]]:
    """``"rnn_psl@psl_weight=0.01,lr=1e-3"`` -> ``("rnn_psl", {"psl_weight": 0.01, "lr": 0.001})``.

    A model name may carry config overrides after ``@`` (values read as TOML literals, bare words as
    strings), so one run trains e.g. the PSL weight grid beside the baselines.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"models: {spec!r} is not a model name")
    base, _, rest = spec.partition("@")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"models: {spec!r}: expected name@field=value[,field=value], got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        overrides[key.strip()] = value
    return base, overrides


def model_variant(cfg: "RunConfig", spec: str) -> tuple[str, "RunConfig"]:
    """The base model name of ``spec`` and the config it trains with (``cfg`` with its overrides, checked)."""
    base, overrides = split_model(spec)
    if not overrides:
        return base, cfg
    names = {f.name for f in dataclasses.fields(cfg)}
    for key in overrides:
        if key not in names:
            raise ConfigError(f"models: {spec!r}: {key!r} is not a config field")
        if key in cfg.run_free_fields():
            raise ConfigError(f"models: {spec!r}: {key!r} is the same for every run and cannot vary per model")
    values = {**cfg.to_dict(), **overrides, "models": [base]}
    try:
        return base, type(cfg)(**values)
    except ConfigError as e:
        raise ConfigError(f"models: {spec!r}: {e}") from None


# -- field checks ----------------------------------------------------------------------------------
def _type_name(t: Any) -> str:
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(t))
    if typing.get_origin(t) is list:
        item = typing.get_args(t)[0]
        return "a list of " + {int: "integers", float: "numbers", bool: "true/false values",
                               str: "strings"}.get(item, _type_name(item))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "omitted (none)"}.get(t, getattr(t, "__name__", str(t)))


def _coerce(value: Any, t: Any, name: str) -> Any:
    """``value`` as type ``t`` or a :class:`ConfigError`; ints are accepted for floats, nothing else converts."""
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, name)
            except ConfigError:
                pass
        raise ConfigError(f"{name} = {value!r}: expected {_type_name(t)}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} = {value!r}: expected {_type_name(t)}, e.g. [{value!r}]")
        (item,) = typing.get_args(t)
        return [_coerce(v, item, f"{name}[{i}]") for i, v in enumerate(value)]
    if t is bool:
        try:
            return check_bool(name, value)
        except TypeError:
            raise ConfigError(f"{name} = {value!r}: expected true or false") from None
    if t is int:
        try:
            value = check_int(name, value)
        except TypeError:
            raise ConfigError(f"{name} = {value!r}: expected an integer") from None
        if not -2**63 <= value < 2**63:  # torch and numpy sizes are int64
            raise ConfigError(f"{name} = {value!r}: too large (at most 2**63 - 1)")
        return value
    if t is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} = {value!r}: expected a number")
        if not math.isfinite(value):
            raise ConfigError(f"{name} = {value!r}: expected a finite number")
        return float(value)
    if t is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} = {value!r}: expected a string")
        return value
    raise TypeError(f"config field {name}: unsupported annotation {t!r}")  # a bug in the dataclass, not input


def _check_range(value: Any, meta: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_range(v, meta, f"{name}[{i}]")
        return
    lo, hi, choices = meta.get("min"), meta.get("max"), meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{name} = {value!r}: expected one of {', '.join(map(repr, choices))}")
    if lo is not None and value < lo:
        raise ConfigError(f"{name} = {value!r}: must be >= {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name} = {value!r}: must be <= {hi}")


def check_fields(cfg: RunConfig) -> None:
    """Check (and normalise: ints to floats, tuples to lists) every field of ``cfg`` in place."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = _coerce(getattr(cfg, f.name), hints[f.name], f.name)
        _check_range(value, f.metadata, f.name)
        setattr(cfg, f.name, value)


# -- TOML and presets ------------------------------------------------------------------------------
def preset_path(presets: Path, name: str) -> Path:
    """The preset ``<presets>/<name>.toml`` shipped in the package, or a named error listing the known ones."""
    p = presets / f"{name}.toml"
    if not p.exists():
        known = ", ".join(sorted(f.stem for f in presets.glob("*.toml")))
        raise ConfigError(f"no preset {name!r}; known presets: {known} (or pass --config FILE)")
    return p


_PRESET_HINT = "src/pseudosl/experiments/<experiment>/presets/quick.toml"


def load_config(cls: type[C], path: str | Path | None = None, **overrides: Any) -> C:
    """``cls`` from the TOML file ``path`` (if any), then ``overrides`` (``None`` values are ignored)."""
    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"--config {path}: " + ("a folder, not a file" if path.is_dir() else "no such file")
                              + f"; pass a TOML file of config fields (e.g. a copy of {_PRESET_HINT})")
        try:
            with open(path, "rb") as f:
                values = tomllib.load(f)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            reason = (f"cannot read it ({e.strerror or e})" if isinstance(e, OSError) else
                      f"not UTF-8 text (byte {e.start}: {e.reason})" if isinstance(e, UnicodeDecodeError)
                      else f"invalid TOML ({e})")
            raise ConfigError(f"--config {path}: {reason}; pass a UTF-8 TOML file of config fields (start from a "
                              f"copy of a preset, e.g. {_PRESET_HINT})") from None
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown keys {unknown}; valid keys: {', '.join(sorted(known))}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**values)
    except ConfigError as e:
        field = re.match(r"\w*", str(e)).group()  # "n_train = ...", "models: ...", "seeds[0] = ..."
        if overrides.get(field) is not None:  # the bad value came from a flag, not from the file
            raise ConfigError(f"--{field.replace('_', '-')}: {e}") from None
        raise ConfigError(f"{path}: {e}" if path is not None else str(e)) from None


# -- devices ---------------------------------------------------------------------------------------
def check_device(name: str | None, flag: str = "--device") -> str:
    """``name`` as a torch device this machine has (``None``: ``cuda`` if available, else ``cpu``), or a
    :class:`ConfigError` naming the flag, the value and the fix."""
    import torch
    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"{flag} {name!r}: not a torch device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{flag} {name}: CUDA is not available here (torch {torch.__version__}, "
                              f"{'no CUDA build' if torch.version.cuda is None else 'no GPU found'}); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{flag} {name}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                              f"use cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
    elif device.type not in ("cpu", "mps") or (device.type == "mps" and not torch.backends.mps.is_available()):
        raise ConfigError(f"{flag} {name}: device type {device.type!r} is not available here; use cpu or cuda")
    return name


# -- CPUs and memory -------------------------------------------------------------------------------
# threads (torch.set_num_threads) lie in 1..C, C = the CPUs this process may run on: more threads than CPUs only
# slow a run down, and thousands crash OpenMP (a segmentation fault at --threads 5000).  jobs (worker processes)
# and jobs x threads lie in 1..2C: a worker often waits (on the GPU, the disk), so up to two per CPU are allowed.
WORKERS_PER_CPU = 2


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def check_parallelism(threads: int | None, jobs: int, cpus: int | None = None) -> None:
    """Refuse ``threads`` outside ``1 .. cpus`` and ``jobs`` or ``jobs x threads`` outside ``1 .. 2 cpus``
    (a :class:`~pseudosl.experiments.config.ConfigError` naming the value, the range and the fix)."""
    cpus = usable_cpus() if cpus is None else cpus
    most = WORKERS_PER_CPU * cpus
    if threads is not None and not 1 <= threads <= cpus:
        raise ConfigError(f"--threads {threads}: must lie in 1..{cpus} (this machine's CPUs); more threads than "
                          f"CPUs only slow a run down, thousands crash OpenMP; pass --threads {cpus} or fewer")
    if not 1 <= jobs <= most:
        raise ConfigError(f"--jobs {jobs}: must lie in 1..{most} (two worker processes per CPU, {cpus} CPUs); "
                          f"pass --jobs {most} or fewer")
    if threads is not None and jobs * threads > most:
        raise ConfigError(f"--jobs {jobs} x --threads {threads} = {jobs * threads} threads: must be at most {most} "
                          f"(two per CPU, {cpus} CPUs); lower --jobs or --threads")


def check_memory(needed: int, what: str, fix: str, available: int | None = None) -> None:
    """Refuse ``needed`` bytes for ``what`` when this machine has less available (``None``: ask it)."""
    available = free_bytes("cpu") if available is None else available
    if available is not None and needed > available:
        raise ConfigError(f"{what} need about {format_bytes(needed)} of memory, but this machine has "
                          f"{format_bytes(available)} available; {fix}")
