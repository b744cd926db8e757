"""Which tokens a causal-LM engine scores per position for a folded vocabulary, and how they fold into class values.

A :class:`~pseudosl.ValueMap` makes the circuit see the classes of a partition of the vocabulary.  A class of at
most ``max_class_size`` tokens is *small*; its tokens are the *distinguished* tokens ``D`` (a word list's tokens);
the other classes are *large* (the ordinary tokens).  Per position ``i`` of the sample ``y`` the engine scores
exactly the set ``S`` (each token ``c`` of ``S`` one neighbour ``y^{i<-c}``, its joint probability exact):

* the sampled token ``y_i``;
* the ``top_k_distinguished`` most likely tokens of ``D \\ {y_i}`` under ``p(. | x, y_<i)`` (default: all of them);
* the ``min(top_k, |j| - 1)`` most likely tokens of each large class ``j`` other than ``y_i``.

This is the paper's construction ("the top-10 good words and the top-470 toxic words": ``top_k=10``,
``top_k_distinguished=470``).  The rest of each class is ESTIMATED, with the prefix's next-token probability as the
proxy of the class's mass and the suffix of one representative token for all of its tokens:

    sum_{c in R} p(y^{i<-c}) ~= p(y_<i) * p(R | x, y_<i) * p(y_>i | x, y_<i, r),

* a large class ``j``: ``R = R_j = j \\ S`` and ``r = r_j`` its most likely token (one neighbour per large class);
* a small class ``v`` (only with ``top_k_distinguished``): ``R = R_v = v \\ S`` and ``r = r_D``, the most likely
  token of all the unscored distinguished tokens ``D \\ S`` (one neighbour shared by every small class).

``p(R | x, y_<i)`` is exact (the full-vocabulary softmax of the base run); only the suffix factor is borrowed.
Each class value gets the exact scores of its tokens in ``S`` plus the estimate of its rest; no token is counted
twice.  A rest of at most one token is exact (its representative is that token), so ``top_k = |largest large class|
- 1`` and ``top_k_distinguished = |D| - 1`` (or ``None``) give the exact folded conditionals.  Neighbour rows per
position (:attr:`FoldedNeighbours.n_candidates`), whatever the sample:

    |D| + 1 + sum_j min(top_k + 1, |j|)                          (top_k_distinguished=None)
    top_k_distinguished + 2 + sum_j min(top_k + 1, |j|)          (the paper's construction)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..checks import check_int
from ..tokens.value_map import ValueMap, fold_classes

__all__ = ["FoldedNeighbours", "Candidates"]


class Candidates(NamedTuple):
    """The tokens scored at each position and what their scores become (see :meth:`FoldedNeighbours.candidates`).

    ``tokens (B, n, X + R)``: ``X`` tokens scored exactly, then ``R`` representatives; ``valid`` marks the exact
    tokens that count (a slot past a class's end, or a token of probability 0, does not); ``rest (B, n, E)``:
    ``log p(R | x, y_<i)`` of each estimated rest (``-inf`` when empty)."""

    tokens: Tensor
    valid: Tensor
    rest: Tensor


class FoldedNeighbours:
    """The exact set ``S`` and the estimated rests of a value map (module docs).

    Args:
        value_map: the partition of the vocabulary into circuit values.
        top_k: the most likely tokens of each large class (the sample aside) scored exactly; at most the largest
            large class's size minus 1.
        max_class_size: the classes of at most this many tokens (>= 1; any larger int, e.g. ``2**63``, makes every
            class small) are small: their tokens are distinguished.
        top_k_distinguished: the most likely distinguished tokens (the sample aside) scored exactly per position,
            the rest of each small class estimated (module docs); at most ``|D| - 1``; ``None``: every one exact.
    """

    def __init__(self, value_map: ValueMap, *, top_k: int, max_class_size: int,
                 top_k_distinguished: int | None) -> None:
        self.value_map = value_map
        self.top_k = check_int("top_k", top_k, low=0)
        self.max_class_size = check_int("max_class_size", max_class_size, low=1)
        lookup = value_map.lookup
        sizes = torch.bincount(lookup, minlength=value_map.n_values)
        small = sizes <= min(self.max_class_size, value_map.vocab_size)  # (no class is larger: any int is exact)
        distinguished = small[lookup]  # (V,)
        n_dist = int(distinguished.sum())
        large = (~small).nonzero().flatten()
        most = int(sizes[large].max()) - 1 if len(large) else 0  # the sample may take one token of a large class
        if self.top_k > most:
            raise ValueError(f"top_k must lie in 0..{most} (the largest class over max_class_size="
                             f"{self.max_class_size} tokens has {most + 1} tokens, one of which may be the sample), "
                             f"got {top_k}")
        self.estimates_distinguished = top_k_distinguished is not None
        if top_k_distinguished is None:
            self.k_dist = n_dist
        elif n_dist == 0:
            raise ValueError(f"top_k_distinguished={top_k_distinguished!r} applies to the tokens of the classes of at "
                             f"most max_class_size={self.max_class_size} tokens, and this value map has none; leave it "
                             "None (or raise max_class_size)")
        else:
            self.k_dist = check_int("top_k_distinguished", top_k_distinguished, low=0)
            if self.k_dist > n_dist - 1:
                raise ValueError(f"top_k_distinguished must lie in 0..{n_dist - 1} (the value map has {n_dist} "
                                 f"tokens in classes of at most max_class_size={self.max_class_size} tokens; "
                                 f"{n_dist - 1} already scores each exactly), got {top_k_distinguished}; pass None "
                                 "to score them all")
        n_top = (sizes[large] - 1).clamp(max=self.top_k)  # (L,): the top tokens scored per large class
        slots = torch.arange(self.top_k)
        top_slots = (torch.arange(len(large))[:, None] * self.top_k + slots)[slots < n_top[:, None]]
        small_classes = small.nonzero().flatten() if self.estimates_distinguished else large[:0]
        n_reps = len(large) + int(self.estimates_distinguished)
        self.n_exact = self.k_dist + 1 + int(n_top.sum())
        self.n_candidates = self.n_exact + n_reps  # neighbour rows per position
        # estimate e uses representative est_rep[e] and adds to class est_class[e]
        est_rep = torch.cat([torch.arange(len(large)), torch.full_like(small_classes, len(large))])
        self._cpu = (distinguished, large, n_top, top_slots, small_classes, est_rep, torch.cat([large, small_classes]))
        self._at: dict[torch.device, tuple[Tensor, ...]] = {}

    def _on(self, device: torch.device) -> tuple[Tensor, ...]:
        """The fixed index tensors on ``device``, copied there once."""
        if device not in self._at:
            self._at[device] = tuple(t.to(device) for t in self._cpu)
        return self._at[device]

    def candidates(self, sample: Tensor, base: Tensor, max_logits: int) -> Candidates:
        """The tokens to score around ``sample (B, n)`` given ``base (B, n, V)`` ``= log p(. | x, y_<i)``.

        Layout: ``[k_D most likely of D \\ {y_i} | y_i | k_1 most likely of large class 1 \\ {y_i} | .. | k_L of
        class L | r_1 .. r_L | r_D (with top_k_distinguished)]``, ``k_j = min(top_k, |j| - 1)``.  The per-class
        top-k runs over groups of large classes, ``(B, n, G, V)`` within ``max_logits``."""
        b, n, V = base.shape
        distinguished, large, n_top, top_slots, small_classes, _, _ = self._on(sample.device)
        lookup = self.value_map.on(sample.device)[1]
        k, kd = self.top_k, self.k_dist
        pre = base.detach()
        is_sample = torch.zeros(b, n, V, dtype=torch.bool, device=sample.device).scatter_(-1, sample[..., None], True)
        tokens, valid, rests = [], [], []
        # the distinguished tokens: the kd most likely (all by default), then r_D and the rest of each small class
        if kd or self.estimates_distinguished:
            dist = pre.masked_fill(is_sample | ~distinguished, float("-inf"))
            best = dist.topk(kd + int(self.estimates_distinguished), -1)
            tokens.append(best.indices[..., :kd])
            valid.append(torch.isfinite(best.values[..., :kd]))
        tokens.append(sample[..., None])
        valid.append(torch.ones_like(is_sample[..., :1]))
        # the large classes: the top tokens of each, then r_j and the rest of each
        taken = is_sample | distinguished
        tops, top_ok, reps = [sample.new_zeros(b, n, 0, k)], [taken.new_zeros(b, n, 0, k)], [sample.new_zeros(b, n, 0)]
        scored_top = taken.new_zeros(b, n, V + 1)  # the top tokens scored exactly (column V: a sink for the others)
        group = max(1, max_logits // max(1, b * n * V))
        for a in range(0, len(large), group):  # detached: nothing (B, n, G, V) is kept for backward
            outside = taken[..., None, :] | (lookup != large[a:a + group, None])  # (B, n, G, V): not in class j \ y_i
            top = pre[..., None, :].masked_fill(outside, float("-inf")).topk(k + 1, -1)  # (B, n, G, k+1)
            scored = torch.arange(k + 1, device=sample.device) < n_top[a:a + group, None]  # (G, k+1)
            scored_top.scatter_(-1, torch.where(scored, top.indices, V).flatten(2), True)
            tops.append(top.indices[..., :-1])
            top_ok.append(torch.isfinite(top.values[..., :-1]))
            reps.append(top.indices.gather(-1, n_top[a:a + group, None].expand(b, n, -1, 1)).squeeze(-1))
        if len(large):  # the exact mass of each rest R_j = j \ (y_i and its top tokens), one fold over the vocabulary
            unscored = base.masked_fill(is_sample | scored_top[..., :V], float("-inf"))
            rests.append(fold_classes(unscored, lookup, self.value_map.n_values)[..., large])
        tokens.append(torch.cat(tops, 2).flatten(2)[..., top_slots])
        valid.append(torch.cat(top_ok, 2).flatten(2)[..., top_slots])
        tokens.append(torch.cat(reps, -1))
        if self.estimates_distinguished:
            unscored = dist.scatter(-1, best.indices[..., :kd], float("-inf"))  # D \ S, detached
            tokens.append(best.indices[..., kd:])
            mass = base.masked_fill(torch.isneginf(unscored), float("-inf"))  # exact p(R_v | x, y_<i), per class
            rests.append(self.value_map.fold(mass)[..., small_classes])
        rest = torch.cat(rests, -1) if rests else base.new_zeros(b, n, 0)
        return Candidates(torch.cat(tokens, -1), torch.cat(valid, -1), rest)

    def fold(self, scores: Tensor, base: Tensor, cand: Candidates) -> Tensor:
        """``(B, n, K)`` candidate scores ``log p(y^{i<-c})`` (up to the prefix term) -> ``(B, n, n_values)`` class
        scores: each exact token's score to its class, each estimate ``log p(R) + log p(y_>i | r)`` to its class."""
        *_, est_rep, est_class = self._on(scores.device)
        lookup = self.value_map.on(scores.device)[1]
        x = self.n_exact
        exact = scores[..., :x].masked_fill(~cand.valid, float("-inf"))
        suffix = scores[..., x:] - base.gather(-1, cand.tokens[..., x:])  # log p(y_>i | x, y_<i, r)
        estimate = torch.where(torch.isneginf(cand.rest), float("-inf"), cand.rest + suffix[..., est_rep])
        classes = torch.cat([lookup[cand.tokens[..., :x]], est_class.expand(*scores.shape[:-1], -1)], -1)
        return fold_classes(torch.cat([exact, estimate], -1), classes, self.value_map.n_values)
