"""Which row of the previous ``generate`` step each row continues.

Beam search reorders and copies rows between calls of a logits processor: row ``i`` of a call holds some row
``p(i)`` of the previous call plus one token, and ``generate`` does not say which.  A processor that keeps a
state per row (an automaton state) must carry it along ``p``; a call whose rows continue no row of the last one
is another ``generate`` call.

:class:`RowLineage` keeps the last call's rows.  A new call's rows, less their last token, are first compared with
them as they are (greedy search and sampling do not reorder: one comparison).  Otherwise each row is matched by a
fingerprint of its tokens (two polynomial hashes modulo primes below ``2^31``: ``O(R L)`` for ``R`` rows of
``L`` tokens, then a sort of ``R`` keys), and every match is checked token by token; a row whose fingerprint
matched a different row (a collision, ``< L^2 / 2^62`` per pair) is looked up by comparing it with every row.
So each call costs ``O(R L + R log R)``: linear in the rows, batch items and beams alike (1,024 rows of 1,000
tokens take a few milliseconds on one CPU thread).  On a GPU the answer costs one synchronisation per call.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["RowLineage", "fingerprints"]

PRIMES = (2_147_483_647, 2_147_483_629)
BASES = (1_000_003, 911_382_323)
_powers: dict[torch.device, Tensor] = {}  # (2, >= L): BASES[h]^t mod PRIMES[h], grown by doubling


def powers(length: int, device: torch.device) -> Tensor:
    """``(2, length)`` int64: the powers of the two bases modulo their primes."""
    pw = _powers.get(device)
    if pw is None or pw.shape[1] < length:
        pw = torch.ones(2, 1, dtype=torch.long)
        primes, bases = torch.tensor(PRIMES)[:, None], torch.tensor(BASES)[:, None]
        while pw.shape[1] < length:  # [b^0 .. b^(m-1)] then b^m times the same
            step = pw[:, -1:] * bases % primes
            pw = torch.cat([pw, pw * step % primes], 1)
        pw = _powers[device] = pw.to(device)
    return pw[:, :length]


def fingerprints(rows: Tensor) -> Tensor:
    """``(R,)`` int64: two polynomial hashes of each row of ``rows (R, L)`` (token ids ``< 2^31``) in one key."""
    pw, rows = powers(rows.shape[1], rows.device), rows.long()
    h = [((rows * pw[i]) % p).sum(1) % p for i, p in enumerate(PRIMES)]  # terms < 2^31, sums < 2^63
    return h[0] * PRIMES[1] + h[1]


class RowLineage:
    """Follows rows through reorderings, starting from the rows of ``prompts (R, P)`` (an integer tensor, or on the
    host a NumPy array: its rows are then kept as bytes, and a call that continues every row in place costs one
    comparison of bytes)."""

    def __init__(self, prompts: Tensor | np.ndarray) -> None:
        self._remember(prompts)

    def _remember(self, ids: Tensor | np.ndarray) -> None:
        """Keep a copy of ``ids``, the last call's rows."""
        self.shape = tuple(ids.shape)
        if isinstance(ids, np.ndarray):
            self._dtype, self._bytes, self._rows = ids.dtype, ids.tobytes(), None
        else:
            self._dtype, self._bytes, self._rows = None, None, ids.clone()

    @property
    def rows(self) -> Tensor:
        """``(R, L)``: the last call's rows."""
        if self._rows is None:
            self._rows = torch.from_numpy(np.frombuffer(self._bytes, self._dtype).reshape(self.shape).copy())
        return self._rows

    def follow(self, ids: Tensor | np.ndarray) -> tuple[bool, Tensor | None]:
        """``(continues, parents)`` for the rows ``ids (R, L + 1)`` of the next call (a tensor, or a NumPy array):
        whether every row continues a row of the last call, and which (row ``i`` continues row ``parents[i]``;
        ``None``: each row its own).  When they continue, ``ids`` become the last call's rows."""
        if (ids.shape[0], ids.shape[1] - 1) != self.shape:
            return False, None
        prefix = ids[:, :-1]
        host = isinstance(ids, np.ndarray)
        if host and ids.dtype == self._dtype:  # host rows against host rows of the same dtype: their bytes
            same = prefix.tobytes() == self._bytes
        else:
            same = torch.equal(torch.from_numpy(prefix) if host else prefix, self.rows)
        parents = None
        if not same:
            parents = self.match(torch.from_numpy(prefix) if host else prefix)
            if parents is None:
                return False, None
        self._remember(ids)
        return True, parents

    def match(self, prefix: Tensor) -> Tensor | None:
        """``(R,)`` long: for each row of ``prefix``, a row of the last call equal to it; ``None`` if some row has
        none."""
        keys = fingerprints(self.rows)
        order = keys.argsort()
        at = torch.searchsorted(keys[order], fingerprints(prefix)).clamp_(max=len(keys) - 1)
        parents = order[at]
        wrong = (prefix != self.rows[parents]).any(1).nonzero().flatten()
        if wrong.numel():  # no equal row, or a fingerprint collision: compare those rows with every row
            equal = (prefix[wrong, None, :] == self.rows[None, :, :]).all(-1)  # (w, R)
            if not bool(equal.any(1).all()):
                return None
            parents[wrong] = equal.to(torch.uint8).argmax(1)
        return parents
