"""Checkpoint files that say when they are damaged: written whole, with the SHA-256 of their bytes, and
checked against it before anything is read from them.

A checkpoint is what ``torch.save`` writes (a zip archive), followed by one line, the *trailer*::

    #pseudosl-checkpoint sha256=<64 hex digits of everything before this line>

written to a temporary name and renamed when complete (:func:`~pseudosl.experiments.runs.atomic_path`), so the
bytes and their digest can never be of two different saves.  ``torch.load`` still reads the file (it ignores
bytes after the archive).  :func:`load_checkpoint` recomputes the digest first: one flipped bit anywhere in
the file (a weight, the pickle, the digest itself) is a :class:`CheckpointError` naming the file, both digests
and the fix, before any weight is used, on ``--resume`` as on ``eval``.

A checkpoint written by pseudosl before checksums (a complete zip archive without the trailer) is accepted,
with a warning naming it: its bytes cannot be checked, and the next save of its run (``--resume``) adds the
trailer.  A file with neither trailer nor a complete archive at its end is refused as damaged.

:func:`check_continuable` (``--resume``: this run's model, seed and config, able to reach the epochs asked for) and
:func:`load_weights` (weights that fit the model) refuse the rest by name.
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from torch import nn

from ..errors import PseudoslError
from .config import ConfigError, RunConfig
from .runs import atomic_path, check_identity

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "checkpoint_bytes", "checkpoint_from_bytes",
           "has_checksum", "check_continuable", "load_weights", "tested_weights", "sha256_file", "KEYS"]

KEYS = frozenset({"config", "model_name", "seed", "epoch", "model", "optimizer", "rng", "history"})
_PREFIX = b"\n#pseudosl-checkpoint sha256="
_TRAILER = re.compile(rb"\n#pseudosl-checkpoint sha256=([0-9a-f]{64})\n\Z")
_TRAILER_BYTES = len(_PREFIX) + 64 + 1
_ZIP_END = b"PK\x05\x06"  # the end-of-central-directory record closing every zip archive (22 bytes, no comment)


class CheckpointError(PseudoslError, ValueError):
    """A checkpoint is missing, damaged, unreadable, from another experiment, or cannot continue as asked."""


def _trailer(digest: str) -> bytes:
    return _PREFIX + digest.encode() + b"\n"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(ckpt: dict, path: Path) -> None:
    """Write ``ckpt`` to ``path`` whole or not at all, followed by the SHA-256 of its bytes.

    The digest is taken from the bytes read back from the temporary file, so it covers what was written;
    a failed write (a full disk) is a :class:`~pseudosl.errors.StorageError` naming ``path``."""
    with atomic_path(path) as tmp:
        torch.save(ckpt, tmp)
        digest = sha256_file(tmp)
        with open(tmp, "ab") as f:
            f.write(_trailer(digest))


def checkpoint_bytes(ckpt: dict, checksum: bool = True) -> bytes:
    """The bytes :func:`save_checkpoint` writes for ``ckpt`` (``checksum=False``: without the trailer)."""
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    data = buf.getvalue()
    return data + _trailer(hashlib.sha256(data).hexdigest()) if checksum else data


def has_checksum(data: bytes) -> bool:
    """Whether ``data`` ends with a checksum trailer (intact or not)."""
    return data[-_TRAILER_BYTES:].startswith(_PREFIX)


def _verified_payload(data: bytes, where: str) -> bytes:
    """The archive bytes of a checkpoint, its digest checked (a legacy file without one: a warning)."""
    m = _TRAILER.search(data[-_TRAILER_BYTES:])
    if m is not None:
        payload, expected = data[:-_TRAILER_BYTES], m.group(1).decode()
        found = hashlib.sha256(payload).hexdigest()
        if found != expected:
            raise CheckpointError(f"{where}: damaged checkpoint: its bytes have SHA-256 {found}, but it was saved with "
                                  f"{expected} (the file changed on disk: a flipped bit, a partial copy); delete it "
                                  f"and train that run again (without --resume), or restore it from a copy")
        return data
    if len(data) >= 22 and data[-22:-18] == _ZIP_END:
        warnings.warn(f"{where}: a checkpoint written without a checksum (by an older pseudosl): used unchecked; "
                      f"its next save (--resume) adds one", stacklevel=3)
        return data
    how = ("its checksum line is damaged" if _PREFIX[2:12] in data[-_TRAILER_BYTES:]
           else "it ends neither with a checksum line nor with a complete archive (truncated or overwritten?)")
    raise CheckpointError(f"{where}: damaged checkpoint: {how}; delete it and train that run again (without "
                          f"--resume), or restore it from a copy")


def checkpoint_from_bytes(data: bytes, where: str) -> Any:
    """The object saved in ``data`` (a checkpoint file's bytes), its digest checked first."""
    payload = _verified_payload(data, where)
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as e:  # foreign files raise many types (OSError, RuntimeError, pickle errors)
        raise CheckpointError(f"{where}: unreadable checkpoint ({type(e).__name__}: {e}); "
                              f"delete it or train again with --overwrite") from None


def load_checkpoint(path: Path, experiment: str | None = None) -> dict:
    """A checkpoint written by :func:`save_checkpoint`, its SHA-256 checked before it is unpickled, or a
    :class:`CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: unreadable checkpoint ({e.strerror or e}); check its permissions") from None
    ckpt = checkpoint_from_bytes(data, str(path))
    if not isinstance(ckpt, dict) or not KEYS <= set(ckpt):
        missing = sorted(KEYS - set(ckpt if isinstance(ckpt, dict) else {}))
        raise CheckpointError(f"{path}: not a pseudosl checkpoint (missing {missing})")
    if experiment is not None and ckpt.get("experiment", experiment) != experiment:
        raise CheckpointError(f"{path}: a {ckpt['experiment']} checkpoint, not {experiment}")
    return ckpt


# -- what a checkpoint must be to continue or to load into a model -----------------------------------
def _check_resumable(saved: dict, cfg: RunConfig, path: Path) -> None:
    diff = {k: (saved.get(k), v) for k, v in cfg.to_dict().items() if k not in cfg.run_free_fields() and saved.get(k) != v}
    if diff:
        raise ConfigError(f"--resume: {path} was trained with a different config: "
                          + ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
                          + "; use the same settings, another --out, or --overwrite")


def check_continuable(ckpt: dict, cfg: RunConfig, name: str, seed: int, path: Path) -> None:
    """``--resume``: the checkpoint is this run's (model, seed, config) and can reach ``cfg.epochs``."""
    check_identity(ckpt, path, name, seed)
    _check_resumable(ckpt["config"], cfg, path)
    done = ckpt["epoch"]
    if done > cfg.epochs:
        raise CheckpointError(f"--resume --epochs {cfg.epochs}: {path} has already trained {done} epochs, and a run "
                              f"cannot go back; pass --epochs {done} (or more) to resume it, or --overwrite to train "
                              f"{cfg.epochs} epochs afresh")
    if ckpt["optimizer"] is None and done < cfg.epochs and not ckpt.get("stopped"):
        raise CheckpointError(f"--resume --epochs {cfg.epochs}: {path} was packed as finished after {done} epochs "
                              f"(its optimizer state was dropped), so it cannot train on; pass --epochs {done}")


def tested_weights(ckpt: dict) -> dict:
    """The weights a run's table tests: the checkpoint of the best validation score (``best_model``), or the model
    at the last epoch when no validation chose one or the run's config says ``test_checkpoint = "last"``."""
    best = ckpt.get("best_model")
    last = ckpt["config"].get("test_checkpoint", "best_validation") == "last"
    return ckpt["model"] if best is None or last else best


def load_weights(model: nn.Module, weights: dict, path: Path, name: str) -> None:
    """``model.load_state_dict(weights)``, or a :class:`CheckpointError` naming ``path`` when they do not fit."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:  # missing / unexpected keys, shape mismatches
        raise CheckpointError(f"{path}: its weights do not fit model {name!r} ({str(e).splitlines()[0][:160]}); "
                              f"is it another model's checkpoint?") from None
