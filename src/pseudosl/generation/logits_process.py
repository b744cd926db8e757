"""A decoding-time guarantee for Hugging Face ``generate``: tokens that would make the constraint unsatisfiable get ``-inf``.

Two modes, chosen by the constraint:

* **Streaming** (an :class:`~pseudosl.tokens.constraint.AutomatonConstraint`), for any number of generated tokens.
  Each row carries its automaton state (:class:`~pseudosl.generation.automaton_mask.AutomatonMask`); a token is masked
  when its state can no longer reach an accepting state in the tokens left (a *live* state when no
  ``max_new_tokens`` is given), so every prefix extends to a text the automaton accepts.  With
  ``eos_token_id`` the end-of-sequence token ends the text: it is masked in non-accepting states.  With
  ``max_new_tokens`` the text also ends accepted when the tokens run out.  The automaton reads the generated tokens
  from its start state: the guarantee is on the continuation's own text (``decode(generated_ids)``), not on the
  prompt's text joined to it -- a word the prompt begins and the continuation ends (prompt ``"... a B"``,
  continuation ``"itch"``) is not seen.  Cut prompts at a word boundary where that matters.  Beam search reorders and copies rows
  between calls: each row's state follows its row (:class:`~pseudosl.generation.row_lineage.RowLineage`, ``O(R^3)``
  per call for ``R`` rows whatever the length).  A call costs a few gathers over ``(R, V)``, with no host
  synchronisation on a GPU.
* **Window** (a :class:`~pseudosl.Constraint` or a :class:`~pseudosl.Circuit`): the circuit covers the ``n``
  positions generated after the prompt.  At step ``t < n`` the prefix ``y_<t`` is known; with it fixed as
  one-hot log-probabilities and every later position free (log-weight 0 for every value), the circuit's marginal
  ``P(y_t = c | alpha, y_<t)`` is positive exactly for the values ``c`` that some completion extends to a model of
  ``alpha`` (:meth:`pseudosl.Circuit.marginals`, one batched pass per step for all rows, beams included).  After
  ``n`` generated tokens nothing is masked (``bad_words_ids`` also bans words split across the window's edge,
  which ``alpha`` does not mention).

Exactness of the window's marginals.  They are ratios of counts: a positive marginal (and every weight on the
way down) is at least ``1 / #completions >= k^-n = exp(-n ln k)``, and a forbidden value gets exactly 0.  They
are computed in float32 when ``n ln k <= 80`` (float32's smallest normal number is ``exp(-87.3)``; a window of
10 tokens over 600 values is ``n ln k = 64``), in float64 up to ``n ln k = 700``, and larger circuits are refused
when the processor is built: no allowed token is ever masked by underflow.

One processor follows one ``generate`` call.  Its first call gives the prompt (``input_ids`` of ``P`` tokens; a
``prompt_length`` passed explicitly must equal ``P``); every later call must add exactly one token to the same
rows (on CPU tensors it also checks that each row still starts with its prompt and continues a row of the last
call: reading the rows is free there, not on a GPU).  Anything else is refused: make a new processor for each
``generate`` call, or call :meth:`reset`.

Rows where every token would be masked (padding after an end-of-sequence token, or a prefix the processor did
not make) are left unmasked: there is nothing left to guarantee for them.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

try:
    from transformers import LogitsProcessor
except ImportError as e:  # pragma: no cover - the [lm] extra is missing
    raise ImportError("pseudosl.ConstraintLogitsProcessor needs transformers: pip install 'pseudosl[lm]'") from e

from .. import checks
from ..checks import check_root
from ..circuit import Circuit
from ..logic.checks import check_int
from .automaton_mask import AutomatonMask
from ..tokens.constraint import AutomatonConstraint, Constraint
from .row_lineage import RowLineage

__all__ = ["ConstraintLogitsProcessor", "MAX_LOG_COMPLETIONS"]

FLOAT32_LOG_COMPLETIONS = 80.0
"""Up to this ``n ln k`` the marginals run in float32 (its smallest normal number is ``exp(-87.3)``)."""
MAX_LOG_COMPLETIONS = 700.0
"""``n ln k`` above this could underflow a float64 marginal (``exp(-745)`` is 0): such circuits are refused."""
ONE_CALL = ("a ConstraintLogitsProcessor follows one generate call: make a new one for each generate call, or call "
            ".reset() between calls")


class ConstraintLogitsProcessor(LogitsProcessor):
    """Masks (``-inf``) every next token whose choice leaves the constraint unsatisfiable given the generated prefix.

    Args:
        constraint: an :class:`~pseudosl.tokens.AutomatonConstraint` (streaming: any number of tokens), a
            :class:`~pseudosl.Constraint` (its value map folds the vocabulary into the circuit's values, e.g. from
            :func:`pseudosl.no_forbidden_sequences`), or a :class:`~pseudosl.Circuit` whose values are the token
            ids ``0 .. k-1`` (tokens ``>= k`` are then masked inside the window).  A circuit must be on the model's
            device; an automaton is copied to it on the first call.
        prompt_length: optional; ``P``, the length of the (padded) ``input_ids`` passed to ``generate``.  The first
            call gives it; a value passed here is checked against it.  In window mode circuit position ``i`` is
            token ``P + i``.
        root: which root of a multi-rooted circuit (required there; window mode only).
        eos_token_id: streaming only: the end-of-sequence token(s) (an int or a list).  The text ends before it, so
            it is masked in non-accepting states; the automaton never reads it.  ``None`` (default): no token ends
            the text; a row that ``generate`` stops at its EOS may then end in any live state.
        max_new_tokens: streaming only: the ``max_new_tokens`` given to ``generate``.  With ``r`` tokens left, only
            tokens after which an accepting state is reachable in the ``r - 1`` tokens left are kept (exactly
            ``r - 1``, or at most ``r - 1`` with ``eos_token_id``), so the text ends accepted; a call past it is
            refused.  ``None``: every prefix stays live (extendable to an accepted text), however long.

    ``__call__(input_ids (R, P + t) integer, scores (R, V) float) -> (R, V)``: a new tensor, ``scores`` with the
    masked tokens at ``-inf``; in window mode ``scores`` itself from ``t = n`` on.  ``R`` is batch times beams.

    Raises:
        UnsatisfiableError: (streaming) no text of the allowed lengths satisfies the automaton.

    Example:
        >>> import torch, pseudosl
        >>> from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=8, n_positions=16,
        ...                                   bos_token_id=0, eos_token_id=0, pad_token_id=0))
        >>> c = pseudosl.no_forbidden_sequences([[3], [4, 5], [5, 5]], n_positions=6, vocab_size=8)
        >>> prompt = torch.tensor([[0, 1], [0, 2]])
        >>> masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(c)])  # the prompt: the first call's
        >>> out = gpt2.generate(prompt, do_sample=True, max_new_tokens=6, min_new_tokens=6, logits_processor=masks)
        >>> c.satisfied(out[:, 2:]).tolist()
        [True, True]
    """

    def __init__(self, constraint: AutomatonConstraint | Constraint | Circuit, prompt_length: int | None = None, *,
                 root: int | None = None, eos_token_id: int | Sequence[int] | None = None,
                 max_new_tokens: int | None = None) -> None:
        self.expected_prompt_length = None if prompt_length is None else check_int("prompt_length", prompt_length, 0)
        self.automaton: AutomatonMask | None = None
        self.circuit: Circuit | None = None
        if isinstance(constraint, AutomatonConstraint):
            if root is not None:
                raise ValueError(f"root={root!r} picks a root of a circuit; an AutomatonConstraint has none: leave "
                                 "root=None")
            self.vocab_size = constraint.vocab_size
            self.max_new_tokens = None if max_new_tokens is None else check_int("max_new_tokens", max_new_tokens, 1)
            self.automaton = AutomatonMask(constraint, eos_token_ids=_eos_ids(eos_token_id, self.vocab_size),
                                           max_new_tokens=self.max_new_tokens)
        elif isinstance(constraint, (Constraint, Circuit)):
            for name, value in (("eos_token_id", eos_token_id), ("max_new_tokens", max_new_tokens)):
                if value is not None:
                    raise ValueError(f"{name}={value!r} applies to an AutomatonConstraint (streaming); a window's "
                                     f"circuit covers its n tokens whatever the length: leave {name}=None, or pass "
                                     "the AutomatonConstraint the window was compiled from")
            self.max_new_tokens = None
            self._init_window(constraint, root)
        else:
            raise TypeError("constraint must be a pseudosl.tokens.AutomatonConstraint, a pseudosl.Constraint or a "
                            f"pseudosl.Circuit, got {type(constraint).__name__}")
        self.reset()

    def _init_window(self, constraint: Constraint | Circuit, root: int | None) -> None:
        circuit, value_map = (constraint.circuit, constraint.value_map) if isinstance(constraint, Constraint) \
            else (constraint, None)
        root = check_root(root, circuit.n_roots)
        log_count = circuit.n_vars * math.log(circuit.n_values)
        if log_count > MAX_LOG_COMPLETIONS:
            raise ValueError(f"a circuit over {circuit.n_vars} positions with {circuit.n_values} values has up to "
                             f"exp({log_count:.0f}) completions, so a float64 marginal could underflow to 0 and mask an "
                             f"allowed token; use windows with n ln k <= {MAX_LOG_COMPLETIONS:.0f}")
        self.circuit, self.value_map, self.root = circuit, value_map, root
        self.vocab_size = value_map.vocab_size if value_map is not None else None  # a bare circuit: any V >= k
        self.dtype = torch.float32 if log_count <= FLOAT32_LOG_COMPLETIONS else torch.float64

    @property
    def streaming(self) -> bool:
        """Whether the processor follows an automaton (any length) rather than a window's circuit."""
        return self.automaton is not None

    @property
    def n_positions(self) -> int | None:
        """``n``, the generated positions a window covers (``None`` when streaming: every position)."""
        return None if self.circuit is None else self.circuit.n_vars

    def reset(self) -> None:
        """Forget the calls so far: the next call starts a new ``generate`` call (its prompt)."""
        self.prompt_length: int | None = None  # learnt from the first call
        self._length: int | None = None
        self._prompt: Tensor | None = None
        self._states: Tensor | None = None
        self._lineage: RowLineage | None = None
        self._last_ids: Tensor | None = None  # the last call's rows, kept on CPU only (to check the lineage)

    # -- __call__ ------------------------------------------------------------------------------------------
    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        vocab = self._check_inputs(input_ids, scores)
        input_ids = input_ids.long()
        if self._length is None:
            self._start(input_ids)
        else:
            self._continue(input_ids)
        generated = input_ids.shape[1] - self.prompt_length
        if self.automaton is not None:
            return self.automaton.mask(self._states, generated, scores)
        if generated >= self.circuit.n_vars:
            return scores
        return scores.masked_fill(~self.allowed_tokens(input_ids[:, self.prompt_length:], vocab), float("-inf"))

    def _check_inputs(self, input_ids: Tensor, scores: Tensor) -> int:
        """Shapes, dtypes, devices (free); token ids on CPU tensors (read only where the data is on the host)."""
        if not isinstance(input_ids, Tensor) or input_ids.dtype.is_floating_point or input_ids.dtype.is_complex \
                or input_ids.dtype == torch.bool:
            what = input_ids.dtype if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise TypeError(f"input_ids must be an integer tensor of token ids (R, length), got {what}: pass the "
                            "input_ids generate gives the processor")
        if not isinstance(scores, Tensor) or not scores.dtype.is_floating_point:
            what = scores.dtype if isinstance(scores, Tensor) else type(scores).__name__
            raise TypeError(f"scores must be a float tensor (R, V) of next-token scores, got {what}")
        if input_ids.dim() != 2 or scores.dim() != 2 or scores.shape[0] != input_ids.shape[0]:
            raise ValueError(f"input_ids (R, length) and scores (R, V) must share their rows R, got shapes "
                             f"{tuple(input_ids.shape)} and {tuple(scores.shape)}")
        if input_ids.device != scores.device:
            raise ValueError(f"input_ids are on {input_ids.device} but scores on {scores.device}")
        vocab = scores.shape[1]
        if self.vocab_size is not None and vocab != self.vocab_size:
            raise ValueError(f"scores have {vocab} tokens but the constraint's value map folds a vocabulary of "
                             f"{self.vocab_size}; build the constraint with vocab_size={vocab}")
        if self.circuit is not None:
            if self.value_map is None and vocab < self.circuit.n_values:
                raise ValueError(f"scores have {vocab} tokens but the circuit reads token ids "
                                 f"0..{self.circuit.n_values - 1}")
            if self.circuit.root_rows.device != input_ids.device:
                raise ValueError(f"the circuit is on {self.circuit.root_rows.device} but input_ids on "
                                 f"{input_ids.device}: move it with circuit.to({str(input_ids.device)!r})")
        new = input_ids if self._length is None else input_ids[:, -1:]  # earlier tokens were checked when new
        if new.numel() and checks.reads_values(new):
            low, high = torch.aminmax(new)
            if low < 0 or high >= vocab:
                outside = int(new[(new < 0) | (new >= vocab)][0])
                raise ValueError(f"input_ids holds token {outside} outside the vocabulary 0..{vocab - 1}: pass the "
                                 "token ids of the model whose scores these are")
        return vocab

    def _start(self, input_ids: Tensor) -> None:
        rows, length = input_ids.shape
        if self.expected_prompt_length is not None and length != self.expected_prompt_length:
            raise ValueError(f"prompt_length={self.expected_prompt_length} but the first call's input_ids hold "
                             f"{length} tokens (the prompt given to generate): pass prompt_length={length}, or leave "
                             "it out (the first call gives it)")
        self.prompt_length, self._length, self._prompt = length, length, input_ids.clone()
        if self.automaton is not None:
            self._states = self.automaton.start_states(rows, input_ids.device)
            self._lineage = RowLineage(input_ids) if rows > 1 else None
            self._last_ids = input_ids.clone() if checks.reads_values(input_ids) else None

    def _continue(self, input_ids: Tensor) -> None:
        """Check that ``input_ids`` continues the last call's rows; carry the automaton states along."""
        rows, length = input_ids.shape
        if rows != self._prompt.shape[0] or length != self._length + 1:
            raise ValueError(f"input_ids has shape {tuple(input_ids.shape)} but the last call had "
                             f"{(self._prompt.shape[0], self._length)}: a call adds exactly one token to the same "
                             "rows; " + ONE_CALL)
        generated = length - self.prompt_length
        if self.max_new_tokens is not None and generated >= self.max_new_tokens:
            raise ValueError(f"this call asks for generated token {generated + 1} but the processor was built with "
                             f"max_new_tokens={self.max_new_tokens}: pass generate the same max_new_tokens")
        on_host = checks.reads_values(input_ids)
        if on_host and not torch.equal(input_ids[:, :self.prompt_length], self._prompt):
            row = int((input_ids[:, :self.prompt_length] != self._prompt).any(1).nonzero()[0])
            raise ValueError(f"input_ids row {row} does not start with the prompt of the first call; " + ONE_CALL)
        if self.automaton is None:
            self._length = length
            return
        parents = None if self._lineage is None else self._lineage.parents(input_ids)  # one row: its own parent
        if on_host and self._last_ids is not None:  # the exact check: reading the rows costs no device sync here
            last = self._last_ids if parents is None else self._last_ids[parents]
            if not torch.equal(input_ids[:, :-1], last):
                row = int((input_ids[:, :-1] != last).any(1).nonzero()[0])
                raise ValueError(f"input_ids row {row} continues no row of the last call (its first {length - 1} "
                                 "tokens match none of them); " + ONE_CALL)
            self._last_ids = input_ids.clone()
        if parents is not None:
            self._lineage.advance(input_ids, parents)
            self._states = self._states[parents]
        self._states = self.automaton.step(self._states, input_ids[:, -1])
        self._length = length

    # -- window mode ---------------------------------------------------------------------------------------
    def allowed_values(self, prefix: Tensor) -> Tensor:
        """Window mode: ``(R, k)`` bool, the values of position ``t`` that keep the constraint satisfiable after
        ``prefix (R, t)`` (circuit values, ``t < n``); all False in a row whose prefix has no completion."""
        r, t = prefix.shape
        n, k = self.circuit.n_vars, self.circuit.n_values
        x = torch.zeros(r, n, k, dtype=self.dtype, device=prefix.device)
        x[:, :t] = float("-inf")
        x[:, :t].scatter_(-1, prefix.unsqueeze(-1), 0.0)  # the prefix as one-hot log-probabilities
        return self.circuit.marginals(x, root=self.root)[:, t] > 0

    def allowed_tokens(self, generated: Tensor, vocab_size: int) -> Tensor:
        """Window mode: ``(R, V)`` bool, the tokens ``__call__`` keeps after the generated tokens ``(R, t)``,
        ``t < n``."""
        if self.value_map is not None:
            ok = self.allowed_values(self.value_map.to_values(generated))  # (R, k)
            ok_tokens = ok[:, self.value_map.to_values(torch.arange(vocab_size, device=ok.device))]  # (R, V)
        else:
            k = self.circuit.n_values
            known = (generated < k).all(-1)  # a token outside the circuit's values: the prefix has no completion
            ok = self.allowed_values(generated.clamp(max=k - 1)) & known[:, None]
            ok_tokens = torch.cat([ok, ok.new_zeros(ok.shape[0], vocab_size - k)], -1)
        stuck = ~ok.any(-1)  # finished / padded rows, or prefixes this processor did not make: left as they are
        return ok_tokens | stuck[:, None]


def _eos_ids(eos_token_id: int | Sequence[int] | None, vocab_size: int) -> tuple[int, ...]:
    """``eos_token_id`` as a tuple of token ids in ``0 .. vocab_size-1`` (``None``: none)."""
    if eos_token_id is None:
        return ()
    ids = [eos_token_id] if not isinstance(eos_token_id, (list, tuple)) else list(eos_token_id)
    ids = [check_int("eos_token_id", t) for t in ids]
    if not ids:
        raise ValueError("eos_token_id is an empty list: pass the end-of-sequence token id(s), or None")
    for t in ids:
        if not 0 <= t < vocab_size:
            raise ValueError(f"eos_token_id holds {t}, outside the vocabulary 0..{vocab_size - 1}: pass the model's "
                             "end-of-sequence token (tokenizer.eos_token_id)")
    return tuple(sorted(set(ids)))
