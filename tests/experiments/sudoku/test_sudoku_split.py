"""The grid splits (split = "grids", "balanced"): solution-grid classes under relabelling digits, disjoint between
the splits, closed under the augmentation they train with; the balanced split's grid types and its draw per model
seed; their puzzles, determinism, cache entries and config refusals."""

import itertools

import numpy as np
import pytest
import torch

from pseudosl.experiments.config import ConfigError
from pseudosl.experiments.sudoku.config import load_config
from pseudosl.experiments.sudoku.data import (augment, count_solutions, generate, is_valid_solution, load_or_generate,
                                              relabel_digits)
from pseudosl.experiments.sudoku.split import (PARTS, all_grids, augmentation, canonical_form, generate_part,
                                               grid_types, load_or_generate_part, part_of, split_seed)
from pseudosl.experiments.sudoku.train import Objective, SudokuExperiment, load_data


def _classes(grids) -> set[bytes]:
    return {row.tobytes() for row in canonical_form(np.asarray(grids))}


def _relabellings(grid: np.ndarray) -> np.ndarray:
    """Every relabelling of the digits of ``grid`` (``size!`` rows)."""
    size = int(round(len(grid) ** 0.5))
    return np.stack([np.asarray((0,) + p)[grid] for p in itertools.permutations(range(1, size + 1))])


