"""Compile a constraint once, then match rows of text against it token by token, in any decoding loop.

:func:`compile_mask` turns a constraint into its mask -- an :class:`~pseudosl.generation.automaton_mask.AutomatonMask`
(an :class:`~pseudosl.tokens.AutomatonConstraint`: any number of tokens) or a
:class:`~pseudosl.generation.window_mask.WindowMask` (a :class:`~pseudosl.Constraint` or
:class:`~pseudosl.Circuit`: the ``n`` tokens after the prompt).  Compile it once per constraint and tokenizer: an
automaton's per-state token lists are built on first use and shared by every matcher and call after.
:class:`TokenMatcher` carries ``R`` rows' states over a mask (as XGrammar's ``GrammarMatcher`` over a compiled
grammar): :meth:`~TokenMatcher.advance` by one token per row (beam search: each row continuing a row of the last
step), :meth:`~TokenMatcher.mask` the next-token scores, :meth:`~TokenMatcher.allowed` as a bool table,
:meth:`~TokenMatcher.rollback` tokens.  The Hugging Face processor
(:class:`~pseudosl.generation.logits_process.ConstraintLogitsProcessor`) is one loop that drives it.

Example:
    >>> import torch, pseudosl
    >>> from pseudosl.generation import TokenMatcher, compile_mask
    >>> mask = compile_mask(pseudosl.no_forbidden_sequences([[3], [4, 5]], n_positions=4, vocab_size=8))
    >>> m = TokenMatcher(mask, rows=2)
    >>> m.advance(torch.tensor([4, 1]))             # row 0 read a 4: a 5 would complete "4 5"
    >>> m.allowed()[:, [3, 5]].tolist()             # a 3 is banned everywhere, a 5 after the 4
    [[False, False], [False, True]]
    >>> scores = m.mask(torch.zeros(2, 8))          # the banned tokens at -inf, a new tensor
    >>> m.rollback(1); m.generated
    0
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from ..checks import check_bool, check_int
from ..circuit import Circuit
from ..tokens.constraint import AutomatonConstraint, Constraint
from .automaton_mask import AutomatonMask
from .banned import Banned
from .window_mask import WindowMask

__all__ = ["TokenMask", "TokenMatcher", "check_ids", "compile_mask", "eos_ids"]


class TokenMask(Protocol):
    """What a matcher drives: :class:`AutomatonMask` and :class:`WindowMask` (a state is an array or tensor whose
    first dimension is the rows)."""

    vocab_size: int | None  # None: any vocabulary the constraint can read (a bare circuit)
    eos_token_ids: tuple[int, ...]
    max_new_tokens: int | None  # the most tokens a text may have (None: any number)
    n_positions: int | None  # the positions masked after the prompt (None: every one)

    def check_vocab(self, vocab_size: int) -> None: ...
    def start(self, rows: int, device: torch.device) -> Any: ...
    def select(self, state: Any, rows: Tensor) -> Any: ...
    def advance(self, state: Any, tokens: Tensor | np.ndarray) -> Any: ...
    def banned(self, state: Any, generated: int, vocab_size: int, device: torch.device) -> Banned: ...
    def can_end(self, state: Any, generated: int) -> np.ndarray: ...


def eos_ids(eos_token_id: int | Sequence[int] | None, vocab_size: int | None) -> tuple[int, ...]:
    """``eos_token_id`` as a tuple of token ids in ``0 .. vocab_size-1`` (``None``: none)."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, (Tensor, np.ndarray)):  # generate's own eos tensor
        eos_token_id = eos_token_id.tolist()
    ids = [eos_token_id] if not isinstance(eos_token_id, (list, tuple)) else list(eos_token_id)
    ids = [check_int("eos_token_id", t, 0) for t in ids]
    if not ids:
        raise ValueError("eos_token_id is an empty list: pass the end-of-sequence token id(s), or None")
    for t in ids:
        if vocab_size is not None and t >= vocab_size:
            raise ValueError(f"eos_token_id holds {t}, outside the vocabulary 0..{vocab_size - 1}: pass the model's "
                             "end-of-sequence token (tokenizer.eos_token_id)")
    return tuple(sorted(set(ids)))


