"""``pseudosl.ConstraintLogitsProcessor``: the mask equals brute-force satisfiability of every prefix, and Hugging
Face ``generate`` (greedy, sampling, beam search) with it ends in the constraint on a tiny GPT-2, while the same
generation without it does not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import oracle
import pseudosl
from tiny_models import circuit_from_truth, tiny_gpt2

transformers = pytest.importorskip("transformers")
from transformers import LogitsProcessorList  # noqa: E402

V, N = 8, 6  # tokens 0..7 (0 = BOS/EOS/pad), windows of 6 generated tokens
# tokens 2..6 are distinguished, 0, 1 and 7 fold into the catch-all value
FOLDED = [[3], [4, 5], [5, 5], [6, 2, 6]]
# a dead end: after a 7 every token completes a forbidden sequence (every token is distinguished: no folding)
DEAD_END = [[3], [4, 5]] + [[7, t] for t in range(V)]


def occurs(seq: tuple[int, ...], words: list[list[int]]) -> bool:
    return any(tuple(w) == seq[i:i + len(w)] for w in words for i in range(len(seq) - len(w) + 1))


def brute_force_allowed(prefix: tuple[int, ...], n: int, vocab: int, ok) -> list[bool]:
    """Per token ``c``: does some completion of ``prefix + (c,)`` to ``n`` tokens satisfy ``ok``?"""
    free = n - len(prefix) - 1
    return [any(ok(prefix + (c,) + rest) for rest in itertools.product(range(vocab), repeat=free))
            for c in range(vocab)]


def kept(processor, input_ids: torch.Tensor, vocab: int, prompt_length: int) -> torch.Tensor:
    """The tokens the processor keeps after ``input_ids``, called as ``generate`` does: from the prompt on, one more
    token each call."""
    processor.reset()
    for end in range(prompt_length, input_ids.shape[1] + 1):
        scores = torch.randn(input_ids.shape[0], vocab)
        out = processor(input_ids[:, :end], scores)
    assert out is not scores and torch.equal(out[torch.isfinite(out)], scores[torch.isfinite(out)])
    return torch.isfinite(out)


@pytest.mark.parametrize("seed", range(3))
def test_mask_equals_brute_force_on_a_random_circuit(seed):
    n, k, vocab, prompt = 4, 3, 5, torch.tensor([4, 3])  # tokens 3, 4 are no circuit values: masked in the window
    truth = np.random.default_rng(seed).random(k ** n) < 0.25
    truth[0] = True
    table = dict(zip(map(tuple, oracle.assignments(n, k).tolist()), truth))
    processor = pseudosl.ConstraintLogitsProcessor(circuit_from_truth(truth, n, k), prompt_length=2)
    for t in range(n):
        prefixes = list(itertools.product(range(k), repeat=t))
        ids = torch.cat([prompt.expand(len(prefixes), 2), torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), t)], 1)
        got = kept(processor, ids, vocab, 2)
        for row, prefix in enumerate(prefixes):
            want = brute_force_allowed(prefix, n, k, table.__getitem__) + [False, False]
            if not any(want):  # no completion left: the row is left as it is
                want = [True] * vocab
            assert got[row].tolist() == want, (t, prefix)


@pytest.mark.parametrize("words", [FOLDED, DEAD_END], ids=["folded", "dead end"])
def test_mask_equals_brute_force_over_token_sequences(words):
    n = 4
    constraint = pseudosl.no_forbidden_sequences(words, n_positions=n, vocab_size=V, cache=False)
    assert (constraint.value_map is not None) == (words is FOLDED)
    processor = pseudosl.ConstraintLogitsProcessor(constraint)
    for t in range(n):
        prefixes = list(itertools.product(range(V), repeat=t))
        ids = torch.cat([torch.zeros(len(prefixes), 1, dtype=torch.long),
                         torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), t)], 1)
        got = kept(processor, ids, V, 1)
        for row, prefix in enumerate(prefixes):
            want = brute_force_allowed(prefix, n, V, lambda s: not occurs(s, words))
            assert got[row].tolist() == (want if any(want) else [True] * V), (t, prefix)
    if words is DEAD_END:  # the look-ahead: a 7 is masked wherever a token must follow it, allowed last
        assert not kept(processor, torch.tensor([[0, 1, 2]]), V, 1)[0, 7]
        assert kept(processor, torch.tensor([[0, 1, 2, 1]]), V, 1)[0, 7]


def test_past_the_window_and_errors():
    constraint = pseudosl.no_forbidden_sequences(FOLDED, n_positions=3, vocab_size=V, cache=False)
    processor = pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=2)
    scores = torch.randn(2, V)
    kept(processor, torch.zeros(2, 4, dtype=torch.long), V, 2)
    with pytest.raises(ValueError, match="one token past the window of 3 tokens.*max_new_tokens.*or call .reset"):
        processor(torch.zeros(2, 5, dtype=torch.long), scores)  # generate past the window, or a new one on the output?
    longer = pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=2, max_new_tokens=5)
    kept(longer, torch.zeros(2, 4, dtype=torch.long), V, 2)
    for end in (5, 6):  # 3, 4 generated: the window is done, nothing is masked
        assert torch.equal(longer(torch.zeros(2, end, dtype=torch.long), scores), scores)
    with pytest.raises(ValueError, match="prompt_length=2 but the first call's input_ids hold 1 tokens"):
        pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=2)(torch.zeros(2, 1, dtype=torch.long), scores)
    with pytest.raises(ValueError, match="build the constraint with vocab_size=9"):
        processor(torch.zeros(2, 2, dtype=torch.long), torch.randn(2, 9))
    with pytest.raises(TypeError, match="AutomatonConstraint, a pseudosl.Constraint or a pseudosl.Circuit"):
        pseudosl.ConstraintLogitsProcessor(FOLDED, prompt_length=2)
    unfolded = pseudosl.ConstraintLogitsProcessor(pseudosl.no_forbidden_sequences(DEAD_END, 3, V, cache=False), 2)
    with pytest.raises(ValueError, match="circuit reads token ids 0..7"):
        unfolded(torch.zeros(2, 2, dtype=torch.long), torch.randn(2, 7))
    with pytest.raises(ValueError, match="prompt_length must be >= 0"):
        pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=-1)
    b = pseudosl.CircuitBuilder(2, 2)
    two = pseudosl.Circuit(b.build([b.literal(0, 1), b.literal(1, 1)]))
    with pytest.raises(ValueError, match="2 roots: pass root=r"):
        pseudosl.ConstraintLogitsProcessor(two, prompt_length=1)
    assert kept(pseudosl.ConstraintLogitsProcessor(two, root=1), torch.tensor([[0, 0]]), 2, 1).tolist() == [[False, True]]


def test_a_value_with_exp_minus_114_of_the_completions_is_allowed():
    """``y_0 = 1`` forces every later position to 0: 1 completion against 7 * 8^54 = exp(114.2) for the others;
    its marginal, exp(-114), underflows float32 (below its subnormals), not the float64 the processor picks."""
    n, k = 55, 8
    b = pseudosl.CircuitBuilder(n, k)
    rest_zero = b.and_(*(b.literal(i, 0) for i in range(1, n)))
    circuit = pseudosl.Circuit(b.build(b.or_(b.and_(b.literal(0, 1), rest_zero), b.in_set(0, [0, 2, 3, 4, 5, 6, 7]))))
    processor = pseudosl.ConstraintLogitsProcessor(circuit, prompt_length=1)
    assert processor.compiled.dtype == torch.float64
    assert kept(processor, torch.zeros(1, 1, dtype=torch.long), k, 1).all()
    x = torch.zeros(1, n, k)  # the same marginal in float32 is 0: the dtype matters
    assert circuit.marginals(x)[0, 0, 1] == 0 and circuit.marginals(x.double())[0, 0, 1] > 0
    assert kept(processor, torch.tensor([[0, 1, 0]]), k, 1)[0].tolist() == [True] + [False] * 7  # then only 0


def test_a_circuit_too_large_for_float64_marginals_is_refused():
    b = pseudosl.CircuitBuilder(330, 9)  # 330 ln 9 = 725 > 700
    circuit = pseudosl.Circuit(b.build(b.true()))
    with pytest.raises(ValueError, match="could underflow"):
        pseudosl.ConstraintLogitsProcessor(circuit, prompt_length=1)


# -- generate ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(16, V, 32).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(3.0)  # peaky: greedy and beam search have preferences to break
    return model


def _prompts(seed: int, rows: int = 12, length: int = 3) -> torch.Tensor:
    return torch.randint(1, V, (rows, length), generator=torch.Generator().manual_seed(seed))


SETTINGS = {"greedy": dict(do_sample=False), "sampling": dict(do_sample=True, top_k=0),
            "beam search": dict(do_sample=False, num_beams=3, num_return_sequences=2)}


@pytest.mark.parametrize("words", [FOLDED, DEAD_END], ids=["folded", "dead end"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_generate_ends_in_the_constraint(gpt2, setting, words):
    constraint = pseudosl.no_forbidden_sequences(words, n_positions=N, vocab_size=V, cache=False)
    ok, unconstrained_ok = [], []
    for seed in range(3):
        prompts = _prompts(seed)
        kw = dict(SETTINGS[setting], max_new_tokens=N, min_new_tokens=N, pad_token_id=0)
        torch.manual_seed(seed)
        masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint)])  # the prompt: the first call's
        out = gpt2.generate(prompts, logits_processor=masks, **kw)
        torch.manual_seed(seed)
        free = gpt2.generate(prompts, **kw)
        assert out.shape[1] == prompts.shape[1] + N
        ok.append(constraint.satisfied(out[:, -N:]))
        unconstrained_ok.append(constraint.satisfied(free[:, -N:]))
    assert torch.cat(ok).all()
    assert not torch.cat(unconstrained_ok).all()  # the same generation without the mask violates it


def test_left_padded_prompts_early_end_and_a_longer_generation(gpt2):
    constraint = pseudosl.no_forbidden_sequences(FOLDED, n_positions=N, vocab_size=V, cache=False)
    prompts = _prompts(7, rows=8, length=4)
    mask = torch.ones_like(prompts)
    mask[::2, :2] = 0  # every other prompt is two tokens, left-padded
    prompts = prompts.masked_fill(mask == 0, 0)
    masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, prompt_length=4, max_new_tokens=N + 4)])
    torch.manual_seed(0)
    out = gpt2.generate(prompts, attention_mask=mask, logits_processor=masks, do_sample=True, top_k=0,
                        max_new_tokens=N + 4, pad_token_id=0)  # EOS (0) may end a row early; 4 tokens past the window
    window = out[:, 4:4 + N]
    assert window.shape[1] == N and constraint.satisfied(window).all()  # the pad after an EOS is no forbidden token
