"""Runs that cannot be mixed up or lost, and the command line's one-line errors (issue 19).

Run folders are locked; a checkpoint must be the run its folder names, of the folder's config, and able to
reach the epochs asked for; a folder's results always cover all its runs; a failed write names the path and
leaves no temporary file; worker processes end with their parent; every anticipated error is one line.
"""

import errno
import re
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pseudosl.cli import main as cli_main
from pseudosl.errors import RunFolderError, StorageError
from pseudosl.experiments.checkpoints import save_checkpoint
from pseudosl.experiments.checkpoints import CheckpointError, load_checkpoint
from pseudosl.experiments.harness import evaluate_checkpoints
from pseudosl.experiments.runs import run_lock
from pseudosl.experiments.sudoku.train import SudokuExperiment

TINY = ["--n-train", "16", "--n-val", "0", "--n-test", "8", "--epochs", "1", "--conv-channels", "4", "--conv-layers", "1",
        "--rnn-hidden", "8", "--rnn-layers", "1", "--threads", "1"]
SRC = str(Path(__file__).resolve().parents[2] / "src")


def train(tmp_path, out, *flags, models=("convnet",)):
    cli_main(["sudoku", "train", "--quick", "--models", *models, "--seeds", "0", "--data-dir", str(tmp_path / "d"),
              "--out", str(out), *TINY, *flags])


