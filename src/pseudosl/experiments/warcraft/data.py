"""Warcraft shortest-path maps: the real data set's layout, a loader, and a procedural generator.

Layout (Vlastelica Pogančić et al., ICLR 2020), one folder per grid size, three splits::

    {train,val,test}_maps.npy             (N, 8k, 8k, 3) uint8   the rendered terrain, 8 x 8 pixels a cell
    {train,val,test}_shortest_paths.npy   (N, k, k)      0/1     the cells of the shortest path
    {train,val,test}_vertex_weights.npy   (N, k, k)      float   the hidden cost of every cell

(``k`` = 12, 18, 24 or 30 in the real data; the generator takes any ``k >= 2``.)  The real data's
paths are 8-connected (diagonal steps allowed); see :func:`load_split` for what the experiment
makes of them.

The generator (:func:`generate`, deterministic by seed, numpy-vectorised over maps):

1. terrain: Gaussian noise ``(N, k, k)`` smoothed by three passes of a ``[1, 2, 1] / 4`` kernel
   per axis, standardised per map, then cut at fixed quantiles of the normal into five tile
   classes ordered by "height": water (cost 7.7, 12 %), grass (0.8, 33 %), dirt (1.2, 20 %),
   forest (5.3, 20 %), mountain (9.2, 15 %);
2. rendering: each cell is an 8 x 8 texture of its class: one of :data:`N_VARIANTS` variants
   (patterns of a 3-colour palette; palettes of different classes overlap, e.g. grass and forest
   share a green), one of the 8 flips/rotations, plus per-pixel Gaussian noise (sd 10), so a cost
   is not one colour;
3. labels: the minimum-cost path from the top-left to the bottom-right cell
   (:func:`~.grid.shortest_paths`).  Ties are detected (the number of minimum-cost paths is
   counted) and, by default, recorded: with five cost levels most maps have several optimal paths
   (about 70 % at 6 x 6 and 94 % at 12 x 12), so rejecting them would keep only unusual maps.  The
   label is then the canonical optimum (the back-tracking rule of :func:`~.grid.shortest_paths`),
   and ``meta.json`` records the share of tied maps per split.  ``reject_ties=True`` redraws them.

From 20,000 maps on (:data:`~.grid.PROGRESS_FROM`), labelling and rendering show progress bars (tqdm, stderr).

:func:`load_or_generate` caches the three splits in the real layout under
``<data_dir>/gen-<k>x<k>-<n_train>-<n_val>-<n_test>-seed<seed>-v1/`` (default
``pseudosl.cache.cache_dir() / "warcraft"``).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ...errors import PseudoslError, StorageError
from ...logic.checks import check_int
from .grid import PROGRESS_FROM, shortest_paths

__all__ = ["WarcraftDataError", "WarcraftSplit", "COSTS", "CLASS_NAMES", "N_VARIANTS", "SPLITS", "terrain",
           "render", "generate", "save_layout", "load_split", "load_layout", "load_or_generate",
           "default_data_dir"]

SPLITS = ("train", "val", "test")
CLASS_NAMES = ("grass", "dirt", "forest", "water", "mountain")
COSTS = np.array([0.8, 1.2, 5.3, 7.7, 9.2])          # the hidden cost of each class, in CLASS_NAMES order
_HEIGHT_ORDER = (3, 0, 1, 2, 4)                      # classes from low to high terrain
_SHARES = (0.12, 0.33, 0.20, 0.20, 0.15)             # their shares of the cells
N_VARIANTS = 4
_PALETTES = np.array([                               # 3 colours per class (RGB); neighbours overlap
    [[74, 140, 52], [96, 160, 60], [120, 150, 70]],    # grass
    [[150, 120, 80], [170, 140, 95], [120, 150, 70]],  # dirt (shares a colour with grass)
    [[40, 90, 40], [60, 110, 45], [96, 160, 60]],      # forest (shares a colour with grass)
    [[50, 90, 160], [70, 110, 180], [40, 90, 40]],     # water (dark weed-green patches)
    [[120, 120, 120], [150, 145, 140], [150, 120, 80]],  # mountain (brown patches, as dirt)
], dtype=np.float64)
_FORMAT = "v1"


class WarcraftDataError(PseudoslError, ValueError):
    """A data folder lacks a file, or a file has the wrong shape, dtype or values."""


@dataclass
class WarcraftSplit:
    maps: np.ndarray      # (N, 8k, 8k, 3) uint8
    paths: np.ndarray     # (N, k, k) uint8, the split's shortest-path cells as stored
    weights: np.ndarray   # (N, k, k) float64 cell costs

    def __len__(self) -> int:
        return int(self.maps.shape[0])

    @property
    def grid(self) -> int:
        return int(self.weights.shape[1])


# -- generation -------------------------------------------------------------------------------------
def _smooth(x: np.ndarray, passes: int = 3) -> np.ndarray:
    for _ in range(passes):
        for axis in (1, 2):
            p = np.pad(x, [(0, 0)] + [(1, 1) if a == axis else (0, 0) for a in (1, 2)], mode="edge")
            sl = lambda a, b: tuple(slice(None) if ax != axis else slice(a, b) for ax in range(3))  # noqa: E731
            x = 0.25 * p[sl(0, -2)] + 0.5 * p[sl(1, -1)] + 0.25 * p[sl(2, None)]
    return x


def terrain(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, k, k)`` int64 tile classes (indices into :data:`CLASS_NAMES`) of smoothed random terrain."""
    from statistics import NormalDist
    x = _smooth(rng.standard_normal((n, k, k)))
    x = (x - x.mean((1, 2), keepdims=True)) / (x.std((1, 2), keepdims=True) + 1e-12)
    cuts = [NormalDist().inv_cdf(q) for q in np.cumsum(_SHARES)[:-1]]
    level = np.searchsorted(np.array(cuts), x)                              # 0..4 from low to high
    return np.array(_HEIGHT_ORDER)[level]


