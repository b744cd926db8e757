"""The Sudoku experiment's configuration: one dataclass, read from TOML, overridden by flags.

Presets are TOML files shipped in ``presets/`` beside this module (``quick.toml``, ``cpu.toml``,
``sudoku_paper.toml``); every key is a field of :class:`SudokuConfig`.  The config is saved
inside every checkpoint and in ``results.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

__all__ = ["SudokuConfig", "MODELS", "load_config", "preset_path"]

MODELS = ("convnet", "convnet_sl", "rnn", "rnn_psl")


@dataclass
class SudokuConfig:
    preset: str = "custom"
    models: list[str] = field(default_factory=lambda: list(MODELS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    # data: "generate" (our generator), "satnet:<dir>" (features.pt/labels.pt) or "csv:<file>"
    data: str = "generate"
    data_dir: str | None = None          # generator cache; default pseudosl.cache.cache_dir()/sudoku
    n_train: int = 9000
    n_test: int = 1000
    n_missing: int = 10                  # blank cells per generated puzzle (paper: 10)
    satnet_dist: bool = False            # generate with 31..42 givens instead of n_missing
    data_seed: int = 1234                # the data set is the same for every model seed
    # optimisation (paper: Adam, lr 3e-4)
    epochs: int = 50
    batch_size: int = 64
    lr: float = 3e-4
    sl_weight: float = 0.05              # ConvNet + SL
    psl_weight: float = 0.05             # RNN + PSL (paper grid {0.01, 0.05})
    psl_examples: int | None = None      # PSL on the first m examples of each batch (None = all)
    condition_on_givens: bool = False    # SL/PSL = -sum_g log P(group g | givens) (no -log P(givens) term)
    constraint_start_epoch: int = 1      # SL/PSL from this epoch on (1-based; later = a cross-entropy warm-up)
    # models
    conv_channels: int = 64
    conv_layers: int = 6
    rnn_hidden: int = 128
    rnn_layers: int = 5
    rnn_dropout: float = 0.2
    # output
    out: str = "runs/sudoku"
    eval_every: int = 1                  # test metrics every k epochs (for the curves)
    threads: int | None = None           # torch.set_num_threads; 1 avoids oversubscription on a busy small CPU

    def __post_init__(self) -> None:
        bad = [m for m in self.models if m not in MODELS]
        if bad:
            raise ValueError(f"models: unknown {bad}; choose from {', '.join(MODELS)}")
        for name in ("n_train", "n_test", "epochs", "batch_size", "constraint_start_epoch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.psl_examples is not None and self.psl_examples < 1:
            raise ValueError(f"psl_examples must be >= 1 or omitted (all), got {self.psl_examples}")
        if not (self.data == "generate" or self.data.startswith(("satnet:", "csv:"))):
            raise ValueError(f"data must be 'generate', 'satnet:<dir>' or 'csv:<file>', got {self.data!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PRESETS = Path(__file__).resolve().parent / "presets"


def preset_path(name: str) -> Path:
    """The preset ``<name>.toml`` shipped in the package (``pseudosl/experiments/sudoku/presets/``)."""
    p = PRESETS / f"{name}.toml"
    if not p.exists():
        known = ", ".join(sorted(f.stem for f in PRESETS.glob("*.toml")))
        raise ValueError(f"no preset {name!r}; known presets: {known} (or pass --config FILE)")
    return p


def load_config(path: str | Path | None = None, **overrides) -> SudokuConfig:
    """Fields from the TOML file ``path`` (if any), then ``overrides`` (``None`` values are ignored)."""
    values: dict = {}
    if path is not None:
        path = Path(path)
        try:
            with open(path, "rb") as f:
                values = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: invalid TOML ({e})") from None
        known = {f.name for f in dataclasses.fields(SudokuConfig)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{path}: unknown keys {unknown}; valid keys: {', '.join(sorted(known))}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return SudokuConfig(**values)
