"""Experiments of the paper, one package each (``pseudosl <name> train|eval`` on the command line)."""
