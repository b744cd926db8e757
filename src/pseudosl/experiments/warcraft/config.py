"""The Warcraft experiment's configuration: :class:`WarcraftConfig`, read from TOML, overridden by flags.

Presets are TOML files shipped in ``presets/`` beside this module (``quick.toml``, ``paper.toml``);
every key is a field of :class:`WarcraftConfig`, checked by type and range before any work starts
(see :mod:`pseudosl.experiments.config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..config import ConfigError, RunConfig, spec
from ..config import load_config as _load_config
from ..config import preset_path as _preset_path

__all__ = ["WarcraftConfig", "MODELS", "CONSTRAINT_LOSS", "load_config", "preset_path", "PRESETS", "PSL_WEIGHTS"]

MODELS = ("resnet", "resnet_sl", "lstm", "lstm_psl")
CONSTRAINT_LOSS = {"resnet": None, "resnet_sl": "sl", "lstm": None, "lstm_psl": "psl"}  # model -> its constraint term
PRESETS = Path(__file__).resolve().parent / "presets"
PSL_WEIGHTS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)  # the paper's grid for the PSL weight


@dataclass
class WarcraftConfig(RunConfig):
    MODELS: ClassVar[tuple[str, ...]] = MODELS
    # data: "generate" (our generator) or "dir:<folder>" (the real layout, {train,val,test}_maps.npy ...)
    data: str = spec("generate", help="generate, or dir:<folder in the real layout ({split}_maps.npy, ...)>")
    data_dir: str | None = spec(None, help="generator cache; default pseudosl.cache.cache_dir()/warcraft")
    grid: int = spec(12, min=2, max=30, help="generated grid size k (maps are 8k x 8k pixels)")
    n_train: int = spec(10000, min=1)
    n_val: int = spec(1000, min=0, help="validation maps for model selection; 0 = none")
    n_test: int = spec(1000, min=1)
    data_seed: int = spec(0, min=0, help="seed of the generated data set (the same for every model seed)")
    reject_ties: bool = spec(False, help="generator: redraw maps with several minimum-cost paths (default: keep, record)")
    # optimisation (paper: Adam, lr 5e-4)
    epochs: int = spec(50, min=1)
    batch_size: int = spec(64, min=1)
    lr: float = spec(5e-4, min=0.0)
    sl_weight: float = spec(0.1, min=0.0, help="ResNet-18 + SL: weight of the semantic loss")
    psl_weight: float = spec(0.1, min=0.0, help="CNN-LSTM + PSL: weight of the pseudo-semantic loss "
                                                "(paper's grid: 0.001 0.005 0.01 0.05 0.1 0.5 1)")
    psl_examples: int | None = spec(None, min=1, help="PSL on the first m examples of each batch (default: all; "
                                                      "the authors' code: 10)")
    max_path_edges: int | None = spec(None, min=1, help="SL/PSL circuit: simple paths of at most this many edges "
                                                         "(default: any length; a bound makes 12 x 12 circuits smaller)")
    # models
    width: float = spec(1.0, min=0.01, help="ResNet-18 width multiplier (1 = 64..512 channels)")
    embed_dim: int = spec(128, min=1, help="CNN-LSTM: image embedding size")
    lstm_hidden: int = spec(512, min=1, help="CNN-LSTM: LSTM hidden size")
    pos_dim: int = spec(32, min=0, help="CNN-LSTM: learned edge-position embedding fed at every step (0 = none)")
    eval_batch_size: int = spec(250, min=1, help="maps per batch when evaluating")
    # constrained decoding (decoders = ["constrained", "resample"]; test time only, so not in the content key)
    resample_candidates: int = spec(16, min=1, run_free=True,
                                    help="decoder 'resample': candidates K per map of the CNN-LSTM's locally "
                                         "constrained resampling (pseudosl.constrained_sample; the ResNet's draw "
                                         "is exact)")

    def check(self) -> None:
        if not (self.data == "generate" or self.data.startswith("dir:")):
            raise ConfigError(f"data = {self.data!r}: expected 'generate' or 'dir:<folder>'")


    def validation_size(self) -> int:
        return self.n_val

    def memory_needs(self) -> tuple[int, int, str] | None:
        """Generated maps: about 600 bytes a grid cell while they are made, written, read back and labelled
        (measured: 430-610 for 6 x 6 and 12 x 12 grids; a map is 8 x 8 RGB pixels a cell), 300 once held;
        maps loaded from a folder are not estimated."""
        if self.data != "generate":
            return None
        n, cells = self.n_train + self.n_val + self.n_test, self.grid ** 2
        return (n * cells * MAKE_BYTES_PER_CELL, n * cells * HOLD_BYTES_PER_CELL,
                f"n_train + n_val + n_test = {n:,} generated {self.grid}x{self.grid} maps")


MAKE_BYTES_PER_CELL = 600  # peak memory of load_data on generated maps, per grid cell of a map
HOLD_BYTES_PER_CELL = 300  # a loaded map per grid cell: 192 bytes of pixels, weights, path, edges, labelling


def preset_path(name: str) -> Path:
    """The preset ``<name>.toml`` shipped in the package (``pseudosl/experiments/warcraft/presets/``)."""
    return _preset_path(PRESETS, name)


def load_config(path: str | Path | None = None, **overrides) -> WarcraftConfig:
    """Fields from the TOML file ``path`` (if any), then ``overrides`` (``None`` values are ignored)."""
    return _load_config(WarcraftConfig, path, **overrides)
