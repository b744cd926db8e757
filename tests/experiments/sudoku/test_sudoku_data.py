"""Sudoku data: generator validity, uniqueness and determinism; loaders round-trip; bad files."""

import numpy as np
import pytest
import torch

from pseudosl.experiments.sudoku.data import (SudokuData, count_solutions, generate, is_valid_solution, load_csv,
                                              load_or_generate, load_satnet, save_csv, save_satnet)


@pytest.mark.parametrize("satnet", [False, True])
def test_generated_puzzles_are_valid_and_unique(satnet):
    d = generate(12, n_missing=10, seed=3, satnet=satnet)
    assert d.puzzles.shape == d.solutions.shape == (12, 81)
    for p, s in zip(d.puzzles.numpy(), d.solutions.numpy()):
        assert is_valid_solution(s)
        assert ((p == 0) | (p == s)).all()                         # givens agree with the solution
        n, sols = count_solutions(p, limit=2)
        assert n == 1 and sols[0] == s.tolist()                    # unique, and it is the stored one
        blanks = int((p == 0).sum())
        if satnet:
            assert 31 <= 81 - blanks                                # 31..42 givens, restores only add givens
        else:
            assert 8 <= blanks <= 10                                # 10, or 8-9 after a rare restore


def test_generator_is_deterministic_by_seed():
    a, b, c = generate(20, seed=7), generate(20, seed=7), generate(20, seed=8)
    assert torch.equal(a.puzzles, b.puzzles) and torch.equal(a.solutions, b.solutions)
    assert not torch.equal(a.solutions, c.solutions)


def test_cache_round_trip(tmp_path):
    a = load_or_generate(10, 10, 0, data_dir=tmp_path)
    assert len(list(tmp_path.glob("gen-*.pt"))) == 1
    b = load_or_generate(10, 10, 0, data_dir=tmp_path)
    assert torch.equal(a.puzzles, b.puzzles)


def test_count_solutions_counts():
    s = generate(1, seed=0).solutions[0].numpy()
    assert count_solutions(s)[0] == 1
    assert count_solutions(np.zeros(81, int), limit=2)[0] == 2
    clash = s.copy(); clash[1] = clash[0]
    assert count_solutions(clash)[0] == 0


def test_satnet_round_trip_both_layouts(tmp_path):
    d = generate(5, seed=1)
    save_satnet(d, tmp_path)
    back = load_satnet(tmp_path)
    assert torch.equal(back.puzzles, d.puzzles) and torch.equal(back.solutions, d.solutions)
    # flattened (N, 729) layout
    for name in ("features.pt", "labels.pt"):
        torch.save(torch.load(tmp_path / name).reshape(5, 729), tmp_path / name)
    back = load_satnet(tmp_path)
    assert torch.equal(back.puzzles, d.puzzles)


def test_csv_round_trip_with_dots_and_no_header(tmp_path):
    d = generate(4, seed=2)
    save_csv(d, tmp_path / "a.csv")
    assert torch.equal(load_csv(tmp_path / "a.csv").puzzles, d.puzzles)
    rows = ["".join(map(str, p)).replace("0", ".") + "," + "".join(map(str, s))
            for p, s in zip(d.puzzles.tolist(), d.solutions.tolist())]
    (tmp_path / "b.csv").write_text("\n".join(rows) + "\n")
    back = load_csv(tmp_path / "b.csv")
    assert torch.equal(back.puzzles, d.puzzles) and torch.equal(back.solutions, d.solutions)