def test_the_288_4x4_grids_fall_into_12_classes_of_24():
    # the oracle: every board whose rows are permutations of 1..4, kept when its columns and boxes are too
    rows = np.asarray(list(itertools.permutations(range(1, 5))))
    boards = rows[np.stack(np.meshgrid(*[np.arange(24)] * 4, indexing="ij"), -1).reshape(-1, 4)]  # (24^4, 4, 4)
    boxes = boards.reshape(-1, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(-1, 4, 4)
    valid = np.all([(np.sort(b, 2) == np.arange(1, 5)).all((1, 2)) for b in (boards.transpose(0, 2, 1), boxes)], 0)
    truth = {b.tobytes() for b in boards[valid].reshape(-1, 16)}
    assert all(is_valid_solution(b) for b in boards[valid])
    grids = all_grids(4)
    assert len(truth) == 288 and {g.tobytes() for g in grids} == truth and len(grids) == 288
    classes = canonical_form(grids)
    labels, counts = np.unique(classes, axis=0, return_counts=True)
    assert len(labels) == 12 and (counts == 24).all()
    for grid, canon in zip(grids, classes):  # a class is exactly the relabellings of its grids
        assert {r.tobytes() for r in _relabellings(grid)} == {g.tobytes() for g in grids[(classes == canon).all(1)]}
    every = torch.as_tensor(grids.copy())
    assert len(_classes(augment(every, every)[1].numpy())) > 1  # the full symmetries join classes
    with pytest.raises(ValueError, match="size = 6: only the 4x4 grids are listed"):
        all_grids(6)


@pytest.mark.parametrize("size", [4, 6, 9])
def test_canonical_form_names_the_class_under_relabelling(size):
    grids = generate(5, n_missing=1, seed=2, size=size).solutions.numpy()
    rng = np.random.default_rng(0)
    for g in grids:
        canon = canonical_form(g[None])[0]
        assert is_valid_solution(canon) and (canon[:size] == np.arange(1, size + 1)).all()
        relabelled = np.concatenate([[0], rng.permutation(np.arange(1, size + 1))])[g]
        assert (canonical_form(relabelled[None])[0] == canon).all()
    swapped = grids[0].reshape(size, size)[[1, 0] + list(range(2, size))].reshape(-1)  # rows 1, 2 of a band
    assert not (canonical_form(swapped[None]) == canonical_form(grids[:1])).all()
    with pytest.raises(ValueError, match="every first row must hold the digits 1..size once"):
        canonical_form(np.ones((1, size * size), int))


def test_4x4_classes_go_8_2_2_to_the_parts_by_seed():
    grids = all_grids(4)
    by_seed = {}
    for seed in range(6):
        part = part_of(grids, seed)
        per_part = [_classes(grids[part == k]) for k in range(len(PARTS))]
        assert [len(c) for c in per_part] == [8, 2, 2]
        assert np.array_equal(part_of(grids, seed), part)
        by_seed[seed] = tuple(sorted(per_part[2]))
    assert len(set(by_seed.values())) > 1  # the seed chooses the test classes


def test_larger_boards_share_classes_about_8_2_2():
    grids = generate(6000, n_missing=1, seed=4, size=6).solutions.numpy()
    part = part_of(grids, 1234)
    relabelled = np.concatenate([np.zeros((len(grids), 1), int), np.argsort(np.random.default_rng(1).random(
        (len(grids), 6)), 1) + 1], 1)
    assert np.array_equal(part_of(np.take_along_axis(relabelled, grids, 1), 1234), part)  # a class has one part
    share = np.bincount(part, minlength=3) / len(grids)
    assert abs(share[0] - 8 / 12) < 0.04 and abs(share[1] - 2 / 12) < 0.03 and abs(share[2] - 2 / 12) < 0.03
    assert not np.array_equal(part_of(grids, 1235), part)


@pytest.mark.parametrize("size, n_missing", [(4, 10), (6, 16)])
def test_no_validation_or_test_grid_is_a_training_grid_up_to_relabelling(size, n_missing):
    parts = {p: generate_part(p, 60, n_missing, seed=7, size=size) for p in PARTS}
    classes = {p: _classes(d.solutions.numpy()) for p, d in parts.items()}
    assert not classes["train"] & classes["val"] and not classes["train"] & classes["test"]
    assert not classes["val"] & classes["test"]
    if size == 4:
        assert [len(classes[p]) for p in PARTS] == [8, 2, 2]
    for d in parts.values():  # uniquely solvable puzzles of the right blanks
        for p, s in zip(d.puzzles.numpy(), d.solutions.numpy()):
            assert is_valid_solution(s) and ((p == 0) | (p == s)).all()
            n, sols = count_solutions(p, limit=2)
            assert n == 1 and sols[0] == s.tolist()
            assert 1 <= (p == 0).sum() <= n_missing
    assert (parts["test"].puzzles == 0).sum(1).float().mean() > n_missing - 2  # the holes were made, mostly kept


def test_the_parts_are_deterministic_by_seed():
    a, b = generate_part("test", 30, 10, seed=3, size=4), generate_part("test", 30, 10, seed=3, size=4)
    assert torch.equal(a.puzzles, b.puzzles) and torch.equal(a.solutions, b.solutions)
    assert not torch.equal(generate_part("test", 30, 10, seed=4, size=4).solutions, a.solutions)
    assert not torch.equal(generate_part("val", 30, 10, seed=3, size=4).solutions, a.solutions)
    with pytest.raises(ValueError, match="part = 'dev': expected one of 'train', 'val', 'test'"):
        generate_part("dev", 3, size=4)
    with pytest.raises(ValueError, match=r"n_missing must be in 1..12"):
        generate_part("train", 3, n_missing=13, size=4)


@pytest.mark.parametrize("size", [4, 6])
def test_the_grids_augmentation_keeps_a_training_grid_in_its_class(size):
    train = generate_part("train", 64, 8, seed=1, size=size)
    classes = canonical_form(train.solutions.numpy())
    assert augmentation("grids") is relabel_digits and augmentation("random") is augment
    torch.manual_seed(0)
    left = False
    for _ in range(50):
        p, s = augmentation("grids")(train.puzzles, train.solutions)
        assert np.array_equal(canonical_form(s.numpy()), classes)                   # the same class, grid by grid
        assert torch.equal(p == 0, train.puzzles == 0) and ((p == 0) | (p == s)).all()
        _, full = augmentation("random")(train.puzzles, train.solutions)
        left |= bool((canonical_form(full.numpy()) != classes).any(1).any())
    assert left  # every symmetry would carry training grids into other classes
    with pytest.raises(ValueError, match="split = 'both': expected one of 'random', 'grids', 'balanced'"):
        augmentation("both")
    assert augmentation("balanced") is relabel_digits


def test_load_data_and_the_cache_under_the_grid_split(tmp_path):
    cfg = load_config(size=4, n_train=40, n_val=10, n_test=20, n_missing=10, split="grids", data_dir=str(tmp_path))
    train, val, test = load_data(cfg)
    assert (len(train), len(val), len(test)) == (40, 10, 20)
    assert not _classes(train.solutions.numpy()) & (_classes(val.solutions.numpy()) | _classes(test.solutions.numpy()))
    assert len(list(tmp_path.glob("gen-*.pt"))) == 3  # one cache entry a part
    other = load_data(load_config(size=4, n_train=30, n_val=0, n_test=20, split="grids", data_dir=str(tmp_path)))
    assert other[1] is None and torch.equal(other[2].puzzles, test.puzzles)  # the test split whatever n_train, n_val
    again = load_or_generate_part("test", 20, 10, cfg.data_seed, data_dir=tmp_path, size=4)
    assert torch.equal(again.puzzles, test.puzzles) and len(list(tmp_path.glob("gen-*.pt"))) == 4
    plain = load_or_generate(20, 10, cfg.data_seed, data_dir=tmp_path, size=4)  # the split is in the key
    assert len(list(tmp_path.glob("gen-*.pt"))) == 5 and not torch.equal(plain.solutions, test.solutions)


def test_the_objective_trains_on_the_splits_augmentation():
    from pseudosl.experiments.sudoku.models import build_model
    for split, expected in (("grids", relabel_digits), ("random", augment)):
        cfg = load_config(size=4, augment=True, split=split, conv_channels=4, conv_layers=1)
        assert Objective(build_model("convnet", cfg), "convnet", cfg).augment is expected
    cfg = load_config(size=4, augment=False, split="grids", conv_channels=4, conv_layers=1)
    assert Objective(build_model("convnet", cfg), "convnet", cfg).augment is None


def test_contradictory_split_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"split = 'grids' draws each split's puzzles from its own generated "
                                          r"solution grids; data = 'csv:x.csv' .*use data = 'generate', or "
                                          r"split = 'random'"):
        load_config(data="csv:x.csv", split="grids")
    with pytest.raises(ConfigError, match=r"split = 'balanced' draws each split's puzzles from its own generated "):
        load_config(data="csv:x.csv", split="balanced")
    with pytest.raises(ConfigError, match=r"split = 'pool': expected one of 'random', 'grids', 'balanced'"):
        load_config(split="pool")
    assert load_config(data="csv:x.csv").split == "random"


