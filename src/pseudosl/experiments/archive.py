"""Carry an unfinished table from one machine to the next: its run folder packed into a few files of at
most 16 MB, unpacked on the next machine, resumed exactly (docs/gpu.md).

GPU time comes in short slots on machines that start empty and send back only a few files, so a
table that outlasts a slot travels as an archive: every file of the run folder (checkpoints, run.json,
results, figures) and the logs given, as one gzip'd tar cut into parts ``<name>.tgz.000``, ``.001``, ...
of ``part_bytes`` each, described by ``<name>.json`` (each part's size and SHA-256, each run's epoch).

Two exact reductions of the checkpoints (Adam keeps two more copies of the weights):

* a **finished** run (its epochs done, or stopped early) keeps only the weights of its selected
  checkpoint (``best_model`` if a validation split chose one, else ``model``) and its history: resuming
  it only evaluates those weights, so its results are the same; it can no longer train on (``--resume``
  with more epochs refuses it by name);
* an unfinished run whose best checkpoint is its last one stores those weights once; unpacking copies
  them back, so the unpacked checkpoint holds the same tensors as the packed one.

Usage (``scripts/gpu.sh`` runs these)::

    python -m pseudosl.experiments.archive pack runs/gpu-table1-paper runs/archive --extra runs/gpu-table1.log
    python -m pseudosl.experiments.archive status runs/archive/gpu-table1-paper.json
    python -m pseudosl.experiments.archive unpack runs/archive/gpu-table1-paper.json runs/gpu-table1-paper
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Sequence

import torch

from ..errors import RunFolderError, StorageError, user_message
from .checkpoints import (checkpoint_bytes, checkpoint_from_bytes, has_checksum, load_checkpoint, sha256_file,
                          tested_weights)
from .runs import LOCK, TMP_PREFIX, atomic_path, run_dirs

__all__ = ["pack", "unpack", "missing_parts", "PART_BYTES"]

PART_BYTES = 16_000_000  # under 16 MiB: the largest file a GPU machine sends back
FORMAT = 1


class _Parts(io.RawIOBase):
    """A write-only stream cut into files ``<dest>/<name>.tgz.NNN`` of at most ``size`` bytes."""

    def __init__(self, dest: Path, name: str, size: int) -> None:
        self.dest, self.name, self.size = dest, name, size
        self.parts: list[dict] = []
        self._file = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            if self._file is None or self._file.tell() == self.size:
                self._next()
            take = min(len(view), self.size - self._file.tell())
            self._file.write(view[:take])
            self._hash.update(view[:take])
            view = view[take:]
        return len(data)

    def _next(self) -> None:
        self._finish()
        path = self.dest / f"{self.name}.tgz.{len(self.parts):03d}"
        self._file, self._hash = open(path, "wb"), hashlib.sha256()
        self.parts.append({"file": path.name})

    def _finish(self) -> None:
        if self._file is not None:
            self.parts[-1].update(bytes=self._file.tell(), sha256=self._hash.hexdigest())
            self._file.close()
            self._file = None

    def close(self) -> None:
        self._finish()
        super().close()


def _packed_checkpoint(path: Path) -> tuple[bytes, dict]:
    """The checkpoint as stored in the archive (reduced where that stays exact) and a line about it."""
    ckpt = load_checkpoint(path)  # its SHA-256 checked: a damaged checkpoint is not carried on
    finished = bool(ckpt.get("stopped")) or ckpt["epoch"] >= ckpt["config"]["epochs"]
    best = ckpt.get("best_model")
    if finished and ckpt["optimizer"] is not None:  # only its selected weights are ever used again
        ckpt.update(model=tested_weights(ckpt), best_model=None, optimizer=None,
                    packed="finished")
    elif best is not None and best.keys() == ckpt["model"].keys() and all(
            torch.equal(best[k], ckpt["model"][k]) for k in best):
        ckpt.update(best_model=None, packed="best_is_model")  # unpack copies the weights back
    data = checkpoint_bytes(ckpt)
    return data, {"epoch": ckpt["epoch"], "epochs": ckpt["config"]["epochs"], "finished": finished,
                  "bytes": len(data), "unpacked_bytes": path.stat().st_size}


def pack(run_dir: str | Path, dest: str | Path, extra: Sequence[str | Path] = (), name: str | None = None,
         part_bytes: int = PART_BYTES) -> dict:
    """Pack ``run_dir`` (and the files ``extra``) into ``dest/<name>.tgz.NNN`` and ``dest/<name>.json``; returns
    the manifest.  The lock and temporary files are left out; an earlier pack of ``name`` in ``dest`` is replaced."""
    run_dir, dest = Path(run_dir), Path(dest)
    name = name or run_dir.name
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: no run folder to pack")
    missing = [str(p) for p in extra if not Path(p).is_file()]
    if missing:
        raise RunFolderError(f"--extra: no such file {', '.join(missing)}")
    if part_bytes < 1024:
        raise ValueError(f"part_bytes = {part_bytes}: must be at least 1024")
    dest.mkdir(parents=True, exist_ok=True)
    for old in [*dest.glob(f"{name}.tgz.*"), dest / f"{name}.json"]:
        old.unlink(missing_ok=True)
    runs: dict[str, dict] = {}
    parts = _Parts(dest, name, part_bytes)
    try:
        checkpoints = set(run_dirs(run_dir).values())
        with tarfile.open(fileobj=parts, mode="w|gz") as tar:
            for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
                if path.name == LOCK or path.name.startswith(TMP_PREFIX):
                    continue
                arcname = "run/" + path.relative_to(run_dir).as_posix()
                if path in checkpoints:
                    data, runs[path.parent.name] = _packed_checkpoint(path)
                    info = tarfile.TarInfo(arcname)
                    info.size, info.mtime = len(data), int(path.stat().st_mtime)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.add(path, arcname=arcname, recursive=False)
            for path in map(Path, extra):
                tar.add(path, arcname="extra/" + path.name, recursive=False)
        parts.close()
    except Exception as e:  # a full disk, a damaged checkpoint: no parts of a half archive are left
        parts.close()
        for p in dest.glob(f"{name}.tgz.*"):
            p.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise StorageError(f"could not pack {run_dir} into {dest}: {e}; free space there") from None
        raise
    manifest = {"format": FORMAT, "name": name, "packed_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                "bytes": sum(p["bytes"] for p in parts.parts), "parts": parts.parts, "runs": runs}
    with atomic_path(dest / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=2))
    return manifest


def read_manifest(path: str | Path) -> dict:
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT or not manifest.get("parts"):
            raise ValueError(f"format {manifest.get('format')!r}, {len(manifest.get('parts') or [])} parts")
        return manifest
    except (OSError, ValueError, AttributeError) as e:
        raise RunFolderError(f"{path}: not an archive manifest written by pack ({e})") from None


def missing_parts(manifest_path: str | Path) -> list[str]:
    """The parts of the archive that are absent beside its manifest or differ from it (size, SHA-256)."""
    manifest_path = Path(manifest_path)
    bad = []
    for part in read_manifest(manifest_path)["parts"]:
        path = manifest_path.parent / part["file"]
        if not path.is_file() or path.stat().st_size != part["bytes"] or sha256_file(path) != part["sha256"]:
            bad.append(part["file"])
    return bad



class _Joined(io.RawIOBase):
    """The parts read back as one stream."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self._file = list(paths), None

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while True:
            if self._file is None:
                if not self.paths:
                    return 0
                self._file = open(self.paths.pop(0), "rb")
            n = self._file.readinto(buf)
            if n:
                return n
            self._file.close()
            self._file = None


