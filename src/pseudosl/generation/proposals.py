"""Where the candidates of :func:`~pseudosl.constrained_sample` come from: proposals around an anchor.

A proposal draws ``K`` candidates ``y~`` around an anchor ``y``, every one satisfying the constraint ``alpha`` (and
``allowed``), and knows ``log q(y~)`` exactly, so the importance weights ``p(y~) / q(y~)`` of :mod:`.resample` are
exact for it.  Sampling importance resampling tends to the target ``p(. | alpha)`` as ``K`` grows when ``q`` gives
every sequence of the target a positive probability; the third column says whether it does.

=============================  ===================================================  ====================  ===========
proposal                       ``q(y~)`` around the anchor ``y``                    model work per anchor  tends to
                                                                                                           p(. | alpha)
=============================  ===================================================  ====================  ===========
``LocalProposal(T)``           ``prod_i p(y~_i | y_-i, x)^(1/T)``, conditioned on   the local              yes
(Gen-C: ``T = 1``)             ``alpha`` by the circuit; ``T < 1`` sharpens it      conditionals (the
                               towards the anchor                                   PSL's), ``K`` scores
``EditProposal(rate, window)`` ``prod_i [(1 - rho_i) [y~_i = y_i] + rho_i p(y~_i |  one teacher-forced     yes
                               x, y_<i)]`` conditioned on ``alpha``: ``rho_i = 1``  pass, the distinct
                               within ``window`` positions of the positions the     candidates' scores
                               repair changes, ``rate`` elsewhere
``RestartProposal(lookback)``  ``y_<s`` kept; ``y~_s ..`` drawn token by token from ``K`` samples (their       no: it tends
                               ``p`` masked to the tokens after which ``alpha``     own scores), one       to
                               stays satisfiable; ``s``: ``lookback`` positions     teacher-forced pass    ``p(. | y_<s,
                               before the first position the repair changes                                alpha)``
=============================  ===================================================  ====================  ===========

The repair.  The positions "the constraint needs changed" are those of the most probable repair of the anchor: the
maximiser over ``y~ |= alpha AND allowed`` of ``prod_i [(1 - eps) [y~_i = y_i] + eps p(y~_i | x, y_<i)]``
(:meth:`pseudosl.Circuit.mpe`, ``eps = REPAIR_RATE``): the fewest changed positions, and among those the changes the
model finds likeliest after the anchor's prefix.  For a forbidden word, the word's tokens (or one of them).

``EditProposal`` and ``LocalProposal`` are fully factorized over positions, so the circuit conditions them on
``alpha`` exactly and draws from them top-down (:meth:`pseudosl.Circuit.sample`); with a folded vocabulary
(:class:`~pseudosl.ValueMap`) the circuit draws each position's class and a token is then drawn within the class
from the proposal's own token distribution (:mod:`.resample`, "Folded vocabularies").  ``RestartProposal`` is
sequential: ``K`` rows per anchor go through ``engine.sample`` with a logits processor that forces the anchor's
tokens before ``s`` and, from ``s`` on, masks every token after which no completion satisfies ``alpha AND allowed``
(the circuit's marginals given the prefix, as the window mode of
:class:`~pseudosl.generation.logits_process.ConstraintLogitsProcessor` computes them), and records ``log p`` and
``log q`` of each drawn token.  Its weight is ``p(y~) / q(y~) = p(y_<s) prod_{t >= s} Z_t(y~)``, ``Z_t`` the
model's mass on the tokens the mask keeps at step ``t``: a candidate that had to be steered away from dead ends
weighs less.  Its candidates share the anchor's prefix, so the output tends to ``p(. | x, y_<s, alpha)``, not to
``p(. | x, alpha)``: a bias towards prefixes that lead to violations (measured on enumerable models in
tests/generation/test_proposals.py).

Example:
    >>> import torch, pseudosl
    >>> from pseudosl.logic.categorical import any_of
    >>> from pseudosl.generation import EditProposal
    >>> y = pseudosl.positions(4, 3)
    >>> circuit = pseudosl.compile_categorical(any_of(y[v] == 2 for v in range(4)))  # some y_v = 2
    >>> dec = pseudosl.RecurrentDecoder(n_values=3, length=4, hidden_size=8)
    >>> out = pseudosl.constrained_sample(pseudosl.as_engine(dec), circuit, batch_size=5, num_candidates=8,
    ...                                   proposal=EditProposal(rate=0.05, window=1))
    >>> bool(pseudosl.sample_satisfies(circuit, out).all())
    True
"""

