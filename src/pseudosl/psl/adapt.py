"""``pseudosl.as_engine``: the one way from a user's model to an engine (:mod:`pseudosl.psl.engine`).

===============================================================  ======================================================
``as_engine(...)``                                               engine
===============================================================  ======================================================
an :class:`~pseudosl.psl.engine.Engine`                          itself
``RecurrentDecoder``, ``context=``, ``step_inputs=``             :class:`RecurrentEngine` (prefix reuse)
a :class:`~pseudosl.psl.recurrent.RecurrentSteps`                :class:`RecurrentEngine` (prefix reuse)
an ``nn.Module`` with ``rnn=``, ``embed=``, ``head=``,           :class:`RecurrentEngine` over
``start=``, ``length=``, ``state=``                              :class:`~pseudosl.psl.recurrent.EmbeddingSteps`
a Hugging Face causal LM, ``prompt_ids=``, ``attention_mask=``,  :class:`CausalLMEngine` (key/value cache reuse)
``value_map=`` or ``n_values=``, ``top_k=``
a callable ``log_joint(y, example)``, ``n_values=``              :class:`~pseudosl.psl.engine.LogJointEngine` (every
                                                                 neighbour scored whole: ``n`` times the work)
===============================================================  ======================================================

Further keyword options go to the engine: ``dropout``, ``fused``, ``suffix_dtype`` (recurrent),
``max_class_size``, ``top_k_distinguished``, ``memory_budget``, ``chunk_size``, ``max_logits``, ``dropout``,
``recompute`` (causal LM), ``recompute`` (log_joint).
An argument that does not apply to the model is refused by name.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from torch import Tensor, nn

from .causal_lm import CausalLMEngine
from ..tokens.value_map import ValueMap
from .decoder import RecurrentDecoder
from .engine import Engine, LogJointEngine
from .recurrent import EmbeddingSteps, RecurrentEngine, RecurrentSteps, State

__all__ = ["as_engine"]

_RECURRENT_OPTIONS = {"dropout", "fused", "suffix_dtype"}
_CAUSAL_LM_OPTIONS = {"max_class_size", "top_k_distinguished", "memory_budget", "chunk_size", "max_logits", "dropout",
                      "recompute"}


def _is_causal_lm(model: Any) -> bool:
    """A Hugging Face model (transformers is imported wherever such a model exists)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def _only(kind: str, given: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(given) - allowed)
    if extra:
        raise ValueError(f"as_engine: {', '.join(f'{k}=' for k in extra)} do(es) not apply to {kind}; "
                         f"it takes {', '.join(sorted(allowed)) or 'no options'}")


def as_engine(model: Any, *, context: Tensor | None = None, step_inputs: Tensor | None = None,
              rnn: nn.RNNBase | None = None, embed: Callable[[Tensor], Tensor] | None = None,
              head: Callable[[Tensor], Tensor] | None = None, start: int | None = None, length: int | None = None,
              state: State | None = None, prompt_ids: Tensor | None = None, attention_mask: Tensor | None = None,
              value_map: ValueMap | None = None, n_values: int | None = None, top_k: int | None = None,
              **options: Any) -> Engine:
    """The engine of ``model`` (see the module table).

    Args:
        model: an engine, a :class:`~pseudosl.RecurrentDecoder`, a :class:`~pseudosl.psl.RecurrentSteps`, an
            ``nn.Module`` holding an ``nn.RNN/GRU/LSTM`` (with ``rnn``, ``embed``, ``head``), a Hugging Face
            causal LM, or a ``log_joint(y (N, n), example (N,)) -> (N,)`` callable.
        context, step_inputs: a decoder's inputs ``(E, context_dim)``, ``(E, n, step_dim)`` (binds ``E`` examples).
        rnn, embed, head, start, length, state: a recurrent step model: step ``t`` reads ``embed(y_{t-1})``
            (``embed(start)`` at ``t = 0``; ``start`` is the id of a start embedding, e.g. ``k`` for an
            ``nn.Embedding(k + 1, d)``), runs ``rnn`` one step from ``state`` (``(L, E, H)``, zeros when ``None``)
            and scores ``y_t`` with ``head`` (an ``nn.Linear`` to ``k`` values, or pass ``n_values``);
            ``length`` is ``n``, used by ``sample``.
        prompt_ids, attention_mask, value_map, n_values, top_k: a causal LM's prompts ``(E, P)`` and how
            tokens become circuit values (see :class:`CausalLMEngine`).
        n_values: for a ``log_joint``: ``k`` (required).
        **options: the engine's own options (module docs).

    Example:
        >>> import torch, pseudosl
        >>> class Tiny(torch.nn.Module):                         # a user's GRU decoder over 3 values
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.embed, self.gru = torch.nn.Embedding(4, 8), torch.nn.GRU(8, 8, batch_first=True)
        ...         self.out = torch.nn.Linear(8, 3)
        >>> m = Tiny()
        >>> engine = pseudosl.as_engine(m, rnn=m.gru, embed=m.embed, head=m.out, start=3, length=5)
        >>> y = engine.sample(batch_size=2)
        >>> engine.local_conditionals(y).shape
        torch.Size([2, 5, 3])
    """
    given = {k: v for k, v in dict(context=context, step_inputs=step_inputs, rnn=rnn, embed=embed, head=head,
                                   start=start, length=length, state=state, prompt_ids=prompt_ids,
                                   attention_mask=attention_mask, value_map=value_map, n_values=n_values,
                                   top_k=top_k).items() if v is not None}
    given.update(options)
    if isinstance(model, Engine):
        _only("an engine (it is one already)", given, set())
        return model
    if isinstance(model, RecurrentDecoder):
        _only("a RecurrentDecoder", given, {"context", "step_inputs"} | _RECURRENT_OPTIONS)
        return model.engine(context, step_inputs, **options)
    if isinstance(model, RecurrentSteps):
        _only("a RecurrentSteps", given, _RECURRENT_OPTIONS)
        return RecurrentEngine(model, **options)
    if rnn is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"with rnn=, model must be the nn.Module holding it, got {type(model).__name__}")
        _only("a recurrent step model", given, {"rnn", "embed", "head", "start", "length", "state", "n_values"}
              | _RECURRENT_OPTIONS)
        missing = [name for name, v in (("embed", embed), ("head", head), ("start", start)) if v is None]
        if missing:
            raise ValueError(f"a recurrent step model needs {', '.join(f'{m}=' for m in missing)} beside rnn= "
                             "(the embedding of the previous value, the head to logits, the id of the start input)")
        steps = EmbeddingSteps(model, rnn, embed, head, start=start, n_values=n_values, length=length, state=state)
        return RecurrentEngine(steps, **options)
    if _is_causal_lm(model):
        _only("a causal LM", given, {"prompt_ids", "attention_mask", "value_map", "n_values", "top_k"}
              | _CAUSAL_LM_OPTIONS)
        return CausalLMEngine(model, prompt_ids, attention_mask, value_map=value_map, n_values=n_values,
                              top_k=0 if top_k is None else top_k, **options)
    if callable(model):
        _only("a log_joint callable", given, {"n_values", "recompute"})
        if n_values is None:
            raise ValueError("a bare log_joint(y, example) needs n_values=k (the values per position)")
        return LogJointEngine(model, n_values, **options)
    raise TypeError(f"as_engine cannot make an engine of a {type(model).__name__}: pass a RecurrentDecoder, an "
                    "nn.Module with rnn=/embed=/head=, a Hugging Face causal LM, or a log_joint(y, example) callable")