def refused(capsys, argv) -> str:
    """The one-line error of a refused command (exit status 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    err = capsys.readouterr().err  # progress bars of the run may come first
    assert e.value.code == 2 and "pseudosl: error: " in err and "Traceback" not in err, err
    line = err[err.index("pseudosl: error: "):]
    assert line.count("\n") == 1 and line.endswith("\n"), err
    return line


def cli(*args, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "pseudosl.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("pseudosl: error: "), r.stderr
    return last


# -- the command line: one line, exit status 2, before any work --------------------------------------------
@pytest.mark.parametrize("case", ["a file", "under a file", "read-only"])
def test_out_that_cannot_be_a_folder_is_named(tmp_path, case):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    if case == "read-only" and not Path("/sys/kernel").is_dir():
        pytest.skip("needs Linux's /sys, where no folder can be made")
    out, message = {"a file": (blocker, "is a file, not a folder"), "under a file": (blocker / "out", "is a file"),
                    "read-only": ("/sys/pseudosl-test/out", "/sys/pseudosl-test/out: cannot")}[case]
    r = cli("sudoku", "train", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(out), *TINY)
    assert message in one_line_error(r)
    assert not (tmp_path / "d").exists()  # refused before any data was made


@pytest.mark.parametrize("flags, message", [
    (["sudoku", "train", "--quick", "--n-train", "99999999999999999999"], "--n-train: n_train = 99999999999999999999: "
                                                                          "too large"),
    (["sudoku", "train", "--quick", "--n-val", "0", "--patience", "2"], "--patience: patience = 2 stops early on the validation split, "
                                                        "but n_val = 0"),
    (["sudoku", "train", "--config", "/no/such.toml"], "--config /no/such.toml: no such file"),
    (["sudoku", "train", "--quick", "--models", "convnet", "bogus"],
     "--models: models: unknown ['bogus']; choose from"),
    (["sudoku", "train", "--quick", "--seeds", "0", "0"], "--seeds: seeds: [0, 0] repeats a seed"),
    (["fidelity", "--hf-model", "gpt2", "--device", "bogus"], "--device 'bogus': not a torch device"),
])
def test_bad_values_are_one_line_errors(tmp_path, capsys, flags, message):
    err = refused(capsys, [*flags, "--out", str(tmp_path / "o")] if flags[0] == "sudoku" else flags)
    assert message in err and not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda_is_named():
    assert "--device cuda: CUDA is not available here" in one_line_error(cli("fidelity", "--hf-model", "gpt2",
                                                                             "--device", "cuda"))


def test_memory_errors_are_one_line(monkeypatch, tmp_path, capsys):
    from pseudosl.experiments.sudoku import train as sudoku_train

    def too_big(cfg):
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (10000000200,)")
    monkeypatch.setattr(sudoku_train, "load_data", too_big)
    err = refused(capsys, ["sudoku", "train", "--quick", "--out", str(tmp_path / "o"), *TINY])
    assert "out of memory (Unable to allocate 74.5 GiB" in err and "lower the sizes" in err


# -- the lock ------------------------------------------------------------------------------------------------
HOLD = """
import sys, time
from pathlib import Path
from pseudosl.experiments.runs import run_lock
with run_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_concurrent_runs_are_refused_and_a_killed_holder_is_taken_over(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.time()
        err = one_line_error(cli("sudoku", "train", "--quick", "--models", "convnet", "--data-dir",
                                 str(tmp_path / "d"), "--out", str(out), *TINY))
        assert f"is in use by another run (pid {holder.pid} on" in err and "another --out" in err
        assert time.time() - t0 < 60 and not (tmp_path / "d").exists()  # at once, before any data
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the lock file keeps the holder's pid
        holder.wait()
    assert f"pid {holder.pid}" in (out / ".lock").read_text()
    r = cli("sudoku", "train", "--quick", "--models", "convnet", "--data-dir", str(tmp_path / "d"), "--out", str(out),
            *TINY)
    assert r.returncode == 0, r.stderr
    assert f"taking over the lock of a run that ended without releasing it (pid {holder.pid}" in r.stdout
    assert (out / "results.json").is_file() and (out / ".lock").read_text() == ""  # released


def test_lock_is_exclusive_in_process_and_clears_temporaries(tmp_path):
    out = tmp_path / "out"
    (out / "convnet-seed0").mkdir(parents=True)
    (out / "convnet-seed0" / ".tmp-checkpoint.pt").write_bytes(b"half a checkpoint")
    with run_lock(out):
        assert not (out / "convnet-seed0" / ".tmp-checkpoint.pt").exists()
        with pytest.raises(RunFolderError, match=f"in use by another run \\(pid {os.getpid()}"):
            with run_lock(out):
                pass
    with run_lock(out) as stale:  # released: free again, and no stale holder
        assert stale == ""


# -- a folder's runs belong together -------------------------------------------------------------------------
def test_other_models_into_one_folder_are_refused_not_dropped(tmp_path, capsys):
    out = tmp_path / "out"
    train(tmp_path, out)
    err = refused(capsys, ["sudoku", "train", "--quick", "--models", "rnn", "--seeds", "0", "--data-dir", str(tmp_path / "d"),
                           "--out", str(out), *TINY])
    assert "also holds the runs convnet-seed0, which are not among --models rnn" in err
    assert set(json.loads((out / "results.json").read_text())["summary"]) == {"convnet"}  # untouched
    assert "also holds the runs convnet-seed0" in refused(capsys, ["sudoku", "train", "--quick", "--models",
                                                                   "convnet", "--seeds", "1", "--data-dir",
                                                                   str(tmp_path / "d"), "--out", str(out), *TINY])
    train(tmp_path, out, "--resume", models=("convnet", "rnn"))  # listed together: one table of both
    assert set(json.loads((out / "results.json").read_text())["summary"]) == {"convnet", "rnn"}
    assert "rnn" in (out / "table.txt").read_text().lower()


def test_resume_refuses_a_checkpoint_copied_from_another_run(tmp_path, capsys):
    out = tmp_path / "out"
    train(tmp_path, out, "--seeds", "0", "1")
    shutil.copy(out / "convnet-seed0" / "checkpoint.pt", out / "convnet-seed1" / "checkpoint.pt")
    argv = ["sudoku", "train", "--quick", "--models", "convnet", "--seeds", "0", "1", "--data-dir",
            str(tmp_path / "d"), "--out", str(out), "--resume", *TINY]
    err = refused(capsys, argv)
    assert "convnet-seed1/checkpoint.pt: holds model 'convnet' seed 0, but its folder is convnet-seed1" in err
    with pytest.raises(RunFolderError, match="holds model 'convnet' seed 0, but its folder is convnet-seed1"):
        evaluate_checkpoints(SudokuExperiment(), out)
    # another model's checkpoint in the folder
    train(tmp_path, tmp_path / "rnn", models=("rnn",))
    shutil.copy(tmp_path / "rnn" / "rnn-seed0" / "checkpoint.pt", out / "convnet-seed1" / "checkpoint.pt")
    assert "holds model 'rnn' seed 0, but its folder is convnet-seed1" in refused(capsys, argv)
    # weights that do not fit the model named (a tampered checkpoint)
    ckpt = load_checkpoint(out / "convnet-seed0" / "checkpoint.pt")
    ckpt["model"].pop(next(iter(ckpt["model"])))
    ckpt["seed"] = 1
    save_checkpoint(ckpt, out / "convnet-seed1" / "checkpoint.pt")  # tampered, with a checksum of its own
    assert "its weights do not fit model 'convnet'" in refused(capsys, argv)


def _no_data(monkeypatch) -> None:
    """Making the data fails the test: a refusal must come before it."""
    def made(*a, **kw):
        raise AssertionError("the data was made before the refusal")
    monkeypatch.setattr(SudokuExperiment, "load_data", made)


def test_resume_cannot_go_back_in_epochs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    train(tmp_path, out, "--epochs", "2")
    before = (out / "results.json").read_bytes()
    _no_data(monkeypatch)
    err = refused(capsys, ["sudoku", "train", "--quick", "--models", "convnet", "--seeds", "0", "--data-dir",
                           str(tmp_path / "d"), "--out", str(out), *TINY, "--resume", "--epochs", "1"])
    assert "has already trained 2 epochs, and a run cannot go back; pass --epochs 2" in err
    assert (out / "results.json").read_bytes() == before


@pytest.mark.parametrize("content, named", [
    ("[]", "holds a JSON list, not the object"), ('{"wall_s_calls": 5}', "wall_s_calls = 5 is not a list of seconds"),
    ('{"wall_s_calls": [1.0, "2"]}', "is not a list of seconds"), ('{"wall_s_calls": [-3]}', "is not a list of seconds"),
    ('{"runs": []}', "records no wall times"), ('{"wall_s": null}', "wall_s = None is not seconds"),
    ("{half", "is not readable JSON"),
    ('"text"', "holds a JSON str")])
def test_resume_refuses_a_results_file_of_the_wrong_shape_before_recomputing(tmp_path, capsys, monkeypatch, content,
                                                                             named):
    """results.json records the wall time of each earlier call; one that is not the harness's is refused by name
    before the data is made (not after every test row is recomputed), and left as it is."""
    out = tmp_path / "out"
    train(tmp_path, out)
    (out / "results.json").write_text(content)
    _no_data(monkeypatch)
    err = refused(capsys, ["sudoku", "train", "--quick", "--models", "convnet", "--seeds", "0", "--data-dir",
                           str(tmp_path / "d"), "--out", str(out), *TINY, "--resume"])
    assert f"{out / 'results.json'}" in err and named in err and "delete it" in err, err
    assert (out / "results.json").read_text() == content


def test_resume_adds_its_wall_time_to_the_earlier_calls(tmp_path):
    out = tmp_path / "out"
    train(tmp_path, out)
    first = json.loads((out / "results.json").read_text())["wall_s_calls"]
    train(tmp_path, out, "--resume", "--epochs", "2")
    calls = json.loads((out / "results.json").read_text())["wall_s_calls"]
    assert len(first) == 1 and len(calls) == 2 and calls[0] == first[0]


def test_resume_checks_every_checkpoint_before_the_data_is_made(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    train(tmp_path, out, "--seeds", "0", "1", "--jobs", "2")
    shutil.copy(out / "convnet-seed0" / "checkpoint.pt", out / "convnet-seed1" / "checkpoint.pt")
    _no_data(monkeypatch)
    err = refused(capsys, ["sudoku", "train", "--quick", "--models", "convnet", "--seeds", "0", "1", "--data-dir",
                           str(tmp_path / "d"), "--out", str(out), "--resume", "--jobs", "2", *TINY])
    assert "convnet-seed1/checkpoint.pt: holds model 'convnet' seed 0, but its folder is convnet-seed1" in err


def test_eval_checks_every_checkpoint_before_evaluating_and_their_epochs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    train(tmp_path, out, "--models", "convnet", "rnn")
    ckpt = load_checkpoint(out / "rnn-seed0" / "checkpoint.pt")
    ckpt["epoch"] = 4  # of a run configured for 1 epoch
    save_checkpoint(ckpt, out / "rnn-seed0" / "checkpoint.pt")
    _no_data(monkeypatch)  # convnet-seed0 sorts first: it is not evaluated before rnn-seed0 is refused
    assert "rnn-seed0/checkpoint.pt: at epoch 4 of a run configured for 1 epochs" in refused(
        capsys, ["sudoku", "eval", "--out", str(out)])


def test_eval_counts_each_run_once_and_checks_the_folder_config(tmp_path, capsys):
    runs = tmp_path / "runs"
    train(tmp_path, runs / "a")
    shutil.copytree(runs / "a", runs / "copy")
    with pytest.raises(CheckpointError, match="are both convnet seed 0 .* one run would count as two seeds"):
        evaluate_checkpoints(SudokuExperiment(), runs)
    assert "one run would count as two seeds" in refused(capsys, ["sudoku", "eval", "--out", str(runs)])
    (table,) = evaluate_checkpoints(SudokuExperiment(), runs / "a")["tables"]
    assert [r["seed"] for r in table["runs"]] == [0]
    # a checkpoint of another config copied into a folder: refused by the folder's run.json
    train(tmp_path, runs / "other", "--lr", "0.001")
    shutil.copy(runs / "other" / "convnet-seed0" / "checkpoint.pt", runs / "a" / "convnet-seed0" / "checkpoint.pt")
    with pytest.raises(RunFolderError, match="run.json holds sudoku runs of config"):
        evaluate_checkpoints(SudokuExperiment(), runs / "a")


# -- failed writes -------------------------------------------------------------------------------------------
def test_full_disk_names_the_path_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    train(tmp_path, out)
    saved = load_checkpoint(out / "convnet-seed0" / "checkpoint.pt")
    real_save = torch.save

    def full_disk(obj, path):  # what torch did on a full tmpfs: part of the file, then this error
        Path(path).write_bytes(b"PK\x03\x04 part of a zip")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 645760 vs 645648")
    monkeypatch.setattr(torch, "save", full_disk)
    argv = ["sudoku", "train", "--quick", "--models", "convnet", "--seeds", "0", "--data-dir", str(tmp_path / "d"),
            "--out", str(out), *TINY, "--resume", "--epochs", "2"]
    err = refused(capsys, argv)
    assert f"could not write {out / 'convnet-seed0' / 'checkpoint.pt'}: [enforce fail" in err and "MiB left" in err
    assert [p.name for p in out.rglob(".tmp-*")] == []  # no temporary file left
    assert load_checkpoint(out / "convnet-seed0" / "checkpoint.pt")["epoch"] == saved["epoch"] == 1
    monkeypatch.setattr(torch, "save", real_save)
    real_write = Path.write_text

    def no_space(self, *a, **kw):
        if self.name == ".tmp-results.json":
            real_write(self, "{half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write(self, *a, **kw)
    monkeypatch.setattr(Path, "write_text", no_space)
    err = refused(capsys, argv)
    assert f"could not write {out / 'results.json'}: No space left on device" in err
    assert [p.name for p in out.rglob(".tmp-*")] == []
    assert json.loads((out / "results.json").read_text())["runs"][0]["epochs_trained"] == 1  # the earlier results
    monkeypatch.setattr(Path, "write_text", real_write)
    train(tmp_path, out, "--resume", "--epochs", "2")  # the disk has room again: it continues from epoch 2
    assert json.loads((out / "results.json").read_text())["runs"][0]["epochs_trained"] == 2


@pytest.mark.parametrize("error, named", [
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 645760 vs 645648"), True),
    (RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/3: "
                  "file write failed"), True),
    (OSError(errno.EACCES, "Permission denied"), True),
    (RuntimeError("a bug in the code that writes"), False),   # not a storage failure: not disguised as one
])
def test_atomic_path_names_write_failures_only(tmp_path, error, named):
    from pseudosl.experiments.runs import atomic_path
    target = tmp_path / "f.bin"
    target.write_bytes(b"complete")
    with pytest.raises(StorageError if named else RuntimeError) as e:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise error
    assert (f"could not write {target}" in str(e.value)) == named
    assert target.read_bytes() == b"complete" and list(tmp_path.iterdir()) == [target]
    assert issubclass(StorageError, OSError) and issubclass(RunFolderError, ValueError)


# -- worker processes ------------------------------------------------------------------------------------------
PARENT = """
import os, time
from pseudosl.experiments.parallel import worker_pool

if __name__ == "__main__":
    pool = worker_pool(2)
    pids = {pool.submit(os.getpid).result() for _ in range(8)}
    futures = [pool.submit(time.sleep, 300) for _ in range(2)]
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()  # a zombie has ended
    except FileNotFoundError:
        return False


POLLING_PARENT = """
import multiprocessing as mp, os, time
from concurrent.futures import ProcessPoolExecutor
from pseudosl.experiments import runs

def init(pid):  # as where the kernel has no parent-death signal: the polling thread alone
    runs._set_death_signal = lambda sig: False
    runs.watch_parent(pid)

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2, mp_context=mp.get_context("spawn"), initializer=init, initargs=(os.getpid(),))
    pids = {pool.submit(os.getpid).result() for _ in range(8)}
    futures = [pool.submit(time.sleep, 300) for _ in range(2)]
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(300)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("how", ["kernel", "polling"])
def test_workers_end_when_their_parent_is_killed(tmp_path, how):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    script = tmp_path / "parent.py"  # spawned workers import the script's functions from its file
    script.write_text(PARENT if how == "kernel" else POLLING_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert workers and all(_alive(p) for p in workers)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.time() + 15
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers), "workers outlived their killed parent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_are_killed_by_the_kernel_when_their_parent_dies():
    """Not polled: the kernel sends SIGKILL to every worker the moment its parent ends (README: within a second)."""
    from pseudosl.experiments.parallel import worker_pool
    from pseudosl.experiments.runs import death_signal
    with worker_pool(2) as pool:
        assert {pool.submit(death_signal).result() for _ in range(4)} == {signal.SIGKILL}


def test_a_worker_whose_parent_died_writes_no_file(tmp_path, monkeypatch):
    from pseudosl.experiments import runs
    ended = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                               text=True).stdout)
    target = tmp_path / "convnet-seed0" / "checkpoint.pt"
    target.parent.mkdir()
    for parent in (ended, os.getppid() + 1):  # a parent that has ended; any process but this one's parent
        monkeypatch.setattr(runs, "_parent", parent)
        assert not runs.parent_alive()
        for write in (lambda: save_checkpoint({"epoch": 1}, target),
                      lambda: runs.write_manifest(tmp_path, "sudoku", SudokuExperiment.config_class())):
            with pytest.raises(RunFolderError, match=f"not written: the process that started this worker \\(pid "
                                                     f"{parent}\\) has ended"):
                write()
        assert sorted(p.name for p in tmp_path.rglob("*")) == ["convnet-seed0"]  # nor a temporary file
    monkeypatch.setattr(runs, "_parent", os.getppid())  # the parent is alive: written
    save_checkpoint({"epoch": 1}, target)
    assert target.is_file()