def _textures(seed: int = 0) -> np.ndarray:
    """``(5, N_VARIANTS * 8, 8, 8, 3)`` float textures: variants x the 8 flips/rotations (one fixed skin)."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(3, size=(5, N_VARIANTS, 8, 8), p=[0.5, 0.3, 0.2])       # palette index per pixel
    idx = np.repeat(np.repeat(idx[..., ::2, ::2], 2, -2), 2, -1)             # 2x2 blobs: a visible pattern
    base = _PALETTES[np.arange(5)[:, None, None, None], idx]                 # (5, V, 8, 8, 3)
    views = [base, base[:, :, ::-1], base[:, :, :, ::-1], base[:, :, ::-1, ::-1]]
    views += [v.transpose(0, 1, 3, 2, 4) for v in views]
    return np.concatenate(views, axis=1)


def render(classes: np.ndarray, rng: np.random.Generator, noise: float = 10.0, chunk: int = 1000) -> np.ndarray:
    """``(n, k, k)`` tile classes -> ``(n, 8k, 8k, 3)`` uint8 maps (random variant, flip and pixel noise)."""
    tex = _textures().astype(np.float32)
    n, k, _ = classes.shape
    out = np.empty((n, 8 * k, 8 * k, 3), dtype=np.uint8)
    bar = tqdm(range(0, n, chunk), desc=f"rendering {n:,} {k}x{k} maps", unit="chunk", mininterval=1.0,
               disable=n < PROGRESS_FROM)
    for s in bar:
        c = classes[s:s + chunk]
        view = rng.integers(0, tex.shape[1], size=c.shape)
        img = tex[c, view]                                                   # (b, k, k, 8, 8, 3)
        img = img.transpose(0, 1, 3, 2, 4, 5).reshape(c.shape[0], 8 * k, 8 * k, 3)
        img = img + np.float32(noise) * rng.standard_normal(img.shape, dtype=np.float32)
        out[s:s + chunk] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def generate(n: int, k: int = 12, seed: int = 0, reject_ties: bool = False) -> tuple[WarcraftSplit, np.ndarray, int]:
    """``n`` maps of a ``k x k`` grid: the split, ``n_paths (n,)`` (number of minimum-cost paths, capped
    at 2) and how many tied maps were redrawn (``reject_ties``; otherwise ties are kept and recorded)."""
    k, n = check_int("k", k, 2, " (the grid size)"), check_int("n", n, 1)
    rng = np.random.default_rng(seed)
    classes, paths, counts, rejected, have = [], [], [], 0, 0
    while have < n:
        c = terrain(n - have if not reject_ties else max(64, 2 * (n - have)), k, rng)
        p, _, count = shortest_paths(COSTS[c])
        keep = count == 1 if reject_ties else np.ones(len(c), dtype=bool)
        rejected += int((~keep).sum())
        classes.append(c[keep]); paths.append(p[keep]); counts.append(count[keep]); have += int(keep.sum())
    cls = np.concatenate(classes)[:n]
    maps = render(cls, rng)
    return WarcraftSplit(maps, np.concatenate(paths)[:n], COSTS[cls]), np.concatenate(counts)[:n], rejected


# -- the layout on disk --------------------------------------------------------------------------
def save_layout(folder: str | Path, splits: dict[str, WarcraftSplit]) -> None:
    """Write ``{split}_maps.npy``, ``{split}_shortest_paths.npy``, ``{split}_vertex_weights.npy``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, s in splits.items():
        np.save(folder / f"{name}_maps.npy", s.maps)
        np.save(folder / f"{name}_shortest_paths.npy", s.paths)
        np.save(folder / f"{name}_vertex_weights.npy", s.weights.astype(np.float32))


def _read(path: Path) -> np.ndarray:
    if not path.is_file():
        raise WarcraftDataError(f"{path}: missing (expected the Warcraft layout {{train,val,test}}_maps.npy, "
                                f"_shortest_paths.npy, _vertex_weights.npy in {path.parent})")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:  # truncated or foreign files raise many types
        raise WarcraftDataError(f"{path}: not a readable .npy array ({type(e).__name__}: {e})") from None


