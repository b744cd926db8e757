"""Warcraft data: the shortest-path solver against brute force, the generator, the real layout's loader."""

import json
from pathlib import Path

import numpy as np
import pytest

from pseudosl.experiments.warcraft.data import (
    COSTS,
    WarcraftDataError,
    generate,
    load_layout,
    load_or_generate,
    load_split,
    save_layout,
)
from pseudosl.experiments.warcraft.grid import shortest_paths
from tolerances import ATOL64


def _all_simple_paths(k: int) -> list[list[int]]:
    """Every simple path of flat cells from 0 to k*k-1 on the 4-connected k x k grid (DFS)."""
    out, goal = [], k * k - 1

    def dfs(path: list[int], seen: set[int]) -> None:
        v = path[-1]
        if v == goal:
            out.append(list(path))
            return
        r, c = divmod(v, k)
        for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            u = rr * k + cc
            if 0 <= rr < k and 0 <= cc < k and u not in seen:
                seen.add(u); path.append(u)
                dfs(path, seen)
                path.pop(); seen.discard(u)

    dfs([0], {0})
    return out


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("kind", ["levels", "continuous"])
def test_shortest_paths_match_brute_force(k, kind):
    rng = np.random.default_rng(k)
    n = 60
    w = COSTS[rng.integers(0, 5, size=(n, k, k))] if kind == "levels" else rng.uniform(0.1, 10, size=(n, k, k))
    paths, costs, n_paths = shortest_paths(w)
    every = _all_simple_paths(k)
    assert len(every) == {2: 2, 3: 12, 4: 184}[k]
    flat = w.reshape(n, -1)
    for b in range(n):
        c = np.array([flat[b, p].sum() for p in every])
        best = c.min()
        assert costs[b] == pytest.approx(best, abs=ATOL64)
        assert n_paths[b] == min(2, int((np.abs(c - best) <= 1e-6).sum()))   # ties counted (capped at 2)
        mask = paths[b].reshape(-1).astype(bool)
        assert any(set(np.nonzero(mask)[0]) == set(p) for p, cp in zip(every, c) if abs(cp - best) <= 1e-6)
    if kind == "levels" and k >= 3:
        assert (n_paths > 1).any() and (n_paths == 1).any()   # the data exercise both cases


def test_ties_detected_on_a_symmetric_map():
    w = np.ones((1, 3, 3))
    _, cost, n_paths = shortest_paths(w)
    assert cost[0] == 5 and n_paths[0] == 2               # 6 monotone paths of 5 cells
    w = np.full((1, 3, 3), 9.0); w[0, 0, :] = w[0, :, 2] = 1.0
    assert shortest_paths(w)[2][0] == 1                   # only along the top row and right column
    with pytest.raises(ValueError, match="positive"):
        shortest_paths(np.zeros((1, 2, 2)))


def test_generator_is_deterministic_and_seeded():
    a, ca, _ = generate(20, 5, seed=3)
    b, cb, _ = generate(20, 5, seed=3)
    c, _, _ = generate(20, 5, seed=4)
    for x, y in ((a.maps, b.maps), (a.paths, b.paths), (a.weights, b.weights), (ca, cb)):
        assert np.array_equal(x, y)
    assert not np.array_equal(a.maps, c.maps) and not np.array_equal(a.weights, c.weights)
    assert a.maps.shape == (20, 40, 40, 3) and a.maps.dtype == np.uint8
    assert set(np.unique(a.weights)) <= set(COSTS)
    # the stored path is a minimum-cost path of the stored weights
    p, cost, _ = shortest_paths(a.weights)
    assert np.array_equal(p, a.paths)
    assert np.allclose((a.paths * a.weights).sum((1, 2)), cost)
    # a cost is not one colour: a pixel of a class varies from cell to cell by more than the noise (sd 10)
    cells = a.maps.reshape(20, 5, 8, 5, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 64, 3).astype(float)
    cls = np.searchsorted(COSTS, a.weights.reshape(-1))
    for j in np.unique(cls):
        assert cells[cls == j].std(0).mean() > 13


def test_generator_rejects_ties_on_request():
    d, n_paths, rejected = generate(30, 6, seed=0, reject_ties=True)
    assert (n_paths == 1).all() and rejected > 0
    assert (shortest_paths(d.weights)[2] == 1).all()
    _, kept, rejected = generate(30, 6, seed=0)
    assert rejected == 0 and (kept > 1).any()


