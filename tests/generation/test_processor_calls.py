"""``ConstraintLogitsProcessor`` across ``generate`` calls and under hostile scores: a processor (or a
``LogitsProcessorList`` built once) serves several ``generate`` calls exactly as new processors would, a second
``generate`` on the first one's output is masked or refused by name (never left unmasked), banned tokens stay
banned under ``+inf`` / ``NaN`` / fp16-overflow scores, other processors that ban every allowed token are a named
error, a generation cut short by ``generate`` is reported, and the window mode's end-of-sequence token is allowed
only where the window filled with it holds (against brute force)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import oracle
import pseudosl
from pseudosl.generation import MaskConflictError
from pseudosl.logic.automaton import DFA, SparseDFA
from pseudosl.tokens.constraint import AutomatonConstraint
from pseudosl.tokens.value_map import ValueMap
from test_streaming_processor import EOS, V, parity_and_no_4_4, texts
from tiny_models import circuit_from_truth, tiny_gpt2

transformers = pytest.importorskip("transformers")
from transformers import LogitsProcessor, LogitsProcessorList  # noqa: E402

N = 5  # window of 5 generated tokens
FOLDED = [[3], [4, 4], [2, 4, 2]]  # token sequences kept out of the window (tokens 0, 1 fold into one value)


@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(16, V, 48).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(3.0)  # peaky: greedy and beam search have preferences to break
    return model


def window() -> pseudosl.Constraint:
    return pseudosl.no_forbidden_sequences(FOLDED, n_positions=N, vocab_size=V, cache=False)


def generate(model, prompts, masks, seed, **kw):
    torch.manual_seed(seed)
    return model.generate(prompts, logits_processor=masks, **{"pad_token_id": 0, **kw})


# -- several generate calls -------------------------------------------------------------------------------------
CASES = {"window": (window, dict(max_new_tokens=N, min_new_tokens=N), {}),
         "streaming": (parity_and_no_4_4, dict(max_new_tokens=6, eos_token_id=EOS), dict(eos_token_id=EOS,
                                                                                          max_new_tokens=6))}
DECODINGS = {"greedy": dict(do_sample=False), "sampling": dict(do_sample=True, top_k=0),
             "beam search": dict(do_sample=False, num_beams=3, num_return_sequences=2)}


@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("case", CASES)
def test_a_processor_list_built_once_serves_several_generate_calls(gpt2, case, decoding):
    """Prompts of other shapes, then the first ones again: the reused list writes what new processors write."""
    make, gen_kw, proc_kw = CASES[case]
    constraint = make()
    reused = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, **proc_kw)])
    for seed, (rows, length) in enumerate([(6, 3), (4, 5), (6, 3), (1, 2)]):
        prompts = torch.randint(1, V, (rows, length), generator=torch.Generator().manual_seed(seed))
        kw = dict(gen_kw, **DECODINGS[decoding])
        out = generate(gpt2, prompts, reused, seed, **kw)
        new = generate(gpt2, prompts, LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, **proc_kw)]),
                       seed, **kw)
        assert torch.equal(out, new)
        if case == "window":
            assert constraint.satisfied(out[:, length:]).all()
        else:
            assert all(constraint.satisfied(t[None]) for t in texts(out, length, EOS))


def test_a_second_generate_on_the_first_output_is_masked_or_refused(gpt2):
    constraint, prompts = window(), torch.randint(1, V, (6, 2), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=N, min_new_tokens=N, do_sample=True, top_k=0)
    ambiguous = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint)])
    first = generate(gpt2, prompts, ambiguous, 0, **kw)
    with pytest.raises(ValueError, match=f"one token past the window of {N} tokens.*new generate call whose prompt is "
                                         "the last output.*max_new_tokens.*reset"):
        generate(gpt2, first, ambiguous, 1, **kw)
    told = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, max_new_tokens=N)])
    free_ok = []
    for seed in range(4):
        first = generate(gpt2, prompts, told, seed, **kw)
        second = generate(gpt2, first, told, seed + 10, **kw)  # a new generation: the window after `first`
        fresh = generate(gpt2, first, LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint)]),
                         seed + 10, **kw)
        assert torch.equal(second, fresh) and constraint.satisfied(second[:, -N:]).all()
        free_ok.append(constraint.satisfied(generate(gpt2, first, None, seed + 10, **kw)[:, -N:]))
    assert not torch.cat(free_ok).all()  # unmasked, the second windows break the constraint


def test_a_streaming_processor_continues_or_starts_by_its_length(gpt2):
    """With ``max_new_tokens`` the second ``generate`` on the output starts fresh (as a new processor); without it
    the calls continue one text, which stays live as a whole."""
    constraint = parity_and_no_4_4()
    prompts = torch.randint(1, V, (6, 3), generator=torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=True, top_k=0)
    told = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint, max_new_tokens=4)])
    first = generate(gpt2, prompts, told, 0, **kw)
    second = generate(gpt2, first, told, 1, **kw)
    fresh = generate(gpt2, first, LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint,
                                                                                           max_new_tokens=4)]), 1, **kw)
    assert torch.equal(second, fresh) and constraint.satisfied(second[:, -4:]).all()
    untold = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(constraint)])
    both = generate(gpt2, generate(gpt2, prompts, untold, 0, **kw), untold, 1, **kw)
    live = constraint.dfa.live_states()
    assert all(live[constraint.dfa.run(constraint.values(row).tolist())] for row in both[:, 3:])


@pytest.mark.parametrize("case", CASES)
def test_calls_that_do_not_continue_start_a_new_generation(case):
    """The same length, two more tokens, fewer rows, a row off its prompt: each call masks as a new processor's
    first call would."""
    make, _, proc_kw = CASES[case]
    constraint = make()
    processor = pseudosl.ConstraintLogitsProcessor(constraint, **proc_kw)
    scores = torch.randn(2, V, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[1, 2], [1, 1]])
    processor(ids, scores)
    processor(torch.cat([ids, torch.tensor([[4], [2]])], 1), scores)
    for other in (torch.tensor([[1, 2, 4], [2, 1, 2]]), torch.tensor([[2, 4], [1, 4]]),
                  torch.tensor([[1, 2, 4, 4, 1], [1, 1, 2, 2, 2]]), torch.tensor([[4, 4, 4]])):
        got = processor(other, scores[:len(other)])
        want = pseudosl.ConstraintLogitsProcessor(constraint, **proc_kw)(other, scores[:len(other)])
        assert torch.equal(got, want) and processor.prompt_length == other.shape[1]
    nxt = torch.tensor([[4, 4, 4, 2]])
    assert torch.equal(processor(nxt, scores[:1]), processor.matcher.mask(scores[:1]))  # it continues
    assert processor.matcher.generated == 1


# -- hostile scores ---------------------------------------------------------------------------------------------
def hostile_scores(allowed: torch.Tensor, seed: int) -> torch.Tensor:
    """Random scores with +inf and NaN at some banned and some allowed tokens."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(allowed.shape, generator=g) * 4
    for value in (float("inf"), float("nan")):
        for wanted in (True, False):
            rows, cols = (allowed == wanted).nonzero(as_tuple=True)
            if len(rows):
                pick = torch.randint(0, len(rows), (max(1, len(rows) // 3),), generator=g)
                scores[rows[pick], cols[pick]] = value
    return scores


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_banned_tokens_stay_banned_whatever_the_scores(case, dtype):
    """Banned: -inf whatever came in (+inf, NaN, an fp16 overflow); allowed: the incoming score, bit for bit."""
    make, _, proc_kw = CASES[case]
    ids = torch.tensor([[1, 4], [2, 3], [1, 1]])
    for steps in range(3):
        processor = pseudosl.ConstraintLogitsProcessor(make(), **proc_kw)
        rows = ids
        for step in range(steps + 1):
            rows = torch.cat([ids, torch.full((3, step), 2)], 1)
            allowed = torch.isfinite(processor(rows, torch.zeros(3, V)))
        processor.reset()
        for r in range(rows.shape[1] - steps, rows.shape[1] + 1):
            processor(rows[:, :r], torch.zeros(3, V))
        scores = hostile_scores(allowed, steps).to(dtype)
        if dtype == torch.float16:
            scores = scores * torch.tensor(3e4, dtype=dtype)  # |score| > 2.2 overflows fp16 to +-inf
        processor.reset()
        for r in range(rows.shape[1] - steps, rows.shape[1]):
            processor(rows[:, :r], torch.zeros(3, V, dtype=dtype))
        out = processor(rows, scores)
        assert out.dtype == dtype
        assert (out[~allowed] == float("-inf")).all()
        assert torch.equal(out[allowed].isnan(), scores[allowed].isnan())
        kept = allowed & ~scores.isnan()
        assert torch.equal(out[kept], scores[kept])


class Sabotage(LogitsProcessor):
    """Before the constraint: sets scores (+inf, NaN) as a buggy processor or an fp16 overflow would."""

    def __init__(self, values: dict[int, float]) -> None:
        self.values = values

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        for token, value in self.values.items():
            scores[:, token] = value
        return scores


SABOTAGE = {"greedy": [{3: float("inf"), 4: float("nan")}, {4: float("inf"), 3: float("nan")}],
            "beam search": [{3: float("inf")}, {3: float("nan")}]}  # beam search sums scores: NaN on a banned token


@pytest.mark.parametrize("decoding", SABOTAGE)
def test_generate_after_a_processor_that_sets_banned_tokens_to_inf_or_nan(gpt2, decoding):
    constraint = window()  # token 3 is banned everywhere, a 4 after a 4
    for seed, values in enumerate(SABOTAGE[decoding]):
        prompts = torch.randint(1, V, (6, 3), generator=torch.Generator().manual_seed(seed))
        masks = LogitsProcessorList([Sabotage(values), pseudosl.ConstraintLogitsProcessor(constraint)])
        out = generate(gpt2, prompts, masks, 0, max_new_tokens=N, min_new_tokens=N, **DECODINGS[decoding])
        assert out.shape[1] == 3 + N and constraint.satisfied(out[:, -N:]).all()
        unmasked = generate(gpt2, prompts, LogitsProcessorList([Sabotage(values)]), 0, max_new_tokens=N,
                            min_new_tokens=N, **DECODINGS[decoding])
        broken = unmasked.shape[1] < 3 + N or not constraint.satisfied(unmasked[:, -N:]).all()
        assert broken  # without the mask the sabotage writes banned tokens (or derails the search)


def needs_a_3() -> AutomatonConstraint:
    """"The text holds a 3" (token 3 is value 0, every other token value 1): with one token, only a 3 will do."""
    return AutomatonConstraint(SparseDFA.from_dense(DFA(2, 2, 0, frozenset({1}), np.array([[1, 0], [1, 1]]))),
                               ValueMap([3], V))


@pytest.mark.parametrize("decoding", ["greedy", "sampling"])
def test_other_processors_banning_every_allowed_token_are_a_named_error(gpt2, decoding):
    prompts = torch.randint(1, V, (4, 2), generator=torch.Generator().manual_seed(0))
    masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(needs_a_3(), max_new_tokens=1)])
    with pytest.raises(MaskConflictError, match="row 0 of the scores: every token the constraint allows there arrives "
                                                "at -inf.*bad_words_ids"):
        generate(gpt2, prompts, masks, 0, max_new_tokens=1, bad_words_ids=[[3]], **DECODINGS[decoding])
    out = generate(gpt2, prompts, masks, 0, max_new_tokens=1, bad_words_ids=[[2]], **DECODINGS[decoding])
    assert (out[:, -1] == 3).all()


# -- generate cut short ------------------------------------------------------------------------------------------
def even_length() -> AutomatonConstraint:
    """"An even number of tokens": a text of 6 cannot end after 3."""
    return AutomatonConstraint(SparseDFA.from_dense(DFA(2, 2, 0, frozenset({0}), np.array([[1, 1], [0, 0]]))),
                               ValueMap([3], V))


def test_a_generation_cut_short_is_reported_at_the_next_call(gpt2):
    prompts = torch.randint(1, V, (6, 3), generator=torch.Generator().manual_seed(2))
    masks = LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(even_length(), max_new_tokens=6)])
    kw = dict(do_sample=True, top_k=0)
    generate(gpt2, prompts, masks, 0, max_new_tokens=3, min_new_tokens=3, **kw)
    with pytest.warns(UserWarning, match="the last generate call stopped after 3 of max_new_tokens=6 tokens, where 6 "
                                         "row.*row 0 first.*Pass generate the processor's max_new_tokens"):
        generate(gpt2, prompts, masks, 1, max_new_tokens=6, min_new_tokens=6, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the full length: nothing to report; after reset() (explicit): none
        generate(gpt2, prompts, masks, 2, max_new_tokens=6, min_new_tokens=6, **kw)
        generate(gpt2, prompts, masks, 3, max_new_tokens=5, min_new_tokens=5, **kw)
        masks[0].reset()
        generate(gpt2, prompts, masks, 4, max_new_tokens=6, min_new_tokens=6, **kw)


def test_rows_that_ended_at_eos_are_not_cut_short():
    """"A multiple of 3 tokens" with an EOS: a row that ended at its EOS is complete; one token in, it is not."""
    thirds = AutomatonConstraint(SparseDFA.from_dense(DFA(3, 2, 0, frozenset({0}), np.array([[1, 1], [2, 2], [0, 0]]))),
                                 ValueMap([3], V))
    processor = pseudosl.ConstraintLogitsProcessor(thirds, eos_token_id=EOS, max_new_tokens=6)
    for end in (1, 2):  # the EOS at once: an empty text
        processor(torch.tensor([[1, 0][:end]]), torch.zeros(1, V))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        processor(torch.tensor([[2]]), torch.zeros(1, V))
    processor(torch.tensor([[2, 4]]), torch.zeros(1, V))  # one token: after one more, two (no EOS allowed there)
    with pytest.warns(UserWarning, match="stopped after 2 of max_new_tokens=6"):
        processor(torch.tensor([[1]]), torch.zeros(1, V))


# -- the window mode and EOS ------------------------------------------------------------------------------------
def window_eos_oracle(ok, n: int, vocab: int, eos: int, prefix: tuple[int, ...]) -> list[bool]:
    """Brute force: a non-EOS token is kept iff some completion of it by non-EOS tokens to ``n`` satisfies ``ok``;
    the EOS iff the window filled with it does; after an EOS every token (the row has ended)."""
    if eos in prefix:
        return [True] * vocab
    text = [c for c in range(vocab) if c != eos]
    rest = n - len(prefix) - 1
    want = [c != eos and any(ok(prefix + (c,) + w) for w in itertools.product(text, repeat=rest))
            for c in range(vocab)]
    want[eos] = ok(prefix + (eos,) * (n - len(prefix)))
    return want if any(want) else [True] * vocab


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["bare circuit", "folded"])
def test_window_eos_mask_equals_brute_force(seed, kind):
    n, eos = 4, 0
    if kind == "bare circuit":  # the values are the token ids: value 0 has only the EOS
        k = vocab = 3
        truth = np.random.default_rng(seed).random(k ** n) < 0.3
        table = dict(zip(map(tuple, oracle.assignments(n, k).tolist()), truth))
        constraint, ok = circuit_from_truth(truth, n, k), table.__getitem__
    else:  # EOS in the catch-all value with token 1 (seeds 0, 1), or its own value (2, 3: "0 4" is forbidden)
        vocab, words = V, [[3], [4, 2], [2, 2, 4]][:seed % 2 + 2] + ([[0, 4]] if seed >= 2 else [])
        constraint = pseudosl.no_forbidden_sequences(words, n_positions=n, vocab_size=V, cache=False)
        ok = lambda s: not any(tuple(w) == s[i:i + len(w)] for w in words for i in range(n))  # noqa: E731
    for t in range(n):
        prefixes = list(itertools.product(range(vocab), repeat=t))
        generated = torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), t)
        ids = torch.cat([torch.full((len(prefixes), 1), 1), generated], 1)
        processor = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=eos)
        for end in range(1, ids.shape[1] + 1):
            out = processor(ids[:, :end], torch.zeros(len(prefixes), vocab))
        for row, prefix in enumerate(prefixes):
            assert torch.isfinite(out[row]).tolist() == window_eos_oracle(ok, n, vocab, eos, prefix), (t, prefix)


