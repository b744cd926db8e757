"""Torch-free symbolic layer: circuits, front-ends that build them, automata."""

from .dag import FALSE, TRUE, CircuitBuilder, CircuitError, Dag, LayerPlan

__all__ = ["CircuitBuilder", "CircuitError", "Dag", "LayerPlan", "FALSE", "TRUE"]
