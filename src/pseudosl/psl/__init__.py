"""The pseudo-semantic loss for autoregressive models (Ahmed, Chang, Van den Broeck, NeurIPS 2023).

* :mod:`.neighbours` -- the generic local conditionals (reference, any ``log_joint``),
* :mod:`.loss`       -- :func:`pseudo_semantic_loss` and its diagnostics,
* :mod:`.decoder`    -- :class:`RecurrentDecoder` and its prefix-reusing :class:`RecurrentEngine`,
* :mod:`.causal_lm`  -- :class:`CausalLMEngine` (Hugging Face causal LMs, KV-cache reuse) and :class:`ValueMap`,
* :mod:`.sampling`   -- anchor sequences,
* :mod:`.fidelity`   -- :func:`local_fidelity`: entropies and KL of the local approximation against the model.
"""

from .causal_lm import CausalLMEngine, ValueMap
from .decoder import RecurrentDecoder, RecurrentEngine, exact_mode
from .fidelity import Fidelity, SamplerRequiredError, local_fidelity
from .loss import PSLDiagnostics, pseudo_semantic_loss, sample_satisfies
from .neighbours import local_conditionals, neighbours
from .sampling import sample_autoregressive, sample_from_logits

__all__ = [
    "CausalLMEngine",
    "Fidelity",
    "PSLDiagnostics",
    "RecurrentDecoder",
    "RecurrentEngine",
    "SamplerRequiredError",
    "ValueMap",
    "exact_mode",
    "local_conditionals",
    "local_fidelity",
    "neighbours",
    "pseudo_semantic_loss",
    "sample_autoregressive",
    "sample_from_logits",
    "sample_satisfies",
]