def test_a_text_level_window_never_ends_on_a_word():
    """``no_forbidden_words(...).window(n)`` under ``generate`` that stops at EOS (a token without text): without
    ``eos_token_id`` the processor lets ``generate`` stop right after a whole word; with it, never."""
    import re

    from tiny_tokenizer import biased_gpt2, tiny_tokenizer

    tok, words = tiny_tokenizer(), ["darn", "heck"]
    eos = tok.eos_token_id
    pieces = sorted({t for w in words for text in (w, " " + w) for t in tok.encode(text, add_special_tokens=False)})
    model = biased_gpt2(len(tok), pieces + [eos], logit=4.0)
    constraint = pseudosl.no_forbidden_words(words, tok, cache=False).window(6)
    pattern = re.compile(r"(?i)(?<![a-z0-9])(?:darn|heck)(?![a-z0-9])")
    prompts = torch.full((8, 1), tok.encode(" the", add_special_tokens=False)[0])
    leaks = {}
    for told in (False, True):
        processor = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=eos if told else None)
        masks = LogitsProcessorList([processor])
        out = generate(model, prompts, masks, 0, do_sample=True, top_k=0, max_new_tokens=6, eos_token_id=eos,
                       num_return_sequences=8)
        leaks[told] = sum(bool(pattern.search(tok.decode(r, skip_special_tokens=True))) for r in out[:, 1:])
    assert leaks == {False: leaks[False], True: 0} and leaks[False] > 0


@pytest.mark.parametrize("case", CASES)
def test_empty_batches_and_an_eos_tensor(case):
    """Zero rows (nothing to mask) and ``eos_token_id`` as ``generate`` keeps it (a tensor)."""
    make, _, proc_kw = CASES[case]
    kw = dict(proc_kw, eos_token_id=torch.tensor([EOS]))
    processor = pseudosl.ConstraintLogitsProcessor(make(), **kw)
    for length in (2, 3):
        assert processor(torch.ones(0, length, dtype=torch.long), torch.zeros(0, V)).shape == (0, V)
    assert processor.compiled.eos_token_ids == (EOS,)
