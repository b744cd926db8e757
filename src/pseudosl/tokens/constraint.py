"""A constraint as a model sees it: the compiled circuit (or an automaton) and, for a large vocabulary, its value map.

A circuit reads ``k`` values per position.  A language model writes token ids out of a vocabulary of
``V`` (50,257 for GPT-2); a constraint that names ``D`` of them (the tokens of some forbidden words)
needs only ``D + 1`` values: the ``D`` distinguished tokens and one catch-all value for every other
token (:class:`~.value_map.ValueMap`).  Both kinds of constraint carry their value map, so the loss, the engine and
a check of generated text agree on how tokens become values; that half is written once, in
:class:`TokenConstraint`:

* :class:`Constraint` -- a compiled circuit over a fixed number of positions (the losses, the decoders);
* :class:`AutomatonConstraint` -- an automaton, for sequences of any length (:meth:`~AutomatonConstraint.window`
  compiles it over ``n`` positions);

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

from ..checks import check_int, check_root, check_sample
from ..circuit import Circuit
from ..compile import compile_automaton
from ..logic.automaton import SparseDFA, forbidden_sequences_sparse_dfa
from ..losses import constraint_log_prob
from .value_map import ValueMap

__all__ = ["AutomatonConstraint", "Constraint", "TokenConstraint", "no_forbidden_sequences", "sample_satisfies"]


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


class TokenConstraint:
    """The half every constraint over a model's values shares: ``value_map`` (token ids -> the values the
    constraint reads, or ``None`` when it reads the token ids directly), checked against ``n_values`` on
    construction, and what follows from it: ``vocab_size`` and :meth:`values`.  A subclass is a frozen dataclass with
    a ``value_map`` field that defines ``n_values`` and names what reads the values (``_reader``)."""

    value_map: ValueMap | None
    _reader: str = "constraint"

    @property
    def n_values(self) -> int:
        """Values per position the constraint reads (each subclass defines it from what it reads)."""
        raise NotImplementedError(f"{type(self).__name__} subclasses TokenConstraint without defining n_values")

    def __post_init__(self) -> None:
        if self.value_map is not None:
            if not isinstance(self.value_map, ValueMap):
                raise TypeError(f"value_map must be a pseudosl.ValueMap or None, got {type(self.value_map).__name__}")
            if self.value_map.n_values != self.n_values:
                raise ValueError(f"the value map gives {self.value_map.n_values} values but the {self._reader} reads "
                                 f"{self.n_values}")

    @property
    def vocab_size(self) -> int:
        """Values per position of the model's sequences (the vocabulary; ``n_values`` without a value map)."""
        return self.value_map.vocab_size if self.value_map is not None else self.n_values

    def values(self, tokens: Tensor) -> Tensor:
        """The values the constraint reads for the model's values ``tokens`` (any shape)."""
        return self.value_map.to_values(tokens) if self.value_map is not None else tokens


@dataclass(frozen=True)
class Constraint(TokenConstraint):
    """A compiled constraint and the map from a model's values (token ids) to the circuit's values.

    Pass it to :func:`pseudosl.pseudo_semantic_loss` in place of a circuit: the loss then checks that the
    engine folds tokens with the same value map.  Build the engine of a folded constraint with
    ``pseudosl.as_engine(model, prompt_ids=..., value_map=constraint.value_map)``.

    Attributes:
        circuit: over ``n_positions`` positions with ``n_values`` values each.
        value_map: token ids -> circuit values, or ``None`` when the circuit reads the model's values directly.
        stats: how it was built (sizes, compile time); free-form, not compared.
        automaton: the :class:`AutomatonConstraint` this is a window of (set by :meth:`AutomatonConstraint.window`),
            or ``None``; decoders that follow a sequence token by token mask with it (a few gathers per step against
            a pass over the circuit).  Not compared.
    """

    circuit: Circuit
    value_map: ValueMap | None = None
    stats: dict[str, Any] = field(default_factory=dict, compare=False)
    _reader = "circuit"
    automaton: "AutomatonConstraint | None" = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.circuit, Circuit):
            raise TypeError(f"circuit must be a pseudosl.Circuit, got {type(self.circuit).__name__}")
        super().__post_init__()

    @property
    def n_positions(self) -> int:
        return self.circuit.n_vars

    @property
    def n_values(self) -> int:
        """Values per position the circuit reads."""
        return self.circuit.n_values

    def satisfied(self, tokens: Tensor, allowed: Tensor | None = None) -> Tensor:
        """``(B,)`` bool: does each sequence ``tokens (B, n_positions)`` of the model's values satisfy it?"""
        tokens = check_sample(tokens, self.vocab_size, "tokens")
        return sample_satisfies(self.circuit, self.values(tokens), allowed)


@dataclass(frozen=True)
class AutomatonConstraint(TokenConstraint):
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
    _reader = "automaton"

    def __post_init__(self) -> None:
        if not isinstance(self.dfa, SparseDFA):
            raise TypeError(f"dfa must be a pseudosl.logic.automaton.SparseDFA, got {type(self.dfa).__name__}")
        super().__post_init__()

    @property
    def n_values(self) -> int:
        """Values per position the automaton reads."""
        return self.dfa.n_values

    def window(self, n_positions: int, *, cache: bool = True) -> Constraint:
        """The :class:`Constraint` "the automaton accepts the ``n_positions`` tokens", for the losses and decoders."""
        n_positions = check_int("n_positions", n_positions, low=1)
        start = time.perf_counter()
        circuit = compile_automaton(self.dfa, n_positions, cache=cache)
        stats = dict(self.stats, n_positions=n_positions, nodes=circuit.n_nodes, edges=circuit.n_edges,
                     window_compile_s=time.perf_counter() - start)
        return Constraint(circuit, self.value_map, stats, automaton=self)

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
