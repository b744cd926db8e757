"""``torch.compile`` for circuits: one compiled pass per circuit, first-order only.

:meth:`Circuit.compiled <pseudosl.Circuit.compiled>` is :func:`compiled_once`: the compiled function is cached
on the circuit (under :data:`CACHE`, per ``options``) and has a code object of its own (:func:`own_code`), so
each circuit has its own compile cache and any number of circuits stay clear of ``torch._dynamo``'s recompile
limit.  Its result refuses ``create_graph=True`` by name (:func:`first_order_only`).

``torch._dynamo``'s recompile limit counts recompilations per code object.  A new batch size recompiles once, after
which the batch dimension is dynamic.  On a GPU, ``mode="reduce-overhead"`` replays the whole pass (forward, and
backward when it is differentiated) as a CUDA graph, cached per batch shape (a replay reuses its output memory:
clone a result you keep past the next call).  A function of your own compiled once and called with many circuits
recompiles per circuit (each is a different graph): compile one per circuit, or raise
``torch._dynamo.config.recompile_limit``.  The compiled pass is differentiable once: ``create_graph=True`` through
it is a ``RuntimeError`` saying so (torch.compile traces the backward without a graph), where
:meth:`Circuit.log_prob <pseudosl.Circuit.log_prob>` gives exact second derivatives.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch
from torch import Tensor, nn

from . import semirings

__all__ = ["CACHE", "compiled_once", "first_order_only", "own_code"]

CACHE = "_compiled"
"""The attribute of a module that holds its compiled functions (rebuilt on demand, never copied or pickled)."""


def compiled_once(module: nn.Module, fn: Callable[[Tensor], Tensor],
                  options: dict[str, Any]) -> Callable[[Tensor], Tensor]:
    """``fn`` (a method of ``module``) compiled with ``torch.compile(fullgraph=True, **options)``, once per
    ``module`` and ``options``."""
    key = repr(sorted(options.items()))  # options may hold dicts (e.g. options={...}), which do not hash
    cache = module.__dict__.setdefault(CACHE, {})
    if key not in cache:
        cache[key] = first_order_only(torch.compile(own_code(fn), fullgraph=True, **options))
    return cache[key]


def first_order_only(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``fn`` whose result refuses ``create_graph=True`` by name (:class:`~pseudosl.semirings.FirstOrderOnly`)."""
    def call(x: Tensor) -> Tensor:
        return semirings.FirstOrderOnly.apply(fn(x))
    return call


def own_code(method: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``method`` wrapped in a function with a fresh code object (so a compile cache of its own)."""
    def call(x: Tensor) -> Tensor:
        return method(x)
    return types.FunctionType(call.__code__.replace(), call.__globals__, call.__name__, None, call.__closure__)