from __future__ import annotations

import abc
import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..circuit import Circuit
from ..logic.errors import UnsatisfiableError
from ..psl.engine import Engine
from ..tokens.constraint import AutomatonConstraint, Constraint, sample_satisfies
from .matcher import compile_mask
from .restart_masks import MatcherMasks, Masks, MaskedSteps, WindowMasks

__all__ = ["Candidates", "EditProposal", "LocalProposal", "Proposal", "RestartProposal", "REPAIR_RATE",
           "class_log_probs", "prefix_log_probs", "repair_start", "tokens_within_classes"]

REPAIR_RATE = 1e-3
"""``eps`` of the repair (module docs): the proposal's weight on changing a position, against ``1 - eps`` on keeping it."""
SCORE_ROWS = 256
"""Distinct candidates an :class:`EditProposal` scores per model call when no ``chunk_size`` is given."""


@dataclass(frozen=True)
class Candidates:
    """``K`` candidates per anchor and what the weights need (all detached).

    Attributes:
        values: ``(B, K, n)`` long, in the model's values (token ids for a language model).
        log_q: ``(B, K)`` ``log q(y~)`` under the proposal, conditioned on the constraint.
        log_p: ``(B, K)`` ``log p(y~ | x)`` under the model.
        log_z: ``(B,)`` ``log`` of the proposal's mass on ``alpha AND allowed`` before conditioning (NaN for a
            sequential proposal, which never draws outside it).
    """

    values: Tensor
    log_q: Tensor
    log_p: Tensor
    log_z: Tensor


class Proposal(abc.ABC):
    """How :func:`~pseudosl.constrained_sample` draws candidates around the anchors (module docs)."""

    exact: bool = True
    """Whether sampling importance resampling with it tends to ``p(. | alpha)`` as ``K`` grows."""
    has_mpe: bool = True
    """Whether ``mode="mpe"`` (``argmax q``) applies."""

    @abc.abstractmethod
    def factors(self, engine: Engine, circuit: Circuit, anchor: Tensor, allowed: Tensor | None, root: int | None,
                chunk_size: int | None) -> tuple[Tensor, Tensor | None]:
        """A factorized proposal's ``(values (B, n, k), tokens (B, n, V) | None)``: the log-weights of each circuit
        value per position (unnormalised) and, with a value map, each token's log-probability within its class
        (normalised per class; ``-inf`` throughout a class of weight 0)."""

    def draw(self, engine: Engine, circuit: Circuit, anchor: Tensor, k: int, allowed: Tensor | None,
             root: int | None, chunk_size: int | None, generator: torch.Generator | None) -> Candidates:
        """``K`` candidates per anchor, drawn exactly from the factorized proposal conditioned on the constraint."""
        values, tokens = self.factors(engine, circuit, anchor, allowed, root, chunk_size)
        draws = circuit.sample(values, k, allowed=allowed, root=root, generator=generator)
        check_mass(draws.log_partition)
        out, log_q = draws.values.transpose(0, 1), (draws.log_prob - draws.log_partition).t()
        if tokens is not None:
            out, log_r = tokens_within_classes(engine, tokens, out, generator)
            log_q = log_q + log_r
        return Candidates(out, log_q, self.score(engine, out, chunk_size), draws.log_partition)

    def bind(self, constraint: Circuit | Constraint, allowed: Tensor | None) -> "Proposal":
        """The proposal for this constraint (what :func:`~pseudosl.constrained_sample` uses; itself by default)."""
        return self

    def score(self, engine: Engine, values: Tensor, chunk_size: int | None) -> Tensor:
        """``(B, K)`` ``log p`` of the candidates ``(B, K, n)`` (``engine.log_prob``)."""
        return engine.log_prob(values, chunk_size=chunk_size).detach()


