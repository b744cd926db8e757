"""How faithful is the local approximation?  Entropies and KL of ``p~_y`` against the model (paper §5).

For a model ``p(y | x)`` over sequences of length ``n`` with ``k`` values and an anchor ``y``, the
pseudo-semantic loss replaces ``p`` by the fully-factorized ``p~_y(y~) = prod_i p(y~_i | y_-i, x)``.
:func:`local_fidelity` measures, per example and in bits (log base 2):

    entropy_model   H(p)          = -sum_y' p(y') log p(y')
    entropy_local   H(p~_y)       =  sum_i H(p(. | y_-i))                     (closed form, always exact)
    kl_local_model  KL(p~_y || p) =  sum_y' p~_y(y') [log p~_y(y') - log p(y')]

* ``method="exact"``: all ``k**n`` sequences are scored through ``log_joint`` (``B * k**n`` rows, in chunks).
  Their probabilities must sum to 1 per example (``|log Z| <= 1e-3``; else ``ValueError``): ``p`` must be a
  distribution over length-``n`` sequences, as every autoregressive model is.
* ``method="monte-carlo"`` (``M = n_mc`` draws per example, standard error ``std / sqrt(M)`` beside each):
  ``KL ~ mean_m [log p~(y~^m) - log p(y~^m)]`` over ``y~^m ~ p~_y``, which is fully factorized: sampled
  and scored exactly; only ``log p`` goes through the model.  ``H(p)`` from the model's own samples
  ``y^m ~ p`` (a *sampler*): for models with ``step_log_probs`` (the engines) by the chain rule,
  ``H(p) ~ mean_m sum_i H(p(. | y^m_<i))`` (Rao-Blackwellised: the same expectation as ``-log p(y)``,
  a far smaller variance); for a bare ``log_joint``, ``H(p) ~ mean_m -log p(y^m)``.

Per-position entropies (for plots): ``entropy_local_positions[b, i] = H(p(. | y_-i))`` (they sum to
``entropy_local``) and ``entropy_model_positions[b, i] = H(Y_i | Y_<i)`` (they sum to ``entropy_model``):
exact from the prefix marginals of the enumeration; by Monte-Carlo ``mean_m H(p(. | y^m_<i))`` for models
with ``step_log_probs``, ``None`` for a bare ``log_joint``.

Models.  ``model`` is a ``log_joint`` callable ``y (N, n) -> (N,)`` or an engine (:class:`RecurrentEngine`,
:class:`CausalLMEngine`), exactly as for :func:`pseudo_semantic_loss`; every call passes ``B * m`` rows grouped
by example (example-major), so engines bound to ``B`` contexts score each row under its own context.
Samplers: ``sampler(m) -> (B, m, n)`` long, ``m`` draws of ``p(. | x_b)`` per example; by default a
:class:`RecurrentEngine` samples through its decoder (``decoder.sample``, eval mode) and any other model with
``step_log_probs`` (:class:`CausalLMEngine`) by ancestral sampling on it (``n`` forward passes, no cache:
meant for short windows; unlike ``CausalLMEngine.sample`` no token, EOS included, is banned).
Engines with a :class:`ValueMap` are refused: their conditionals are over folded values (and estimated),
not over the sequences ``p`` is a distribution on; build the engine without one (values = token ids).
Engines with ``dropout=True`` are refused too (a stochastic model has no single ``p``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from .decoder import RecurrentEngine, exact_mode
from .loss import conditionals_of
from .neighbours import check_sample
from .sampling import sample_autoregressive

__all__ = ["Fidelity", "local_fidelity", "model_sampler", "SamplerRequiredError"]

Sampler = Callable[[int], Tensor]
_EXACT_LIMIT = 1 << 24  # sequences per example beyond which exact=True is refused
_NORM_ATOL = 1e-3       # nats


class SamplerRequiredError(ValueError):
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


def model_sampler(model: Any, batch: int, length: int, generator: torch.Generator | None = None,
                  device: torch.device | str | None = None) -> Sampler | None:
    """The default ``sampler(m) -> (batch, m, length)`` of an engine (see module docs), or ``None``."""
    if isinstance(model, RecurrentEngine):
        dec = model.decoder

        def rep(t: Tensor | None, rows: int) -> Tensor | None:  # contexts grouped example-major, as engine calls
            return None if t is None else t.repeat_interleave(rows // t.shape[0], 0)

        def draw(m: int) -> Tensor:
            rows = batch * m
            with exact_mode(dec, model.dropout):
                y = dec.sample(rep(model.context, rows), rep(model.step_inputs, rows), batch_size=rows,
                               generator=generator)
            return y.view(batch, m, -1)
        return draw
    if hasattr(model, "step_log_probs"):
        def step(prefix: Tensor) -> Tensor:  # p(. | x, prefix): the last row of step_log_probs on prefix + a dummy
            return model.step_log_probs(torch.cat([prefix, prefix.new_zeros(prefix.shape[0], 1)], 1))[:, -1]

        def draw_lm(m: int) -> Tensor:
            y = sample_autoregressive(step, length, batch_size=batch * m, generator=generator, device=device)
            return y.view(batch, m, length)
        return draw_lm
    return None


def _check_model(model: Any, n_values: int | None) -> int:
    if not callable(model):
        raise TypeError("model must be a log_joint callable (y (N, n) -> (N,)) or an engine "
                        f"(RecurrentEngine, CausalLMEngine); got {type(model).__name__}")
    if getattr(model, "value_map", None) is not None:
        raise ValueError("local_fidelity needs conditionals over the model's own values, but this engine has a "
                         "value_map (folded, partly estimated values); build the CausalLMEngine with value_map=None")
    if getattr(model, "dropout", False) is True:
        raise ValueError("this engine keeps dropout on (dropout=True): a stochastic model has no single p; "
                         "build the engine with dropout=False")
    own = getattr(model, "n_values", None)
    if n_values is not None and own is not None and n_values != own:
        raise ValueError(f"n_values={n_values!r} differs from the model's n_values={own}; leave n_values=None")
    k = n_values if n_values is not None else own
    if not isinstance(k, int) or k < 2:
        raise ValueError(f"n_values must be an int >= 2 (pass n_values=k for a log_joint without an n_values "
                         f"attribute); got {k!r}")
    return k


def _scores(model: Any, ys: Tensor, chunk_rows: int) -> Tensor:
    """``log p`` of ``ys (B, M, n)`` through ``model`` in example-major chunks of ``B * m`` rows: ``(B, M)`` float64."""
    b, M, n = ys.shape
    step = max(1, chunk_rows // b)
    out = []
    for a in range(0, M, step):
        part = ys[:, a:a + step]
        lp = model(part.reshape(-1, n))
        if lp.shape != (part.shape[0] * part.shape[1],):
            raise ValueError(f"log_joint must map (N, n) sequences to (N,) log-likelihoods; got {tuple(lp.shape)}")
        out.append(lp.double().view(b, -1))
    return torch.cat(out, 1)


def _exact(model: Any, cond: Tensor, k: int, chunk_rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """``H(p)``, ``KL(p~ || p)`` (nats, ``(B,)``) and ``H(Y_i | Y_<i)`` ``(B, n)`` by enumerating ``k**n`` sequences."""
    b, n, _ = cond.shape
    grid = torch.cartesian_prod(*[torch.arange(k, device=cond.device)] * n).view(k ** n, n)  # lexicographic
    logp = _scores(model, grid.expand(b, -1, -1), chunk_rows)  # (B, k**n)
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


def local_fidelity(model: Any, sample: Tensor, *, n_values: int | None = None, exact: bool | None = None,
                   n_mc: int = 1000, sampler: Sampler | None = None, generator: torch.Generator | None = None,
                   max_exact: int = 1 << 14, chunk_size: int = 1 << 14) -> Fidelity:
    """Entropy of the model, of ``p~_y`` and ``KL(p~_y || p)`` per anchor (bits; see module docs).

    Args:
        model: a ``log_joint`` callable ``y (N, n) -> (N,)`` or an engine, as for :func:`pseudo_semantic_loss`.
        sample: ``(B, n)`` long anchors ``y`` (one per example / bound context).
        n_values: ``k``; defaults to ``model.n_values``.
        exact: enumerate (``True``), Monte-Carlo (``False``), or ``None``: exact iff ``k**n <= max_exact``.
        n_mc: Monte-Carlo draws per example, ``>= 2``.
        sampler: ``sampler(m) -> (B, m, n)`` long, ``m`` samples of the model per example; default
            :func:`model_sampler` (engines); a bare ``log_joint`` needs one for Monte-Carlo
            (:class:`SamplerRequiredError` otherwise).
        generator: seeds the draws of ``p~_y`` and the default samplers (on the sample's device).
        max_exact: see ``exact``.
        chunk_size: at most this many sequences per model call.

    Example:
        >>> import torch, pseudosl
        >>> dec = pseudosl.RecurrentDecoder(n_values=3, length=4, hidden_size=8).eval()
        >>> y = dec.sample(batch_size=2)
        >>> f = pseudosl.local_fidelity(dec.engine(), y)          # 3**4 sequences: exact
        >>> f.method, f.entropy_model.shape, bool((f.kl_local_model >= 0).all())
        ('exact', torch.Size([2]), True)
    """
    k = _check_model(model, n_values)
    sample = check_sample(sample, k)
    b, n = sample.shape
    if not isinstance(n_mc, int) or isinstance(n_mc, bool) or n_mc < 2:
        raise ValueError(f"n_mc must be an int >= 2 (draws per example), got {n_mc!r}")
    if exact is None:
        exact = k ** n <= max_exact
    if exact and k ** n > _EXACT_LIMIT:
        raise ValueError(f"exact=True would enumerate k**n = {k}**{n} sequences per example (limit {_EXACT_LIMIT}); "
                         "use exact=False (Monte-Carlo) or exact=None")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    with torch.no_grad():
        kw = {} if hasattr(model, "local_conditionals") else {"n_values": k}
        cond = conditionals_of(model, sample, **kw).double()  # (B, n, k)
        if cond.isnan().any():
            bad = cond.isnan().flatten(1).any(1).nonzero().flatten().tolist()
            raise ValueError(f"sample rows {bad} have probability 0 under the model (every neighbour scores -inf), "
                             "so their conditionals are undefined; pass anchors the model can generate")
        local_pos = _entropy(cond)  # (B, n) nats
        zeros = torch.zeros(b, dtype=torch.float64, device=sample.device)
        if exact:
            h, kl, model_pos = _exact(model, cond, k, chunk_size)
            h_se, kl_se, m = zeros, zeros, 0
        else:
            h, h_se, kl, kl_se, model_pos = _monte_carlo(model, cond, n_mc, sampler, generator, chunk_size)
            m = n_mc
    bits = 1 / math.log(2)
    return Fidelity(entropy_model=h * bits, entropy_local=local_pos.sum(-1) * bits, kl_local_model=kl * bits,
                    entropy_model_se=h_se * bits, entropy_local_se=zeros, kl_local_model_se=kl_se * bits,
                    entropy_local_positions=local_pos * bits,
                    entropy_model_positions=None if model_pos is None else model_pos * bits,
                    method="exact" if exact else "monte-carlo", n_mc=m)


def _monte_carlo(model: Any, cond: Tensor, n_mc: int, sampler: Sampler | None, generator: torch.Generator | None,
                 chunk_rows: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """``H(p)``, its s.e., ``KL``, its s.e. (nats, ``(B,)``) and ``H(Y_i | Y_<i)`` ``(B, n)`` or ``None``."""
    b, n, k = cond.shape
    # KL(p~ || p): y~ ~ p~ (independent positions), scored exactly under p~ and through the model under p
    draws = torch.multinomial(cond.exp().view(b * n, k), n_mc, replacement=True, generator=generator)
    ys = draws.view(b, n, n_mc).transpose(1, 2)  # (B, M, n)
    log_q = cond.gather(-1, ys.transpose(1, 2)).sum(1)  # (B, M)
    kl, kl_se = _mean_se(log_q - _scores(model, ys, chunk_rows))
    # H(p): the model's own samples
    if sampler is None:
        sampler = model_sampler(model, b, n, generator, cond.device)
        if sampler is None:
            raise SamplerRequiredError("Monte-Carlo needs samples of the model for its entropy, and a bare log_joint "
                                       "cannot be sampled: pass sampler=lambda m: ... returning (B, m, n) samples "
                                       "(or use exact=True where k**n is small)")
    step = max(1, chunk_rows // b)
    steps = getattr(model, "step_log_probs", None)
    neg_logp: list[Tensor] = []
    pos: list[Tensor] = []
    for a in range(0, n_mc, step):
        m = min(step, n_mc - a)
        y = sampler(m)
        if not isinstance(y, Tensor) or y.shape != (b, m, n) or y.dtype != torch.long:
            raise ValueError(f"sampler({m}) must return a long tensor of shape ({b}, {m}, {n}); got "
                             f"{tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__}")
        check_sample(y.reshape(-1, n), k, "sampler output")
        if steps is None:
            neg_logp.append(-_scores(model, y, chunk_rows))
            continue
        pos.append(_entropy(steps(y.reshape(-1, n))).double().view(b, m, n))  # H(p(. | y_<i)), (B, m, n)
    if pos:
        per_draw = torch.cat(pos, 1)  # (B, M, n)
        h, h_se = _mean_se(per_draw.sum(-1))
        return h, h_se, kl, kl_se, per_draw.mean(1)
    h, h_se = _mean_se(torch.cat(neg_logp, 1))
    return h, h_se, kl, kl_se, None
