"""Outputs that satisfy a constraint.

* :mod:`.resample`       -- :func:`constrained_sample`: locally constrained resampling (candidates from the local
  distribution conditioned on the constraint, reweighted towards the model's own conditional),
* :mod:`.proposals`      -- where the candidates come from: :class:`LocalProposal` (Gen-C's local distribution),
  :class:`EditProposal` (edits where the constraint needs them), :class:`RestartProposal` (masked regeneration
  after the anchor's repaired prefix),
* :mod:`.matcher`        -- :func:`compile_mask` (a constraint compiled once into its token mask) and
  :class:`TokenMatcher` (rows' states over it, driven by any decoding loop: advance, mask, rollback), over
* :mod:`.automaton_mask` -- :class:`AutomatonMask`: an automaton's states, with a token list cached per state,
* :mod:`.window_mask`    -- :class:`WindowMask`: a window's circuit and its marginals,
* :mod:`.banned`         -- the banned tokens as lists of positions, written into the scores (the non-finite rule),
* :mod:`.row_lineage`    -- rows followed through beam-search reorderings, and
* :mod:`.logits_process` -- :class:`ConstraintLogitsProcessor`: the matcher under Hugging Face ``generate``
  (imports ``transformers``: loaded on first use).
"""

from .automaton_mask import AutomatonMask
from .banned import MaskConflictError
from .matcher import TokenMatcher, compile_mask
from .proposals import EditProposal, LocalProposal, Proposal, RestartProposal
from .resample import ResampleDiagnostics, UnsatisfiableError, constrained_sample
from .window_mask import WindowMask

__all__ = [
    "AutomatonMask",
    "ConstraintLogitsProcessor",
    "EditProposal",
    "LocalProposal",
    "MaskConflictError",
    "Proposal",
    "RestartProposal",
    "ResampleDiagnostics",
    "TokenMatcher",
    "UnsatisfiableError",
    "WindowMask",
    "compile_mask",
    "constrained_sample",
]


def __getattr__(name: str):
    """``ConstraintLogitsProcessor`` imports ``transformers`` (the ``[lm]`` extra): loaded on first use only."""
    if name == "ConstraintLogitsProcessor":
        from .logits_process import ConstraintLogitsProcessor
        return ConstraintLogitsProcessor
    raise AttributeError(f"module 'pseudosl.generation' has no attribute {name!r}")