@dataclass(frozen=True)
class LocalProposal(Proposal):
    """Gen-C's proposal: the local distribution ``prod_i p(y~_i | y_-i, x)`` of the anchor (the PSL's
    conditionals, ``engine.local_conditionals``), each position's distribution raised to ``1 / temperature`` and
    renormalised (``temperature < 1`` sharpens it towards the anchor; 1: as published).  With a folded vocabulary the
    token distribution within a class is the model's next token after the anchor's prefix (:mod:`.resample`),
    sharpened alike.  Full support: the output tends to ``p(. | alpha)``."""

    temperature: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not 0 < self.temperature < math.inf:
            raise ValueError(f"temperature must be a finite number > 0 (1: the local distribution as it is; < 1 "
                             f"sharpens it), got {self.temperature!r}")

    def factors(self, engine, circuit, anchor, allowed, root, chunk_size):
        # a position where ``allowed`` leaves one value takes it in every candidate whatever its conditional (its
        # factor cancels in q), so only the positions with a choice are computed (a Sudoku's blanks: 10 of 81)
        positions = allowed.sum(-1) > 1 if allowed is not None else None
        cond = engine.local_conditionals(anchor, chunk_size=chunk_size, positions=positions).detach()  # (B, n, k)
        r = class_log_probs(engine, anchor) if engine.value_map is not None else None
        if self.temperature == 1:
            return cond, r
        cond = cond / self.temperature
        if r is None:
            return cond, None
        r, folded = _within(engine, r / self.temperature)
        return cond + folded, r


@dataclass(frozen=True)
class EditProposal(Proposal):
    """Edits of the anchor where the constraint needs them (module docs): each position keeps its anchor token with
    probability ``1 - rho_i`` or draws from the model's next-token distribution after the anchor's prefix,
    ``rho_i = 1`` within ``window`` positions of a position the repair changes and ``rate`` elsewhere; conditioned on
    the constraint by the circuit.  One teacher-forced pass over the anchors gives every factor; only the distinct
    candidates are scored.  Full support for ``rate > 0``: the output tends to ``p(. | alpha)``."""

    rate: float = 0.02
    window: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not 0 < self.rate < 1:
            raise ValueError(f"rate must be a number in (0, 1) (the chance of editing a position away from the "
                             f"repair; 0 would give up the support of the target), got {self.rate!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be an int >= 0 (positions each side of a repaired one that are redrawn), "
                             f"got {self.window!r}")

    def factors(self, engine, circuit, anchor, allowed, root, chunk_size):
        logp = prefix_log_probs(engine, anchor)  # (B, n, V)
        changed = _repair(engine, circuit, anchor, logp, allowed, root)  # (B, n) bool
        near = torch.nn.functional.max_pool1d(changed[:, None].double(), 2 * self.window + 1, 1, self.window)[:, 0]
        rho = torch.where(near > 0, 1.0, self.rate).to(logp.dtype)
        tokens = _keep_or_draw(anchor, logp, rho)
        if engine.value_map is None:
            return tokens, None
        within, folded = _within(engine, tokens)
        return folded, within

    def score(self, engine, values, chunk_size):
        """The distinct candidates of each example, scored once (edits repeat: ``K`` can grow for the price of the
        distinct ones)."""
        b, k, n = values.shape
        example = engine.example_ids(b, values.device).repeat_interleave(k)
        rows = torch.cat([example[:, None], values.reshape(b * k, n)], 1)
        distinct, back = torch.unique(rows, dim=0, return_inverse=True)
        step = chunk_size or SCORE_ROWS
        scores = torch.cat([engine.log_joint(distinct[a:a + step, 1:], distinct[a:a + step, 0])
                            for a in range(0, distinct.shape[0], step)])
        return scores[back].view(b, k).detach()


