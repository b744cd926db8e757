"""Warcraft shortest paths as autoregressive generation (paper Table 2); see docs/warcraft.md.

``data`` (the real layout's loader, the procedural generator, the cache), ``grid`` (minimum-cost
paths, paths as edge vectors), ``models`` (ResNet-18, CNN-LSTM), ``metrics`` (Exact, Consistent,
cost ratio), ``decoding`` (constrained decoders), ``config`` (WarcraftConfig, TOML presets), ``train`` (the
experiment on the harness).
"""

from .config import MODELS, WarcraftConfig, load_config
from .data import WarcraftDataError, WarcraftSplit, generate, load_layout, load_or_generate, load_split, save_layout
from .grid import edges_to_path, mask_to_edges, path_to_edges, shortest_paths
from .metrics import path_metrics

__all__ = ["MODELS", "WarcraftConfig", "load_config", "WarcraftDataError", "WarcraftSplit", "generate",
           "load_layout", "load_or_generate", "load_split", "save_layout", "edges_to_path", "mask_to_edges",
           "path_to_edges", "shortest_paths", "path_metrics"]
