"""The inputs of a circuit's passes: log-probabilities ``x`` and ``allowed`` masks, checked and brought to
``(B, n, k)``.  Moved to :mod:`pseudosl.checks` (the one home of the shared argument checks); re-exported here.
"""

from __future__ import annotations

from .checks import apply_allowed, categorical, check_allowed, check_root, check_shape

__all__ = ["check_shape", "categorical", "check_allowed", "check_root", "apply_allowed"]
