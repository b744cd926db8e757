"""The pseudo-semantic loss for autoregressive models (Ahmed, Chang, Van den Broeck, NeurIPS 2023).

* :mod:`.engine`      -- the engine protocol (what the loss, fidelity and sampling ask of a model), exact_mode,
  and :class:`LogJointEngine` (a bare ``log_joint``),
* :mod:`.adapt`       -- :func:`as_engine`: a user's model -> an engine,
* :mod:`.recurrent`   -- :class:`RecurrentEngine`: ``nn.RNN/GRU/LSTM`` step models with prefix reuse,
* :mod:`.decoder`     -- :class:`RecurrentDecoder`, the experiments' recurrent decoder,
* :mod:`.causal_lm`   -- :class:`CausalLMEngine` (Hugging Face causal LMs, key/value-cache reuse),
* :mod:`.folded_neighbours` -- which tokens it scores per position for a folded vocabulary (top-k), and the
  estimates of the rest,
* :mod:`.neighbours`  -- the generic local conditionals (the reference every engine is tested against),
* :mod:`.loss`        -- :func:`pseudo_semantic_loss` and its diagnostics,
* :mod:`.sampling`    -- drawing values from logits,
* :mod:`.fidelity`    -- :func:`local_fidelity`: entropies and KL of the local approximation against the model.

Constraints over a model's values (token ids) live in :mod:`pseudosl.tokens`; outputs that satisfy them
(resampling, decoding-time masks) in :mod:`pseudosl.generation`.
"""

from .adapt import as_engine
from .causal_lm import CausalLMEngine
from .decoder import RecurrentDecoder
from .engine import Engine, LogJointEngine, exact_mode
from .fidelity import Fidelity, SamplerRequiredError, local_fidelity
from .loss import PSLDiagnostics, pseudo_semantic_loss
from .neighbours import local_conditionals, neighbours
from .recurrent import EmbeddingSteps, RecurrentEngine, RecurrentSteps
from .sampling import sample_autoregressive, sample_from_logits

__all__ = [
    "CausalLMEngine",
    "EmbeddingSteps",
    "Engine",
    "Fidelity",
    "LogJointEngine",
    "PSLDiagnostics",
    "RecurrentDecoder",
    "RecurrentEngine",
    "RecurrentSteps",
    "SamplerRequiredError",
    "as_engine",
    "exact_mode",
    "local_conditionals",
    "local_fidelity",
    "neighbours",
    "pseudo_semantic_loss",
    "sample_autoregressive",
    "sample_from_logits",
]

