"""The mask written into the scores (``pseudosl.generation.banned``), as a new tensor (the default) and in place
(``inplace=True``): both modes give the same scores bit for bit under hostile scores (``+inf``, ``NaN``, fp16
overflow), in every dtype and layout (a strided view, scores that require grad), the in-place mode writes into the
given tensor and the default leaves it untouched, other processors' bans are the same named error, ``generate``
writes the same tokens, what ``output_logits`` returns under each mode is pinned, and bad switches are refused."""

from __future__ import annotations

import pytest
import torch

import pseudosl
from pseudosl.generation import MaskConflictError, TokenMatcher, compile_mask
from test_processor_calls import CASES, DECODINGS, N, generate, gpt2, hostile_scores, needs_a_3  # noqa: F401
from test_streaming_processor import V, mask_path  # noqa: F401

transformers = pytest.importorskip("transformers")
from transformers import LogitsProcessorList  # noqa: E402

IDS = torch.tensor([[1, 4], [2, 3], [1, 1]])


def steps(rows: int = 3):
    """The calls of one generation: a prompt, then two tokens (the rows reordered at the last one)."""
    yield IDS
    yield torch.cat([IDS, torch.tensor([[4], [2], [1]])], 1)
    yield torch.cat([IDS, torch.tensor([[4], [2], [1]]), torch.tensor([[2], [4], [1]])], 1)[[1, 0, 2]]


def layout(scores: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores as the processor gets them, the tensor that holds them)``: contiguous, a strided slice of a
    larger tensor (assisted decoding hands processors one), or a tensor that requires grad."""
    if kind == "strided":
        holder = torch.full((scores.shape[0], 3, V), 7.0, dtype=scores.dtype)
        holder[:, 1] = scores
        return holder[:, 1], holder
    if kind == "requires grad":
        leaf = scores.detach().clone().requires_grad_(True)
        view = leaf * 1  # a non-leaf: in place is allowed, autograd sees it
        return view, view
    given = scores.clone()
    return given, given


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, NaN where NaN."""
    a, b = a.detach(), b.detach()
    return a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()])


@pytest.mark.parametrize("kind", ["contiguous", "strided", "requires grad"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_inplace_writes_the_copys_scores_into_the_given_tensor(case, dtype, kind, mask_path):
    make, _, proc_kw = CASES[case]
    constraint = make()
    copy, inplace, zeros = (pseudosl.ConstraintLogitsProcessor(constraint, inplace=i, **proc_kw)
                            for i in (False, True, False))
    for step, ids in enumerate(steps()):
        allowed = torch.isfinite(zeros(ids, torch.zeros(3, V)))
        scores = hostile_scores(allowed, step).to(dtype)
        if dtype == torch.float16:
            scores = scores * torch.tensor(3e4, dtype=dtype)  # overflows to +-inf
        given, holder = layout(scores, kind)
        before = holder.detach().clone()
        want = copy(ids, given)
        assert same(given, scores) and same(holder, before)  # the default leaves its input as it was
        got = inplace(ids, given)
        assert got is given and same(got, want)
        if kind == "strided":  # written through the view: the rest of the holder untouched
            assert same(holder[:, 1], want) and same(holder[:, [0, 2]], before[:, [0, 2]])
        assert (want[~allowed] == float("-inf")).all() and same(want[allowed], scores[allowed])
    if kind == "requires grad":  # in place stays differentiable: the banned tokens get no gradient
        got.float().nan_to_num(0.0, 0.0, 0.0).sum().backward()


def test_inplace_writes_are_seen_by_autograd():
    """The NumPy writes bump the version counter: a tensor saved for backward and masked in place is an error at
    backward, as after any in-place torch op, not a silently wrong gradient."""
    constraint = needs_a_3()
    weight = torch.ones(V, requires_grad=True)
    scores = torch.randn(3, V)
    loss = (weight * scores).sum()  # saves `scores` for the gradient of `weight`
    pseudosl.ConstraintLogitsProcessor(constraint, max_new_tokens=1, inplace=True)(torch.ones(3, 2, dtype=torch.long),
                                                                                  scores)  # only a 3 will do
    assert torch.isinf(scores).any()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("inplace", [False, True])
def test_other_processors_bans_are_the_same_error_in_both_modes(inplace):
    processor = pseudosl.ConstraintLogitsProcessor(needs_a_3(), max_new_tokens=1, inplace=inplace)
    scores = torch.randn(3, V)
    scores[2, 3] = float("-inf")
    with pytest.raises(MaskConflictError, match="row 2 of the scores.*1 such row"):
        processor(torch.ones(3, 2, dtype=torch.long), scores)
    scores[2, 3] = float("nan")  # passed through: an allowed token's score is not the mask's business
    assert processor(torch.ones(3, 2, dtype=torch.long), scores)[2, 3].isnan()


@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("case", CASES)
def test_generate_writes_the_same_tokens_in_both_modes(gpt2, case, decoding):  # noqa: F811
    make, gen_kw, proc_kw = CASES[case]
    constraint = make()
    prompts = torch.randint(1, V, (6, 3), generator=torch.Generator().manual_seed(1))
    kw = dict(gen_kw, **DECODINGS[decoding], return_dict_in_generate=True, output_scores=True)
    outs = [generate(gpt2, prompts, LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(
        constraint, inplace=inplace, **proc_kw)]), 0, **kw) for inplace in (False, True)]
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    assert all(same(a, b) for a, b in zip(outs[0].scores, outs[1].scores))


@pytest.mark.parametrize("decoding", DECODINGS)
def test_what_output_logits_returns_in_each_mode(gpt2, decoding):  # noqa: F811
    """transformers' greedy search and sampling store the very tensor the processors got as the raw logits, after
    they ran: an in-place processor that is the first to write it leaves its -inf there (with ``min_new_tokens``
    its processor runs first and returns a new tensor: the logits stay raw).  Beam search gives the processors
    log-softmaxed scores (a new tensor) and keeps a copy of the logits: raw in both modes."""
    make, gen_kw, proc_kw = CASES["streaming"]
    prompts = torch.randint(1, V, (4, 3), generator=torch.Generator().manual_seed(2))
    for extra, raw_in_place in (({}, decoding == "beam search"), ({"min_new_tokens": 2}, True)):
        kw = dict(gen_kw, **extra, **DECODINGS[decoding], return_dict_in_generate=True, output_logits=True)
        logits = {inplace: generate(gpt2, prompts, LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(
            make(), inplace=inplace, **proc_kw)]), 0, **kw).logits for inplace in (False, True)}
        assert all(torch.isfinite(step).all() for step in logits[False])
        assert all(torch.isfinite(step).all() for step in logits[True]) == raw_in_place


@pytest.mark.parametrize("bad", ["True", 1, None, 0.0])
def test_bad_inplace_values_are_refused_by_name(bad):
    with pytest.raises(TypeError, match="inplace must be True or False"):
        pseudosl.ConstraintLogitsProcessor(needs_a_3(), inplace=bad)
    matcher = TokenMatcher(compile_mask(needs_a_3()), rows=2)
    with pytest.raises(TypeError, match="inplace must be True or False"):
        matcher.mask(torch.zeros(2, V), inplace=bad)
