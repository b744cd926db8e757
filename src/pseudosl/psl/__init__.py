"""The pseudo-semantic loss for autoregressive models (Ahmed, Chang, Van den Broeck, NeurIPS 2023).

* :mod:`.engine`      -- the engine protocol (what the loss, fidelity and sampling ask of a model), exact_mode,
  and :class:`LogJointEngine` (a bare ``log_joint``),
* :mod:`.adapt`       -- :func:`as_engine`: a user's model -> an engine,
* :mod:`.recurrent`   -- :class:`RecurrentEngine`: ``nn.RNN/GRU/LSTM`` step models with prefix reuse,
* :mod:`.decoder`     -- :class:`RecurrentDecoder`, the experiments' recurrent decoder,
* :mod:`.causal_lm`   -- :class:`CausalLMEngine` (Hugging Face causal LMs, key/value-cache reuse),
* :mod:`.folded_neighbours` -- which tokens it scores per position for a folded vocabulary (top-k), and the
  estimates of the rest,
* :mod:`.constraint`  -- :class:`Constraint` (a circuit and its :class:`ValueMap`), :func:`no_forbidden_sequences`,
  :class:`AutomatonConstraint` (an automaton over a model's values, any length),
* :mod:`.words`       -- :func:`no_forbidden_words`: words in the decoded text, under any tokenization,
* :mod:`.neighbours`  -- the generic local conditionals (the reference every engine is tested against),
* :mod:`.loss`        -- :func:`pseudo_semantic_loss` and its diagnostics,
* :mod:`.sampling`    -- drawing values from logits,
* :mod:`.fidelity`    -- :func:`local_fidelity`: entropies and KL of the local approximation against the model,
* :mod:`.resample`    -- :func:`constrained_sample`: outputs that satisfy the constraint (locally constrained resampling),
* :mod:`.logits_process` -- :class:`ConstraintLogitsProcessor`: decoding-time masks for Hugging Face ``generate``
  (imports ``transformers``: loaded on first use), over a window or streaming with
  :mod:`.automaton_mask` (an automaton's states and masks on a device) and :mod:`.row_lineage` (rows followed
  through beam-search reorderings).
"""

from .adapt import as_engine
from .causal_lm import CausalLMEngine
from .constraint import AutomatonConstraint, Constraint, ValueMap, no_forbidden_sequences, sample_satisfies
from .decoder import RecurrentDecoder
from .engine import Engine, LogJointEngine, exact_mode
from .fidelity import Fidelity, SamplerRequiredError, local_fidelity
from .loss import PSLDiagnostics, pseudo_semantic_loss
from .neighbours import local_conditionals, neighbours
from .recurrent import EmbeddingSteps, RecurrentEngine, RecurrentSteps
from .resample import ResampleDiagnostics, UnsatisfiableError, constrained_sample
from .sampling import sample_autoregressive, sample_from_logits
from .words import no_forbidden_words

__all__ = [
    "AutomatonConstraint",
    "CausalLMEngine",
    "Constraint",
    "ConstraintLogitsProcessor",
    "EmbeddingSteps",
    "Engine",
    "Fidelity",
    "LogJointEngine",
    "PSLDiagnostics",
    "RecurrentDecoder",
    "RecurrentEngine",
    "RecurrentSteps",
    "ResampleDiagnostics",
    "SamplerRequiredError",
    "UnsatisfiableError",
    "ValueMap",
    "as_engine",
    "constrained_sample",
    "exact_mode",
    "local_conditionals",
    "local_fidelity",
    "neighbours",
    "no_forbidden_sequences",
    "no_forbidden_words",
    "pseudo_semantic_loss",
    "sample_autoregressive",
    "sample_from_logits",
    "sample_satisfies",
]


def __getattr__(name: str):
    """``ConstraintLogitsProcessor`` imports ``transformers`` (the ``[lm]`` extra): loaded on first use only."""
    if name == "ConstraintLogitsProcessor":
        from .logits_process import ConstraintLogitsProcessor
        return ConstraintLogitsProcessor
    raise AttributeError(f"module 'pseudosl.psl' has no attribute {name!r}")