def _types_by_augmentation(draws: int = 3000) -> dict[bytes, int]:
    """The oracle of the grid types: the 12 classes joined whenever a random full Sudoku symmetry (data.augment:
    relabelling, rows within bands, bands, columns within stacks, stacks, transpose) maps a grid of one onto a grid
    of another; 3000 draws per class reach each of its 128 geometric images with probability > 1 - 1e-9."""
    grids = all_grids(4)
    classes = [c.tobytes() for c in np.unique(canonical_form(grids), axis=0)]
    parent = {c: c for c in classes}

    def root(c: bytes) -> bytes:
        while parent[c] != c:
            c = parent[c]
        return c
    torch.manual_seed(0)
    reps = torch.as_tensor(np.unique(canonical_form(grids), axis=0)).repeat(draws, 1)       # (12 * draws, 16)
    _, images = augment(reps, reps)
    for a, b in zip(canonical_form(reps.numpy()), canonical_form(images.numpy())):
        parent[root(b.tobytes())] = root(a.tobytes())
    names = {r: k for k, r in enumerate(dict.fromkeys(root(c) for c in classes))}
    return {c: names[root(c)] for c in classes}


def test_the_12_classes_form_two_grid_types_of_4_and_8():
    truth = _types_by_augmentation()
    classes = np.unique(canonical_form(all_grids(4)), axis=0)
    types = grid_types(4)
    assert sorted(np.bincount(types).tolist()) == [4, 8]
    for a in range(12):
        for b in range(12):  # the same partition as the oracle's, whatever the numbering
            assert (types[a] == types[b]) == (truth[classes[a].tobytes()] == truth[classes[b].tobytes()])
    grids = all_grids(4)
    assert sorted(np.bincount(types[[np.flatnonzero((classes == c).all(1))[0]
                                     for c in canonical_form(grids)]]).tolist()) == [96, 192]


def test_the_balanced_split_gives_validation_and_test_one_class_of_either_type_per_seed():
    grids = all_grids(4)
    classes = np.unique(canonical_form(grids), axis=0)
    type_of = {c.tobytes(): t for c, t in zip(classes, grid_types(4))}
    tests = set()
    for seed in range(8):
        part = part_of(grids, split_seed(1234, seed), balanced=True)
        per_part = [_classes(grids[part == k]) for k in range(len(PARTS))]
        assert [len(c) for c in per_part] == [8, 2, 2] and not (per_part[0] & (per_part[1] | per_part[2]))
        for k in (1, 2):  # validation and test: one class of each type
            assert sorted(type_of[c] for c in per_part[k]) == [0, 1]
        tests.add(tuple(sorted(per_part[2])))
    assert len(tests) > 4  # each seed its own draw
    assert split_seed(1234, 0) == split_seed(1234, 0) != split_seed(1234, 1) != split_seed(1235, 1)
    assert np.array_equal(part_of(grids, 7), part_of(grids, 7, balanced=False))  # the fixed split is unchanged


def test_each_model_seed_trains_and_is_tested_on_its_own_balanced_split(tmp_path):
    cfg = load_config(size=4, n_train=40, n_val=10, n_test=20, split="balanced", seeds=[3, 4],
                      data_dir=str(tmp_path))
    splits = SudokuExperiment().load_data(cfg)
    first, second = splits.of_seed(3), splits.of_seed(4)  # test classes 4, 8 and 3, 9 of the sorted 12
    assert torch.equal(first.test.puzzles, splits.test.puzzles)  # the splits shown are the first seed's
    assert not _classes(second.test.solutions.numpy()) == _classes(first.test.solutions.numpy())
    for s, own in ((3, first), (4, second)):
        train, val, test = load_data(cfg, s)
        assert torch.equal(own.test.puzzles, test.puzzles) and torch.equal(own.val.solutions, val.solutions)
        assert torch.equal(own.train.tensors[1], train.solutions)
        assert not _classes(train.solutions.numpy()) & (_classes(val.solutions.numpy())
                                                        | _classes(test.solutions.numpy()))
    with pytest.raises(ValueError, match="split = 'balanced' draws a split per model seed: pass the seed"):
        load_data(cfg)
    fixed = SudokuExperiment().load_data(load_config(size=4, n_train=40, n_val=10, n_test=20, split="grids",
                                                     data_dir=str(tmp_path)))
    assert fixed.of_seed(3) is fixed and fixed.for_seed is None  # the named variant: one split for every seed
