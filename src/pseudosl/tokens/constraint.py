"""A constraint as a model sees it: the compiled circuit and, for a large vocabulary, its value map.

A circuit reads ``k`` values per position.  A language model writes token ids out of a vocabulary of
``V`` (50,257 for GPT-2); a constraint that names ``D`` of them (the tokens of some forbidden words)
needs only ``D + 1`` values: the ``D`` distinguished tokens and one catch-all value for every other
token (:class:`ValueMap`).  :class:`Constraint` carries both, so the loss, the engine and a check of
generated text agree on how tokens become values:

* :func:`no_forbidden_sequences` -- "no token sequence of a list occurs in a window of ``n`` tokens"
  over a tokenizer's vocabulary, in one call (the Aho--Corasick automaton over the folded values,
  unrolled over the window; :func:`pseudosl.compile_automaton`).  The folding is exact: a token that
  occurs in no sequence sends the automaton back to its start, whichever token it is.
* ``Constraint(circuit)`` -- any compiled circuit whose values are the model's own values.

Example:
    >>> import torch
    >>> c = no_forbidden_sequences([[3, 4], [5]], n_positions=4, vocab_size=10)
    >>> c.value_map.tokens.tolist(), c.n_values                  # 3 distinguished tokens + "any other"
    ([3, 4, 5], 4)
    >>> c.satisfied(torch.tensor([[1, 3, 4, 2], [1, 4, 3, 2]])).tolist()
    [False, True]
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .. import checks
from ..checks import check_int, check_root, check_sample
from ..circuit import Circuit
from ..compile import compile_automaton
from ..logic.automaton import SparseDFA, forbidden_sequences_sparse_dfa
from ..losses import constraint_log_prob

__all__ = ["AutomatonConstraint", "Constraint", "ValueMap", "MAX_VOCAB_SIZE", "fold_classes", "no_forbidden_sequences",
           "sample_satisfies"]


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


def sample_satisfies(circuit: Circuit, values: Tensor, allowed: Tensor | None = None, *,
                     root: int | None = None) -> Tensor:
    """``(B,)`` bool: does each sequence of circuit values satisfy the constraint (and ``allowed``)?

    Evaluates the circuit once on the one-hot log-probabilities of ``values`` (0 at the value, ``-inf``
    elsewhere): the log WMC is 0 for a model and ``-inf`` otherwise.  Every root must hold, or root ``root`` only.
    """
    values = check_sample(values, circuit.n_values, "values")
    root = check_root(root, circuit.n_roots, every_root=True)
    one_hot = torch.full((*values.shape, circuit.n_values), float("-inf"), device=values.device)
    one_hot.scatter_(-1, values.unsqueeze(-1), 0.0)
    with torch.no_grad():
        lp = constraint_log_prob(circuit, one_hot, allowed)
    ok = lp > -0.5
    ok = ok if ok.dim() == 2 else ok[:, None]  # (B, roots)
    return ok.all(-1) if root is None else ok[:, root]


@dataclass(frozen=True)
class Constraint:
    """A compiled constraint and the map from a model's values (token ids) to the circuit's values.

    Pass it to :func:`pseudosl.pseudo_semantic_loss` in place of a circuit: the loss then checks that the
    engine folds tokens with the same value map.  Build the engine of a folded constraint with
    ``pseudosl.as_engine(model, prompt_ids=..., value_map=constraint.value_map)``.

    Attributes:
        circuit: over ``n_positions`` positions with ``n_values`` values each.
        value_map: token ids -> circuit values, or ``None`` when the circuit reads the model's values directly.
        stats: how it was built (sizes, compile time); free-form, not compared.
    """

    circuit: Circuit
    value_map: ValueMap | None = None
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.circuit, Circuit):
            raise TypeError(f"circuit must be a pseudosl.Circuit, got {type(self.circuit).__name__}")
        if self.value_map is not None:
            if not isinstance(self.value_map, ValueMap):
                raise TypeError(f"value_map must be a pseudosl.ValueMap or None, got {type(self.value_map).__name__}")
            if self.value_map.n_values != self.circuit.n_values:
                raise ValueError(f"the value map gives {self.value_map.n_values} values but the circuit reads "
                                 f"{self.circuit.n_values}")

    @property
    def n_positions(self) -> int:
        return self.circuit.n_vars

    @property
    def n_values(self) -> int:
        """Values per position the circuit reads."""
        return self.circuit.n_values

    @property
    def vocab_size(self) -> int:
        """Values per position of the model's sequences (the vocabulary; ``n_values`` without a value map)."""
        return self.value_map.vocab_size if self.value_map is not None else self.circuit.n_values

    def values(self, tokens: Tensor) -> Tensor:
        """Circuit values of the model's values ``tokens`` (any shape)."""
        return self.value_map.to_values(tokens) if self.value_map is not None else tokens

    def satisfied(self, tokens: Tensor, allowed: Tensor | None = None) -> Tensor:
        """``(B,)`` bool: does each sequence ``tokens (B, n_positions)`` of the model's values satisfy it?"""
        tokens = check_sample(tokens, self.vocab_size, "tokens")
        return sample_satisfies(self.circuit, self.values(tokens), allowed)


