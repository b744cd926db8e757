"""pseudosl: semantic and pseudo-semantic losses for neural networks with logical constraints."""

from .circuit import Circuit
from .logic import CircuitBuilder, CircuitError, Dag
from .losses import constraint_entropy, constraint_log_prob, semantic_loss

__all__ = [
    "Circuit",
    "CircuitBuilder",
    "CircuitError",
    "Dag",
    "constraint_entropy",
    "constraint_log_prob",
    "semantic_loss",
]
__version__ = "0.1.0"
