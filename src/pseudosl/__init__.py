"""pseudosl: semantic and pseudo-semantic losses for neural networks with logical constraints."""

from . import constraints
from .cache import cache_dir, cached_circuit
from .circuit import Circuit
from .compile import compile_automaton, compile_cnf, compile_formula, no_forbidden_words
from .logic import CircuitBuilder, CircuitError, Dag
from .logic.automaton import DFA, forbidden_words_dfa
from .logic.cnf import parse_dimacs
from .logic.errors import DimacsFormatError, UnsatisfiableError
from .logic.formula import And, Not, Or, Var, false, iff, implies, true, variables
from .logic.sdd import SddFormatError
from .losses import constraint_entropy, constraint_log_prob, semantic_loss
from .psl import (
                  CausalLMEngine,
                  Fidelity,
                  PSLDiagnostics,
                  RecurrentDecoder,
                  RecurrentEngine,
                  ValueMap,
                  local_conditionals,
                  local_fidelity,
                  pseudo_semantic_loss,
                  sample_autoregressive,
)

__all__ = [
    "CausalLMEngine",
    "Fidelity",
    "PSLDiagnostics",
    "RecurrentDecoder",
    "RecurrentEngine",
    "ValueMap",
    "local_conditionals",
    "local_fidelity",
    "pseudo_semantic_loss",
    "sample_autoregressive",
    "And",
    "Circuit",
    "CircuitBuilder",
    "CircuitError",
    "DFA",
    "Dag",
    "DimacsFormatError",
    "Not",
    "Or",
    "SddFormatError",
    "UnsatisfiableError",
    "Var",
    "cache_dir",
    "cached_circuit",
    "compile_automaton",
    "compile_cnf",
    "compile_formula",
    "constraint_entropy",
    "constraint_log_prob",
    "constraints",
    "false",
    "forbidden_words_dfa",
    "iff",
    "implies",
    "no_forbidden_words",
    "parse_dimacs",
    "semantic_loss",
    "true",
    "variables",
]
from ._version import __version__  # noqa: E402
