"""Sudoku puzzles: a generator with unique solutions, SATNet / CSV loaders and a disk cache.

Boards are ``size x size`` with ``size`` in :data:`SIZES` (4, 6 or 9; 9 is the paper's), split into
boxes of :func:`box_shape` ``(size)`` rows x columns: 2 x 2 for 4, 2 x 3 for 6, 3 x 3 for 9.  A data
set is a pair of ``int64`` tensors of shape ``(N, size**2)`` in row-major order: ``puzzles`` with
digits ``1..size`` for givens and ``0`` for blanks, ``solutions`` with digits ``1..size``.  (Models
see digits as classes ``0..size-1``: ``solution - 1``.)

Generation (deterministic by seed, numpy only):

1. full grids: a small pool of grids built by randomized bitmask backtracking, each
   puzzle then draws one and applies a random Sudoku symmetry (digit relabelling,
   rows within bands, bands, columns within stacks, stacks, and a transpose when the
   boxes are square);
2. holes: blank ``n_missing`` random cells at once, count solutions (bitmask
   backtracking with the fewest-candidates rule, stop at 2); while there are two,
   restore one blank cell where the two solutions differ.  The result has a unique
   solution; with 10 blanks of 81 a restore is almost never needed, on small boards
   it often is (a 4 x 4 puzzle with 10 blanks keeps 7-10 of them).

From :data:`PROGRESS_FROM` puzzles on, a progress bar (tqdm, on stderr) counts them.

``satnet=True`` (9 x 9 only) draws the number of givens uniformly from 31..42 (SATNet's
range, mean 36.5) instead of a fixed ``n_missing``.  Puzzles whose solution grids keep apart between
the train, validation and test splits (``split = "grids"``) come from :mod:`.split`.
"""

from __future__ import annotations

import csv
import hashlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ...errors import StorageError
from ...logic.checks import check_int
from ..runs import atomic_path

__all__ = ["SudokuData", "SIZES", "MIN_GIVENS", "box_shape", "board_size", "generate", "augment", "relabel_digits",
           "count_solutions", "is_valid_solution", "random_full_grid", "random_symmetry", "check_generation",
           "unique_puzzles", "load_satnet", "load_csv", "save_satnet", "save_csv", "load_or_generate",
           "generation_key", "load_cached", "default_data_dir"]

SIZES = (4, 6, 9)
MIN_GIVENS = {4: 4, 6: 8, 9: 17}  # the fewest givens of a puzzle with a unique solution (known results)
PROGRESS_FROM = 20_000  # generate shows a progress bar (stderr) for this many puzzles or more


def box_shape(size: int) -> tuple[int, int]:
    """Rows and columns of a box: the largest divisor of ``size`` up to its square root, times the rest."""
    if size not in SIZES:
        raise ValueError(f"size = {size!r}: expected one of {', '.join(map(str, SIZES))} (the board's side)")
    r = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
    return r, size // r


def board_size(n_cells: int) -> int:
    """The side of a board of ``n_cells`` cells (16 -> 4, 36 -> 6, 81 -> 9), or a named error."""
    side = math.isqrt(n_cells)
    if side * side != n_cells or side not in SIZES:
        raise ValueError(f"{n_cells} cells is not a Sudoku board; expected {', '.join(str(s * s) for s in SIZES)} "
                         f"cells (sides {', '.join(map(str, SIZES))})")
    return side


