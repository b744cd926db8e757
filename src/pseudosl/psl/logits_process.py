"""A decoding-time guarantee for Hugging Face ``generate``: tokens that would make the constraint unsatisfiable get ``-inf``.

The circuit covers the ``n`` positions generated after the prompt.  At generation step ``t < n`` the prefix
``y_<t`` is known; with it fixed as one-hot log-probabilities and every later position free (log-weight 0 for
every value), the circuit's marginal ``P(y_t = c | alpha, y_<t)`` under that input is positive exactly for the
values ``c`` that some completion ``y_>t`` extends to a model of ``alpha`` (:meth:`pseudosl.Circuit.marginals`:
one batched bottom-up and top-down pass per step for all rows, beams included).  Every other token is masked,
so greedy search, sampling and beam search keep every prefix extendable, and a row that generates ``n``
tokens ends in ``alpha``.  Unlike banning the last token of each forbidden sequence (``bad_words_ids``), the
mask looks ahead: it never leads into a prefix whose every continuation violates ``alpha``.

Exactness.  The marginals are ratios of counts: a positive marginal (and every weight on the way down) is at
least ``1 / #completions >= k^-n = exp(-n ln k)``, and a forbidden value gets exactly 0.  They are computed in
float32 when ``n ln k <= 80`` (float32's smallest normal number is ``exp(-87.3)``; a window of 10 tokens over
600 values is ``n ln k = 64``), in float64 up to ``n ln k = 700``, and larger circuits are refused when the
processor is built: no allowed token is ever masked by underflow.

Rows.  Rows whose prefix already has no completion (padding after an end-of-sequence token, or a prefix the
processor did not make) are left unmasked: there is nothing left to guarantee for them.  After ``n``
generated tokens nothing is masked (the constraint covers the window only; ``bad_words_ids`` also bans words
split across its edge, which ``alpha`` does not mention).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

try:
    from transformers import LogitsProcessor
except ImportError as e:  # pragma: no cover - the [lm] extra is missing
    raise ImportError("pseudosl.ConstraintLogitsProcessor needs transformers: pip install 'pseudosl[lm]'") from e

from ..circuit import Circuit
from .constraint import Constraint
from .sampling import check_count

__all__ = ["ConstraintLogitsProcessor", "MAX_LOG_COMPLETIONS"]

FLOAT32_LOG_COMPLETIONS = 80.0
"""Up to this ``n ln k`` the marginals run in float32 (its smallest normal number is ``exp(-87.3)``)."""
MAX_LOG_COMPLETIONS = 700.0
"""``n ln k`` above this could underflow a float64 marginal (``exp(-745)`` is 0): such circuits are refused."""


class ConstraintLogitsProcessor(LogitsProcessor):
    """Masks (``-inf``) every next token whose choice leaves the constraint unsatisfiable given the generated prefix.

    Args:
        constraint: a :class:`~pseudosl.Constraint` (its value map folds the vocabulary into the circuit's values,
            e.g. from :func:`pseudosl.no_forbidden_sequences`), or a :class:`~pseudosl.Circuit` whose values are the
            token ids ``0 .. k-1`` (tokens ``>= k`` are then masked inside the window).  On the model's device.
        prompt_length: ``P``, the length of the (padded) ``input_ids`` passed to ``generate``: the circuit's position
            ``i`` is token ``P + i``.
        root: which root of a multi-rooted circuit (required there).

    ``__call__(input_ids (R, P + t) long, scores (R, V) float) -> (R, V)``: a new tensor, ``scores`` with the masked
    tokens at ``-inf`` while ``t < n``; ``scores`` itself from ``t = n`` on.  ``R`` is batch times beams.

    Example:
        >>> import torch, pseudosl
        >>> from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=8, n_positions=16,
        ...                                   bos_token_id=0, eos_token_id=0, pad_token_id=0))
        >>> c = pseudosl.no_forbidden_sequences([[3], [4, 5], [5, 5]], n_positions=6, vocab_size=8)
        >>> prompt = torch.tensor([[0, 1], [0, 2]])
        >>> masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(c, prompt_length=2)])
        >>> out = gpt2.generate(prompt, do_sample=True, max_new_tokens=6, min_new_tokens=6, logits_processor=masks)
        >>> c.satisfied(out[:, 2:]).tolist()
        [True, True]
    """

    def __init__(self, constraint: Constraint | Circuit, prompt_length: int, *, root: int | None = None) -> None:
        if isinstance(constraint, Constraint):
            circuit, value_map = constraint.circuit, constraint.value_map
        elif isinstance(constraint, Circuit):
            circuit, value_map = constraint, None
        else:
            raise TypeError(f"constraint must be a pseudosl.Constraint or a pseudosl.Circuit, got {type(constraint).__name__}")
        self.prompt_length = check_count("prompt_length", prompt_length, 0)
        if circuit.n_roots > 1 and root is None:
            raise ValueError(f"this circuit has {circuit.n_roots} roots: pass root=r (0 <= r < {circuit.n_roots}), or "
                             "compile the conjunction of the constraints into one root")
        if root is not None and (isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < circuit.n_roots):
            raise ValueError(f"root must be an int in 0..{circuit.n_roots - 1}, got {root!r}")
        log_count = circuit.n_vars * math.log(circuit.n_values)
        if log_count > MAX_LOG_COMPLETIONS:
            raise ValueError(f"a circuit over {circuit.n_vars} positions with {circuit.n_values} values has up to "
                             f"exp({log_count:.0f}) completions, so a float64 marginal could underflow to 0 and mask an "
                             f"allowed token; use windows with n ln k <= {MAX_LOG_COMPLETIONS:.0f}")
        self.circuit, self.value_map, self.root = circuit, value_map, root
        self.dtype = torch.float32 if log_count <= FLOAT32_LOG_COMPLETIONS else torch.float64

    @property
    def n_positions(self) -> int:
        """``n``, the generated positions the constraint covers."""
        return self.circuit.n_vars

    def allowed_values(self, prefix: Tensor) -> Tensor:
        """``(R, k)`` bool: the values of position ``t`` that keep the constraint satisfiable after ``prefix (R, t)``
        (circuit values, ``t < n``); all False in a row whose prefix has no completion."""
        r, t = prefix.shape
        n, k = self.circuit.n_vars, self.circuit.n_values
        x = torch.zeros(r, n, k, dtype=self.dtype, device=prefix.device)
        x[:, :t] = float("-inf")
        x[:, :t].scatter_(-1, prefix.unsqueeze(-1), 0.0)  # the prefix as one-hot log-probabilities
        return self.circuit.marginals(x, root=self.root)[:, t] > 0

    def allowed_tokens(self, input_ids: Tensor, vocab_size: int) -> Tensor:
        """``(R, V)`` bool: the tokens ``__call__`` keeps for rows ``input_ids (R, P + t)``, ``t < n``."""
        prefix = input_ids[:, self.prompt_length:]
        if self.value_map is not None:
            ok = self.allowed_values(self.value_map.to_values(prefix))  # (R, D + 1)
            ok_tokens = ok[:, self.value_map.on(ok.device)[1]]  # (R, V)
        else:
            k = self.circuit.n_values
            known = (prefix < k).all(-1)  # a token outside the circuit's values: the prefix has no completion
            ok = self.allowed_values(prefix.clamp(max=k - 1)) & known[:, None]
            ok_tokens = torch.cat([ok, ok.new_zeros(ok.shape[0], vocab_size - k)], -1)
        stuck = ~ok.any(-1)  # finished / padded rows, or prefixes this processor did not make: left as they are
        return ok_tokens | stuck[:, None]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        t = input_ids.shape[1] - self.prompt_length
        if t < 0:
            raise ValueError(f"input_ids has {input_ids.shape[1]} tokens, fewer than prompt_length={self.prompt_length}: "
                             "pass the length of the input_ids given to generate as prompt_length")
        if t >= self.circuit.n_vars:
            return scores
        vocab = scores.shape[-1]
        if self.value_map is not None and vocab != self.value_map.vocab_size:
            raise ValueError(f"scores have {vocab} tokens but the constraint's value map folds a vocabulary of "
                             f"{self.value_map.vocab_size}; build the constraint with vocab_size={vocab}")
        if self.value_map is None and vocab < self.circuit.n_values:
            raise ValueError(f"scores have {vocab} tokens but the circuit reads token ids 0..{self.circuit.n_values - 1}")
        if self.circuit.root_rows.device != input_ids.device:
            raise ValueError(f"the circuit is on {self.circuit.root_rows.device} but input_ids on {input_ids.device}: "
                             f"move it with circuit.to({str(input_ids.device)!r})")
        return scores.masked_fill(~self.allowed_tokens(input_ids, vocab), float("-inf"))
