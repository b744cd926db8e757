"""The grid splits: train, validation and test puzzles whose solution grids differ, even after relabelling digits.

Two solution grids are in one *class* when a permutation of the digits maps one onto the other;
:func:`canonical_form` names the class (the digits renumbered in order of first appearance, so the first
row reads ``1..size``).  With ``split = "grids"`` the classes are shared out among the parts
:data:`PARTS` (train, validation, test), each part's puzzles take their solutions from its own classes
only, and training augments by relabelling digits only (:func:`augmentation`), which keeps a grid in its
class.  So no validation or test solution grid is a training grid or an augmentation of one: the test
measures solving puzzles whose solutions were not learnt.  (The full symmetry group of
:func:`~.data.augment` would undo it: on 4 x 4 boards it joins the 288 grids into 2 classes.)

Two splits share the classes out (:data:`SPLITS`):

* ``"grids"``: one draw, fixed by the data seed, for every model seed (the split of the earlier CPU tables);
* ``"balanced"``: each model seed draws its own (:func:`split_seed` of the data seed and the model seed), so an
  interval over seeds holds the variance of which classes are held out; on 4 x 4 boards balanced over the grid
  types (:func:`grid_types`: under the board's geometric symmetries the 12 classes form 2 types, of 4 and 8
  classes), so that validation and test each hold one class of either type and training the other 2 + 6.

Which classes go to which part, deterministic in the (split) seed:

* 4 x 4: all 288 grids are listed (:func:`all_grids`): 12 classes of 24.  The seed permutes the classes (within
  each type when balanced); 8 train, 2 validate, 2 test (:data:`SHARES`), and each part draws its solutions
  uniformly from its grids (192, 48 and 48).
* 6 x 6 and 9 x 9 (28,200,960 and about 6.7e21 grids): a seeded hash of the canonical form puts a class
  in a part, 8, 2 and 2 in 12 as on 4 x 4.  Each part draws grids as :func:`~.data.generate` does (a pool
  of backtracking-built grids under random symmetries) and keeps those of its own classes.  There are too many
  types to balance; ``"balanced"`` is the per-seed draw of the hash.

Every part has its own random stream (``[seed, part]``), so the test puzzles do not depend on ``n_train`` or
``n_val``.  Holes and uniqueness are :func:`~.data.unique_puzzles`'s, as for ``split = "random"``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
from torch import Tensor

from .data import (SudokuData, augment, board_size, box_shape, check_generation, count_solutions, generation_key,
                   load_cached, random_full_grid, random_symmetry, relabel_digits, unique_puzzles)

__all__ = ["SPLITS", "GRID_SPLITS", "PARTS", "SHARES", "canonical_form", "all_grids", "grid_types", "part_of",
           "split_seed", "generate_part", "load_or_generate_part", "augmentation"]

SPLITS = ("random", "grids", "balanced")  # the config's `split`
GRID_SPLITS = ("grids", "balanced")  # the splits by classes of solution grids (this module)
PARTS = ("train", "val", "test")
SHARES = (8, 2, 2)  # classes of each part in every 12 (on 4 x 4 exactly: 8, 2 and 2 of its 12 classes)
LISTED = 4  # the board side whose grids are all listed (6 x 6 has 28,200,960)
CHUNK = 50_000  # candidate grids drawn at a time on the larger boards


def canonical_form(grids) -> np.ndarray:
    """The class of each solution grid ``(N, size**2)`` under relabelling the digits: the digits renumbered in
    order of first appearance (row-major), i.e. so that the first row reads ``1..size``.

    >>> canonical_form([[3, 4, 1, 2, 1, 2, 3, 4, 4, 3, 2, 1, 2, 1, 4, 3]]).tolist()
    [[1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1]]
    """
    g = np.asarray(grids, dtype=np.int64)
    size = board_size(g.shape[1])
    first = g[:, :size]
    if not (np.sort(first, 1) == np.arange(1, size + 1)).all():
        raise ValueError("canonical_form takes solution grids: every first row must hold the digits 1..size once")
    relabel = np.zeros((len(g), size + 1), np.int64)
    np.put_along_axis(relabel, first, np.broadcast_to(np.arange(1, size + 1), first.shape), axis=1)
    return np.take_along_axis(relabel, g, 1)


@lru_cache(maxsize=None)
def all_grids(size: int = LISTED) -> np.ndarray:
    """Every ``size x size`` solution grid ``(M, size**2)`` (backtracking on the empty board): 288 for 4 x 4."""
    if size != LISTED:
        raise ValueError(f"size = {size}: only the {LISTED}x{LISTED} grids are listed (6x6 has 28,200,960)")
    n, found = count_solutions([0] * size * size, limit=10**6)
    grids = np.asarray(found, dtype=np.int64)
    grids.flags.writeable = False  # cached: shared by every caller
    return grids


@lru_cache(maxsize=None)
def _classes(size: int = LISTED) -> np.ndarray:
    """The classes of the listed grids, sorted: ``(12, 16)`` for 4 x 4."""
    return np.unique(canonical_form(all_grids(size)), axis=0)


def _geometric_images(grid: np.ndarray) -> list[np.ndarray]:
    """Every image of one ``(size, size)`` grid under the geometric symmetries: rows within bands, bands, columns
    within stacks, stacks, and the transpose when the boxes are square (4 x 4: 8 x 8 x 2 = 128)."""
    size = grid.shape[0]
    br, bc = box_shape(size)

    def orders(block: int) -> list[list[int]]:  # permutations of the lines that keep the bands (stacks) whole
        bands = list(itertools.permutations(range(size // block)))
        inner = list(itertools.permutations(range(block)))
        return [[b * block + w[i] for b, w in zip(band, within) for i in range(block)]
                for band in bands for within in itertools.product(inner, repeat=size // block)]

    out = [grid[rows][:, cols] for rows in orders(br) for cols in orders(bc)]
    return out + [g.T for g in out] if br == bc else out


@lru_cache(maxsize=None)
def grid_types(size: int = LISTED) -> np.ndarray:
    """The type of each class of :func:`_classes` ``(12,)``: two classes have one type when a geometric symmetry
    (rows within bands, bands, columns within stacks, stacks, transpose) maps a grid of one onto a grid of the
    other; types are numbered by their first class.  4 x 4: ``[0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0]``, 4 classes
    (96 grids) of type 0 and 8 (192 grids) of type 1, the two essentially different 4 x 4 Sudoku grids."""
    classes = _classes(size)
    index = {c.tobytes(): k for k, c in enumerate(classes)}
    types = np.full(len(classes), -1, np.int64)
    for k, c in enumerate(classes):
        if types[k] < 0:
            images = np.stack([g.reshape(-1) for g in _geometric_images(c.reshape(size, size))])
            types[[index[i.tobytes()] for i in canonical_form(images)]] = k
    _, types = np.unique(types, return_inverse=True)
    types.flags.writeable = False  # cached: shared by every caller
    return types


def split_seed(data_seed: int, seed: int) -> int:
    """The seed of model seed ``seed``'s own draw of the split (``split = "balanced"``): a 32-bit function of
    ``(data_seed, seed)``, the same on every machine."""
    return int(np.random.SeedSequence([data_seed, seed]).generate_state(1)[0])


def part_of(grids, seed: int, balanced: bool = False) -> np.ndarray:
    """The part (an index into :data:`PARTS`) of the class of each solution grid ``(N, size**2)``, for the data
    seed ``seed``; ``balanced`` (4 x 4): each of validation and test holds one class of either
    :func:`grid_types` type (on larger boards it changes nothing: the hash spreads many types over every part)."""
    canonical = canonical_form(grids)
    size = board_size(canonical.shape[1])
    shares = np.repeat(np.arange(len(PARTS)), SHARES)  # (12,): the part of the k-th class in a shuffled order
    if size == LISTED:
        classes = _classes(size)
        part = np.empty(len(classes), np.int64)
        rng = np.random.default_rng(seed)
        if balanced:  # per type: one class validates, one tests, the rest train
            for t in np.unique(grid_types(size)):
                mine = rng.permutation(np.flatnonzero(grid_types(size) == t))
                part[mine] = PARTS.index("train")
                part[mine[:2]] = [PARTS.index("val"), PARTS.index("test")]
        else:
            part[rng.permutation(len(classes))] = shares
        index = {c.tobytes(): k for k, c in enumerate(classes)}
        return part[[index[c.tobytes()] for c in canonical]]
    return shares[_seeded_hash(canonical, seed) % np.uint64(len(shares))]


def _seeded_hash(rows: np.ndarray, seed: int) -> np.ndarray:
    """A 64-bit hash of each row of small non-negative ints: a seeded random linear form (mod 2^64), then
    SplitMix64's finaliser, so that the low bits of distinct rows look independent."""
    weights = np.random.default_rng([seed, 0x5EED]).integers(1, 2**63, rows.shape[1], dtype=np.uint64)
    h = (rows.astype(np.uint64) * weights).sum(1, dtype=np.uint64)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def generate_part(part: str, n: int, n_missing: int = 10, seed: int = 0, satnet: bool = False, pool: int = 64,
                  size: int = 9, balanced: bool = False) -> SudokuData:
    """``n`` puzzles with a unique solution each, their solution grids from the classes of ``part`` only.

    Args as :func:`~.data.generate`; ``part``: one of :data:`PARTS`; ``pool`` is unused on 4 x 4 boards;
    ``balanced``: the classes shared out as :func:`part_of` with ``balanced`` says.
    """
    if part not in PARTS:
        raise ValueError(f"part = {part!r}: expected one of {', '.join(map(repr, PARTS))}")
    n, pool = check_generation(n, n_missing, satnet, size, pool)
    k = PARTS.index(part)
    rng = np.random.default_rng([seed, k])
    if size == LISTED:
        grids = all_grids(size)
        mine = grids[part_of(grids, seed, balanced) == k]
        solutions = mine[rng.integers(0, len(mine), n)]
    else:
        solutions = _drawn_grids(k, n, seed, pool, size, rng)
    return unique_puzzles(solutions, n_missing, satnet, rng)