def unpack(manifest_path: str | Path, run_dir: str | Path, extra_dir: str | Path | None = None) -> dict:
    """Unpack the archive of ``manifest_path`` into the empty (or new) folder ``run_dir``; ``extra`` files go to
    ``extra_dir`` (default: beside ``run_dir``).  Every part is checked against the manifest first."""
    manifest_path, run_dir = Path(manifest_path), Path(run_dir)
    manifest = read_manifest(manifest_path)
    bad = missing_parts(manifest_path)
    if bad:
        raise RunFolderError(f"{manifest_path}: parts missing or damaged beside it: {', '.join(bad)}; bring them "
                             f"from the machine that packed it (bash scripts/gpu.sh fetch)")
    if run_dirs(run_dir):
        raise RunFolderError(f"{run_dir} already holds runs; unpack into a new folder (its runs may be newer)")
    extra_dir = Path(extra_dir) if extra_dir is not None else run_dir.parent
    stream = io.BufferedReader(_Joined([manifest_path.parent / p["file"] for p in manifest["parts"]]), 1 << 20)
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        for member in tar:
            root, _, rel = member.name.partition("/")
            if not member.isfile() or root not in ("run", "extra") or not rel or ".." in Path(rel).parts \
                    or Path(rel).is_absolute():
                raise RunFolderError(f"{manifest_path}: unexpected entry {member.name!r} in the archive")
            target = (run_dir if root == "run" else extra_dir) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()
            if target.name == "checkpoint.pt":
                data = _unpacked_checkpoint(data, f"{manifest_path}: {member.name}")
            with atomic_path(target) as tmp:
                tmp.write_bytes(data)
    return manifest


