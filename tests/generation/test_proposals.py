"""The proposals of ``constrained_sample`` (``pseudosl.generation.proposals``) against brute force in float64.

For the GRU of tests/generation/test_constrained_sample.py (81 sequences) and the tiny GPT-2 over a folded
vocabulary (216 token sequences), each proposal's ``q`` is built by enumeration from the joint table -- the next-value
distributions after each prefix, the most probable repair, the masks of the sequential proposal -- independently of
the library's code.  Checked: ``log q`` and ``log p`` of every candidate are the brute-force values; the draws follow
the exact output distribution of sampling importance resampling with ``q`` (so the weights are exact); for the
proposals that claim it, large ``K`` approaches ``p(. | alpha)`` and the exact distance falls with ``K``; the
sequential proposal's support is the anchor's prefix (it tends to ``p(. | y_<s, alpha)``, a stated bias, whose
distance to the target is not 0); rounds compose exactly; the automaton's masks equal the circuit's; named errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
import pseudosl
from assertions import sample_fit
from proposal_oracle import Brute
from tiny_models import circuit_from_truth
from test_constrained_sample import (GRU, K_VALUES, N, N_LM, V, counts, local_table, lm_setup, random_truth,
                                     table_of, target, tv)
from pseudosl.generation import EditProposal, LocalProposal, RestartProposal

pytestmark = pytest.mark.usefixtures("float64_default")


def gru_case(seed: int = 1, density: float = 0.3):
    model, truth = GRU(seed=seed), random_truth(seed, density=density)
    return model, circuit_from_truth(truth, N, K_VALUES), Brute(table_of(model), truth, N, K_VALUES)


def brute_q(brute: Brute, proposal, a: int, local=None) -> torch.Tensor:
    if isinstance(proposal, LocalProposal):
        return brute.factorized(local / proposal.temperature)
    if isinstance(proposal, EditProposal):
        return brute.edit(a, proposal.rate, proposal.window)
    return brute.restart(a, proposal.lookback)


PROPOSALS = [LocalProposal(temperature=0.5), EditProposal(rate=0.1, window=1), EditProposal(rate=0.3, window=0),
             RestartProposal(lookback=0), RestartProposal(lookback=1)]


# -- log q, log p, and the draws ---------------------------------------------------------------------------
@pytest.mark.parametrize("proposal", PROPOSALS, ids=repr)
def test_weights_are_p_over_the_brute_force_proposal(proposal):
    model, circuit, brute = gru_case()
    anchors = model.engine().sample(batch_size=12, generator=torch.Generator().manual_seed(0))
    _, diag = pseudosl.constrained_sample(model.engine(), circuit, anchors, num_candidates=6, proposal=proposal,
                                          generator=torch.Generator().manual_seed(1), return_diagnostics=True,
                                          keep_satisfying=False)
    idx = brute.index(diag.candidates)
    torch.testing.assert_close(diag.log_p, brute.log_p[idx])
    table = brute.log_p.view((K_VALUES,) * N)
    for b in range(12):
        a = int(brute.index(anchors[b]))
        q = brute_q(brute, proposal, a, local_table(table, tuple(anchors[b].tolist())))
        torch.testing.assert_close(diag.log_q[b], q[idx[b]].log())


@pytest.mark.parametrize("proposal", PROPOSALS, ids=repr)
@pytest.mark.parametrize("k", [1, 2])
def test_draws_follow_the_exact_output_distribution(proposal, k):
    model, circuit, brute = gru_case()
    anchor = torch.tensor([[2, 0, 1, 1]])
    a = int(brute.index(anchor[0]))
    q = brute_q(brute, proposal, a, local_table(brute.log_p.view((K_VALUES,) * N), (2, 0, 1, 1)))
    y = pseudosl.constrained_sample(model.engine(), circuit, anchor.expand(20_000, N), num_candidates=k,
                                    proposal=proposal, generator=torch.Generator().manual_seed(k))
    got = counts(y)
    l1, bound, _ = sample_fit(got, oracle.resampling_output(q, brute.log_p, k))
    assert l1 <= bound, (l1, bound)
    assert sample_fit(got, oracle.resampling_output(q, brute.log_p, 3 - k))[0] > bound  # the check has power


@pytest.mark.parametrize("proposal", [EditProposal(rate=0.2, window=0), RestartProposal(lookback=0)], ids=repr)
def test_folded_vocabulary_draws_follow_the_exact_output_distribution(proposal):
    constraint, truth, engine, ys, log_p, logits = lm_setup("classes")
    vm = constraint.value_map
    ok = torch.as_tensor(truth)[oracle.assignment_index(vm.to_values(ys), 3)].numpy()
    brute = Brute(log_p, ok, N_LM, V, vm.lookup)
    torch.testing.assert_close(brute.pref, logits)  # the enumeration agrees with the model's own prefixes
    anchor = torch.tensor([1, 0, 0])  # the restart keeps its first token
    assert not constraint.satisfied(anchor[None])[0]
    q = brute_q(brute, proposal, int(brute.index(anchor)))
    y, diag = pseudosl.constrained_sample(engine, constraint, anchor[None].expand(10_000, N_LM), num_candidates=2,
                                          proposal=proposal, generator=torch.Generator().manual_seed(0),
                                          return_diagnostics=True)
    got = torch.bincount(brute.index(y), minlength=V ** N_LM).double()
    l1, bound, _ = sample_fit(got, oracle.resampling_output(q, log_p, 2))
    assert l1 <= bound, (l1, bound)
    assert sample_fit(got, oracle.resampling_output(q, log_p, 1))[0] > bound
    torch.testing.assert_close(diag.log_q[:4], q[brute.index(diag.candidates[:4])].log())


# -- where they tend ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("proposal", [LocalProposal(temperature=0.5), EditProposal(rate=0.1, window=1)], ids=repr)
def test_exact_proposals_approach_the_target_as_k_grows(proposal):
    """The exact distance to ``p(. | alpha)`` falls with ``K`` (1, 2, 3), and ``K = 32`` draws lie closer to the target
    than ``K = 1`` does (with probability >= 1 - 1e-9)."""
    model, circuit, brute = gru_case(seed=3)
    anchor = (2, 0, 1, 1)
    q = brute_q(brute, proposal, int(brute.index(torch.tensor(anchor))),
                local_table(brute.log_p.view((K_VALUES,) * N), anchor))
    want = brute.target()
    dist = [tv(oracle.resampling_output(q, brute.log_p, k), want) for k in (1, 2, 3)]
    assert dist[0] > 0.05 and dist[0] > dist[1] > dist[2], dist
    y = pseudosl.constrained_sample(model.engine(), circuit, torch.tensor([anchor]).expand(20_000, N),
                                    num_candidates=32, proposal=proposal, generator=torch.Generator().manual_seed(0))
    l1, bound, _ = sample_fit(counts(y), want)
    assert l1 / 2 + bound / 2 < dist[0], (l1 / 2 + bound / 2, dist[0])


@pytest.mark.parametrize("lookback", [0, 1])
def test_restart_keeps_the_prefix_and_is_biased_off_the_target(lookback):
    """The sequential proposal's support is the constraint's sequences that share the anchor's prefix ``y_<s``, so as
    ``K`` grows its output tends to ``p(. | y_<s, alpha)``; over anchors ``y ~ p`` (satisfying ones kept) that law is
    off ``p(. | alpha)`` (exact distance > 0: the stated bias), while ``EditProposal``'s limit is the target."""
    _, _, brute = gru_case(seed=3)
    p = brute.log_p.exp()
    limit = p.masked_fill(~brute.ok, 0.0)  # kept anchors: exactly p on the constraint
    for a in torch.nonzero(~brute.ok).flatten().tolist():
        q = brute.restart(a, lookback)
        s = brute.restart_start(a, lookback)
        support = brute.ok & (brute.ys[:, :s] == brute.ys[a, :s]).all(1)
        assert torch.equal(q > 0, support)
        cond = p.masked_fill(~support, 0.0)
        limit = limit + p[a] * cond / cond.sum()  # K -> infinity: p restricted to the support
    assert tv(limit, brute.target()) > 1e-3