@lru_cache(maxsize=None)
def _geometry(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and box index of every cell, ``(size**2,)`` each."""
    br, bc = box_shape(size)
    cell = np.arange(size * size)
    row, col = cell // size, cell % size
    return row, col, (row // br) * br + col // bc


@dataclass
class SudokuData:
    puzzles: Tensor    # (N, size**2) int64, 0 = blank
    solutions: Tensor  # (N, size**2) int64, 1..size

    def __len__(self) -> int:
        return int(self.puzzles.shape[0])

    def __getitem__(self, idx) -> "SudokuData":
        return SudokuData(self.puzzles[idx], self.solutions[idx])

    @property
    def size(self) -> int:
        return board_size(int(self.puzzles.shape[1]))


# -- solving --------------------------------------------------------------------------------
def count_solutions(grid, limit: int = 2, rng: np.random.Generator | None = None) -> tuple[int, list[list[int]]]:
    """Number of completions of ``grid`` (``size**2`` ints, 0 = blank), up to ``limit``, and the completions found.

    Bitmask backtracking: always branch on the blank cell with the fewest candidates.
    With ``rng`` the candidate digits are tried in random order (used to build random grids).
    """
    g = [int(v) for v in grid]
    size = board_size(len(g))
    full = (1 << size) - 1  # bit d-1 = digit d
    row, col, box = _geometry(size)
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    blanks = []
    for i, v in enumerate(g):
        if v:
            bit = 1 << (v - 1)
            r, c, b = row[i], col[i], box[i]
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return 0, []  # the givens already clash
            rows[r] |= bit; cols[c] |= bit; boxes[b] |= bit
        else:
            blanks.append(i)
    rc = [(int(row[i]), int(col[i]), int(box[i])) for i in range(len(g))]
    found: list[list[int]] = []

    def solve(todo: list[int]) -> bool:  # returns True once `limit` solutions are found
        if not todo:
            found.append(list(g))
            return len(found) >= limit
        best, best_mask, best_n = -1, 0, size + 1
        for j, i in enumerate(todo):
            r, c, b = rc[i]
            m = full & ~(rows[r] | cols[c] | boxes[b])
            n = bin(m).count("1")
            if n < best_n:
                best, best_mask, best_n = j, m, n
                if n <= 1:
                    break
        if best_n == 0:
            return False
        i = todo[best]
        rest = todo[:best] + todo[best + 1:]
        r, c, b = rc[i]
        digits = [d for d in range(1, size + 1) if best_mask >> (d - 1) & 1]
        if rng is not None:
            rng.shuffle(digits)
        for d in digits:
            bit = 1 << (d - 1)
            g[i] = d
            rows[r] |= bit; cols[c] |= bit; boxes[b] |= bit
            stop = solve(rest)
            rows[r] ^= bit; cols[c] ^= bit; boxes[b] ^= bit
            g[i] = 0
            if stop:
                return True
        return False

    solve(blanks)
    return len(found), found


def is_valid_solution(grid) -> bool:
    """True iff ``grid`` (``size**2`` digits 1..size) has distinct digits in every row, column and box."""
    g = np.asarray(grid).reshape(-1)
    size = board_size(g.size)
    if g.min() < 1 or g.max() > size:
        return False
    row, col, box = _geometry(size)
    return all(len(set(g[idx == u].tolist())) == size for idx in (row, col, box) for u in range(size))


# -- generation -------------------------------------------------------------------------------
def random_full_grid(rng: np.random.Generator, size: int) -> np.ndarray:
    """One solution grid ``(size**2,)``: backtracking on the empty board, the digits tried in random order."""
    n, sols = count_solutions([0] * (size * size), limit=1, rng=rng)
    assert n == 1
    return np.asarray(sols[0], dtype=np.int64)


def random_symmetry(grids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Apply an independent random validity-preserving transformation to each grid ``(N, size, size)``."""
    n, size = grids.shape[0], grids.shape[1]
    br, bc = box_shape(size)

    def perm_in_blocks(block: int) -> np.ndarray:  # (n, size): permute blocks of `block`, then within each
        k = size // block
        blocks = np.argsort(rng.random((n, k)), axis=1)
        inner = np.argsort(rng.random((n, k, block)), axis=2)
        return (blocks[:, :, None] * block
                + np.take_along_axis(inner, blocks[:, :, None].repeat(block, 2), 1)).reshape(n, size)

    rows, cols = perm_in_blocks(br), perm_in_blocks(bc)  # rows move within bands (box height), columns within stacks
    ar = np.arange(n)[:, None, None]
    out = grids[ar, rows[:, :, None], cols[:, None, :]]
    if br == bc:  # a transpose maps boxes to boxes only when they are square
        flip = rng.random(n) < 0.5
        out[flip] = out[flip].transpose(0, 2, 1)
    relabel = np.concatenate([np.zeros((n, 1), np.int64), 1 + np.argsort(rng.random((n, size)), axis=1)], axis=1)
    return np.take_along_axis(relabel, out.reshape(n, size * size), 1).reshape(n, size, size)


def augment(puzzles: Tensor, solutions: Tensor) -> tuple[Tensor, Tensor]:
    """The same random validity-preserving transformation on each puzzle and its solution ``(B, size**2)``.

    Per example: digit relabelling, rows within bands, bands, columns within stacks, stacks, and (square
    boxes) a transpose with probability 1/2 (torch's global RNG, on the batch's device).  Blanks stay
    blanks, so a puzzle stays a puzzle with the same number of givens and a unique solution.
    """
    b, dev = puzzles.shape[0], puzzles.device
    size = board_size(int(puzzles.shape[1]))
    br, bc = box_shape(size)

    def perm_in_blocks(block: int) -> Tensor:  # (B, size): permute the blocks, then within each block
        k = size // block
        blocks = torch.rand(b, k, device=dev).argsort(1)
        inner = torch.rand(b, k, block, device=dev).argsort(2)
        return (blocks[:, :, None] * block + inner.gather(1, blocks[:, :, None].expand(b, k, block))).reshape(b, size)

    rows, cols = perm_in_blocks(br), perm_in_blocks(bc)
    cell = rows[:, :, None] * size + cols[:, None, :]                     # (B, size, size) source cell
    if br == bc:
        flip = torch.rand(b, device=dev) < 0.5
        cell = torch.where(flip[:, None, None], cell.transpose(1, 2), cell)
    cell = cell.reshape(b, size * size)
    return relabel_digits(puzzles.gather(1, cell), solutions.gather(1, cell))


def relabel_digits(puzzles: Tensor, solutions: Tensor) -> tuple[Tensor, Tensor]:
    """The same random permutation of the digits ``1..size`` on each puzzle and its solution ``(B, size**2)``
    (torch's global RNG, on the batch's device); blanks stay blanks.  The last step of :func:`augment`, and
    alone the augmentation that keeps a grid in its class of the grid split (:mod:`.split`)."""
    b, dev = puzzles.shape[0], puzzles.device
    size = board_size(int(puzzles.shape[1]))
    relabel = torch.cat([torch.zeros(b, 1, dtype=torch.long, device=dev),
                         1 + torch.rand(b, size, device=dev).argsort(1)], 1)  # (B, size + 1), 0 -> 0
    return relabel.gather(1, puzzles), relabel.gather(1, solutions)


def generate(n: int, n_missing: int = 10, seed: int = 0, satnet: bool = False, pool: int = 64,
             size: int = 9) -> SudokuData:
    """``n`` puzzles with a unique solution each.

    Args:
        n: number of puzzles.
        n_missing: blank cells per puzzle (ignored when ``satnet``), ``1 .. size**2 - MIN_GIVENS[size]``.
        seed: everything is a function of the seed.
        satnet: draw the number of givens uniformly from 31..42 (SATNet's distribution; 9 x 9 only).
        pool: number of backtracking-built base grids the symmetries are applied to.
        size: the board's side, one of :data:`SIZES`.
    """
    n, pool = check_generation(n, n_missing, satnet, size, pool)
    rng = np.random.default_rng(seed)
    bases = np.stack([random_full_grid(rng, size) for _ in range(pool)]).reshape(pool, size, size)
    return unique_puzzles(random_symmetry(bases[rng.integers(0, pool, n)], rng).reshape(n, size * size),
                          n_missing, satnet, rng)


def check_generation(n: int, n_missing: int, satnet: bool, size: int, pool: int = 64) -> tuple[int, int]:
    """``n`` and ``pool`` as ints, or the named error of a bad argument of :func:`generate`, before any work."""
    n, pool = check_int("n", n, 1), check_int("pool", pool, 1)
    box_shape(size)  # a named error for a bad size
    most = size * size - MIN_GIVENS[size]
    if not satnet and not (1 <= check_int("n_missing", n_missing) <= most):
        raise ValueError(f"n_missing must be in 1..{most} (a unique {size}x{size} Sudoku needs >= "
                         f"{MIN_GIVENS[size]} givens), got {n_missing!r}")
    if satnet and size != 9:
        raise ValueError(f"satnet = True draws SATNet's 9x9 distribution of givens; size = {size}")
    return n, pool


def unique_puzzles(sol: np.ndarray, n_missing: int, satnet: bool, rng: np.random.Generator) -> SudokuData:
    """Puzzles with a unique solution each, made from the solution grids ``sol`` ``(N, size**2)``: blank
    ``n_missing`` random cells of each (``satnet``: all but 31..42, uniformly), then, while there are two
    completions, restore one blank cell where they differ (so a puzzle may keep fewer blanks)."""
    n, size = sol.shape[0], board_size(sol.shape[1])
    holes = size * size - rng.integers(31, 43, n) if satnet else np.full(n, n_missing)
    puzzles = sol.copy()
    bar = tqdm(range(n), desc=f"generating {n:,} {size}x{size} Sudoku puzzles", unit="puzzle", mininterval=1.0,
               disable=n < PROGRESS_FROM)  # ~9,000 9x9 puzzles a second on one core
    cells = size * size
    for k in bar:
        blank = rng.permutation(cells)[: holes[k]]
        p = puzzles[k]
        p[blank] = 0
        while True:
            count, found = count_solutions(p, limit=2)
            assert count >= 1, "a puzzle made from a valid grid always has a solution"
            if count == 1:
                break
            a, b = np.asarray(found[0]), np.asarray(found[1])
            differ = np.flatnonzero((a != b) & (p == 0))
            i = differ[rng.integers(len(differ))]
            p[i] = sol[k, i]  # restore one cell the two solutions disagree on
    return SudokuData(torch.as_tensor(puzzles), torch.as_tensor(sol))


# -- files --------------------------------------------------------------------------------------
def default_data_dir() -> Path:
    """``pseudosl.cache.cache_dir() / "sudoku"`` (env ``PSEUDOSL_CACHE``, default ``~/.cache/pseudosl``)."""
    from pseudosl.cache import cache_dir
    return Path(cache_dir()) / "sudoku"


def generation_key(n: int, n_missing: int, seed: int, satnet: bool, size: int) -> str:
    """What :func:`load_or_generate` caches under: every argument of :func:`generate` it passes."""
    return f"v1-n{n}-m{n_missing}-s{seed}-satnet{int(satnet)}" + (f"-size{size}" if size != 9 else "")


def load_or_generate(n: int, n_missing: int, seed: int, satnet: bool = False,
                     data_dir: str | Path | None = None, size: int = 9) -> SudokuData:
    """:func:`generate`, cached as ``<data_dir>/gen-<hash>.pt`` (never inside the repository by default)."""
    return load_cached(generation_key(n, n_missing, seed, satnet, size),
                       lambda: generate(n, n_missing, seed, satnet, size=size), data_dir)


def load_cached(key: str, make: Callable[[], SudokuData], data_dir: str | Path | None = None) -> SudokuData:
    """The puzzles cached under ``key`` as ``<data_dir>/gen-<sha1(key)[:12]>.pt``, or ``make()`` written there."""
    path = Path(data_dir or default_data_dir()) / f"gen-{hashlib.sha1(key.encode()).hexdigest()[:12]}.pt"
    if path.exists():
        try:
            d = torch.load(path, weights_only=True)
            if d.get("key") == key:
                return SudokuData(d["puzzles"], d["solutions"])
        except Exception as e:  # a truncated file raises EOFError, RuntimeError, UnpicklingError, ...
            warnings.warn(f"{path}: unusable cached puzzles ({type(e).__name__}: {str(e)[:160]}); making them again")
    data = make()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"--data-dir {path.parent}: cannot create the folder ({e.strerror or e}); pass a writable "
                           f"--data-dir") from None
    with atomic_path(path) as tmp:  # a failed write (disk full) names the path and leaves no temporary file
        torch.save({"key": key, "puzzles": data.puzzles, "solutions": data.solutions}, tmp)
    return data


