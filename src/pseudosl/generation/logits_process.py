"""A decoding-time guarantee for Hugging Face ``generate``: tokens that would make the constraint unsatisfiable get
``-inf``.

The logic lives in the mask (:func:`~pseudosl.generation.matcher.compile_mask`: streaming over an
:class:`~pseudosl.tokens.AutomatonConstraint`, or a window's circuit) and in the
:class:`~pseudosl.generation.matcher.TokenMatcher` that carries each row's state; this module keeps Hugging Face's
call protocol only: which calls belong to one ``generate`` call, and which row each row continues.

Generations.  A call *continues* the current generation when it has the same rows with one more token, each row
continuing a row of the last call (beam search copies and reorders rows:
:class:`~pseudosl.generation.row_lineage.RowLineage`, linear in the rows), and the generation is not over (fewer
than ``max_new_tokens`` tokens generated, when given).  Any other call *starts* a new generation: its
``input_ids`` are the prompt.  So one processor (or a ``LogitsProcessorList`` built once) serves any number of
``generate`` calls.  One case is ambiguous and refused by name: a window processor without ``max_new_tokens``
called one token past its window with rows that continue the last call -- ``generate`` running past the window,
or a second ``generate`` whose prompt is the first one's output.  Reading the rows on a GPU costs one
synchronisation per call.

Cut short.  When a generation ends (a new one starts) before ``max_new_tokens`` tokens with a row that could not
have ended accepted there, ``generate`` stopped it early (its ``max_new_tokens`` or ``max_length`` is smaller
than the processor's): a ``UserWarning`` says so.  Rows where the mask allows nothing (padding after an
end-of-sequence token, a prefix the processor did not make) are left unmasked.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

try:
    from transformers import LogitsProcessor
except ImportError as e:  # pragma: no cover - the [lm] extra is missing
    raise ImportError("pseudosl.ConstraintLogitsProcessor needs transformers: pip install 'pseudosl[lm]'") from e

from ..checks import check_bool, check_int, reads_values
from ..circuit import Circuit
from ..tokens.constraint import AutomatonConstraint, Constraint
from .automaton_mask import AutomatonMask
from .matcher import TokenMatcher, check_ids, compile_mask
from .row_lineage import RowLineage
from .window_mask import WindowMask

__all__ = ["ConstraintLogitsProcessor"]


class ConstraintLogitsProcessor(LogitsProcessor):
    """Masks (``-inf``) every next token whose choice leaves the constraint unsatisfiable given the generated prefix.

    Args:
        constraint: an :class:`~pseudosl.tokens.AutomatonConstraint` (streaming: any number of tokens), a
            :class:`~pseudosl.Constraint` (a window over the ``n`` tokens after the prompt, its value map folding
            the vocabulary), a :class:`~pseudosl.Circuit` over the token ids ``0 .. k-1`` (tokens ``>= k`` are then
            masked in the window; put it on the model's device), or a mask from ``compile_mask`` (shared).
        prompt_length: optional; ``P``, the length of the (padded) ``input_ids`` passed to ``generate``.  The first
            call of each generation gives it; a value passed here is checked against it.
        root: which root of a multi-rooted circuit (window only).
        eos_token_id: the end-of-sequence token(s) ``generate`` stops at (an int, a list or a tensor): EOS is
            allowed only where the text so far ends accepted.  ``None``: no token ends the text (a row that
            ``generate`` stops at its EOS may then end unaccepted).
        max_new_tokens: the ``max_new_tokens`` given to ``generate``.  Streaming: with ``r`` tokens left only tokens
            after which an accepting state is reachable in the ``r - 1`` tokens left are kept, so the text ends
            accepted.  Window: ``>= n``; the tokens past the window are not masked.  A call past it starts a new
            generation.  ``None``: streaming keeps every prefix live (extendable to an accepted text).
        inplace: ``False`` (the default, Hugging Face's convention): return a new tensor and leave ``scores`` as they
            are, at the cost of one copy per call (``R x V`` elements: 513 KB per row at ``V = 128,256`` in
            float32, most of a call's time from about 50K tokens up).  ``True`` (as XGrammar's
            ``apply_token_bitmask_inplace``): write ``-inf`` at the banned positions of ``scores`` itself (any
            strides) and return it: no copy, the cost is the positions written.  The non-finite rule and the
            ``MaskConflictError`` check are the same in both modes (when that error is raised in place, ``scores``
            already hold the mask); autograd sees the writes.  The price: the caller's tensor changes.  In the
            installed transformers' greedy search and sampling ``generate(..., output_logits=True)`` stores the very
            tensor it handed the processors, after they ran, so with this processor the first of the list to
            write it (no processor before it returned a new tensor: ``min_new_tokens``, temperature, top-k ... do)
            the returned ``logits`` carry its ``-inf`` instead of the model's raw logits; beam search and assisted
            decoding store a copy made before the processors (raw in both modes), and ``output_scores`` holds the
            processed scores in both modes.

    ``__call__(input_ids (R, P + t) integer, scores (R, V) float) -> (R, V)``: a new tensor (``inplace``: ``scores``
    itself), ``scores`` with the masked tokens at ``-inf`` (never added to: ``+inf`` or ``NaN`` scores cannot leak a
    banned token; allowed tokens keep their scores).  ``R`` is batch times beams.  ``self.matcher`` is the current
    generation's :class:`~pseudosl.generation.matcher.TokenMatcher`.

    Raises:
        UnsatisfiableError: (streaming) no text of the allowed lengths satisfies the automaton.
        MaskConflictError: (CPU tensors) every token the constraint allows in a row arrives at ``-inf``.

    Example:
        >>> import torch, pseudosl
        >>> from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=8, n_positions=16,
        ...                                   bos_token_id=0, eos_token_id=0, pad_token_id=0))
        >>> c = pseudosl.no_forbidden_sequences([[3], [4, 5], [5, 5]], n_positions=6, vocab_size=8)
        >>> masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(c)])   # built once, reused
        >>> for prompt in (torch.tensor([[0, 1], [0, 2]]), torch.tensor([[0, 3, 1]])):
        ...     out = gpt2.generate(prompt, do_sample=True, max_new_tokens=6, min_new_tokens=6, logits_processor=masks)
        ...     print(c.satisfied(out[:, prompt.shape[1]:]).tolist())
        [True, True]
        [True]
    """

    def __init__(self, constraint: AutomatonConstraint | Constraint | Circuit | AutomatonMask | WindowMask,
                 prompt_length: int | None = None, *, root: int | None = None,
                 eos_token_id: int | Sequence[int] | None = None, max_new_tokens: int | None = None,
                 inplace: bool = False) -> None:
        self.inplace = check_bool("inplace", inplace)
        self.expected_prompt_length = None if prompt_length is None else check_int("prompt_length", prompt_length, 0)
        self.max_new_tokens = None if max_new_tokens is None else check_int("max_new_tokens", max_new_tokens, 1)
        self.compiled = compile_mask(constraint, root=root, eos_token_id=eos_token_id,
                                     max_new_tokens=self.max_new_tokens)
        self.reset()

    def reset(self) -> None:
        """Forget the current generation: the next call starts a new one (its ``input_ids`` are the prompt)."""
        self.matcher: TokenMatcher | None = None
        self.prompt_length: int | None = None
        self._lineage: RowLineage | None = None

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        self._check(input_ids, scores)
        ids = input_ids.numpy() if input_ids.is_cpu else input_ids  # on CPU the rows are read through NumPy
        continues, parents = self._continues(ids)
        if continues:
            if scores.shape[1] != self.matcher.vocab_size:
                self.matcher.check_scores(scores)  # names the vocabulary and the fix
            self.matcher.advance(ids[:, -1], parents)
        else:
            self._start(input_ids, scores.shape[1])
        return self.matcher._mask(scores, self.inplace)

    def _continues(self, input_ids: Tensor | np.ndarray) -> tuple[bool, Tensor | None]:
        """Whether ``input_ids`` continues the current generation (and each row's parent row)."""
        if self.matcher is None or input_ids.shape[1] != self.prompt_length + self.matcher.generated + 1:
            return False, None
        generated = self.matcher.generated + 1
        if self.max_new_tokens is not None and generated >= self.max_new_tokens:
            return False, None
        continues, parents = self._lineage.follow(input_ids)
        n = self.compiled.n_positions
        if continues and n is not None and self.max_new_tokens is None and generated >= n:
            self.reset()
            raise ValueError(f"input_ids continue the last call one token past the window of {n} tokens: generate "
                             "runs past the window, or this is a new generate call whose prompt is the last output. "
                             "Pass the processor generate's max_new_tokens (tokens past the window are then not "
                             "masked, and a call past it starts a new generation), or call .reset() before the "
                             "new generate call")
        return continues, parents

    def _start(self, input_ids: Tensor, vocab_size: int) -> None:
        rows, length = input_ids.shape
        if self.expected_prompt_length is not None and length != self.expected_prompt_length:
            raise ValueError(f"prompt_length={self.expected_prompt_length} but the first call's input_ids hold "
                             f"{length} tokens (the prompt given to generate): pass prompt_length={length}, or leave "
                             "it out (the first call gives it)")
        self._warn_if_cut_short()
        self.matcher = TokenMatcher(self.compiled, rows, input_ids.device, vocab_size=vocab_size)
        self.prompt_length = length
        self._lineage = RowLineage(input_ids.numpy() if input_ids.is_cpu else input_ids)

    def _warn_if_cut_short(self) -> None:
        """Warn when the generation that ends here stopped before ``max_new_tokens`` with rows that could not end."""
        m = self.matcher
        if m is None or self.max_new_tokens is None or m.generated + 1 >= self.max_new_tokens:
            return
        stuck = (~m.can_end()).nonzero()[0]
        if len(stuck):
            warnings.warn(f"the last generate call stopped after {m.generated + 1} of max_new_tokens="
                          f"{self.max_new_tokens} tokens, where {len(stuck)} row(s) (row {stuck[0]} first) could not "
                          "end in the constraint: their texts may break it. Pass generate the processor's "
                          "max_new_tokens (and no smaller max_length)", UserWarning, stacklevel=4)

    def _check(self, input_ids: Tensor, scores: Tensor) -> None:
        """Shapes, dtypes, devices (free); a prompt's token ids on CPU tensors (the matcher checks the later ones, and
        ``__call__`` a continuing call's vocabulary)."""
        kind = input_ids.dtype if isinstance(input_ids, Tensor) else None
        if kind is None or kind.is_floating_point or kind.is_complex or kind == torch.bool:
            what = input_ids.dtype if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise TypeError(f"input_ids must be an integer tensor of token ids (R, length), got {what}: pass the "
                            "input_ids generate gives the processor")
        if not isinstance(scores, Tensor) or not scores.dtype.is_floating_point:
            what = scores.dtype if isinstance(scores, Tensor) else type(scores).__name__
            raise TypeError(f"scores must be a float tensor (R, V) of next-token scores, got {what}")
        if input_ids.dim() != 2 or scores.dim() != 2 or scores.shape[0] != input_ids.shape[0]:
            raise ValueError(f"input_ids (R, length) and scores (R, V) must share their rows R, got shapes "
                             f"{tuple(input_ids.shape)} and {tuple(scores.shape)}")
        if not (input_ids.is_cpu and scores.is_cpu) and input_ids.device != scores.device:
            raise ValueError(f"input_ids are on {input_ids.device} but scores on {scores.device}")
        if self.matcher is not None:  # the matcher checks the later calls' scores and tokens
            return
        self.compiled.check_vocab(scores.shape[1])
        if input_ids.numel() and reads_values(input_ids):
            check_ids("input_ids", input_ids.flatten(), input_ids.numel(), scores.shape[1],
                      "the token ids of the model whose scores these are")
