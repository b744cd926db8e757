"""How faithful is the local approximation?  Entropies and KL of ``p~_y`` against the model (paper §5).

For a model ``p(y | x)`` over sequences of length ``n`` with ``k`` values and an anchor ``y``, the
pseudo-semantic loss replaces ``p`` by the fully-factorized ``p~_y(y~) = prod_i p(y~_i | y_-i, x)``.
:func:`local_fidelity` measures, per example and in bits (log base 2):

    entropy_model   H(p)          = -sum_y' p(y') log p(y')
    entropy_local   H(p~_y)       =  sum_i H(p(. | y_-i))                     (closed form, always exact)
    kl_local_model  KL(p~_y || p) =  sum_y' p~_y(y') [log p~_y(y') - log p(y')]

* ``method="exact"``: all ``k**n`` sequences are scored through ``engine.log_prob`` (``B * k**n`` rows, in chunks).
  Their probabilities must sum to 1 per example (``|log Z| <= 1e-3``; else ``ValueError``): ``p`` must be a
  distribution over length-``n`` sequences, as every autoregressive model is.
* ``method="monte-carlo"`` (``M = n_mc`` draws per example, standard error ``std / sqrt(M)`` beside each):
  ``KL ~ mean_m [log p~(y~^m) - log p(y~^m)]`` over ``y~^m ~ p~_y``, which is fully factorized: sampled
  and scored exactly; only ``log p`` goes through the model.  ``H(p)`` from the model's own samples
  ``y^m ~ p`` (a *sampler*): for autoregressive engines by the chain rule on ``step_log_probs``,
  ``H(p) ~ mean_m sum_i H(p(. | y^m_<i))`` (Rao-Blackwellised: the same expectation as ``-log p(y)``,
  a far smaller variance); for a bare ``log_joint``, ``H(p) ~ mean_m -log p(y^m)``.

Per-position entropies (for plots): ``entropy_local_positions[b, i] = H(p(. | y_-i))`` (they sum to
``entropy_local``) and ``entropy_model_positions[b, i] = H(Y_i | Y_<i)`` (they sum to ``entropy_model``):
exact from the prefix marginals of the enumeration; by Monte-Carlo ``mean_m H(p(. | y^m_<i))`` for
autoregressive engines, ``None`` for a bare ``log_joint``.

Engines.  ``engine`` is what :func:`pseudo_semantic_loss` takes (:func:`pseudosl.as_engine`); sequences go to
``engine.log_prob`` grouped by example, so an engine bound to ``B`` inputs scores each under its own.
Samplers: ``sampler(m) -> (B, m, n)`` long, ``m`` draws of ``p(. | x_b)`` per example; by default an
autoregressive engine's own ``engine.sample`` (exact ancestral samples, dropout off).
Engines whose circuit values are not the model's values are refused: with a :class:`ValueMap` their
conditionals are over folded values (and estimated), with ``n_values`` below the vocabulary over part of it;
build the engine without either.  Engines with ``dropout=True`` are refused too (a stochastic model has no single ``p``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from ..checks import check_bool, check_int, check_sample
from ..errors import PseudoslError
from .engine import Engine

__all__ = ["Fidelity", "local_fidelity", "SamplerRequiredError"]

Sampler = Callable[[int], Tensor]
_EXACT_LIMIT = 1 << 24  # sequences per example beyond which exact=True is refused
_NORM_ATOL = 1e-3       # nats


class SamplerRequiredError(PseudoslError, ValueError):
    """Monte-Carlo needs samples of the model and none can be drawn: pass ``sampler=``."""


@dataclass(frozen=True)
class Fidelity:
    """Per-example fidelity of ``p~_y`` (all in bits; ``(B,)`` unless noted; ``*_se`` = standard errors, 0 if exact).

    Attributes:
        entropy_model: ``H(p)`` over length-``n`` sequences.
        entropy_local: ``H(p~_y)`` (exact in both methods).
        kl_local_model: ``KL(p~_y || p)``.
        entropy_local_positions: ``(B, n)`` ``H(p(. | y_-i))``.
        entropy_model_positions: ``(B, n)`` ``H(Y_i | Y_<i)``, or ``None`` (Monte-Carlo with a bare ``log_joint``).
        method: ``"exact"`` or ``"monte-carlo"``.
        n_mc: draws per example (0 when exact).
    """

    entropy_model: Tensor
    entropy_local: Tensor
    kl_local_model: Tensor
    entropy_model_se: Tensor
    entropy_local_se: Tensor
    kl_local_model_se: Tensor
    entropy_local_positions: Tensor
    entropy_model_positions: Tensor | None
    method: str
    n_mc: int

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean and standard deviation over the examples (and the mean standard error) of the three numbers."""
        out = {}
        for name in ("entropy_model", "entropy_local", "kl_local_model"):
            v, se = getattr(self, name), getattr(self, name + "_se")
            out[name] = {"mean": v.mean().item(), "std": v.std().item() if v.numel() > 1 else 0.0,
                         "se": se.mean().item()}
        return out