def test_rounds_compose_the_resampling_kernel():
    """``rounds=2`` from a fixed violating anchor: round 1's output law, each output then resampled around itself
    (exact composition by enumeration, K = 2)."""
    model, circuit, brute = gru_case()
    anchor = (2, 0, 1, 1)
    table = brute.log_p.view((K_VALUES,) * N)
    proposal = LocalProposal(temperature=0.5)

    def kernel(y: tuple[int, ...]) -> torch.Tensor:
        return oracle.resampling_output(brute_q(brute, proposal, 0, local_table(table, y)), brute.log_p, 2)

    first = kernel(anchor)
    second = sum(first[z] * kernel(tuple(brute.ys[z].tolist())) for z in torch.nonzero(first).flatten().tolist())
    y = pseudosl.constrained_sample(model.engine(), circuit, torch.tensor([anchor]).expand(20_000, N),
                                    num_candidates=2, proposal=proposal, rounds=2,
                                    generator=torch.Generator().manual_seed(0))
    got = counts(y)
    l1, bound, _ = sample_fit(got, second)
    assert l1 <= bound, (l1, bound)
    assert sample_fit(got, first)[0] > bound


@pytest.mark.parametrize("lookback", [0, 1])
def test_restart_under_allowed_is_the_brute_force_proposal_on_alpha_and_allowed(lookback):
    """``allowed`` (the same for every example here) restricts the repair and the masks: ``log q`` of every candidate
    is the sequential proposal enumerated on ``alpha AND allowed``, and every candidate satisfies both."""
    model, circuit, _ = gru_case(seed=2, density=0.5)
    truth = Brute(table_of(model), random_truth(2, density=0.5), N, K_VALUES).ok.numpy()
    allowed = torch.ones(N, K_VALUES, dtype=torch.bool)
    allowed[1, 0] = allowed[3, 2] = False
    fits = allowed.numpy()[np.arange(N), np.asarray(oracle.assignments(N, K_VALUES))].all(1)
    brute = Brute(table_of(model), truth & fits, N, K_VALUES)
    assert 2 < brute.ok.sum() < truth.sum()
    anchors = model.engine().sample(batch_size=8, generator=torch.Generator().manual_seed(4))
    _, diag = pseudosl.constrained_sample(model.engine(), circuit, anchors, num_candidates=5,
                                          proposal=RestartProposal(lookback), allowed=allowed.expand(8, N, K_VALUES),
                                          generator=torch.Generator().manual_seed(5), return_diagnostics=True,
                                          keep_satisfying=False)
    idx = brute.index(diag.candidates)
    assert brute.ok[idx].all()
    for b in range(8):
        q = brute.restart(int(brute.index(anchors[b])), lookback)
        torch.testing.assert_close(diag.log_q[b], q[idx[b]].log())