def compile_mask(constraint: AutomatonConstraint | Constraint | Circuit | AutomatonMask | WindowMask, *,
                 root: int | None = None,
                 eos_token_id: int | Sequence[int] | None = None,
                 max_new_tokens: int | None = None) -> AutomatonMask | WindowMask:
    """The mask of ``constraint``: streaming for an :class:`AutomatonConstraint`, a window otherwise.

    Args:
        constraint: an :class:`AutomatonConstraint`, a :class:`Constraint` or a :class:`Circuit` over token ids (a
            mask compiled already is returned as it is, its options checked against these).
        root: which root of a multi-rooted circuit (windows only).
        eos_token_id: the end-of-sequence token(s) that end the text (module docs of each mask).
        max_new_tokens: the text's length: streaming plans for the text to end accepted then; a window checks that
            it covers the window (the tokens past it are not masked).
    """
    max_new_tokens = None if max_new_tokens is None else check_int("max_new_tokens", max_new_tokens, 1)
    if isinstance(constraint, (AutomatonMask, WindowMask)):
        if (root, eos_token_id) != (None, None) or constraint.max_new_tokens not in (None, max_new_tokens):
            raise ValueError("a compiled mask carries its root, eos_token_id and max_new_tokens: pass them to "
                             "compile_mask, and the same max_new_tokens to the processor")
        mask = constraint
    elif isinstance(constraint, AutomatonConstraint):
        if root is not None:
            raise ValueError(f"root={root!r} picks a root of a circuit; an AutomatonConstraint has none: leave "
                             "root=None")
        mask = AutomatonMask(constraint, eos_token_ids=eos_ids(eos_token_id, constraint.vocab_size),
                             max_new_tokens=max_new_tokens)
    elif isinstance(constraint, (Constraint, Circuit)):
        vocab = constraint.value_map.vocab_size if isinstance(constraint, Constraint) and \
            constraint.value_map is not None else None
        mask = WindowMask(constraint, root=root, eos_token_ids=eos_ids(eos_token_id, vocab))
    else:
        raise TypeError("constraint must be a pseudosl.tokens.AutomatonConstraint, a pseudosl.Constraint or a "
                        f"pseudosl.Circuit, got {type(constraint).__name__}")
    n = mask.n_positions
    if n is not None and max_new_tokens is not None and max_new_tokens < n:
        raise ValueError(f"max_new_tokens={max_new_tokens} is below the window's {n} tokens: generate would stop "
                         f"before the window ends; pass generate (and the processor) max_new_tokens >= {n}")
    return mask


INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
UNSIGNED = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


def check_ids(name: str, ids: object, rows: int, high: int | None, what: str) -> None:
    """Refuse ``ids`` unless an integer tensor (or NumPy array) of shape ``(rows,)`` whose values (read on the host)
    lie in ``0 .. high-1``."""
    if isinstance(ids, np.ndarray):
        ok, a = ids.dtype.kind in "iu" and ids.shape == (rows,), ids
    else:
        ok = isinstance(ids, Tensor) and ids.dtype in INTEGERS and ids.shape == (rows,)
        a = ids.numpy() if ok and ids.is_cpu else None  # values are read on CPU tensors only
    if not ok:
        got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, (Tensor, np.ndarray)) else type(ids).__name__
        raise TypeError(f"{name} must be an integer tensor of shape ({rows},), got {got}")
    if high is not None and rows and a is not None:
        if max(a.view(UNSIGNED[a.itemsize]).tolist()) >= high:  # a negative id is a large unsigned one
            bad = int(a[(a < 0) | (a >= high)][0])
            raise ValueError(f"{name} holds {bad}, outside 0..{high - 1}: pass {what}")


