"""On-disk cache of compiled circuits and automata, keyed by the SHA-256 of their normalised inputs.

``cached_circuit(key_parts, build)`` returns the circuit saved under
``sha256(FORMAT_VERSION, pseudosl version, key_parts)`` in :func:`cache_dir`, or calls
``build()`` and saves its result there (written to a temporary file, then renamed, so
readers never see a half-written file); ``cached_arrays`` does the same for named arrays (an automaton).
Every entry is a file of the one checksummed format (:mod:`pseudosl.logic.dagfile`) labelled with its key, both
verified on load, and a circuit is checked like any loaded circuit (:meth:`~pseudosl.logic.dag.Dag.load`): a
truncated, corrupted or tampered entry, or one holding the content of another key, is rebuilt and replaced with a
warning; an unwritable cache directory only warns.

Example:
    >>> import pseudosl
    >>> key = ("my-xor", 2)
    >>> c = cached_circuit(key, lambda: pseudosl.compile_cnf([[1, 2], [-1, -2]], cache=False))
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from .circuit import Circuit
from .logic import dagfile
from .logic.checks import check_bool
from .logic.dag import Dag

__all__ = ["cache_dir", "cache_key", "cached_arrays", "cached_circuit", "FORMAT_VERSION"]

FORMAT_VERSION = 2  # bump when the circuit construction or the saved format changes (2: key and checksum stored)


def cache_dir() -> Path:
    """The cache folder: ``$PSEUDOSL_CACHE`` if set, else ``~/.cache/pseudosl`` (created on first write)."""
    env = os.environ.get("PSEUDOSL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pseudosl"


def cache_key(key_parts: object) -> str:
    """Hex SHA-256 of an unambiguous encoding of ``key_parts`` (bytes, str, numbers, None,
    numpy arrays, and (nested) sequences of those), prefixed by the format and library versions."""
    from ._version import __version__

    h = hashlib.sha256()
    _feed(h, ("pseudosl-circuit", FORMAT_VERSION, __version__))
    _feed(h, key_parts)
    return h.hexdigest()


def cached_circuit(key_parts: object, build: Callable[[], Circuit], *, enabled: bool = True) -> Circuit:
    """Load the circuit cached under ``key_parts`` or build, save and return it.

    Args:
        key_parts: everything that determines the circuit (normalised content and options).
        build: zero-argument function returning a :class:`Circuit` (called on a cache miss).
        enabled: ``False`` skips the cache entirely and just calls ``build()``.
    """
    if not check_bool("cache", enabled):  # the callers' cache= switch
        return _checked(build())
    key = cache_key(key_parts)
    path = cache_dir() / f"{key}.npz"
    if path.is_file():
        try:
            return Circuit(Dag.load(path, label=key, max_vars=None))  # its size was allowed when it was built
        except (OSError, ValueError) as e:
            warnings.warn(f"ignoring an unreadable or mismatching cached circuit {path} ({e}); rebuilding it")
    circuit = _checked(build())
    _write_entry(path, lambda tmp: circuit.dag.save(tmp, label=key))
    return circuit


def cached_arrays(key_parts: object, build: Callable[[], dict[str, np.ndarray]], *,
                  enabled: bool = True) -> dict[str, np.ndarray]:
    """Load the named arrays cached under ``key_parts`` or build, save and return them (an automaton, say).

    Saved like a circuit (temporary file, then renamed, :mod:`pseudosl.logic.dagfile`), labelled with the key and
    checksummed, both checked on load: a mismatching or unreadable entry is rebuilt and replaced with a warning.
    """
    if not check_bool("cache", enabled):  # the callers' cache= switch
        return build()
    key = cache_key(("arrays", key_parts))
    path = cache_dir() / f"{key}.npz"
    if path.is_file():
        try:
            arrays, checksummed = dagfile.read_arrays(path, key, what="cache entry")
            if checksummed:
                return arrays
            warnings.warn(f"ignoring the cache entry {path}, which has no checksum; rebuilding it")
        except (OSError, ValueError) as e:
            warnings.warn(f"ignoring an unreadable or mismatching cache entry {path} ({e}); rebuilding it")
    arrays = {name: np.asarray(a) for name, a in build().items()}
    _write_entry(path, lambda tmp: dagfile.write_arrays(tmp, arrays, key))
    return arrays


def _write_entry(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp)`` a cache entry to a temporary ``.npz`` beside ``path``, then rename it into place (whole or not
    at all); a cache that cannot be written is a warning, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")  # .npz: savez adds none
        os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; cache entries are ordinary files
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as e:
        warnings.warn(f"could not write the cache at {path.parent} ({e}); "
                      f"set PSEUDOSL_CACHE to a writable folder or pass cache=False")


def _checked(circuit: object) -> Circuit:
    if not isinstance(circuit, Circuit):
        raise TypeError(f"build() must return a pseudosl.Circuit, got {type(circuit).__name__}")
    return circuit


def _feed(h, x: object) -> None:
    """Type-tagged, length-prefixed encoding: distinct structures never collide."""
    if isinstance(x, bytes):
        h.update(b"b%d:" % len(x) + x)
    elif isinstance(x, str):
        data = x.encode()
        h.update(b"s%d:" % len(data) + data)
    elif x is None or isinstance(x, (bool, int, float, np.integer, np.floating)):
        h.update(b"n" + repr(x.item() if isinstance(x, np.generic) else x).encode() + b";")
    elif isinstance(x, np.ndarray):
        data = np.ascontiguousarray(x).tobytes()
        h.update(f"a{x.dtype.str}{x.shape}".encode() + b"%d:" % len(data) + data)
    elif isinstance(x, (list, tuple)):
        h.update(b"l%d:" % len(x))
        for item in x:
            _feed(h, item)
    elif isinstance(x, (set, frozenset)):
        _feed(h, sorted(x))
    else:
        raise TypeError(f"cannot use {type(x).__name__} {x!r} in a cache key; "
                        f"use bytes, str, numbers, numpy arrays or sequences of them")