def _entropy(logp: Tensor, dim: int = -1) -> Tensor:
    """``-sum p log p`` over ``dim`` (0 log 0 = 0), in nats."""
    return -torch.where(logp > float("-inf"), logp.exp() * logp, torch.zeros_like(logp)).sum(dim)


def _mean_se(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and standard error over the last dim (``(B, M)`` -> ``(B,)`` each)."""
    return x.mean(-1), x.std(-1) / math.sqrt(x.shape[-1])


def _check_engine(engine: Engine) -> int:
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a pseudosl engine, got {type(engine).__name__}; make one with "
                        "pseudosl.as_engine(model, ...)")
    if engine.value_map is not None or engine.n_values != engine.vocab_size:
        raise ValueError("local_fidelity needs conditionals over the model's own values, but this engine's circuit "
                         "values are not (a value_map: folded, partly estimated values; or n_values below the "
                         "vocabulary); build the CausalLMEngine with value_map=None and n_values=None")
    if engine.dropout:
        raise ValueError("this engine keeps dropout on (dropout=True): a stochastic model has no single p; "
                         "build the engine with dropout=False")
    return engine.n_values


def _scores(engine: Engine, ys: Tensor, chunk_rows: int) -> Tensor:
    """``log p`` of ``ys (B, M, n)`` through ``engine.log_prob`` in chunks of ``B * m`` rows: ``(B, M)`` float64."""
    b, M, n = ys.shape
    step = max(1, chunk_rows // max(b, 1))
    return torch.cat([engine.log_prob(ys[:, a:a + step]).double() for a in range(0, M, step)], 1)


def _exact(engine: Engine, cond: Tensor, k: int, chunk_rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """``H(p)``, ``KL(p~ || p)`` (nats, ``(B,)``) and ``H(Y_i | Y_<i)`` ``(B, n)`` by enumerating ``k**n`` sequences."""
    b, n, _ = cond.shape
    grid = torch.cartesian_prod(*[torch.arange(k, device=cond.device)] * n).view(k ** n, n)  # lexicographic
    logp = _scores(engine, grid.expand(b, -1, -1), chunk_rows)  # (B, k**n)
    log_z = logp.logsumexp(-1)
    if (log_z.abs() > _NORM_ATOL).any():
        raise ValueError(f"the model is not normalised over the {k ** n} sequences of length {n}: log sum p = "
                         f"{log_z.tolist()} (nats); local_fidelity needs p to be a distribution over "
                         "length-n sequences")
    entropy = _entropy(logp)
    log_q = cond[:, torch.arange(n, device=cond.device), grid].sum(-1)  # (B, k**n): log p~(y~)
    kl = torch.where(log_q > float("-inf"), log_q.exp() * (log_q - logp), torch.zeros_like(log_q)).sum(-1)
    table = logp.view(b, *[k] * n)
    prefix = [torch.zeros(b, dtype=logp.dtype, device=logp.device)]  # H(Y_<=i), i = -1 .. n-1
    for i in range(n):
        marg = table.logsumexp(tuple(range(i + 2, n + 1))) if i < n - 1 else table
        prefix.append(_entropy(marg.reshape(b, -1)))
    return entropy, kl, torch.stack(prefix, 1).diff(dim=1)


def local_fidelity(engine: Engine, sample: Tensor, *, exact: bool | None = None, n_mc: int = 1000,
                   sampler: Sampler | None = None, generator: torch.Generator | None = None,
                   max_exact: int = 1 << 14, chunk_size: int = 1 << 14) -> Fidelity:
    """Entropy of the model, of ``p~_y`` and ``KL(p~_y || p)`` per anchor (bits; see module docs).

    Args:
        engine: the model as an engine (:func:`pseudosl.as_engine`), as for :func:`pseudo_semantic_loss`.
        sample: ``(B, n)`` long anchors ``y`` (one per example / bound context).
        exact: enumerate (``True``), Monte-Carlo (``False``), or ``None``: exact iff ``k**n <= max_exact``.
        n_mc: Monte-Carlo draws per example, ``>= 2``.
        sampler: ``sampler(m) -> (B, m, n)`` long, ``m`` samples of the model per example; default: the
            engine's own ``sample``; a bare ``log_joint`` needs one for Monte-Carlo
            (:class:`SamplerRequiredError` otherwise).
        generator: seeds the draws of ``p~_y`` and the default samplers (on the sample's device).
        max_exact: see ``exact``.
        chunk_size: at most this many sequences per model call.

    Example:
        >>> import torch, pseudosl
        >>> dec = pseudosl.RecurrentDecoder(n_values=3, length=4, hidden_size=8).eval()
        >>> y = dec.sample(batch_size=2)
        >>> f = pseudosl.local_fidelity(pseudosl.as_engine(dec), y)          # 3**4 sequences: exact
        >>> f.method, f.entropy_model.shape, bool((f.kl_local_model >= 0).all())
        ('exact', torch.Size([2]), True)
    """
    exact = check_bool("exact", exact, none="exact iff k**n <= max_exact")
    k = _check_engine(engine)
    sample = check_sample(sample, k)
    b, n = sample.shape
    n_mc = check_int("n_mc", n_mc, 2, " (draws per example)")
    if exact is None:
        exact = k ** n <= check_int("max_exact", max_exact, 1)
    if exact and k ** n > _EXACT_LIMIT:
        raise ValueError(f"exact=True would enumerate k**n = {k}**{n} sequences per example (limit {_EXACT_LIMIT}); "
                         "use exact=False (Monte-Carlo) or exact=None")
    chunk_size = check_int("chunk_size", chunk_size, 1)
    with torch.no_grad():
        cond = engine.local_conditionals(sample).double()  # (B, n, k)
        if cond.isnan().any():
            bad = cond.isnan().flatten(1).any(1).nonzero().flatten().tolist()
            raise ValueError(f"sample rows {bad} have probability 0 under the model (every neighbour scores -inf), "
                             "so their conditionals are undefined; pass anchors the model can generate")
        local_pos = _entropy(cond)  # (B, n) nats
        zeros = torch.zeros(b, dtype=torch.float64, device=sample.device)
        if exact:
            h, kl, model_pos = _exact(engine, cond, k, chunk_size)
            h_se, kl_se, m = zeros, zeros, 0
        else:
            h, h_se, kl, kl_se, model_pos = _monte_carlo(engine, cond, n_mc, sampler, generator, chunk_size)
            m = n_mc
    bits = 1 / math.log(2)
    return Fidelity(entropy_model=h * bits, entropy_local=local_pos.sum(-1) * bits, kl_local_model=kl * bits,
                    entropy_model_se=h_se * bits, entropy_local_se=zeros, kl_local_model_se=kl_se * bits,
                    entropy_local_positions=local_pos * bits,
                    entropy_model_positions=None if model_pos is None else model_pos * bits,
                    method="exact" if exact else "monte-carlo", n_mc=m)


def _monte_carlo(engine: Engine, cond: Tensor, n_mc: int, sampler: Sampler | None, generator: torch.Generator | None,
                 chunk_rows: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """``H(p)``, its s.e., ``KL``, its s.e. (nats, ``(B,)``) and ``H(Y_i | Y_<i)`` ``(B, n)`` or ``None``."""
    b, n, k = cond.shape
    # KL(p~ || p): y~ ~ p~ (independent positions), scored exactly under p~ and through the model under p
    draws = torch.multinomial(cond.exp().view(b * n, k), n_mc, replacement=True, generator=generator)
    ys = draws.view(b, n, n_mc).transpose(1, 2)  # (B, M, n)
    log_q = cond.gather(-1, ys.transpose(1, 2)).sum(1)  # (B, M)
    kl, kl_se = _mean_se(log_q - _scores(engine, ys, chunk_rows))
    # H(p): the model's own samples
    if sampler is None:
        if not engine.autoregressive:
            raise SamplerRequiredError("Monte-Carlo needs samples of the model for its entropy, and a bare log_joint "
                                       "cannot be sampled: pass sampler=lambda m: ... returning (B, m, n) samples "
                                       "(or use exact=True where k**n is small)")
        ids = engine.example_ids(b, cond.device)

        def sampler(m: int) -> Tensor:
            return engine.sample(ids.repeat_interleave(m), length=n, generator=generator).view(b, m, n)
    step = max(1, chunk_rows // b)
    neg_logp: list[Tensor] = []
    pos: list[Tensor] = []
    for a in range(0, n_mc, step):
        m = min(step, n_mc - a)
        y = sampler(m)
        if not isinstance(y, Tensor) or y.shape != (b, m, n) or y.dtype != torch.long:
            raise ValueError(f"sampler({m}) must return a long tensor of shape ({b}, {m}, {n}); got "
                             f"{tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__}")
        check_sample(y.reshape(-1, n), k, "sampler output")
        if not engine.autoregressive:
            neg_logp.append(-_scores(engine, y, chunk_rows))
            continue
        example = engine.example_ids(b, y.device).repeat_interleave(m)
        # H(p(. | y_<i)), (B, m, n)
        pos.append(_entropy(engine.step_log_probs(y.reshape(-1, n), example)).double().view(b, m, n))
    if pos:
        per_draw = torch.cat(pos, 1)  # (B, M, n)
        h, h_se = _mean_se(per_draw.sum(-1))
        return h, h_se, kl, kl_se, per_draw.mean(1)
    h, h_se = _mean_se(torch.cat(neg_logp, 1))
    return h, h_se, kl, kl_se, None