def _unpacked_checkpoint(data: bytes, where: str) -> bytes:
    """The checkpoint file of a packed one (its SHA-256 checked); it has a checksum iff it had one when packed."""
    ckpt = checkpoint_from_bytes(data, where)
    if ckpt.get("packed") != "best_is_model":
        return data
    del ckpt["packed"]
    ckpt["best_model"] = {k: v.clone() for k, v in ckpt["model"].items()}
    return checkpoint_bytes(ckpt, checksum=has_checksum(data))


def _describe(manifest: dict) -> str:
    runs = manifest["runs"]
    done = sum(r["finished"] for r in runs.values())
    return (f"{manifest['name']}: {len(runs)} runs ({done} finished), {manifest['bytes'] / 2**20:.1f} MiB in "
            f"{len(manifest['parts'])} part(s); " + ", ".join(f"{k} {r['epoch']}/{r['epochs']}"
                                                              for k, r in sorted(runs.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pseudosl.experiments.archive",
                                     description="Pack a run folder into parts of at most 16 MB, or unpack it.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="pack RUN_DIR into DEST/<name>.tgz.NNN and DEST/<name>.json")
    p.add_argument("run_dir", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--extra", type=Path, nargs="*", default=[], help="further files (logs) to carry along")
    p.add_argument("--name", help="archive name (default: the run folder's name)")
    p.add_argument("--part-bytes", type=int, default=PART_BYTES)
    s = sub.add_parser("status", help="which parts of an archive are here")
    s.add_argument("manifest", type=Path)
    u = sub.add_parser("unpack", help="unpack the archive of MANIFEST into RUN_DIR")
    u.add_argument("manifest", type=Path)
    u.add_argument("run_dir", type=Path)
    u.add_argument("--extra-to", type=Path, help="folder for the extra files (default: beside RUN_DIR)")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            print(_describe(pack(args.run_dir, args.dest, args.extra, args.name, args.part_bytes)))
        elif args.command == "status":
            bad = missing_parts(args.manifest)
            print(_describe(read_manifest(args.manifest)) + (f"; missing: {' '.join(bad)}" if bad else "; complete"))
            return 1 if bad else 0
        else:
            print("unpacked " + _describe(unpack(args.manifest, args.run_dir, args.extra_to)))
    except Exception as e:
        message = user_message(e)
        if message is None:
            raise
        parser.exit(2, f"{parser.prog}: error: {message}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