# -- the automaton's masks --------------------------------------------------------------------------------
def test_the_automatons_masks_give_the_circuits_outputs():
    from tiny_tokenizer import biased_gpt2, tiny_tokenizer

    tok = tiny_tokenizer()
    vocab = len(tok)
    words = ["darn", "heck"]
    favoured = [tok.convert_tokens_to_ids(t) for t in ["Ġdarn", "Ġheck", "Ġthe", "Ġdog"] if t in tok.get_vocab()]
    model = biased_gpt2(vocab, favoured, logit=3.0)
    automaton = pseudosl.no_forbidden_words(words, tok, cache=False)
    constraint = automaton.window(6)
    prompts = torch.tensor([[0], [0], [0], [0]])
    engine = pseudosl.as_engine(model, prompt_ids=prompts, value_map=constraint.value_map)
    texts = [" the darn dog ate the shoe", " a heck of a quick fox", " what the heck is darn", " the lazy dog jumps"]
    anchors = torch.tensor([tok(t)["input_ids"][:6] for t in texts])
    assert constraint.satisfied(anchors).tolist() == [False, False, False, True]
    outs = [pseudosl.constrained_sample(engine, constraint, anchors, num_candidates=4,
                                        proposal=RestartProposal(1, automaton=a),
                                        generator=torch.Generator().manual_seed(1)) for a in (None, automaton)]
    assert torch.equal(outs[0], outs[1]) and constraint.satisfied(outs[1]).all()
    other = pseudosl.no_forbidden_words(["fox"], tok, cache=False)
    with pytest.raises(ValueError, match="folds tokens with"):
        pseudosl.constrained_sample(engine, constraint, anchors, proposal=RestartProposal(automaton=other))


# -- named errors ---------------------------------------------------------------------------------------
def test_errors_are_named_before_the_model_runs():
    model, circuit, _ = gru_case()
    anchors = torch.zeros(2, N, dtype=torch.long)
    with pytest.raises(ValueError, match="mode='mpe'.*RestartProposal"):
        pseudosl.constrained_sample(model.engine(), circuit, anchors, mode="mpe", proposal=RestartProposal())
    with pytest.raises(TypeError, match="proposal must be"):
        pseudosl.constrained_sample(model.engine(), circuit, anchors, proposal="restart")
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        pseudosl.constrained_sample(model.engine(), circuit, anchors, rounds=0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        LocalProposal(temperature=0.0)
    with pytest.raises(ValueError, match=r"rate must be a number in \(0, 1\)"):
        EditProposal(rate=0.0)
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        EditProposal(window=-1)
    with pytest.raises(ValueError, match="lookback must be an int >= 0"):
        RestartProposal(lookback=1.5)
    with pytest.raises(TypeError, match="automaton must be"):
        RestartProposal(automaton=circuit)
    table = pseudosl.as_engine(lambda y, example: table_of(model)[oracle.assignment_index(y, K_VALUES)],
                               n_values=K_VALUES)
    for proposal in (EditProposal(), RestartProposal()):
        with pytest.raises(ValueError, match="next-token distributions.*LocalProposal"):
            pseudosl.constrained_sample(table, circuit, anchors, proposal=proposal)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("proposal", [None, LocalProposal(0.5), EditProposal(), RestartProposal(1)], ids=repr)
def test_every_proposal_runs_on_cuda(proposal):
    import copy

    model, circuit, _ = gru_case()
    anchors = model.engine().sample(batch_size=16, generator=torch.Generator().manual_seed(0))
    gpu_model, gpu_circuit = copy.deepcopy(model).cuda(), copy.deepcopy(circuit).to("cuda")
    y, diag = pseudosl.constrained_sample(gpu_model.engine(), gpu_circuit, anchors.cuda(), num_candidates=4,
                                          proposal=proposal, generator=torch.Generator("cuda").manual_seed(0),
                                          return_diagnostics=True)
    assert y.device.type == "cuda" and pseudosl.sample_satisfies(circuit, y.cpu()).all()
    assert diag.log_q.device.type == "cuda" and torch.isfinite(diag.log_p).all()
