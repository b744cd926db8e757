"""Fixtures for the tests and the doctests of src/pseudosl."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """No test or doctest writes to the user's compile cache."""
    monkeypatch.setenv("PSEUDOSL_CACHE", str(tmp_path_factory.mktemp("cache")))