def _onehot_to_digits(t: Tensor, name: str, path: Path, allow_blank: bool) -> Tensor:
    if not isinstance(t, Tensor):
        raise ValueError(f"{path}: expected a tensor in {name}, got {type(t).__name__}")
    if t.dim() == 2 and t.shape[1] == 729:
        t = t.reshape(-1, 81, 9)
    elif t.dim() == 4 and tuple(t.shape[1:]) == (9, 9, 9):
        t = t.reshape(-1, 81, 9)
    else:
        raise ValueError(f"{path}: {name} must have shape (N, 9, 9, 9) or (N, 729) (one-hot, digit last); "
                         f"got {tuple(t.shape)}")
    t = t.float()
    s = t.sum(-1)
    bad_values = ~((t == 0) | (t == 1)).all(-1)
    bad_sum = (s > 1) | ((s == 0) if not allow_blank else torch.zeros_like(s, dtype=torch.bool))
    bad = bad_values | bad_sum
    if bad.any():
        row, cell = (int(v) for v in bad.nonzero()[0])
        want = "at most one 1" if allow_blank else "exactly one 1"
        raise ValueError(f"{path}: {name} puzzle {row}, cell {cell} is not one-hot ({want} expected, "
                         f"got {t[row, cell].tolist()})")
    return torch.where(s > 0, t.argmax(-1) + 1, torch.zeros_like(s, dtype=torch.long)).long()