@dataclass(frozen=True)
class RestartProposal(Proposal):
    """Regeneration after the repair (module docs): the anchor's tokens up to ``lookback`` positions before the first
    position the repair changes are kept; the rest is drawn token by token from the model, masked to the tokens after
    which the constraint stays satisfiable.  The candidates share the anchor's prefix: the output tends to
    ``p(. | x, y_<s, alpha)``, not ``p(. | x, alpha)`` (``exact = False``).

    ``automaton``: the :class:`~pseudosl.tokens.AutomatonConstraint` the constraint's window was compiled from (e.g.
    ``no_forbidden_words(...)`` for ``no_forbidden_words(...).window(n)``): its streaming masks
    (:class:`~pseudosl.ConstraintLogitsProcessor` with ``max_new_tokens=n``) keep the same tokens as the circuit's
    marginals for a fraction of the cost (a few gathers per step against a pass over the circuit's edges).  Every
    output is checked against the circuit: an automaton that is not the window's is refused by name.
    """

    lookback: int = 2
    automaton: AutomatonConstraint | None = None
    exact = False
    has_mpe = False

    def __post_init__(self) -> None:
        if isinstance(self.lookback, bool) or not isinstance(self.lookback, int) or self.lookback < 0:
            raise ValueError(f"lookback must be an int >= 0 (positions kept less before the repair), got "
                             f"{self.lookback!r}")
        if self.automaton is not None and not isinstance(self.automaton, AutomatonConstraint):
            raise TypeError(f"automaton must be the pseudosl.tokens.AutomatonConstraint the window was compiled "
                            f"from, or None, got {type(self.automaton).__name__}")

    def factors(self, engine, circuit, anchor, allowed, root, chunk_size):
        raise NotImplementedError("RestartProposal is sequential: it has no factors")

    def bind(self, constraint, allowed):
        """Without an automaton of its own, the automaton a window constraint was compiled from
        (``Constraint.automaton``), unless ``allowed`` needs the circuit's masks."""
        window_of = getattr(constraint, "automaton", None)
        if self.automaton is None and window_of is not None and allowed is None:
            return dataclasses.replace(self, automaton=window_of)
        return self

    def draw(self, engine, circuit, anchor, k, allowed, root, chunk_size, generator):
        b, n = anchor.shape
        masks = self._masks(engine, circuit, n, allowed, root, k)
        start = (repair_start(engine, circuit, anchor, allowed, root) - self.lookback).clamp(min=0)
        steps = MaskedSteps(masks, anchor.repeat_interleave(k, 0), start.repeat_interleave(k))
        example = engine.example_ids(b, anchor.device).repeat_interleave(k)
        out = engine.sample(example, length=n, generator=generator, logits_processor=steps)
        steps.finish(out)
        if self.automaton is not None and not sample_satisfies(circuit, engine.circuit_values(out), allowed,
                                                               root=root).all():
            raise ValueError("RestartProposal's automaton let through a sequence that the circuit rejects: pass the "
                             "AutomatonConstraint whose window(n) is the constraint (or automaton=None)")
        nan = torch.full((b,), float("nan"), dtype=steps.log_q.dtype, device=anchor.device)
        return Candidates(out.view(b, k, n), steps.log_q.view(b, k), steps.log_p.view(b, k), nan)

    def _masks(self, engine: Engine, circuit: Circuit, n: int, allowed: Tensor | None, root: int | None,
               k: int) -> Masks:
        """The masks of ``k`` rows per anchor, checked before the model runs."""
        if self.automaton is None:
            try:
                mask = compile_mask(Constraint(circuit, engine.value_map), root=root)
            except ValueError as e:
                raise ValueError(f"RestartProposal masks with the window's circuit: {e}; or pass automaton= (its "
                                 "streaming masks), or use another proposal") from e
            return WindowMasks(mask, None if allowed is None else allowed.repeat_interleave(k, 0))
        if allowed is not None:
            raise ValueError("RestartProposal(automaton=...) masks with the automaton alone; allowed= needs the "
                             "circuit's masks: pass automaton=None")
        if self.automaton.value_map != engine.value_map:
            raise ValueError(f"the automaton folds tokens with {self.automaton.value_map} but the engine with "
                             f"{engine.value_map}: pass the automaton the constraint's window was compiled from")
        return MatcherMasks(compile_mask(self.automaton, max_new_tokens=n))


# -- shared pieces ---------------------------------------------------------------------------------------
def check_mass(log_z: Tensor) -> None:
    """Refuse examples whose proposal gives the constraint no mass (``log_z (B,) = -inf``)."""
    unsat = torch.isneginf(log_z)
    if unsat.any():
        raise UnsatisfiableError(f"the model's local conditionals give probability 0 to every assignment that "
                                 f"satisfies the constraint for examples {unsat.nonzero().flatten().tolist()[:10]} "
                                 "(a conditional of exactly 0: check the model's outputs for -inf logits)")


def _check_autoregressive(engine: Engine, what: str) -> None:
    if not engine.autoregressive:
        raise ValueError(f"{what} reads the model's next-token distributions after the anchor's prefix, which "
                         f"{type(engine).__name__} does not have (a bare log_joint): make the engine from the model "
                         "with pseudosl.as_engine, or use LocalProposal")


def prefix_log_probs(engine: Engine, anchor: Tensor) -> Tensor:
    """``(B, n, V)`` ``log p(t | x, y_<i)`` after each prefix of the anchors (one teacher-forced pass); over the
    circuit's values ``0 .. k-1`` (renormalised) for an engine without a value map whose vocabulary is larger."""
    _check_autoregressive(engine, "this proposal")
    logp = engine.step_log_probs(anchor, engine.example_ids(anchor.shape[0], anchor.device)).detach()
    if engine.value_map is None and logp.shape[-1] != engine.n_values:
        logp = logp[..., :engine.n_values].log_softmax(-1)
    return logp


