"""Outputs that satisfy the constraint: locally constrained resampling (Ahmed, Chang, Van den Broeck, ICLR 2025).

For an autoregressive model ``p(y | x)`` the distribution ``p(y | x, alpha)`` is intractable.  Around an
anchor ``y ~ p`` the local distribution ``p~_y(y~) = prod_i p(y~_i | y_-i, x)`` is fully factorized, so the
compiled circuit conditions it on ``alpha`` exactly.  :func:`constrained_sample` uses it as a proposal:

1. anchor ``y ~ p(. | x)`` (``engine.sample``), or a given one; an anchor that already satisfies ``alpha`` (and
   ``allowed``) is the output as it is (``keep_satisfying=True``, the default), the others go on:
2. ``q(y~) = p~_y(y~ | alpha AND allowed)`` from the engine's local conditionals and the circuit;
3. ``K`` candidates ``y~_1 .. y~_K ~ q``, drawn exactly (:meth:`pseudosl.Circuit.sample`);
4. self-normalised importance weights ``w_j = p(y~_j | x) / q(y~_j)`` (``engine.log_prob``);
5. one output per example, ``y~_J`` with ``P(J = j) = w_j / sum_l w_l``.

Every output satisfies ``alpha`` (and ``allowed``); as ``K`` grows the output's distribution tends to
``p(. | x, alpha AND allowed)`` (sampling importance resampling; ``K = 1`` returns the proposal's draw).

Kept anchors.  Write ``A`` for the sequences satisfying ``alpha AND allowed`` and ``S_K(. | y)`` for the output
distribution of steps 2-5 around anchor ``y``.  With anchors ``y ~ p`` the output has the distribution

    p(z) [z in A] + sum_{y not in A} p(y) S_K(z | y)  =  p(A) p(z | A) + (1 - p(A)) M_K(z),

``M_K`` the mixture of ``S_K(. | y)`` over the violating anchors (``y ~ p(. | not A)``): a satisfying anchor
``y ~ p`` *is* a draw of ``p(. | A)``, so keeping it adds that share exactly.  As ``K`` grows every ``S_K(. | y)``
tends to ``p(. | A)`` (the weights correct any proposal that covers ``A``), so ``M_K`` and the output do too; for
a finite ``K`` the output is not exactly ``p(. | A)``: its total-variation distance is ``(1 - p(A)) TV(M_K, p(. | A))``
-- the violators' share of their own error, none from the kept ones.  A given anchor (``sample=``, e.g. a greedy
decode) that satisfies is kept too: the experiments' decoders want the model's own decode unchanged wherever it
is already valid (:mod:`pseudosl.experiments.decoders`); the mixture argument above needs ``y ~ p``.
``keep_satisfying=False`` resamples every anchor (the proposal's study).  The candidates are drawn for every row,
kept or not, so the generator advances the same way and a violator's output does not depend on which other anchors
were kept; when every anchor is kept and no diagnostics are asked for, nothing runs and nothing is drawn.
``mode="mpe"`` returns ``argmax q`` instead (:meth:`pseudosl.Circuit.mpe`), one deterministic output per anchor.
``p`` is the model as ``engine.log_prob`` scores it.

Folded vocabularies (an engine with a :class:`~pseudosl.ValueMap`).  The circuit reads the classes of a partition
of the vocabulary (``D`` tokens and a catch-all value, or any partition: ``pseudosl.no_forbidden_words``); a class
value does not name a token.  Each candidate's position ``i`` with class value ``v`` gets a concrete token drawn from
the model's next-token distribution after the anchor's prefix, restricted to the class:
``r_i(t) = p(t | x, y_<i) / p(v | x, y_<i)`` for ``t`` in ``v`` (one ``engine.step_log_probs`` pass over the anchors;
a class of one token gives that token, ``r_i = 1``).  The proposal over token sequences is then
``q(y~) = p~_y(v(y~) | alpha) * prod_i r_i(y~_i)``, known exactly, so the weights ``p(y~) / q(y~)`` stay exact and the
output still tends to ``p(. | alpha)`` (an estimated class conditional of the engine only makes the proposal less
close to the target); every token of a class gives the same circuit value, so every candidate satisfies ``alpha``.
``mode="mpe"`` returns ``argmax q`` over token sequences the same way (each class value weighted by ``max_t r_i(t)``
over its tokens, filled with that token).

Several roots.  The output must satisfy one constraint, which the circuit samples from: a multi-rooted
circuit needs ``root=r`` (the output then satisfies root ``r`` only); for several constraints at once compile
their conjunction (for a Sudoku: per puzzle, conditioned on its givens).

Example:
    >>> import torch, pseudosl
    >>> from pseudosl.logic.categorical import any_of
    >>> y = pseudosl.positions(4, 3)
    >>> circuit = pseudosl.compile_categorical(any_of(y[v] == 2 for v in range(4)))  # some y_v = 2
    >>> dec = pseudosl.RecurrentDecoder(n_values=3, length=4, hidden_size=8)
    >>> y, diag = pseudosl.constrained_sample(pseudosl.as_engine(dec), circuit, batch_size=5, num_candidates=10,
    ...                                       return_diagnostics=True)
    >>> bool(pseudosl.sample_satisfies(circuit, y).all()), tuple(diag.candidates.shape)
    (True, (5, 10, 4))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..checks import check_bool, check_int, check_root, check_sample
from ..circuit import Circuit
from ..logic.errors import UnsatisfiableError
from ..tokens.constraint import Constraint, sample_satisfies
from ..psl.engine import Engine, engine_circuit
from ..psl.sampling import sample_from_logits
from .proposals import Candidates, LocalProposal, Proposal, RestartProposal, check_mass

__all__ = ["constrained_sample", "ResampleDiagnostics", "UnsatisfiableError"]  # the library's one
# UnsatisfiableError (pseudosl.logic.errors), re-exported here: an except of either name catches both

Mode = Literal["resample", "mpe"]
DEFAULT_CANDIDATES = 16


@dataclass(frozen=True)
class ResampleDiagnostics:
    """What :func:`constrained_sample` did, per example (all detached).

    Attributes:
        anchor: ``(B, n)`` the anchors ``y`` (the model's values).
        candidates: ``(B, K, n)`` the candidates ``y~`` (the model's values; ``K = 1`` in ``mode="mpe"``).
        log_p: ``(B, K)`` ``log p(y~ | x)`` under the model.
        log_q: ``(B, K)`` ``log q(y~)``, the proposal ``p~_y(. | alpha AND allowed)`` (times the concrete-token
            factor of a folded vocabulary).
        chosen: ``(B,)`` long, the candidate returned; ``-1`` where the anchor was kept (``kept``).
        ess: ``(B,)`` effective sample size of the self-normalised weights, ``(sum w)^2 / sum w^2`` in ``[1, K]``
            (``K``: all weights equal, the proposal is the target up to a constant; 1: one candidate takes all);
            1 in ``mode="mpe"``.  A kept row's candidates and weights are drawn and reported as for any row (its
            ``ess`` describes the proposal around it), but not used.
        log_p_constraint: ``(B,)`` ``log p~_y(alpha AND allowed)``, the local distribution's mass on the constraint;
            positions where ``allowed`` leaves one value are conditioned on (their conditional counts as 1, not computed).
        kept: ``(B,)`` bool, the anchor satisfied the constraint and is the output as it is (``keep_satisfying``).
    """

    anchor: Tensor
    candidates: Tensor
    log_p: Tensor
    log_q: Tensor
    chosen: Tensor
    ess: Tensor
    log_p_constraint: Tensor
    kept: Tensor

    @property
    def log_weights(self) -> Tensor:
        """``(B, K)`` unnormalised log importance weights ``log p(y~) - log q(y~)``."""
        return self.log_p - self.log_q


def effective_sample_size(log_weights: Tensor) -> Tensor:
    """``(B,)`` ``(sum_j w_j)^2 / sum_j w_j^2`` of ``(B, K)`` log-weights (computed in log space)."""
    return (2 * log_weights.logsumexp(-1) - (2 * log_weights).logsumexp(-1)).exp()


def _check(engine: Engine, constraint: Circuit | Constraint, mode: str, num_candidates: int | None,
           root: int | None) -> tuple[Circuit, int]:
    """The circuit and the number of candidates, or a named error, before the model runs."""
    circuit = engine_circuit(engine, constraint)
    check_root(root, circuit.n_roots)
    if mode not in ("resample", "mpe"):
        raise ValueError(f"mode must be 'resample' or 'mpe', got {mode!r}")
    if mode == "mpe":
        if num_candidates is not None:
            raise ValueError(f"num_candidates={num_candidates!r} applies to mode='resample'; mode='mpe' returns the "
                             "single most probable assignment of the proposal")
        return circuit, 1
    k = DEFAULT_CANDIDATES if num_candidates is None else check_int("num_candidates", num_candidates, 1)
    return circuit, k


def _check_proposal(proposal: object, mode: str, engine: Engine) -> Proposal:
    """The proposal (``None``: the default, module docs), or a named error."""
    if proposal is None:
        return RestartProposal() if mode == "resample" and engine.autoregressive else LocalProposal()
    if not isinstance(proposal, Proposal):
        raise TypeError(f"proposal must be a pseudosl.generation proposal (LocalProposal(), EditProposal(), "
                        f"RestartProposal()), got {type(proposal).__name__}")
    if mode == "mpe" and not proposal.has_mpe:
        raise ValueError(f"mode='mpe' takes the argmax of a factorized proposal; {type(proposal).__name__} draws "
                         "token by token and has none: use mode='resample', or LocalProposal / EditProposal")
    return proposal


def _check_allowed(allowed: Tensor | None, circuit: Circuit) -> None:
    if allowed is None:
        return
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool tensor (B, n, k), got {getattr(allowed, 'dtype', type(allowed).__name__)}")
    if allowed.dim() != 3 or allowed.shape[1:] != (circuit.n_vars, circuit.n_values):
        raise ValueError(f"allowed must have shape (B, {circuit.n_vars}, {circuit.n_values}) (the circuit's positions "
                         f"and values), got {tuple(allowed.shape)}")


def _check_satisfiable(circuit: Circuit, allowed: Tensor | None, root: int | None) -> None:
    """Refuse, before the model runs, examples whose ``alpha AND allowed`` has no model (``log P = -inf`` under
    the uniform distribution)."""
    rows = 1 if allowed is None else allowed.shape[0]
    with torch.no_grad():
        lp = circuit.log_prob(torch.zeros(rows, circuit.n_vars, circuit.n_values, device=circuit.root_rows.device),
                              None if allowed is None else allowed.to(circuit.root_rows.device))
    lp = lp[:, root or 0] if lp.dim() == 2 else lp
    bad = torch.isneginf(lp).nonzero().flatten().tolist()
    if bad:
        where = "the constraint" if allowed is None else f"the constraint and allowed for examples {bad[:10]}"
        raise UnsatisfiableError(f"{where} have no satisfying assignment: there is nothing to sample (check the "
                                 "constraint and the unit constraints in allowed)")


@torch.no_grad()
def constrained_sample(engine: Engine, circuit: Circuit | Constraint, sample: Tensor | None = None, *,
                       num_candidates: int | None = None, mode: Mode = "resample", allowed: Tensor | None = None,
                       root: int | None = None, batch_size: int | None = None, chunk_size: int | None = None,
                       generator: torch.Generator | None = None, return_diagnostics: bool = False,
                       keep_satisfying: bool = True, proposal: Proposal | None = None,
                       rounds: int = 1) -> Tensor | tuple[Tensor, ResampleDiagnostics]:
    """One output per example that satisfies the constraint: locally constrained resampling (module docs).

    Args:
        engine: the model as an engine (:func:`pseudosl.as_engine`); the one :func:`pseudosl.pseudo_semantic_loss` takes.
        circuit: the compiled constraint over ``n`` positions with ``k`` values, or a :class:`~pseudosl.Constraint`
            (its value map must be the engine's).  A multi-rooted circuit needs ``root``.
        sample: ``(B, n)`` long anchors in the model's values (e.g. ``engine.sample(greedy=True)`` for a
            deterministic decode); ``None``: ``y ~ p`` from ``engine.sample`` (one per bound example, or ``batch_size``).
        num_candidates: ``K`` candidates per example in ``mode="resample"`` (default 16); not used by ``"mpe"``.
        mode: ``"resample"`` (draw from the weighted candidates) or ``"mpe"`` (``argmax q``).
        allowed: optional bool ``(B, n, k)`` unit constraints in circuit values, conjoined with the constraint
            (e.g. a puzzle's givens).
        root: which root of a multi-rooted circuit the output must satisfy.
        batch_size: the number of anchors to draw for an engine bound to no input (``sample=None`` only).
        chunk_size: the engine's memory bound (rows per model call) for the conditionals and the weights.
        generator: a ``torch.Generator`` on the model's device for every draw (anchors, candidates, tokens, the choice).
        return_diagnostics: also return a :class:`ResampleDiagnostics` (weights, effective sample size, ...).
        keep_satisfying: return an anchor that already satisfies the constraint (and ``allowed``) unchanged and
            resample only the violators (module docs: "Kept anchors"); ``False``: resample every anchor.
        proposal: where the candidates come from (:mod:`pseudosl.generation.proposals`): ``LocalProposal()``
            (Gen-C, the default), ``LocalProposal(temperature)``, ``EditProposal(rate, window)`` or
            ``RestartProposal(lookback)``; ``mode="mpe"`` needs a factorized one (not ``RestartProposal``).
        rounds: resample the violators' outputs again, around their last output, ``rounds - 1`` more times (a short
            Markov chain with the proposal as its kernel; module docs: "Rounds").  The diagnostics are the last
            round's.

    Returns:
        ``(B, n)`` long outputs in the model's values (token ids for a language model), each satisfying the
        constraint (root ``root``) and ``allowed``; with ``return_diagnostics``, ``(outputs, diagnostics)``.

    Raises:
        UnsatisfiableError: (a ``ValueError``) the constraint and ``allowed`` have no model for an example (checked
            before the model runs), or the model gives every model probability 0.
    """
    keep_satisfying = check_bool("keep_satisfying", keep_satisfying)
    return_diagnostics = check_bool("return_diagnostics", return_diagnostics)
    constraint = circuit
    circuit, k = _check(engine, circuit, mode, num_candidates, root)
    proposal = _check_proposal(proposal, mode, engine).bind(constraint, allowed)
    rounds = check_int("rounds", rounds, 1)
    _check_allowed(allowed, circuit)
    n = circuit.n_vars
    if sample is None:
        if allowed is not None and batch_size is None and engine.n_examples in (None, 1):
            batch_size = allowed.shape[0]
        _check_satisfiable(circuit, allowed, root)
        sample = engine.sample(batch_size=batch_size, length=n, generator=generator)
    else:
        if batch_size is not None:
            raise ValueError("batch_size applies when the anchors are drawn (sample=None); the batch is sample's")
        sample = check_sample(sample, engine.vocab_size if engine.value_map is not None else engine.n_values)
        if sample.shape[1] != n:
            raise ValueError(f"sample has length {sample.shape[1]} but the circuit has {n} positions; "
                             f"pass (B, {n}) sequences")
        _check_satisfiable(circuit, allowed, root)
    b = sample.shape[0]
    if allowed is not None and allowed.shape[0] != b:
        raise ValueError(f"allowed has {allowed.shape[0]} rows but there are {b} anchors (one row per example)")
    if b == 0:
        empty = sample.new_zeros(0, k, n)
        none = torch.zeros(0, k)
        diag = ResampleDiagnostics(sample, empty, none, none, sample.new_zeros(0), torch.zeros(0), torch.zeros(0),
                                   torch.zeros(0, dtype=torch.bool))
        return (sample, diag) if return_diagnostics else sample
    kept = torch.zeros(b, dtype=torch.bool, device=sample.device)
    if keep_satisfying:
        kept = sample_satisfies(circuit, engine.circuit_values(sample), allowed, root=root).to(sample.device)
        if kept.all() and not return_diagnostics:
            return sample.clone()

    out, diag = _resample(engine, circuit, proposal, sample, k, mode, allowed, root, chunk_size, generator, kept)
    for _ in range(rounds - 1):  # the violators again, around their last output
        again, diag = _resample(engine, circuit, proposal, out, k, mode, allowed, root, chunk_size, generator,
                                kept)
        out = torch.where(kept[:, None], out, again)
    if not return_diagnostics:
        return out
    return out, diag


def _resample(engine: Engine, circuit: Circuit, proposal: Proposal, anchor: Tensor, k: int, mode: str,
              allowed: Tensor | None, root: int | None, chunk_size: int | None, generator: torch.Generator | None,
              kept: Tensor) -> tuple[Tensor, ResampleDiagnostics]:
    """One round: the proposal's candidates around ``anchor`` (``argmax q`` in ``mode="mpe"``), one chosen by its
    importance weight; ``kept`` rows return their anchor."""
    b, n = anchor.shape
    if mode == "mpe":
        cand = _mpe(engine, circuit, proposal, anchor, allowed, root, chunk_size)
        chosen = torch.zeros(b, dtype=torch.long, device=anchor.device)
        ess = torch.ones(b, dtype=cand.log_p.dtype, device=cand.log_p.device)
    else:
        cand = proposal.draw(engine, circuit, anchor, k, allowed, root, chunk_size, generator)
        log_w = cand.log_p - cand.log_q
        dead = torch.isneginf(log_w).all(-1)
        if dead.any():
            raise UnsatisfiableError(f"every candidate of examples {dead.nonzero().flatten().tolist()[:10]} has model "
                                     "probability 0 (log p = -inf): no importance weight is positive")
        chosen = sample_from_logits(log_w, generator=generator).to(anchor.device)
        ess = effective_sample_size(log_w)
    out = cand.values.gather(1, chosen.view(b, 1, 1).expand(b, 1, n)).squeeze(1)
    out = torch.where(kept[:, None], anchor, out)
    return out, ResampleDiagnostics(anchor=anchor, candidates=cand.values, log_p=cand.log_p, log_q=cand.log_q,
                                    chosen=chosen.masked_fill(kept, -1), ess=ess, log_p_constraint=cand.log_z,
                                    kept=kept)


def _mpe(engine: Engine, circuit: Circuit, proposal: Proposal, anchor: Tensor, allowed: Tensor | None,
         root: int | None, chunk_size: int | None) -> Candidates:
    """``argmax q`` of a factorized proposal as one candidate ``(B, 1, n)`` in the model's values.

    With a value map each class value of position ``i`` stands for its best token: its weight is multiplied by
    the largest within-class probability of its tokens before the MPE, and it is filled with that token (module docs)."""
    values, tokens = proposal.factors(engine, circuit, anchor, allowed, root, chunk_size)
    log_z = circuit.log_prob(values, allowed)
    log_z = log_z[:, root or 0] if log_z.dim() == 2 else log_z
    check_mass(log_z)
    x = values
    vm = engine.value_map
    if vm is not None:
        lookup = vm.on(tokens.device)[1]
        best = tokens.new_full(values.shape, float("-inf")).scatter_reduce(-1, lookup.expand_as(tokens), tokens,
                                                                            "amax")
        x = values + best  # each class value weighted by its best token
    best_q = circuit.mpe(x, allowed, root=root)
    out = best_q.values[:, None]  # (B, 1, n)
    if vm is not None:  # each class value filled with its best token
        in_class = lookup == best_q.values[..., None]  # (B, n, V)
        out = tokens.masked_fill(~in_class, float("-inf")).argmax(-1)[:, None]
    return Candidates(out, (best_q.log_prob - log_z)[:, None], proposal.score(engine, out, chunk_size), log_z)