def load_satnet(directory: str | Path) -> SudokuData:
    """SATNet's ``features.pt`` (givens, all-zero rows = blanks) and ``labels.pt`` (solutions).

    Both hold one-hot tensors with the digit last, ``(N, 9, 9, 9)`` as SATNet ships them,
    or flattened ``(N, 729)``.
    """
    directory = Path(directory)
    tensors = {}
    for name in ("features.pt", "labels.pt"):
        path = directory / name
        if not path.exists():
            raise FileNotFoundError(f"{path} not found (SATNet layout: features.pt and labels.pt in one folder)")
        try:
            tensors[name] = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling problem is a bad file
            raise ValueError(f"{path} is not a torch tensor file ({type(e).__name__}: {e})") from None
    puzzles = _onehot_to_digits(tensors["features.pt"], "features.pt", directory / "features.pt", True)
    solutions = _onehot_to_digits(tensors["labels.pt"], "labels.pt", directory / "labels.pt", False)
    return _checked(SudokuData(puzzles, solutions), directory)


def save_satnet(data: SudokuData, directory: str | Path) -> None:
    """Write ``features.pt`` / ``labels.pt`` in SATNet's ``(N, 9, 9, 9)`` one-hot layout (9 x 9 boards only)."""
    if data.size != 9:
        raise ValueError(f"SATNet's layout holds 9x9 boards; these are {data.size}x{data.size} (use save_csv)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    eye = torch.cat([torch.zeros(1, 9), torch.eye(9)])
    torch.save(eye[data.puzzles].reshape(-1, 9, 9, 9), directory / "features.pt")
    torch.save(eye[data.solutions].reshape(-1, 9, 9, 9), directory / "labels.pt")


def load_csv(path: str | Path, size: int = 9) -> SudokuData:
    """A CSV with exactly the columns ``quiz,solution``: ``size**2``-character strings (81 for 9 x 9), ``0`` or
    ``.`` for blanks; header optional.  Errors name the file's line number."""
    path = Path(path)
    box_shape(size)  # a named error for a bad size
    cells, top = size * size, str(size)
    puzzles, solutions, lines = [], [], []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if not puzzles and not lines and not row[0].strip().replace(".", "0").isdigit():
                lines.append(line)  # header
                continue
            if len(row) != 2:
                raise ValueError(f"{path}, line {line}: expected exactly two columns quiz,solution; "
                                 f"got {len(row)}: {row!r}"[:300])
            q, s = row[0].strip().replace(".", "0"), row[1].strip()
            for name, text, lo in (("quiz", q, "0"), ("solution", s, "1")):
                if len(text) != cells or not all(lo <= ch <= top for ch in text):
                    raise ValueError(f"{path}, line {line}: {name} must be {cells} digits "
                                     f"({'0 or . for blanks' if name == 'quiz' else f'1-{top}'}) for a {size}x{size} "
                                     f"board (size = {size}); got {text[:90]!r}")
            if set(q) == {"0"}:
                raise ValueError(f"{path}, line {line}: the quiz is all blanks (no givens)")
            puzzles.append([int(ch) for ch in q])
            solutions.append([int(ch) for ch in s])
            lines.append(line)
    if not puzzles:
        raise ValueError(f"{path}: no puzzles found")
    body = lines[-len(puzzles):]
    return _checked(SudokuData(torch.tensor(puzzles), torch.tensor(solutions)), path, [f"line {n}" for n in body])


def save_csv(data: SudokuData, path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["quiz", "solution"])
        for p, s in zip(data.puzzles.tolist(), data.solutions.tolist()):
            w.writerow(["".join(map(str, p)), "".join(map(str, s))])


def _checked(data: SudokuData, source, rows: list[str] | None = None) -> SudokuData:
    """Reject solutions that break a rule or contradict their givens, naming the row (``rows[i]``,
    default ``puzzle i`` counted from 0)."""
    given = data.puzzles > 0
    clash = (given & (data.puzzles != data.solutions)).any(1)
    for i in range(len(data)):
        where = rows[i] if rows is not None else f"puzzle {i}"
        if clash[i]:
            raise ValueError(f"{source}, {where}: the solution contradicts a given digit")
        if not is_valid_solution(data.solutions[i].numpy()):
            raise ValueError(f"{source}, {where}: the solution repeats a digit in a row, column or box")
    return data
