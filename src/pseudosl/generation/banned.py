"""Which next tokens a mask bans, as lists of positions, and how the ban is written into the scores.

A mask over ``(R, V)`` scores is kept sparse: the flat positions ``r * V + token`` it bans (``fill``), or, for a row
where fewer tokens are allowed than banned, the row itself (``clear``) and the flat positions it keeps (``keep``).
Applying it costs one copy of the scores (``R * V`` elements written: the floor of a processor that returns a new
tensor) plus one write per listed position; the dense alternatives (``masked_fill`` and ``torch.where`` with a
``(R, V)`` bool mask) measured 10--30x a copy on CPU.  In place (``inplace=True``, as XGrammar's
``apply_token_bitmask_inplace``) it writes the listed positions of the given scores only: no copy.  On CPU the writes
go through NumPy (a fancy-index store costs a fraction of a torch op's dispatch); ``bfloat16`` (no NumPy dtype),
scores that require grad and other devices take torch's ``index_fill_``.

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
from functools import cached_property

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
        probe: ``(P,)`` int64 NumPy array: the flat position of an allowed token in each row that bans something.
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
        probe = (constrained * allowed.shape[1] + allowed[constrained].to(torch.uint8).argmax(1)).cpu().numpy()
        return cls(fill=(~flat & ~in_few).nonzero().flatten(), clear=few.nonzero().flatten(),
                   keep=(flat & in_few).nonzero().flatten(), probe=probe)

    def apply(self, scores: Tensor, *, inplace: bool = False) -> Tensor:
        """``scores (R, V)`` with the banned tokens at ``-inf``: a new tensor (``scores`` is not modified), or with
        ``inplace`` ``scores`` itself, written at the banned positions only (any strides); then :meth:`check`."""
        out = scores if inplace else scores.clone(memory_format=torch.contiguous_format)
        host = host_array(out)
        if host is not None:
            self._write_host(host)
            if inplace:  # NumPy's writes bypass autograd's version counter: a tensor saved for backward stays guarded
                torch.autograd.graph.increment_version(out)
        elif out.is_contiguous():
            flat = out.view(-1)
            if self.clear.numel():
                kept = flat.index_select(0, self.keep)
                out.index_fill_(0, self.clear, float("-inf"))
                flat.index_copy_(0, self.keep, kept)
            if self.fill.numel():
                flat.index_fill_(0, self.fill, float("-inf"))
        else:  # in place on a strided view (assisted decoding hands processors a slice): (row, column) pairs
            vocab = out.shape[1]
            if self.clear.numel():
                at = (self.keep // vocab, self.keep % vocab)
                kept = out[at]
                out.index_fill_(0, self.clear, float("-inf"))
                out[at] = kept
            if self.fill.numel():
                out[self.fill // vocab, self.fill % vocab] = float("-inf")
        self.check(out, host)
        return out

    def _write_host(self, a: np.ndarray) -> None:
        """Write the mask into the NumPy view ``a (R, V)`` of the scores."""
        fill, clear, keep = self.host
        if len(clear):
            target, at = indexer(a, keep)
            kept = target[at]
            a[clear] = -np.inf
            target[at] = kept
        if len(fill):
            target, at = indexer(a, fill)
            target[at] = -np.inf

    @cached_property
    def host(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fill, clear, keep)`` as NumPy arrays (CPU masks; built once per mask)."""
        return self.fill.cpu().numpy(), self.clear.cpu().numpy(), self.keep.cpu().numpy()

    def allowed(self, rows: int, vocab_size: int, device: torch.device) -> Tensor:
        """``(R, V)`` bool: the tokens the mask keeps (dense, for inspection)."""
        ok = torch.ones(rows * vocab_size, dtype=torch.bool, device=device)
        ok[self.fill] = False
        ok = ok.view(rows, vocab_size)
        ok[self.clear] = False
        ok.view(-1)[self.keep] = True
        return ok

    def check(self, out: Tensor, host: np.ndarray | None = None) -> None:
        """Raise :class:`MaskConflictError` when a row of the masked scores ``out`` has allowed tokens, all ``-inf``
        (read on CPU tensors only; ``host``: ``out``'s NumPy view, when the caller has it)."""
        if not len(self.probe) or not out.is_cpu:
            return
        host = host_array(out) if host is None else host
        if host is not None:
            target, at = indexer(host, self.probe)
            at = target[at]
        else:  # bfloat16 (no NumPy dtype), or scores that require grad: read through torch
            rows, cols = np.divmod(self.probe, out.shape[1])
            at = out.detach()[torch.from_numpy(rows), torch.from_numpy(cols)].float().numpy()
        if -np.inf not in at.tolist():  # (NaN equals nothing)
            return
        suspect = torch.from_numpy(self.probe[np.isneginf(at)] // out.shape[1])
        row_max = out.detach().index_select(0, suspect).amax(1)
        empty = suspect[row_max == float("-inf")].tolist()  # NaN is not -inf: kept
        if len(empty):
            raise MaskConflictError(
                f"row {empty[0]} of the scores: every token the constraint allows there arrives at -inf "
                f"({len(empty)} such row(s)), set by a logits processor that runs before this one (e.g. "
                "bad_words_ids, min_new_tokens, another constraint); sampling would fail and greedy search would "
                "write a token the constraint bans. Remove the conflicting ban, or put it into the constraint")


HOST_DTYPES = (torch.float32, torch.float16, torch.float64)
"""Float dtypes NumPy holds (``bfloat16`` it does not)."""


def host_array(t: Tensor) -> np.ndarray | None:
    """The NumPy view of ``t`` (same memory) when it has one: a CPU tensor of a NumPy float dtype that does not
    require grad; else ``None``."""
    return t.numpy() if t.is_cpu and t.dtype in HOST_DTYPES and not t.requires_grad else None


def indexer(a: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray | tuple[np.ndarray, np.ndarray]]:
    """``(target, index)`` with ``target[index]`` the entries of ``a (R, V)`` at the flat positions ``flat``
    (``r * V + token``): ``a``'s flat view (``ravel`` of a C-contiguous array is one), or ``a`` and ``(rows,
    columns)``."""
    return (a.ravel(), flat) if a.flags.c_contiguous else (a, np.divmod(flat, a.shape[1]))


def check_scores_vocab(vocab_size: int, folded: int) -> None:
    """Refuse scores over ``vocab_size`` tokens when the constraint's value map folds a vocabulary of ``folded``."""
    if vocab_size != folded:
        raise ValueError(f"scores have {vocab_size} tokens but the constraint's value map folds a vocabulary of "
                         f"{folded}; build the constraint with vocab_size={vocab_size}")