@dataclass(frozen=True)
class AutomatonConstraint:
    """A constraint on sequences of any length: an automaton over a model's values, read through a value map.

    A sequence of tokens satisfies it when the automaton, reading the tokens' values from ``dfa.start``, ends in an
    accepting state.  :meth:`window` compiles it over a fixed number of positions for the losses and for
    :func:`pseudosl.constrained_sample`; ``pseudosl.ConstraintLogitsProcessor`` can follow it token by token during
    generation, for any length.

    Attributes:
        dfa: the automaton over circuit values ``0 .. dfa.n_values-1``.
        value_map: token ids -> the automaton's values (``None``: the values are the token ids).
        stats: how it was built (sizes, build time); free-form, not compared.
    """

    dfa: SparseDFA
    value_map: ValueMap | None = None
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dfa, SparseDFA):
            raise TypeError(f"dfa must be a pseudosl.logic.automaton.SparseDFA, got {type(self.dfa).__name__}")
        if self.value_map is not None:
            if not isinstance(self.value_map, ValueMap):
                raise TypeError(f"value_map must be a pseudosl.ValueMap or None, got {type(self.value_map).__name__}")
            if self.value_map.n_values != self.dfa.n_values:
                raise ValueError(f"the value map gives {self.value_map.n_values} values but the automaton reads "
                                 f"{self.dfa.n_values}")

    @property
    def vocab_size(self) -> int:
        """Values per position of the model's sequences."""
        return self.value_map.vocab_size if self.value_map is not None else self.dfa.n_values

    def values(self, tokens: Tensor) -> Tensor:
        """Automaton values of the model's values ``tokens`` (any shape)."""
        return self.value_map.to_values(tokens) if self.value_map is not None else tokens

    def window(self, n_positions: int, *, cache: bool = True) -> Constraint:
        """The :class:`Constraint` "the automaton accepts the ``n_positions`` tokens", for the losses and decoders."""
        n_positions = check_int("n_positions", n_positions, low=1)
        start = time.perf_counter()
        circuit = compile_automaton(self.dfa, n_positions, cache=cache)
        stats = dict(self.stats, n_positions=n_positions, nodes=circuit.n_nodes, edges=circuit.n_edges,
                     window_compile_s=time.perf_counter() - start)
        return Constraint(circuit, self.value_map, stats)

    def satisfied(self, tokens: Tensor) -> Tensor:
        """``(B,)`` bool: does the automaton accept each row of ``tokens (B, L)`` (the model's values, any ``L``)?"""
        tokens = check_sample(tokens, self.vocab_size, "tokens")
        values = self.values(tokens).cpu().numpy()
        states = np.full(values.shape[0], self.dfa.start, dtype=np.int64)
        for t in range(values.shape[1]):
            states = self.dfa.step(states, values[:, t])
        accepting = np.zeros(self.dfa.n_states, dtype=bool)
        accepting[list(self.dfa.accepting)] = True
        return torch.from_numpy(accepting[states])


