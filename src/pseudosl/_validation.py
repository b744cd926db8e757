"""Moved to :mod:`pseudosl.checks` (the one home of the shared argument checks); re-exported here."""

from __future__ import annotations

from .checks import check_dense, check_device, check_ids, reads_values, require

__all__ = ["reads_values", "require", "check_dense", "check_device", "check_ids"]