# -- what this machine cannot give: threads, worker processes, memory --------------------------------------------
@pytest.mark.parametrize("cpus, threads, jobs, message", [
    (1, 2, 1, "--threads 2: must lie in 1..1 (this machine's CPUs)"),
    (4, 5, 1, "--threads 5: must lie in 1..4"),
    (16, 5000, 1, "--threads 5000: must lie in 1..16"),
    (16, 0, 1, "--threads 0: must lie in 1..16"),
    (1, None, 3, "--jobs 3: must lie in 1..2 (two worker processes per CPU, 1 CPUs)"),
    (4, 1, 9, "--jobs 9: must lie in 1..8"),
    (4, 3, 3, "--jobs 3 x --threads 3 = 9 threads: must be at most 8"),
    (16, 2, 17, "--jobs 17 x --threads 2 = 34 threads: must be at most 32"),
])
def test_threads_and_jobs_are_bounded_by_the_cpus(cpus, threads, jobs, message):
    from pseudosl.experiments.config import ConfigError, check_parallelism
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_parallelism(threads, jobs, cpus)
    check_parallelism(min(threads or 1, cpus), 1, cpus)  # the bounds themselves are allowed
    check_parallelism(1, 2 * cpus, cpus)
    check_parallelism(None, 2 * cpus, cpus)
    check_parallelism(min(2, cpus), 2 * cpus // min(2, cpus), cpus)  # jobs x threads = 2 cpus


def test_too_many_threads_is_one_line_before_any_work(tmp_path, capsys):
    from pseudosl.experiments.config import usable_cpus
    r = cli("sudoku", "train", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o"), *TINY,
            "--threads", "5000")  # torch.set_num_threads(5000) was a segmentation fault
    assert f"--threads 5000: must lie in 1..{usable_cpus()}" in one_line_error(r)
    for flags, message in ((["--threads", str(usable_cpus() + 1)], f"--threads {usable_cpus() + 1}: must lie"),
                           (["--jobs", "100000"], "--jobs 100000: must lie in 1.."),
                           (["--jobs", str(2 * usable_cpus()), "--threads", str(usable_cpus())], "threads: must be at most")):
        err = refused(capsys, ["sudoku", "train", "--quick", "--data-dir", str(tmp_path / "d"), "--out",
                               str(tmp_path / "o"), *TINY, *flags])
        assert message in err
    assert not (tmp_path / "d").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("content, reason", [
    (bytes(range(256)), "not UTF-8 text (byte 128: invalid start byte)"),
    ("lr = 0.001\n".encode("utf-16"), "not UTF-8 text (byte 0: invalid start byte)"),
    (b"lr = 0.001\nnote = '\xe9t\xe9'\n", "not UTF-8 text (byte 19: invalid continuation byte)"),
    (b"lr = = 1\n", "invalid TOML (Invalid value (at line 1, column 6))"),
    (b"\x00\x00\x00", "invalid TOML"),
    (None, "a folder, not a file"),
])
def test_unreadable_configs_name_the_file(tmp_path, capsys, content, reason):
    path = tmp_path / "cfg.toml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    err = refused(capsys, ["sudoku", "train", "--config", str(path), "--out", str(tmp_path / "o")])
    assert f"--config {path}: {reason}" in err and "pass a" in err and "TOML file of config fields" in err


def test_data_sets_that_cannot_fit_in_memory_are_refused_by_size(tmp_path, capsys, monkeypatch):
    from pseudosl.experiments import config
    from pseudosl.experiments.config import ConfigError
    from pseudosl.experiments.sudoku.config import SudokuConfig
    from pseudosl.experiments.warcraft.config import WarcraftConfig
    gib = 1 << 30
    big = SudokuConfig(n_train=3_000_000, size=9, models=["convnet"], seeds=[0])  # 9.1 GiB to make, 3.7 held
    for available, fits in ((16 * gib, True), (8 * gib, False)):
        monkeypatch.setattr(config, "free_bytes", lambda device: available)
        if fits:
            big.preflight()
        else:
            with pytest.raises(ConfigError, match=r"n_train \+ n_test \+ n_val = 3,001,000 generated 9x9 puzzles need "
                                                  r"about 9\.1 GiB of memory, but this machine has 8\.0 GiB available"):
                big.preflight()
    two = SudokuConfig(n_train=3_000_000, size=9, models=["convnet"], seeds=[0, 1], jobs=2)
    monkeypatch.setattr(config, "free_bytes", lambda device: 16 * gib)
    with pytest.raises(ConfigError, match="then held by 2 worker processes too"):  # 9.1 + 2 x 3.7 GiB
        two.preflight()
    monkeypatch.setattr(config, "free_bytes", lambda device: 20 * gib)
    two.preflight()
    maps = WarcraftConfig(n_train=1_000_000, grid=12)  # 80.6 GiB to make
    for available, fits in ((128 * gib, True), (64 * gib, False)):
        monkeypatch.setattr(config, "free_bytes", lambda device: available)
        if fits:
            maps.preflight()
        else:
            with pytest.raises(ConfigError, match="n_train \\+ n_val \\+ n_test = 1,002,000 generated 12x12 maps need"):
                maps.preflight()
    monkeypatch.undo()
    err = refused(capsys, ["sudoku", "train", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "o"),
                           *TINY, "--n-train", str(10**12)])  # on any machine
    assert "n_train + n_test + n_val = 1,000,000,000,008 generated 4x4 puzzles" in err and "need about" in err
    assert not (tmp_path / "d").exists() and not (tmp_path / "o").exists()
