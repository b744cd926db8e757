"""Torch-free symbolic layer: circuits, front-ends that build them, automata."""

from .builder import CircuitBuilder
from .dag import Dag
from .layers import LayerPlan
from .nodes import FALSE, TRUE
from .errors import CircuitError, CircuitFormatError, SizeLimitError

__all__ = ["CircuitBuilder", "CircuitError", "CircuitFormatError", "Dag", "LayerPlan", "SizeLimitError", "FALSE",
           "TRUE"]