class TokenMatcher:
    """``rows`` texts read token by token against a compiled mask (:func:`compile_mask`).

    Args:
        mask: an :class:`AutomatonMask` or :class:`WindowMask` (several matchers may share one).
        rows: how many texts (``R >= 0``).
        device: where the scores and tokens live.
        vocab_size: the scores' ``V``, for a bare circuit (any vocabulary ``>= k``); else the constraint's.

    ``advance(tokens (R',), parents=None)``: row ``i`` of the next step continues row ``parents[i]`` (``None``: row
    ``i``) and reads ``tokens[i]``; ``mask(scores (R, V), inplace=False)``: a new tensor with the banned tokens at
    ``-inf`` (``inplace``: ``scores`` itself, written at the banned positions only)
    (:class:`~pseudosl.generation.banned.Banned` states the rule for non-finite scores and raises
    :class:`~pseudosl.generation.banned.MaskConflictError`); ``allowed()``: ``(R, V)`` bool; ``rollback(n)``:
    forget the last ``n`` tokens (each row back to its ancestor ``n`` steps ago).
    """

    def __init__(self, mask: TokenMask, rows: int = 1, device: torch.device | str = "cpu", *,
                 vocab_size: int | None = None) -> None:
        if not isinstance(mask, (AutomatonMask, WindowMask)):
            raise TypeError(f"mask must come from pseudosl.generation.compile_mask, got {type(mask).__name__}")
        self.compiled, self.device = mask, torch.device(device)
        self.vocab_size = mask.vocab_size if vocab_size is None else check_int("vocab_size", vocab_size, 2)
        if self.vocab_size is not None:
            mask.check_vocab(self.vocab_size)
        self.reset(rows)

    def reset(self, rows: int | None = None) -> None:
        """Back to empty texts (``rows`` of them; default: as many as now)."""
        rows = self.rows if rows is None else check_int("rows", rows, 0)
        self._states: list[Any] = [self.compiled.start(rows, self.device)]
        self._parents: list[Tensor | None] = [None]

    @property
    def rows(self) -> int:
        return len(self._states[-1])

    @property
    def generated(self) -> int:
        """Tokens read so far per row."""
        return len(self._states) - 1

    @property
    def state(self) -> Any:
        """The rows' states (automaton states ``(R,)``, or a window's generated tokens ``(R, t)``)."""
        return self._states[-1]

    def advance(self, tokens: Tensor | np.ndarray, parents: Tensor | None = None) -> None:
        """Each row (row ``parents[i]`` of the last step, or row ``i``) reads ``tokens[i]`` (a tensor on the
        matcher's device, or a NumPy array)."""
        rows = self.rows if parents is None else len(parents)
        check_ids("tokens", tokens, rows, self.vocab_size,
                  "the token ids of the model whose scores these are (under generate: input_ids' last column)")
        if parents is not None:
            check_ids("parents", parents, len(parents), self.rows, "row indices of the last step")
        if self.compiled.max_new_tokens is not None and self.generated >= self.compiled.max_new_tokens:
            raise ValueError(f"the texts already have max_new_tokens={self.compiled.max_new_tokens} tokens: reset() to "
                             "start new texts, or compile the mask with a larger max_new_tokens")
        state = self.state if parents is None else self.compiled.select(self.state, parents)
        self._states.append(self.compiled.advance(state, tokens))
        self._parents.append(parents)

    def rollback(self, n: int = 1) -> None:
        """Forget the last ``n`` tokens; each row goes back to the state of its ancestor ``n`` steps ago."""
        n = check_int("n", n, 0)
        if n > self.generated:
            raise ValueError(f"cannot roll back {n} tokens: the rows have read {self.generated}")
        if n == 0:
            return
        back = None  # the current rows' ancestors among the rows of step t - n
        for p in reversed(self._parents[len(self._parents) - n:]):
            back = p if back is None else (back if p is None else p.to(back.device)[back])
        keep = self.generated - n
        self._states, self._parents = self._states[:keep + 1], self._parents[:keep + 1]
        if back is not None:  # the history before step t - n stays in its own order: its parents are composed
            self._states[-1] = self.compiled.select(self._states[-1], back)
            last = self._parents[-1]
            self._parents[-1] = None if keep == 0 else (back if last is None else last.to(back.device)[back])

    def banned(self) -> Banned:
        """The tokens banned after the tokens read."""
        if self.vocab_size is None:
            raise ValueError("this mask reads token ids of any vocabulary (a bare circuit): make the matcher with "
                             "vocab_size=V")
        return self.compiled.banned(self.state, self.generated, self.vocab_size, self.device)

    def allowed(self) -> Tensor:
        """``(R, V)`` bool: the next tokens that keep each row's constraint satisfiable."""
        return self.banned().allowed(self.rows, self.vocab_size, self.device)

    def mask(self, scores: Tensor, *, inplace: bool = False) -> Tensor:
        """``scores (R, V)`` with the banned tokens at ``-inf``: a new tensor, or with ``inplace`` ``scores`` itself,
        written at the banned positions only (:meth:`~pseudosl.generation.banned.Banned.apply`)."""
        inplace = check_bool("inplace", inplace)
        self.check_scores(scores)
        return self._mask(scores, inplace)

    def check_scores(self, scores: Tensor) -> None:
        """Refuse ``scores`` unless a float tensor ``(R, V)`` over this matcher's rows and vocabulary."""
        if not isinstance(scores, Tensor) or not scores.dtype.is_floating_point or scores.shape[:1] != (self.rows,) \
                or scores.dim() != 2:
            raise TypeError(f"scores must be a float tensor ({self.rows}, V) of next-token scores, got "
                            f"{scores.dtype if isinstance(scores, Tensor) else type(scores).__name__} "
                            f"{tuple(getattr(scores, 'shape', ()))}")
        if scores.shape[1] != self.vocab_size:
            self.compiled.check_vocab(scores.shape[1])  # names the constraint's vocabulary and the fix
            raise ValueError(f"scores have {scores.shape[1]} tokens but this matcher reads {self.vocab_size}")

    def _mask(self, scores: Tensor, inplace: bool) -> Tensor:
        """:meth:`mask` of scores :meth:`check_scores` would pass (the processor checks them on its way)."""
        return self.banned().apply(scores, inplace=inplace)

    def can_end(self) -> np.ndarray:
        """``(R,)`` bool: rows whose text can be complete (accepted) after one more token."""
        return self.compiled.can_end(self.state, self.generated)
