"""pseudosl: semantic and pseudo-semantic losses for neural networks with logical constraints.

The public API is :data:`__all__`: the compile front-ends and :class:`Circuit`, the losses, the engines
(:func:`as_engine` makes one from a user's model), :class:`Constraint`, the fidelity study and constrained
generation (:func:`constrained_sample`; :class:`ConstraintLogitsProcessor`, which imports ``transformers`` when
first used).
Everything else stays reachable in its submodule: :mod:`pseudosl.logic` (formulas, DAGs, errors),
:mod:`pseudosl.losses` (``product_log_prob``, ``constraint_entropy``), :mod:`pseudosl.cache`,
:mod:`pseudosl.tokens` (``AutomatonConstraint``), :mod:`pseudosl.psl` (``exact_mode``, ``local_conditionals``,
``LogJointEngine``, ``RecurrentSteps`` ...), :mod:`pseudosl.generation` (``ResampleDiagnostics``).
"""

from . import constraints
from ._version import __version__
from .circuit import Circuit
from .compile import compile_automaton, compile_categorical, compile_cnf, compile_formula
from .logic.automaton import DFA
from .logic.categorical import positions
from .logic.builder import CircuitBuilder
from .logic.formula import variables
from .losses import constraint_log_prob, semantic_loss
from .generation import constrained_sample
from .psl import (CausalLMEngine, Engine, RecurrentDecoder, RecurrentEngine, as_engine, local_fidelity,
                  pseudo_semantic_loss)
from .tokens import Constraint, ValueMap, no_forbidden_sequences, no_forbidden_words, sample_satisfies

__all__ = [
    # constraints -> circuits
    "Circuit",
    "CircuitBuilder",
    "DFA",
    "compile_automaton",
    "compile_categorical",
    "compile_cnf",
    "compile_formula",
    "constraints",
    "positions",
    "variables",
    # a constraint over a model's values (token ids)
    "Constraint",
    "ValueMap",
    "no_forbidden_sequences",
    "no_forbidden_words",
    "sample_satisfies",
    # losses
    "constraint_log_prob",
    "pseudo_semantic_loss",
    "semantic_loss",
    # models -> engines
    "CausalLMEngine",
    "Engine",
    "RecurrentDecoder",
    "RecurrentEngine",
    "as_engine",
    # how faithful the local approximation is
    "local_fidelity",
    # constrained generation: outputs that satisfy the constraint
    "ConstraintLogitsProcessor",
    "constrained_sample",
]


def __getattr__(name: str):
    """``ConstraintLogitsProcessor`` imports ``transformers`` (the ``[lm]`` extra): loaded on first use only."""
    if name == "ConstraintLogitsProcessor":
        from .generation import logits_process
        return logits_process.ConstraintLogitsProcessor
    raise AttributeError(f"module 'pseudosl' has no attribute {name!r}")