def class_log_probs(engine: Engine, anchor: Tensor) -> Tensor:
    """``(B, n, V)`` ``log r_i(t)``: the model's next token after the anchor's prefix ``y_<i``, restricted to the class
    of ``t`` (``log p(t | x, y_<i) - log p(class(t) | x, y_<i)``; ``-inf`` throughout a class of probability 0)."""
    vm = engine.value_map
    lookup = vm.on(anchor.device)[1]
    logp = engine.step_log_probs(anchor, engine.example_ids(anchor.shape[0], anchor.device)).detach()
    mass = vm.fold(logp).gather(-1, lookup.expand_as(logp))  # log p(class(t) | x, y_<i)
    return torch.where(torch.isneginf(mass), float("-inf"), logp - mass)


def _within(engine: Engine, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Token log-weights ``(B, n, V)`` -> ``(within, folded)``: each token's log-probability within its class and
    each class's log-weight ``(B, n, k)``."""
    vm = engine.value_map
    folded = vm.fold(tokens)
    mass = folded.gather(-1, vm.on(tokens.device)[1].expand_as(tokens))
    return torch.where(torch.isneginf(mass), float("-inf"), tokens - mass), folded


def _keep_or_draw(anchor: Tensor, logp: Tensor, rho: Tensor) -> Tensor:
    """``(B, n, V)`` ``log[(1 - rho_i) [t = y_i] + rho_i p(t | x, y_<i)]``, ``rho (B, n)``."""
    keep = torch.full_like(logp, float("-inf")).scatter(-1, anchor[..., None], 0.0)
    rho = rho[..., None]
    return torch.logaddexp(torch.log1p(-rho) + keep, rho.log() + logp)


def _repair(engine: Engine, circuit: Circuit, anchor: Tensor, logp: Tensor, allowed: Tensor | None,
            root: int | None) -> Tensor:
    """``(B, n)`` bool: the positions whose circuit value the most probable repair changes (module docs)."""
    tokens = _keep_or_draw(anchor, logp, torch.full(anchor.shape, REPAIR_RATE, dtype=logp.dtype, device=logp.device))
    values = tokens if engine.value_map is None else engine.value_map.fold(tokens)
    best = circuit.mpe(values, allowed, root=root).values
    return best != engine.circuit_values(anchor)


def repair_start(engine: Engine, circuit: Circuit, anchor: Tensor, allowed: Tensor | None = None,
                 root: int | None = None) -> Tensor:
    """``(B,)`` long: the first position the most probable repair of each anchor changes (module docs); ``n`` for an
    anchor that satisfies the constraint (and ``allowed``)."""
    changed = _repair(engine, circuit, anchor, prefix_log_probs(engine, anchor), allowed, root)
    n = anchor.shape[1]
    first = torch.where(changed, torch.arange(n, device=anchor.device), n)
    return first.min(-1).values


def tokens_within_classes(engine: Engine, within: Tensor, values: Tensor,
                          generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Folded candidates ``values (B, K, n)`` -> token ids, each drawn from ``within (B, n, V)`` (log-probabilities
    normalised per class) within its class, and ``log prod_i within_i(token_i)`` ``(B, K)``.

    Inverse transform sampling on the cumulative ``within`` of the tokens sorted by class (float64): class ``v`` spans
    ``[starts[v], starts[v+1])`` of that order, where a uniform draw is located by ``searchsorted``."""
    order, starts = engine.value_map.by_class(values.device)
    sorted_r = within[..., order]
    upto = sorted_r.double().exp().cumsum(-1)  # (B, n, V): the mass up to each token; a class's segment adds 1 (or 0)
    before = torch.cat([upto.new_zeros(*upto.shape[:-1], 1), upto], -1)  # (B, n, V + 1): the mass before each token
    v = values.transpose(1, 2)  # (B, n, K)
    lo, hi = starts[v], starts[v + 1]
    low, high = before.gather(-1, lo), before.gather(-1, hi)
    u = torch.rand(v.shape, dtype=upto.dtype, device=upto.device, generator=generator)
    at = torch.searchsorted(upto, low + u * (high - low), right=True)  # before[at] <= target < upto[at]
    at = torch.minimum(torch.maximum(at, lo), hi - 1)  # rounding at a class's edge stays in the class
    positive = torch.where(sorted_r > float("-inf"), torch.arange(len(order), device=within.device), -1)
    at = positive.cummax(-1).values.gather(-1, at).clamp(min=lo)  # never a token of probability 0 (rounding)
    ids = order[at]  # (B, n, K)
    return ids.transpose(1, 2), within.gather(-1, ids).sum(1)