def no_forbidden_sequences(sequences: Sequence[Sequence[int]], n_positions: int, vocab_size: int, *,
                           cache: bool = True) -> Constraint:
    """"No sequence of ``sequences`` occurs in ``n_positions`` consecutive tokens", over a vocabulary of ``vocab_size``.

    The ``D`` distinct tokens of the sequences that fit in the window become values ``0 .. D-1``, every
    other token the catch-all ``D`` (:class:`ValueMap`), and the circuit is the Aho--Corasick automaton of
    the folded sequences unrolled over the window: ``O(n_states * n_positions)`` nodes whatever
    ``vocab_size``.  When the sequences use every token there is nothing to fold: the circuit reads the
    token ids directly (``value_map=None``).  A sequence longer than the window cannot occur in it; it
    adds nothing to the circuit and is counted in ``stats["n_too_long"]``.

    Args:
        sequences: non-empty token-id sequences, ids in ``0 .. vocab_size-1`` (e.g. ``tokenizer.encode(word)``
            for each word, with and without a leading space for BPE vocabularies).
        n_positions: the window, ``>= 1`` tokens.
        vocab_size: the model's vocabulary size (``model.get_output_embeddings().weight.shape[0]``).
        cache: use the on-disk circuit cache (:mod:`pseudosl.cache`).

    Returns:
        A :class:`Constraint` with ``stats``: ``n_sequences``, ``n_too_long``, ``n_tokens`` (``D``),
        ``n_states`` (automaton), ``nodes``, ``edges``, ``compile_s`` (a load when it was cached).
    """
    vocab_size = check_int("vocab_size", vocab_size, low=2)
    n_positions = check_int("n_positions", n_positions, low=1)
    if isinstance(sequences, (str, bytes, Tensor)) or not isinstance(sequences, Sequence):
        raise TypeError(f"sequences must be a list of token-id lists, got {type(sequences).__name__}")
    seqs = [[check_int(f"sequences[{i}] token", t, low=0) for t in s] for i, s in enumerate(sequences)]
    for i, s in enumerate(seqs):
        if not s:
            raise ValueError(f"sequences[{i}] is empty; an empty sequence occurs in every window")
        if max(s) >= vocab_size:
            raise ValueError(f"sequences[{i}] = {s} has token {max(s)} outside the vocabulary 0..{vocab_size - 1}")
    fits = [s for s in seqs if len(s) <= n_positions]
    if not fits:
        raise ValueError(f"no forbidden sequence fits in n_positions={n_positions} tokens (the shortest has "
                         f"{min(map(len, seqs)) if seqs else 0}); increase n_positions")
    tokens = sorted({t for s in fits for t in s})
    value_map = ValueMap(tokens, vocab_size) if len(tokens) < vocab_size else None
    index = {t: v for v, t in enumerate(tokens)} if value_map is not None else {t: t for t in tokens}
    n_values = value_map.n_values if value_map is not None else vocab_size
    start = time.perf_counter()
    dfa = forbidden_sequences_sparse_dfa([[index[t] for t in s] for s in fits], n_values)
    circuit = compile_automaton(dfa, n_positions, cache=cache)
    stats = dict(n_sequences=len(seqs), n_too_long=len(seqs) - len(fits), n_tokens=len(tokens),
                 n_states=dfa.n_states, nodes=circuit.n_nodes, edges=circuit.n_edges,
                 compile_s=time.perf_counter() - start)
    return Constraint(circuit, value_map, stats)
