"""The one checksummed file format of the package: named arrays in a ``.npz`` file (no torch).

A file holds named arrays, a ``label`` and the SHA-256 of both (:func:`checksum`).  :func:`read_arrays` refuses,
naming the file, one that is unreadable, truncated, fails its checksum or holds another label (and always closes
it).  Its users: a circuit (:meth:`Dag.save <pseudosl.logic.dag.Dag.save>` writes the arrays of
:meth:`Dag.to_arrays <pseudosl.logic.dag.Dag.to_arrays>`, :meth:`Dag.load <pseudosl.logic.dag.Dag.load>` then
checks that they are a valid circuit) and every entry of the on-disk cache (:mod:`pseudosl.cache`: a circuit, or
the arrays of an automaton, labelled with their cache key).
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .errors import CircuitFormatError

__all__ = ["write_arrays", "read_arrays", "checksum", "npz_path", "saved_path"]


def write_arrays(path: str | Path, arrays: dict[str, np.ndarray], label: str = "") -> None:
    """Write ``arrays``, ``label`` and their SHA-256 checksum to ``path`` (an ``.npz`` file)."""
    if reserved := sorted({"label", "checksum"} & set(arrays)):
        raise ValueError(f"arrays named {reserved} would be overwritten by the file's own label and checksum; "
                         f"rename them")
    np.savez_compressed(path, **arrays, label=np.array(label), checksum=np.array(checksum(arrays, label)))


def read_arrays(path: str | Path, label: str | None = None, *, what: str = "circuit"
                ) -> tuple[dict[str, np.ndarray], bool]:
    """The arrays of a file written by :func:`write_arrays`, and whether it had a checksum (a file without one
    was made elsewhere); :class:`~pseudosl.logic.errors.CircuitFormatError` naming ``path`` (a saved ``what``) when
    it is unreadable, truncated, fails its checksum or holds another ``label`` (when one is asked for)."""
    try:
        # opened here, not by np.load: np.load leaves its own file open when the zip archive is truncated
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        raise CircuitFormatError(f"{path} is not a saved pseudosl {what} ({type(e).__name__}: {e}); "
                                 f"save circuits with Circuit.save, or delete the file to rebuild it") from None
    stored = str(arrays.pop("label", ""))
    sha = arrays.pop("checksum", None)
    if sha is not None and str(sha) != checksum(arrays, stored):
        raise CircuitFormatError(f"{path} fails its checksum: it was modified or corrupted after it was saved; "
                                 f"delete it (a cached {what} is then rebuilt)")
    if label is not None and stored != label:
        raise CircuitFormatError(f"{path} holds the {what} saved as {stored!r}, not {label!r}")
    return arrays, sha is not None


def checksum(arrays: dict[str, np.ndarray], label: str) -> str:
    """SHA-256 of ``label`` and the arrays (names, dtypes, shapes and bytes)."""
    h = hashlib.sha256(b"pseudosl-dag\0" + label.encode() + b"\0")
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def npz_path(path: str | Path) -> Path:
    """``path`` with the ``.npz`` suffix appended if missing (where :meth:`pseudosl.Circuit.save` writes)."""
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def saved_path(path: str | Path) -> Path:
    """The file a circuit was saved to: ``path``, or ``path`` with ``.npz`` appended (``FileNotFoundError`` if
    neither exists)."""
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".npz").exists():
        path = path.with_name(path.name + ".npz")
    if not path.exists():
        raise FileNotFoundError(f"no saved circuit at {path}")
    return path
