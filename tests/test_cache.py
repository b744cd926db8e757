"""The on-disk cache (pseudosl.cache): entries of the one checksummed format (pseudosl.logic.dagfile), rebuilt
with a warning when truncated, tampered or another key's, and never a file left open."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from pseudosl import compile_cnf
from pseudosl.cache import cached_arrays
from pseudosl.logic import dagfile


def _rebuilt_without_open_files(call, match: str):
    """``call()`` warns ``match`` and no file object is left for the garbage collector to close."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call()
        gc.collect()
    assert any(match in str(w.message) for w in seen), [str(w.message) for w in seen]
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)], [str(w.message) for w in seen]
    return result


@pytest.mark.parametrize("cut", [10, 100, 0.5])
def test_a_truncated_entry_is_rebuilt_and_its_file_closed(tmp_path, monkeypatch, cut):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    arrays = {"a": np.arange(5), "b": np.eye(2)}
    cached_arrays(("k", 1), lambda: arrays)
    compile_cnf([[1, 2], [-1, -2]])
    for entry in tmp_path.glob("*.npz"):
        data = entry.read_bytes()
        entry.write_bytes(data[:int(cut * len(data)) if isinstance(cut, float) else cut])
    again = _rebuilt_without_open_files(lambda: cached_arrays(("k", 1), lambda: arrays), "rebuilding")
    assert again.keys() == arrays.keys() and all(np.array_equal(again[k], arrays[k]) for k in arrays)
    _rebuilt_without_open_files(lambda: compile_cnf([[1, 2], [-1, -2]]), "rebuilding")
    assert np.array_equal(cached_arrays(("k", 1), lambda: {})["a"], arrays["a"])  # rebuilt and replaced


def test_array_entries_are_the_circuit_file_format_labelled_with_their_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path))
    cached_arrays(("k", 1), lambda: {"x": np.arange(3)})
    cached_arrays(("k", 2), lambda: {"x": np.arange(4)})
    first, second = sorted(tmp_path.glob("*.npz"), key=lambda p: p.stat().st_mtime_ns)
    arrays, checksummed = dagfile.read_arrays(first, first.stem)
    assert checksummed and arrays["x"].tolist() == [0, 1, 2]
    second.write_bytes(first.read_bytes())  # a valid entry under another key: not taken for this key
    got = _rebuilt_without_open_files(lambda: cached_arrays(("k", 2), lambda: {"x": np.arange(4)}), "saved as")
    assert got["x"].tolist() == [0, 1, 2, 3]
    np.savez(second, x=np.arange(9))  # no label, no checksum: not an entry the cache wrote
    got = _rebuilt_without_open_files(lambda: cached_arrays(("k", 2), lambda: {"x": np.arange(4)}), "rebuilding")
    assert got["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"arrays named \['label'\] would be overwritten"):
        cached_arrays(("k", 3), lambda: {"label": np.arange(2)})
