"""Constraints over a model's values (token ids): the bridge from a circuit's values to a vocabulary.

* :mod:`.constraint` -- :class:`ValueMap` (token ids -> circuit values), :class:`Constraint` (a circuit and its
  value map), :class:`AutomatonConstraint` (an automaton over a model's values, any length),
  :func:`no_forbidden_sequences`, :func:`sample_satisfies`,
* :mod:`.words`      -- :func:`no_forbidden_words`: words in the decoded text, under any tokenization.
"""

from .constraint import AutomatonConstraint, Constraint, ValueMap, no_forbidden_sequences, sample_satisfies
from .words import no_forbidden_words

__all__ = [
    "AutomatonConstraint",
    "Constraint",
    "ValueMap",
    "no_forbidden_sequences",
    "no_forbidden_words",
    "sample_satisfies",
]