def load_split(folder: str | Path, split: str) -> WarcraftSplit:
    """One split of the real layout, checked: shapes, dtypes, 0/1 paths, positive weights.

    The stored paths are returned as they are.  The real data's paths are 8-connected; the experiment
    does not train on them but recomputes the 4-connected minimum-cost path from ``vertex_weights``
    (``train.load_data``; docs/warcraft.md, "8-connected labels").
    """
    if split not in SPLITS:
        raise ValueError(f"split = {split!r}: expected one of {', '.join(SPLITS)}")
    folder = Path(folder)
    maps = _read(folder / f"{split}_maps.npy")
    paths = _read(folder / f"{split}_shortest_paths.npy")
    weights = _read(folder / f"{split}_vertex_weights.npy")
    f = lambda kind: folder / f"{split}_{kind}.npy"  # noqa: E731
    if maps.dtype != np.uint8:
        raise WarcraftDataError(f"{f('maps')}: dtype {maps.dtype}, expected uint8 RGB images")
    if maps.ndim != 4 or maps.shape[3] != 3 or maps.shape[1] != maps.shape[2] or maps.shape[1] % 8:
        raise WarcraftDataError(f"{f('maps')}: shape {maps.shape}, expected (N, 8k, 8k, 3) "
                                f"(e.g. (N, 96, 96, 3) for the 12 x 12 grid)")
    n, k = maps.shape[0], maps.shape[1] // 8
    for kind, a in (("shortest_paths", paths), ("vertex_weights", weights)):
        if a.shape != (n, k, k):
            raise WarcraftDataError(f"{f(kind)}: shape {a.shape}, expected ({n}, {k}, {k}) to match {f('maps')}")
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise WarcraftDataError(f"{f(kind)}: dtype {a.dtype}, expected numbers")
    if not np.isin(paths, (0, 1)).all():
        raise WarcraftDataError(f"{f('shortest_paths')}: values {np.unique(paths)[:5]}..., expected 0/1 cell masks")
    weights = weights.astype(np.float64)
    if not (np.isfinite(weights).all() and (weights > 0).all()):
        raise WarcraftDataError(f"{f('vertex_weights')}: every cell cost must be finite and > 0")
    return WarcraftSplit(maps, paths.astype(np.uint8), weights)


def load_layout(folder: str | Path) -> dict[str, WarcraftSplit]:
    """The three splits of a folder in the real layout (same grid size in all of them)."""
    out = {s: load_split(folder, s) for s in SPLITS}
    grids = {s: d.grid for s, d in out.items()}
    if len(set(grids.values())) != 1:
        raise WarcraftDataError(f"{folder}: the splits have different grid sizes {grids}")
    return out


def default_data_dir() -> Path:
    """``pseudosl.cache.cache_dir() / "warcraft"`` (env ``PSEUDOSL_CACHE``, default ``~/.cache/pseudosl``)."""
    from pseudosl.cache import cache_dir
    return Path(cache_dir()) / "warcraft"


def load_or_generate(k: int, n_train: int, n_val: int, n_test: int, seed: int, reject_ties: bool = False,
                     data_dir: str | Path | None = None) -> tuple[dict[str, WarcraftSplit], dict]:
    """The generated splits (from the cache, or made and written there) and their ``meta.json``.

    One stream of ``n_train + n_val + n_test`` maps, cut in that order."""
    name = f"gen-{k}x{k}-{n_train}-{n_val}-{n_test}-seed{seed}{'-unique' if reject_ties else ''}-{_FORMAT}"
    folder = Path(data_dir or default_data_dir()) / name
    meta_path = folder / "meta.json"
    if meta_path.is_file():
        try:
            return load_layout(folder), json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:  # a truncated or tampered file of the cache: made again
            warnings.warn(f"{folder}: unusable cached maps ({str(e)[:200]}); making them again")
            shutil.rmtree(folder, ignore_errors=True)
    data, n_paths, rejected = generate(n_train + n_val + n_test, k, seed, reject_ties)
    cut = np.cumsum([0, n_train, n_val, n_test])
    splits = {s: WarcraftSplit(data.maps[a:b], data.paths[a:b], data.weights[a:b])
              for s, a, b in zip(SPLITS, cut[:-1], cut[1:])}
    meta = {"grid": k, "n": {s: len(d) for s, d in splits.items()}, "seed": seed, "format": _FORMAT,
            "costs": dict(zip(CLASS_NAMES, COSTS.tolist())), "rejected_ties": rejected,
            "tied_share": {s: float((n_paths[a:b] > 1).mean()) if b > a else 0.0
                           for s, a, b in zip(SPLITS, cut[:-1], cut[1:])}}
    tmp = folder.with_name(f"{name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_layout(tmp, splits)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    except OSError as e:  # a full disk, permissions: name the folder, leave no half-written one
        shutil.rmtree(tmp, ignore_errors=True)
        raise StorageError(f"could not write the generated maps to {folder} ({e.strerror or e}); free space there or "
                           f"pass another --data-dir") from None
    try:
        os.replace(tmp, folder)  # atomic: readers never see a half-written folder
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
    return load_layout(folder), meta