def test_bad_files_raise_clear_errors(tmp_path):
    d = generate(3, seed=4)
    save_csv(d, tmp_path / "ok.csv")
    lines = (tmp_path / "ok.csv").read_text().splitlines()
    (tmp_path / "short.csv").write_text("\n".join(lines[:2] + [lines[3][:-1] + ",x"]) + "\n")
    with pytest.raises(ValueError, match=r"short.csv, line 3: .*solution"):
        load_csv(tmp_path / "short.csv")
    (tmp_path / "one.csv").write_text(lines[1].split(",")[0] + "\n")
    with pytest.raises(ValueError, match="two columns"):
        load_csv(tmp_path / "one.csv")
    wrong = d.solutions.clone(); wrong[1, :2] = wrong[1, [1, 0]]
    save_csv(SudokuData(torch.where(d.puzzles > 0, wrong, 0), wrong), tmp_path / "rules.csv")
    with pytest.raises(ValueError, match="rules.csv, line 3: the solution repeats"):  # the file's line, as above
        load_csv(tmp_path / "rules.csv")
    (tmp_path / "three.csv").write_text("\n".join(lines[:2] + [lines[2] + ",extra"]) + "\n")
    with pytest.raises(ValueError, match="three.csv, line 3: expected exactly two columns"):
        load_csv(tmp_path / "three.csv")
    (tmp_path / "blank.csv").write_text("\n".join(lines[:2] + ["0" * 81 + "," + lines[2].split(",")[1]]) + "\n")
    with pytest.raises(ValueError, match="blank.csv, line 3: the quiz is all blanks"):
        load_csv(tmp_path / "blank.csv")
    (tmp_path / "empty.csv").write_text("quiz,solution\n")
    with pytest.raises(ValueError, match="no puzzles"):
        load_csv(tmp_path / "empty.csv")

    save_satnet(d, tmp_path / "s")
    torch.save(torch.zeros(3, 9, 9), tmp_path / "s" / "labels.pt")
    with pytest.raises(ValueError, match=r"labels.pt must have shape"):
        load_satnet(tmp_path / "s")
    save_satnet(d, tmp_path / "s")
    lab = torch.load(tmp_path / "s" / "labels.pt"); lab[2, 0, 0] = 0
    torch.save(lab, tmp_path / "s" / "labels.pt")
    with pytest.raises(ValueError, match="labels.pt puzzle 2, cell 0 is not one-hot"):
        load_satnet(tmp_path / "s")
    (tmp_path / "s" / "labels.pt").write_text("not a tensor")
    with pytest.raises(ValueError, match="not a torch tensor file"):
        load_satnet(tmp_path / "s")
    with pytest.raises(FileNotFoundError, match="features.pt"):
        load_satnet(tmp_path / "nowhere")


def test_augment_keeps_puzzles_valid_and_consistent():
    from pseudosl.experiments.sudoku.data import augment, count_solutions, is_valid_solution
    d = generate(32, seed=5)
    torch.manual_seed(0)
    p, s = augment(d.puzzles, d.solutions)
    assert not torch.equal(s, d.solutions)
    assert torch.equal((p == 0).sum(1), (d.puzzles == 0).sum(1))              # same number of blanks
    assert ((p == 0) | (p == s)).all()                                        # givens agree with the solution
    for i in range(32):
        assert is_valid_solution(s[i].numpy())
        n, sols = count_solutions(p[i].tolist())
        assert n == 1 and sols[0] == s[i].tolist()                            # still a unique solution


# -- boards of other sizes (the CPU regime) ---------------------------------------------------------
@pytest.mark.parametrize("size, n_missing", [(4, 10), (6, 16)])
def test_small_boards_are_valid_unique_and_deterministic(size, n_missing):
    from pseudosl.experiments.sudoku.data import MIN_GIVENS, box_shape
    d = generate(40, n_missing=n_missing, seed=3, size=size)
    assert d.size == size and d.puzzles.shape == (40, size * size)
    for p, s in zip(d.puzzles.numpy(), d.solutions.numpy()):
        assert is_valid_solution(s) and ((p == 0) | (p == s)).all()
        n, sols = count_solutions(p, limit=2)
        assert n == 1 and sols[0] == s.tolist()                        # unique, and it is the stored one
        assert 1 <= (p == 0).sum() <= n_missing and (p > 0).sum() >= MIN_GIVENS[size]
    assert torch.equal(generate(40, n_missing=n_missing, seed=3, size=size).puzzles, d.puzzles)
    assert box_shape(size) == {4: (2, 2), 6: (2, 3)}[size]


def _brute_force_completions(puzzle: np.ndarray) -> list[list[int]]:
    """Every valid completion of a small puzzle by enumerating all digits of its blanks (the oracle)."""
    from oracle import assignments
    size = int(round(len(puzzle) ** 0.5))
    blanks = np.flatnonzero(puzzle == 0)
    out = []
    for a in assignments(len(blanks), size):
        g = puzzle.copy()
        g[blanks] = a + 1
        if is_valid_solution(g):
            out.append(g.tolist())
    return out


