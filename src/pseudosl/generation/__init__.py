"""Outputs that satisfy a constraint.

* :mod:`.resample`       -- :func:`constrained_sample`: locally constrained resampling (candidates around an anchor
  that satisfy the constraint, reweighted towards the model's own conditional),
* :mod:`.proposals`      -- where the candidates come from: :class:`LocalProposal` (Gen-C's local distribution),
  :class:`EditProposal` (edits where the constraint needs them), :class:`RestartProposal` (masked regeneration
  after the anchor's repaired prefix),
* :mod:`.logits_process` -- :class:`ConstraintLogitsProcessor`: decoding-time masks for Hugging Face ``generate``
  (imports ``transformers``: loaded on first use), over a window or streaming with
* :mod:`.automaton_mask` -- an automaton's states and allowed-token masks on a device, and
* :mod:`.row_lineage`    -- rows followed through beam-search reorderings.
"""

from .proposals import EditProposal, LocalProposal, Proposal, RestartProposal
from .resample import ResampleDiagnostics, UnsatisfiableError, constrained_sample

__all__ = [
    "ConstraintLogitsProcessor",
    "EditProposal",
    "LocalProposal",
    "Proposal",
    "RestartProposal",
    "ResampleDiagnostics",
    "UnsatisfiableError",
    "constrained_sample",
]


def __getattr__(name: str):
    """``ConstraintLogitsProcessor`` imports ``transformers`` (the ``[lm]`` extra): loaded on first use only."""
    if name == "ConstraintLogitsProcessor":
        from .logits_process import ConstraintLogitsProcessor
        return ConstraintLogitsProcessor
    raise AttributeError(f"module 'pseudosl.generation' has no attribute {name!r}")
