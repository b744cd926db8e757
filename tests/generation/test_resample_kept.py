"""``constrained_sample`` keeps an anchor that already satisfies the constraint (issue 27, item 3), float64.

Checked against brute force over the 81 sequences of the GRU of tests/generation/test_constrained_sample.py: satisfying anchors
come back identical (diagnostics ``kept``, ``chosen = -1``), violators are resampled exactly as with
``keep_satisfying=False`` under the same generator (the documented generator use), every output satisfies the
constraint; with anchors ``y ~ p`` the draws follow the exact mixture ``p(A) p(. | A) + (1 - p(A)) M_K`` (not the
every-anchor-resampled distribution, not the target), whose distance to ``p(. | A)`` is ``(1 - p(A)) TV(M_K, p(. | A))``
and falls with ``K``; when every anchor is kept nothing runs.
"""

from __future__ import annotations

import pytest
import torch

import oracle
import pseudosl
from assertions import sample_fit
from tiny_models import circuit_from_truth
from test_constrained_sample import (GRU, local_sample, K_VALUES, N, counts, exact_output, lm_setup, random_truth, table_of, target,
                                     tv)

pytestmark = pytest.mark.usefixtures("float64_default")


@pytest.mark.parametrize("mode", ["resample", "mpe"])
@pytest.mark.parametrize("with_allowed", [False, True])
def test_satisfying_anchors_come_back_unchanged_and_only_violators_are_resampled(mode, with_allowed):
    model, truth = GRU(seed=0), random_truth(0, density=0.5)
    circuit = circuit_from_truth(truth, N, K_VALUES)
    anchors = model.engine().sample(batch_size=64, generator=torch.Generator().manual_seed(0))
    allowed = None
    if with_allowed:  # position 0 may not take value 2: an anchor satisfying alpha but not allowed is resampled
        allowed = torch.ones(64, N, K_VALUES, dtype=torch.bool)
        allowed[:, 0, 2] = False
    sat = pseudosl.sample_satisfies(circuit, anchors, allowed)
    assert sat.any() and not sat.all()
    if with_allowed:
        assert (pseudosl.sample_satisfies(circuit, anchors) & ~sat).any()  # the allowed test has power
    kw = dict(num_candidates=4) if mode == "resample" else {}
    y, diag = local_sample(model.engine(), circuit, anchors, mode=mode, allowed=allowed,
                                          generator=torch.Generator().manual_seed(1), return_diagnostics=True, **kw)
    assert torch.equal(y[sat], anchors[sat]) and torch.equal(diag.kept, sat)
    assert (diag.chosen[sat] == -1).all() and (diag.chosen[~sat] >= 0).all()
    assert pseudosl.sample_satisfies(circuit, y, allowed).all()
    assert torch.equal(y[~sat], diag.candidates[~sat, diag.chosen[~sat]])
    every, _ = local_sample(model.engine(), circuit, anchors, mode=mode, allowed=allowed,
                                           generator=torch.Generator().manual_seed(1), return_diagnostics=True,
                                           keep_satisfying=False, **kw)
    assert torch.equal(y[~sat], every[~sat])  # the same draws: the generator advances alike, kept or not
    assert not torch.equal(y[sat], every[sat])  # the kept rows would have changed


def test_folded_vocabulary_keeps_satisfying_token_anchors():
    constraint, _, engine, *_ = lm_setup("classes")
    anchors = engine.sample(batch_size=32, length=3, generator=torch.Generator().manual_seed(0))
    sat = constraint.satisfied(anchors)
    assert sat.any() and not sat.all()
    y = local_sample(engine, constraint, anchors, num_candidates=3,
                                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(y[sat], anchors[sat]) and constraint.satisfied(y).all()


@pytest.mark.parametrize("k", [1, 2])
def test_anchors_from_the_model_give_the_exact_kept_mixture(k):
    """Draws with anchors ``y ~ p``: the exact output distribution keeps ``p(A) p(. | A)`` and resamples the rest;
    the check tells it from the every-anchor-resampled distribution and from the target."""
    model, truth = GRU(seed=6), random_truth(6, density=0.5)  # p(A) large enough that keeping it shows
    circuit, log_p = circuit_from_truth(truth, N, K_VALUES), table_of(model)
    y = local_sample(model.engine(), circuit, batch_size=30_000, num_candidates=k,
                                    generator=torch.Generator().manual_seed(k))
    got = counts(y)
    l1, bound, _ = sample_fit(got, exact_output(log_p, truth, k, keep=True))
    assert l1 <= bound, (l1, bound)
    for other in (exact_output(log_p, truth, k), target(log_p, truth)):
        assert sample_fit(got, other)[0] > bound


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_mixture_is_off_the_target_by_the_violators_share_and_falls_with_k(seed):
    """``TV(out, p(. | A)) = (1 - p(A)) TV(M_K, p(. | A))`` exactly, ``M_K`` the violators' resampled mixture; it falls
    with ``K`` and is not 0 for a finite ``K`` (the mixture is not exactly the target)."""
    model, truth = GRU(seed=seed), random_truth(seed)
    log_p = table_of(model)
    want, p = target(log_p, truth), log_p.exp()
    p_a = float(p[torch.as_tensor(truth)].sum())
    dist = []
    for k in (1, 2, 3):
        out = exact_output(log_p, truth, k, keep=True)
        violators = (out - p.masked_fill(~torch.as_tensor(truth), 0.0)) / (1 - p_a)  # M_K
        torch.testing.assert_close(violators.sum(), torch.tensor(1.0))
        torch.testing.assert_close(torch.tensor(tv(out, want)), (1 - p_a) * torch.tensor(tv(violators, want)))
        dist.append(tv(out, want))
    assert dist[0] > dist[1] > dist[2] > 1e-4, dist


def test_when_every_anchor_is_kept_nothing_runs_and_nothing_is_drawn():
    model = GRU(seed=0)
    circuit = circuit_from_truth(random_truth(0, density=0.5), N, K_VALUES)
    ys = torch.as_tensor(oracle.assignments(N, K_VALUES))
    anchors = ys[pseudosl.sample_satisfies(circuit, ys)][:5]
    engine = model.engine()
    engine.local_conditionals = lambda *a, **kw: pytest.fail("the model ran")
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    y = local_sample(engine, circuit, anchors, generator=g)
    assert torch.equal(y, anchors) and y.data_ptr() != anchors.data_ptr()
    assert torch.equal(g.get_state(), state)


def test_sample_satisfies_one_root_of_several():
    """Kept anchors of a multi-rooted circuit satisfy the ``root`` asked for (``sample_satisfies(root=)``)."""
    from test_constrained_sample import _two_roots
    two = pseudosl.Circuit.from_dag(_two_roots())  # root 0: y_0 in {0, 1}; root 1: y_1 in {0, 1}
    values = torch.tensor([[0, 2, 0, 0], [2, 0, 0, 0], [1, 1, 2, 2]])
    assert pseudosl.sample_satisfies(two, values).tolist() == [False, False, True]
    assert pseudosl.sample_satisfies(two, values, root=0).tolist() == [True, False, True]
    assert pseudosl.sample_satisfies(two, values, root=1).tolist() == [False, True, True]
    with pytest.raises(ValueError, match=r"root must be an int in 0..1 \(a root of the circuit\), got 2"):
        pseudosl.sample_satisfies(two, values, root=2)
    y = local_sample(GRU(seed=0).engine(), two, values, num_candidates=3, root=1,
                                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(y[1:], values[1:]) and (y[:, 1] <= 1).all()
