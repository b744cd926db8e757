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
