"""Which next tokens a mask bans, as lists of positions, and how the ban is written into the scores.

A mask over ``(R, V)`` scores is kept sparse: the flat positions ``r * V + token`` it bans (``fill``), or, for a row
where fewer tokens are allowed than banned, the row itself (``clear``) and the flat positions it keeps (``keep``).
Applying it costs one copy of the scores (``R * V`` elements written: the floor of a processor that returns a new
tensor) plus one write per listed position; the dense alternatives (``masked_fill`` and ``torch.where`` with a
``(R, V)`` bool mask) measured 10--30x a copy on CPU.

The rule for non-finite scores.  A banned token's score is *set* to ``-inf`` (never added to), so ``+inf``,
``NaN`` or an fp16 overflow coming from an earlier processor cannot leak it; an allowed token's score passes
through unchanged, non-finite included.  A row where the mask allows tokens but every one of them arrives at
``-inf`` (another processor banned them: ``bad_words_ids``, ``min_new_tokens``) has no token left that keeps
the constraint: :class:`MaskConflictError` names the row instead of letting greedy search write a banned token
or sampling fail.  The check reads the scores, so it runs on CPU tensors only (as the library's other value
checks; on a GPU it would wait for the device); it reads one known allowed token per row (``probe``), and a whole
row only when that token arrives at ``-inf``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import PseudoslError

__all__ = ["Banned", "KEEP_BELOW", "MaskConflictError", "check_scores_vocab"]

KEEP_BELOW = 0.5
"""A row (or an automaton state) that allows fewer than this share of the vocabulary lists its allowed tokens;
the others list their banned ones."""


class MaskConflictError(PseudoslError, ValueError):
    """Every token the constraint allows in a row was already set to ``-inf`` by another logits processor."""


@dataclass(frozen=True)
class Banned:
    """The banned next tokens of ``R`` rows over a vocabulary of ``V``, as flat positions ``r * V + token``.

    Attributes:
        fill: ``(F,)`` long: positions set to ``-inf``.
        clear: ``(C,)`` long: rows set to ``-inf`` wholly, before ``keep`` restores their allowed tokens.
        keep: ``(K,)`` long: positions (in the ``clear`` rows) that keep their score.
        probe: ``(2, P)`` int64 NumPy array: the row and the column of an allowed token in each row that bans
            something.
    """

    fill: Tensor
    clear: Tensor
    keep: Tensor
    probe: np.ndarray

    @classmethod
    def from_allowed(cls, allowed: Tensor, free: Tensor) -> "Banned":
        """From ``allowed (R, V)`` bool; rows where ``free (R,)`` holds ban nothing."""
        allowed = allowed | free[:, None]
        few = allowed.sum(1) < KEEP_BELOW * allowed.shape[1]  # few allowed tokens: list those
        flat = allowed.reshape(-1)
        in_few = few.repeat_interleave(allowed.shape[1])
        constrained = (~free).nonzero().flatten()
        probe = torch.stack([constrained, allowed[constrained].to(torch.uint8).argmax(1)]).cpu().numpy()
        return cls(fill=(~flat & ~in_few).nonzero().flatten(), clear=few.nonzero().flatten(),
                   keep=(flat & in_few).nonzero().flatten(), probe=probe)

    def apply(self, scores: Tensor) -> Tensor:
        """``scores (R, V)`` with the banned tokens at ``-inf``: a new tensor (``scores`` is not modified)."""
        if scores.shape[0] == 1 and not self.clear.numel():  # one op: the copy and the writes
            return scores.index_fill(1, self.fill, float("-inf"))
        out = scores.clone(memory_format=torch.contiguous_format)  # one copy, whatever the strides of the scores
        flat = out.view(-1)
        if self.clear.numel():
            kept = flat.index_select(0, self.keep)
            out.index_fill_(0, self.clear, float("-inf"))
            flat.index_copy_(0, self.keep, kept)
        if self.fill.numel():
            flat.index_fill_(0, self.fill, float("-inf"))
        return out

    def allowed(self, rows: int, vocab_size: int, device: torch.device) -> Tensor:
        """``(R, V)`` bool: the tokens the mask keeps (dense, for inspection)."""
        ok = torch.ones(rows * vocab_size, dtype=torch.bool, device=device)
        ok[self.fill] = False
        ok = ok.view(rows, vocab_size)
        ok[self.clear] = False
        ok.view(-1)[self.keep] = True
        return ok

    def check(self, out: Tensor) -> None:
        """Raise :class:`MaskConflictError` when a row of the masked scores ``out`` has allowed tokens, all ``-inf``
        (read on CPU tensors only)."""
        if not self.probe.shape[1] or out.device.type != "cpu":
            return
        rows, cols = self.probe
        if out.dtype == torch.bfloat16:  # no NumPy dtype: read through torch
            at = out[torch.from_numpy(rows), torch.from_numpy(cols)].float().numpy()
        else:
            at = out.numpy()[rows, cols]
        if -np.inf not in at.tolist():  # (NaN equals nothing)
            return
        suspect = torch.from_numpy(rows[np.isneginf(at)])
        empty = suspect[out.index_select(0, suspect).amax(1) == float("-inf")].tolist()  # NaN is not -inf: kept
        if len(empty):
            raise MaskConflictError(
                f"row {empty[0]} of the scores: every token the constraint allows there arrives at -inf "
                f"({len(empty)} such row(s)), set by a logits processor that runs before this one (e.g. "
                "bad_words_ids, min_new_tokens, another constraint); sampling would fail and greedy search would "
                "write a token the constraint bans. Remove the conflicting ban, or put it into the constraint")


def check_scores_vocab(vocab_size: int, folded: int) -> None:
    """Refuse scores over ``vocab_size`` tokens when the constraint's value map folds a vocabulary of ``folded``."""
    if vocab_size != folded:
        raise ValueError(f"scores have {vocab_size} tokens but the constraint's value map folds a vocabulary of "
                         f"{folded}; build the constraint with vocab_size={vocab_size}")
