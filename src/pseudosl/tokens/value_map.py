"""Token ids -> circuit values: :class:`ValueMap`, a partition of a model's vocabulary into the values a constraint
reads, and :func:`fold_classes`, the log-sum-exp of each class of scores.

A circuit reads ``k`` values per position.  A language model writes token ids out of a vocabulary of ``V`` (50,257
for GPT-2); a constraint that names ``D`` of them (the tokens of some forbidden words) needs only ``D + 1`` values:
the ``D`` distinguished tokens and one catch-all value for every other token.  A word list lifted to a vocabulary
has one value per behaviour instead (:meth:`ValueMap.from_classes`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from .. import checks
from ..checks import check_int

__all__ = ["ValueMap", "MAX_VOCAB_SIZE", "fold_classes"]


MAX_VOCAB_SIZE = 1 << 22
"""The largest vocabulary a value map or a word list is built for (4,194,304 tokens; the largest models' have about
260K): a mistyped size (``10**9``) is refused by name before a table per token is made."""


class ValueMap:
    """Token ids -> circuit values: a partition of the vocabulary into ``n_values`` classes, ``lookup[t]`` the class
    of token ``t``.

    ``ValueMap(tokens, vocab_size)`` is the common case: ``tokens[v]`` is value ``v``, every other token the
    catch-all value ``other = len(tokens)`` (``D + 1`` values).  :meth:`from_classes` takes any partition (a word
    list lifted to tokens has one class per behaviour); there ``tokens`` and ``other`` are ``None`` unless the
    partition has that form.

    Example:
        >>> vm = ValueMap([17, 4], vocab_size=50)
        >>> vm.n_values, vm.to_values(torch.tensor([[4, 17, 9]])).tolist()
        (3, [[1, 0, 2]])
        >>> folded = ValueMap.from_classes([1, 0, 1, 2]).fold(torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4])))
        >>> [round(p, 4) for p in folded.exp().tolist()]
        [0.2, 0.4, 0.4]
    """

    def __init__(self, tokens: Sequence[int], vocab_size: int) -> None:
        toks = [check_int("a token", t) for t in tokens]
        vocab_size = check_int("vocab_size", vocab_size, 1, high=MAX_VOCAB_SIZE)
        if len(set(toks)) != len(toks):
            raise ValueError("tokens must be distinct (a token would be counted twice)")
        if any(not 0 <= t < vocab_size for t in toks):
            raise ValueError(f"tokens must lie in 0..{vocab_size - 1}, got {toks}")
        if len(toks) >= vocab_size:
            raise ValueError("a value map must leave at least one token for the catch-all value")
        lookup = torch.full((vocab_size,), len(toks), dtype=torch.long)
        lookup[torch.tensor(toks, dtype=torch.long)] = torch.arange(len(toks))
        self._set(lookup, len(toks) + 1)

    @classmethod
    def from_classes(cls, lookup: Sequence[int] | np.ndarray | Tensor) -> "ValueMap":
        """The value map of a partition: ``lookup (V,)`` gives each token's value; every value ``0 .. K-1`` must
        have a token, ``K >= 2``."""
        table = torch.as_tensor(np.asarray(lookup) if not isinstance(lookup, Tensor) else lookup).cpu()
        if table.dim() != 1 or table.numel() < 2:
            raise ValueError(f"lookup must be a 1-D list of each token's value, over at least 2 tokens, got shape "
                             f"{tuple(table.shape)}")
        check_int("the vocabulary (len(lookup))", table.numel(), high=MAX_VOCAB_SIZE)
        if table.is_floating_point() or table.dtype == torch.bool or table.is_complex():
            raise TypeError(f"lookup must hold integer values, got dtype {table.dtype}")
        table = table.long()
        n_values = int(table.max()) + 1
        if int(table.min()) < 0:
            raise ValueError(f"lookup holds {int(table.min())}; values are 0 .. n_values-1")
        empty = torch.bincount(table, minlength=n_values) == 0
        if empty.any():
            raise ValueError(f"value {int(empty.nonzero()[0])} has no token in lookup; number the values 0 .. "
                             f"n_values-1 with each used")
        if n_values < 2:
            raise ValueError("lookup puts every token in one value; a circuit variable needs >= 2 values")
        vm = cls.__new__(cls)
        vm._set(table.clone(), n_values)
        return vm

    def _set(self, lookup: Tensor, n_values: int) -> None:
        self.vocab_size, self.n_values, self.lookup = int(lookup.numel()), n_values, lookup
        counts = torch.bincount(lookup, minlength=n_values)
        catch_all = bool((counts[:-1] == 1).all())  # D singletons, then the rest
        self.other: int | None = n_values - 1 if catch_all else None
        self.tokens: Tensor | None = None
        if catch_all:
            self.tokens = torch.empty(n_values - 1, dtype=torch.long)
            singles = (lookup < n_values - 1).nonzero().flatten()
            self.tokens[lookup[singles]] = singles
        self._copies: dict[torch.device, tuple[Tensor | None, Tensor]] = {}
        self._by_class: dict[torch.device, tuple[Tensor, Tensor]] = {}

    @property
    def is_catch_all(self) -> bool:
        """Is this map ``D`` distinguished tokens and one catch-all value (``tokens`` and ``other`` set)?"""
        return self.other is not None

    def on(self, device: torch.device) -> tuple[Tensor | None, Tensor]:
        """``(tokens, lookup)`` on ``device``, copied there once (a copy per call would wait for a GPU each time)."""
        if device not in self._copies:
            tokens = self.tokens.to(device) if self.tokens is not None else None
            self._copies[device] = (tokens, self.lookup.to(device))
        return self._copies[device]

    def by_class(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """``(order, starts)`` on ``device``: the token ids sorted by class (ascending ids within a class) and the
        ``n_values + 1`` offsets of the classes in that order (class ``v`` is ``order[starts[v]:starts[v + 1]]``).

        Example:
            >>> order, starts = ValueMap.from_classes([1, 0, 1, 2]).by_class(torch.device("cpu"))
            >>> order.tolist(), starts.tolist()
            ([1, 0, 2, 3], [0, 1, 3, 4])
        """
        if device not in self._by_class:
            order = self.lookup.argsort(stable=True)
            starts = torch.zeros(self.n_values + 1, dtype=torch.long)
            starts[1:] = torch.bincount(self.lookup, minlength=self.n_values).cumsum(0)
            self._by_class[device] = (order.to(device), starts.to(device))
        return self._by_class[device]

    def to_values(self, token_ids: Tensor) -> Tensor:
        """Circuit values of token ids (any shape; integers in ``0 .. vocab_size-1``)."""
        checks.check_ids("token_ids", token_ids, self.vocab_size, "token ids")
        return self.on(token_ids.device)[1][token_ids]

    def fold(self, log_scores: Tensor) -> Tensor:
        """``(..., V)`` log-scores over tokens -> ``(..., n_values)``: the log-sum-exp of each class (computed below
        each class's own maximum, so a class far below the others does not underflow)."""
        return fold_classes(log_scores, self.on(log_scores.device)[1], self.n_values)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ValueMap) and self.vocab_size == other.vocab_size
                and torch.equal(self.lookup, other.lookup))

    __hash__ = None  # type: ignore[assignment]  (mutable tensors inside)

    def __repr__(self) -> str:
        if self.is_catch_all:
            return f"ValueMap(n_tokens={len(self.tokens)}, vocab_size={self.vocab_size})"
        return f"ValueMap(n_classes={self.n_values}, vocab_size={self.vocab_size})"


def fold_classes(log_scores: Tensor, classes: Tensor, n_classes: int) -> Tensor:
    """``(..., M)`` log-scores -> ``(..., n_classes)``: class ``c`` gets the log-sum-exp of the scores whose
    ``classes (M,)`` entry is ``c`` (``-inf`` when none), computed below each class's own maximum (a class far below
    the others does not underflow; a class of one score is that score exactly, with gradient 1)."""
    index = classes.expand_as(log_scores)
    top = log_scores.new_full((*log_scores.shape[:-1], n_classes), float("-inf"))
    top = top.scatter_reduce(-1, index, log_scores.detach(), "amax").nan_to_num(0.0, posinf=0.0, neginf=0.0)
    sums = log_scores.new_zeros(top.shape).scatter_add(-1, index, (log_scores - top.gather(-1, index)).exp())
    # a class of -inf scores is -inf with a zero gradient (log(0) would send NaN back through its zero sum)
    empty = sums == 0
    return torch.where(empty, float("-inf"), sums.masked_fill(empty, 1.0).log() + top)