def test_layout_round_trip_and_cache(tmp_path):
    splits, meta = load_or_generate(4, 12, 3, 5, seed=1, data_dir=tmp_path)
    folder = next(tmp_path.glob("gen-4x4-12-3-5-seed1-*"))
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(["meta.json"] + [f"{s}_{f}.npy" for s in ("train", "val", "test")
                                           for f in ("maps", "shortest_paths", "vertex_weights")])
    assert json.loads((folder / "meta.json").read_text())["n"] == {"train": 12, "val": 3, "test": 5}
    assert 0 <= meta["tied_share"]["train"] <= 1
    again, _ = load_or_generate(4, 12, 3, 5, seed=1, data_dir=tmp_path)    # from the cache
    fresh, _, _ = generate(20, 4, seed=1)
    assert np.array_equal(np.concatenate([splits[s].maps for s in ("train", "val", "test")]), fresh.maps)
    for s in ("train", "val", "test"):
        assert np.array_equal(again[s].maps, splits[s].maps) and np.array_equal(again[s].paths, splits[s].paths)
        assert np.allclose(again[s].weights, splits[s].weights)
    loaded = load_layout(folder)
    assert loaded["test"].maps.shape == (5, 32, 32, 3) and loaded["test"].grid == 4


def test_loader_names_bad_files(tmp_path):
    d, _, _ = generate(4, 3, seed=0)
    save_layout(tmp_path, {"train": d, "val": d, "test": d})
    assert len(load_split(tmp_path, "train")) == 4
    (tmp_path / "val_vertex_weights.npy").unlink()
    with pytest.raises(WarcraftDataError, match="val_vertex_weights.npy: missing"):
        load_layout(tmp_path)
    np.save(tmp_path / "train_maps.npy", d.maps.astype(np.float32))
    with pytest.raises(WarcraftDataError, match="train_maps.npy: dtype float32, expected uint8"):
        load_split(tmp_path, "train")
    np.save(tmp_path / "train_maps.npy", d.maps[:, :20])
    with pytest.raises(WarcraftDataError, match=r"train_maps.npy: shape \(4, 20, 24, 3\), expected \(N, 8k, 8k, 3\)"):
        load_split(tmp_path, "train")
    np.save(tmp_path / "test_shortest_paths.npy", d.paths[:, :2])
    with pytest.raises(WarcraftDataError, match=r"test_shortest_paths.npy: shape \(4, 2, 3\), expected \(4, 3, 3\)"):
        load_split(tmp_path, "test")
    np.save(tmp_path / "test_shortest_paths.npy", d.paths * 2)
    with pytest.raises(WarcraftDataError, match="0/1"):
        load_split(tmp_path, "test")
    np.save(tmp_path / "test_shortest_paths.npy", d.paths)
    np.save(tmp_path / "test_vertex_weights.npy", -d.weights)
    with pytest.raises(WarcraftDataError, match="> 0"):
        load_split(tmp_path, "test")
    (tmp_path / "test_maps.npy").write_text("not numpy")
    with pytest.raises(WarcraftDataError, match="not a readable .npy"):
        load_split(tmp_path, "test")
    with pytest.raises(ValueError, match="split = 'dev'"):
        load_split(tmp_path, "dev")


def test_a_truncated_cached_layout_is_made_again(tmp_path):
    splits, _ = load_or_generate(4, 6, 2, 3, seed=1, data_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    maps = folder / "train_maps.npy"
    maps.write_bytes(maps.read_bytes()[:100])
    with pytest.warns(UserWarning, match="unusable cached maps .*making them again"):
        again, _ = load_or_generate(4, 6, 2, 3, seed=1, data_dir=tmp_path)
    assert np.array_equal(again["train"].maps, splits["train"].maps)
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_a_failed_write_names_the_folder_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    from pseudosl.errors import StorageError
    from pseudosl.experiments.warcraft import data

    def full_disk(path, array, *a, **kw):
        Path(path).write_bytes(b"\x93NUMPY half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(data.np, "save", full_disk)
    with pytest.raises(StorageError, match=r"could not write the generated maps to .*gen-4x4.* \(No space left on "
                                           r"device\); free space there or pass another --data-dir"):
        load_or_generate(4, 6, 2, 3, seed=1, data_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_many_maps_are_solved_in_chunks_with_progress_and_the_same_answers(capsys, monkeypatch):
    from pseudosl.experiments.warcraft import data, grid
    w = data.COSTS[data.terrain(50, 5, np.random.default_rng(3))]
    whole = grid.shortest_paths(w)
    maps = data.render(data.terrain(12, 3, np.random.default_rng(4)), np.random.default_rng(5), chunk=5)
    assert capsys.readouterr().err == ""  # below PROGRESS_FROM: no bar
    monkeypatch.setattr(grid, "CHUNK", 7)
    monkeypatch.setattr(grid, "PROGRESS_FROM", 10)
    monkeypatch.setattr(data, "PROGRESS_FROM", 10)
    for a, b in zip(whole, grid.shortest_paths(w)):
        np.testing.assert_array_equal(a, b)
    again = data.render(data.terrain(12, 3, np.random.default_rng(4)), np.random.default_rng(5), chunk=5)
    np.testing.assert_array_equal(maps, again)
    err = capsys.readouterr().err
    assert "shortest paths of 50 maps" in err and "50/50" in err and "rendering 12 3x3 maps" in err