@pytest.mark.parametrize("size", [4, 6])
def test_count_solutions_agrees_with_enumeration(size):
    """The solver counts (up to its limit) and lists exactly the completions that enumeration finds."""
    rng = np.random.default_rng(0)
    full = generate(6, n_missing=1, seed=1, size=size).solutions.numpy()
    for grid in full:
        for n_blank in (3, 6 if size == 4 else 5):
            p = grid.copy()
            p[rng.permutation(size * size)[:n_blank]] = 0
            truth = _brute_force_completions(p)
            n, found = count_solutions(p, limit=1000)
            assert n == len(truth) and sorted(found) == sorted(truth)
            assert count_solutions(p, limit=2)[0] == min(2, len(truth))


@pytest.mark.parametrize("size", [4, 6])
def test_augment_on_small_boards(size):
    from pseudosl.experiments.sudoku.data import augment
    d = generate(24, n_missing=8, seed=5, size=size)
    torch.manual_seed(0)
    p, s = augment(d.puzzles, d.solutions)
    assert not torch.equal(s, d.solutions) and torch.equal((p == 0).sum(1), (d.puzzles == 0).sum(1))
    for i in range(24):
        assert is_valid_solution(s[i].numpy()) and ((p[i] == 0) | (p[i] == s[i])).all()
        n, sols = count_solutions(p[i].tolist())
        assert n == 1 and sols[0] == s[i].tolist()


def test_sizes_are_checked_and_csv_reads_small_boards(tmp_path):
    from pseudosl.experiments.sudoku.data import board_size
    with pytest.raises(ValueError, match="size = 5: expected one of 4, 6, 9"):
        generate(2, size=5)
    with pytest.raises(ValueError, match=r"n_missing must be in 1..12 \(a unique 4x4 Sudoku needs >= 4 givens\)"):
        generate(2, n_missing=13, size=4)
    with pytest.raises(ValueError, match="satnet = True draws SATNet's 9x9"):
        generate(2, satnet=True, size=6)
    with pytest.raises(ValueError, match="20 cells is not a Sudoku board"):
        board_size(20)
    d = generate(5, n_missing=6, seed=2, size=4)
    save_csv(d, tmp_path / "four.csv")
    back = load_csv(tmp_path / "four.csv", size=4)
    assert torch.equal(back.puzzles, d.puzzles) and torch.equal(back.solutions, d.solutions)
    with pytest.raises(ValueError, match=r"four.csv, line 2: quiz must be 81 digits .*size = 9"):
        load_csv(tmp_path / "four.csv")
    with pytest.raises(ValueError, match="SATNet's layout holds 9x9 boards"):
        save_satnet(d, tmp_path / "s")
    a = load_or_generate(10, 6, 0, data_dir=tmp_path / "c", size=4)
    assert a.size == 4 and torch.equal(load_or_generate(10, 6, 0, data_dir=tmp_path / "c", size=4).puzzles, a.puzzles)
    assert load_or_generate(10, 6, 0, data_dir=tmp_path / "c").size == 9           # the size is part of the cache key


def test_a_truncated_cache_entry_is_made_again(tmp_path):
    a = load_or_generate(10, 6, 0, data_dir=tmp_path, size=4)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(entry.read_bytes()[:200])  # cut by a full disk or a kill
    with pytest.warns(UserWarning, match="unusable cached puzzles .*making them again"):
        b = load_or_generate(10, 6, 0, data_dir=tmp_path, size=4)
    assert torch.equal(a.puzzles, b.puzzles) and torch.equal(a.solutions, b.solutions)
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # written whole again, no temporary file
    assert torch.equal(load_or_generate(10, 6, 0, data_dir=tmp_path, size=4).puzzles, a.puzzles)


def test_large_generations_show_progress_and_the_bar_changes_nothing(capsys, monkeypatch):
    from pseudosl.experiments.sudoku import data
    quiet = generate(30, n_missing=6, seed=2, size=4)
    assert "Sudoku puzzles" not in capsys.readouterr().err  # below PROGRESS_FROM: no bar
    monkeypatch.setattr(data, "PROGRESS_FROM", 25)
    shown = generate(30, n_missing=6, seed=2, size=4)
    err = capsys.readouterr().err
    assert "generating 30 4x4 Sudoku puzzles" in err and "30/30" in err
    assert torch.equal(quiet.puzzles, shown.puzzles) and torch.equal(quiet.solutions, shown.solutions)
