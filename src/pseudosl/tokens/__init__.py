"""Constraints over a model's values (token ids): the bridge from a circuit's values to a vocabulary.

* :mod:`.value_map`  -- :class:`ValueMap` (token ids -> circuit values), :func:`~.value_map.fold_classes`,
* :mod:`.constraint` -- :class:`TokenConstraint` (the value-map half both kinds share), :class:`Constraint` (a
  circuit and its value map), :class:`AutomatonConstraint` (an automaton over a model's values, any length),
  :func:`no_forbidden_sequences`, :func:`sample_satisfies`,
* :mod:`.words`      -- :func:`no_forbidden_words`: words in the decoded text, under any tokenization.
"""

from .constraint import AutomatonConstraint, Constraint, TokenConstraint, no_forbidden_sequences, sample_satisfies
from .value_map import ValueMap
from .words import no_forbidden_words

__all__ = [
    "AutomatonConstraint",
    "Constraint",
    "TokenConstraint",
    "ValueMap",
    "no_forbidden_sequences",
    "no_forbidden_words",
    "sample_satisfies",
]
