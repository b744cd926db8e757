"""Run folders that cannot be mixed up or lost: one writer at a time, checkpoints that belong where they
lie, files written whole or not at all.

* :func:`run_folder`: where a config's runs go, ``runs/<experiment>/<preset>-<content key>`` unless ``cfg.out``.
* :func:`check_out_folder`: ``--out`` is a folder this process can create and write, checked before any work.
* :func:`run_lock`: ``<out>/.lock`` is held (``flock``) while a run writes the folder.  A second run into the
  same folder is refused at once, naming the holder; the kernel drops the lock when its process ends,
  however it ends (``kill -9`` too), so the lock of a killed run is taken over by the next one.
* :func:`write_manifest` / :func:`check_manifest`: ``<out>/run.json`` names the experiment and the config key
  of the folder's runs; a run of another config, or a checkpoint copied in from one, is refused by name.
* :func:`check_identity`: a checkpoint holds the model and seed its folder ``<model>-seed<seed>`` names.
* :func:`atomic_path`: write to a temporary name, rename when complete; a failed write (disk full,
  permissions) removes the temporary file and raises a :class:`~pseudosl.errors.StorageError` naming the path.
* :func:`watch_parent`: a worker process ends when the process that started it is gone (Linux: killed by the
  kernel at once, ``PR_SET_PDEATHSIG``; elsewhere within a second), and writes no file after that
  (:func:`atomic_path` checks :func:`parent_alive` before it puts a file in place).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from ..errors import PseudoslError, RunFolderError, StorageError

__all__ = ["run_folder", "check_out_folder", "run_lock", "write_manifest", "check_manifest", "check_identity", "run_dirs",
           "atomic_path", "watch_parent", "parent_alive", "death_signal", "LOCK", "MANIFEST", "TMP_PREFIX"]

LOCK = ".lock"
MANIFEST = "run.json"
TMP_PREFIX = ".tmp-"
_RUN_DIR = re.compile(r"^(?P<model>.+)-seed(?P<seed>\d+)$")


def run_folder(exp: Any, cfg: Any) -> Path:
    """``cfg.out``, or ``runs/<experiment>/<preset>-<content key>`` (the key hashes every config field that changes
    what is computed, so two presets never share a folder) for experiment ``exp`` and its config ``cfg``."""
    return Path(cfg.out) if cfg.out else Path("runs") / exp.name / f"{cfg.preset}-{cfg.content_key()}"


def check_out_folder(out: Path) -> None:
    """Refuse an ``out`` that is a file or lies in a folder that cannot be written (names the path and the fix)."""
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out}: is a file, not a folder; pass a folder (it is created if missing)")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise RunFolderError(f"--out {out}: {parent} is a file, not a folder; pass another --out")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StorageError(f"--out {out}: cannot write in {parent} (permission denied); pass a writable folder")


def make_folder(out: Path) -> None:
    """``mkdir -p out``, an ``OSError`` (read-only file system, permissions, disk full) named."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"--out {out}: cannot create the folder ({e.strerror or e}); pass a writable folder") from None


@contextmanager
def run_lock(out: Path) -> Iterator[str]:
    """Hold ``out/.lock`` for the block; yields what a killed earlier holder left in the file ('' if none).

    Raises :class:`RunFolderError` at once if another process holds it.  Temporary files of an earlier,
    interrupted run (``.tmp-*``) are removed once the lock is held.
    """
    import fcntl
    make_folder(out)
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageError(f"{path}: cannot create the run folder's lock ({e.strerror or e}); pass a writable --out") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise RunFolderError(f"{out} is in use by another run ({holder}); wait for it to end, or pass another "
                             f"--out") from None
    stale = os.read(fd, 300).decode("utf-8", "replace").strip()  # a holder that ended without releasing it
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}"
                  .encode(), 0)
    for tmp in [*out.glob(TMP_PREFIX + "*"), *out.glob(f"*/{TMP_PREFIX}*")]:
        with suppress(OSError):
            tmp.unlink()
    try:
        yield stale
    finally:
        with suppress(OSError):
            os.ftruncate(fd, 0)  # an empty lock file: the folder was released, not abandoned
        os.close(fd)


def run_dirs(out: Path) -> dict[str, Path]:
    """``<model>-seed<seed>`` -> checkpoint path, for every run with a checkpoint directly under ``out``."""
    return {p.parent.name: p for p in sorted(out.glob("*/checkpoint.pt")) if _RUN_DIR.match(p.parent.name)}