def _drawn_grids(k: int, n: int, seed: int, pool: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` grids of part ``k``'s classes: random symmetries of a pool of grids, the others' classes dropped."""
    bases = np.stack([random_full_grid(rng, size) for _ in range(pool)]).reshape(pool, size, size)
    kept, have, tried = [], 0, 0
    while have < n:
        m = min(CHUNK, (n - have) * sum(SHARES) // SHARES[k] + 64)  # about n - have of them are kept
        drawn = random_symmetry(bases[rng.integers(0, pool, m)], rng).reshape(m, size * size)
        drawn = drawn[part_of(drawn, seed) == k]
        kept.append(drawn)
        have, tried = have + len(drawn), tried + m
        if not have and tried >= 10_000:
            raise ValueError(f"pool = {pool}: {tried} symmetries of the pool's grids hold no grid of the "
                             f"{PARTS[k]} part's classes; raise pool")
    return np.concatenate(kept)[:n]


def load_or_generate_part(part: str, n: int, n_missing: int, seed: int, satnet: bool = False,
                          data_dir: str | Path | None = None, size: int = 9, balanced: bool = False) -> SudokuData:
    """:func:`generate_part`, cached beside :func:`~.data.load_or_generate`'s entries (the key adds the part, and
    ``-balanced``)."""
    return load_cached(generation_key(n, n_missing, seed, satnet, size) + f"-grids-{part}"
                       + ("-balanced" if balanced else ""),
                       lambda: generate_part(part, n, n_missing, seed, satnet, size=size, balanced=balanced), data_dir)


def augmentation(split: str) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The training augmentation that keeps ``split``: every Sudoku symmetry (:func:`~.data.augment`) for
    ``"random"``, relabelling digits only (:func:`~.data.relabel_digits`, within a class) for the grid splits."""
    if split not in SPLITS:
        raise ValueError(f"split = {split!r}: expected one of {', '.join(map(repr, SPLITS))}")
    return augment if split == "random" else relabel_digits
