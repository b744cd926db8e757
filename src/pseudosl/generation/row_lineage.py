"""Which row of the previous ``generate`` step each row continues, without reading the whole rows.

Beam search reorders and copies rows between calls of a logits processor: row ``i`` of a call holds some row
``p(i)`` of the previous call plus one token, and ``generate`` does not say which.  A processor that keeps a
state per row (an automaton state) must carry it along ``p``.

:class:`RowLineage` keeps, for every pair of rows ``(j, k)`` of the last call, ``last_diff[j, k]``: the last
position where the two rows differ (``-1``: they are equal), and ``token_at[j, k]``: row ``j``'s token there.
A new row ``i`` continues row ``j`` (``i[:-1] == j``) iff ``i[last_diff[j, k]] == token_at[j, k]`` for every
``k`` with ``last_diff[j, k] >= 0``: if ``i`` continues ``p`` and ``j != p`` as sequences, at ``d =
last_diff[j, p]`` row ``i`` holds ``p``'s token, not ``j``'s.  Each call costs ``O(R^3)`` comparisons for ``R``
rows (in blocks, a few MB at a time), whatever the length of the rows; the pairs' table is then updated in
``O(R^2)``: two new rows differ last at the new position if their new tokens differ, else where their parents do.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["RowLineage"]

BLOCK_ELEMENTS = 1 << 21
"""Elements compared at a time (rows are taken in blocks of ``BLOCK_ELEMENTS // (R * R)``)."""


def token_at(ids: Tensor, positions: Tensor) -> Tensor:
    """``(R, R)``: ``ids[j, positions[j, k]]`` (0 where ``positions < 0``)."""
    if ids.shape[1] == 0:
        return torch.zeros_like(positions)
    return ids.gather(1, positions.clamp(min=0)).long()


class RowLineage:
    """Follows rows through reorderings, starting from the rows of ``prompts (R, P)`` (any integer dtype)."""

    def __init__(self, prompts: Tensor) -> None:
        rows, length = prompts.shape
        last_diff = torch.full((rows, rows), -1, dtype=torch.long, device=prompts.device)
        if length:
            position = torch.arange(1, length + 1, device=prompts.device)
            block = max(1, BLOCK_ELEMENTS // (rows * length))
            for a in range(0, rows, block):
                differ = prompts[a:a + block, None, :] != prompts[None, :, :]  # (b, R, P)
                last_diff[a:a + block] = (differ * position).amax(-1) - 1
        self.take(prompts, last_diff)

    def take(self, ids: Tensor, last_diff: Tensor) -> None:
        """Remember the rows ``ids`` whose pairs differ last at ``last_diff``."""
        rows = ids.shape[0]
        self.last_diff, self.token_at = last_diff, token_at(ids, last_diff)
        self.positions, self.free = last_diff.clamp(min=0).reshape(1, rows * rows), last_diff < 0

    def parents(self, ids: Tensor) -> Tensor:
        """``(R,)`` long: for the rows ``ids (R, L + 1)`` of the next call, row ``i`` continues row ``parents[i]`` of
        the last call, if it continues any (a row that continues none gets an arbitrary one: check that apart)."""
        rows = ids.shape[0]
        block = max(1, BLOCK_ELEMENTS // (rows * rows))
        matches = []
        for a in range(0, rows, block):
            part = ids[a:a + block]
            seen = part.gather(1, self.positions.expand(part.shape[0], -1)).view(-1, rows, rows)  # (b, j, k)
            matches.append(((seen == self.token_at) | self.free).all(-1))
        match = matches[0] if len(matches) == 1 else torch.cat(matches)  # (R, R): row i continues row j
        return match.to(torch.uint8).argmax(1)

    def advance(self, ids: Tensor, parents: Tensor) -> None:
        """Take the rows ``ids (R, L + 1)``, row ``i`` continuing row ``parents[i]`` of the last call."""
        last = ids[:, -1]
        inherited = self.last_diff.index_select(0, parents).index_select(1, parents)
        self.take(ids, torch.where(last[:, None] != last[None, :], ids.shape[1] - 1, inherited))