def check_identity(ckpt: dict, path: Path, name: str | None = None, seed: int | None = None) -> None:
    """The checkpoint at ``.../<model>-seed<seed>/checkpoint.pt`` holds that model and seed (and ``name``, ``seed``
    when given); a checkpoint copied into another run's folder is refused, naming both."""
    m = _RUN_DIR.match(path.parent.name)
    want_name = name if name is not None else (m["model"] if m else None)
    want_seed = seed if seed is not None else (int(m["seed"]) if m else None)
    if (want_name, want_seed) != (ckpt["model_name"], ckpt["seed"]):
        raise RunFolderError(f"{path}: holds model {ckpt['model_name']!r} seed {ckpt['seed']}, but its folder is "
                             f"{path.parent.name} (copied from another run?); move it to "
                             f"{ckpt['model_name']}-seed{ckpt['seed']}/ or delete it")


def write_manifest(out: Path, experiment: str, cfg: Any) -> None:
    """``out/run.json``: the experiment and config key every checkpoint in ``out`` must have."""
    info = {"experiment": experiment, "content_key": cfg.content_key(), "preset": cfg.preset, "config": cfg.to_dict()}
    with atomic_path(out / MANIFEST) as tmp:
        tmp.write_text(json.dumps(info, indent=2))


def read_manifest(out: Path) -> dict | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(info, dict) or not {"experiment", "content_key"} <= set(info):
            raise ValueError("missing experiment or content_key")
        return info
    except (OSError, ValueError) as e:
        raise RunFolderError(f"{path}: unreadable ({e}); delete it (the next run writes it again)") from None


def check_manifest(out: Path, experiment: str, content_key: str, what: str) -> None:
    """``what`` (a checkpoint or a run's config) has the experiment and config key of ``out/run.json``."""
    info = read_manifest(out)
    if info is None:
        return
    if (info["experiment"], info["content_key"]) != (experiment, content_key):
        raise RunFolderError(f"{what}: a {experiment} run of config {content_key}, but {out / MANIFEST} holds "
                             f"{info['experiment']} runs of config {info['content_key']} (preset "
                             f"{info.get('preset')!r}); use another --out for another config")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed onto ``path`` when the block ends (if it was
    written), so a reader never sees half a file.  On failure the temporary file is removed; a failed write becomes a :class:`StorageError`
    naming ``path`` and the free space left (torch reports a full disk as a ``RuntimeError``)."""
    tmp = path.with_name(TMP_PREFIX + path.name)
    try:
        yield tmp
        if tmp.exists():  # a writer may decide to write nothing (e.g. an experiment without an example figure)
            if not parent_alive():  # a worker of a killed run: the folder's lock is free, another run may own it
                raise RunFolderError(f"{path}: not written: the process that started this worker (pid {_parent}) "
                                     f"has ended, and its run folder may belong to another run now")
            os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        if isinstance(e, PseudoslError) or (isinstance(e, RuntimeError) and not _torch_write_error(e)):
            raise
        raise StorageError(f"could not write {path}: {_reason(e)}; {_free(path)}free space there or pass "
                           f"another --out (earlier complete files are kept)") from None
    finally:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)


def _torch_write_error(e: RuntimeError) -> bool:
    """torch.save's writer on a full disk: "[enforce fail at inline_container.cc:...] . unexpected pos 645760 vs
    645648" or "... PytorchStreamWriter failed writing file data/3: file write failed"."""
    return any(s in str(e) for s in ("inline_container", "PytorchStreamWriter", "file write failed"))


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__


def _free(path: Path) -> str:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.0f} MiB left on its disk; "
    except OSError:
        return ""


# -- worker processes ------------------------------------------------------------------------------
_parent: int | None = None  # in a worker process: the pid of the process that started it (watch_parent)
_PR_SET_PDEATHSIG, _PR_GET_PDEATHSIG = 1, 2  # linux/prctl.h


def watch_parent(parent_pid: int, interval: float = 0.2) -> None:
    """In a worker process (a pool's initializer): end it as soon as its parent ``parent_pid`` dies.

    A killed parent cannot stop its workers; without this they train on for minutes and write into a folder
    whose lock is free again.  On Linux the kernel kills the worker (``SIGKILL``) the moment its parent
    ends (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and as a second line, a thread polls ``os.getppid()``
    every ``interval`` seconds (the parent of an orphan is another process) and ends the worker with
    ``os._exit``.  Until then :func:`parent_alive` is checked before every file is put in place.
    """
    global _parent
    _parent = parent_pid
    _set_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the death signal was set
        os._exit(70)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(70)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def parent_alive() -> bool:
    """False in a worker process whose parent (:func:`watch_parent`) has ended; True everywhere else."""
    return _parent is None or os.getppid() == _parent


def _libc() -> Any:
    """The C library, as the symbols of this process (Linux: Python links it)."""
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _set_death_signal(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` on Linux; False where there is no such call (the polling thread remains)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def death_signal() -> int | None:
    """The signal this process receives when its parent ends (Linux; 0: none), ``None`` where it cannot be read."""
    import ctypes
    if not sys.platform.startswith("linux"):
        return None
    value = ctypes.c_int(0)
    try:
        ok = _libc().prctl(_PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return None
    return value.value if ok else None
