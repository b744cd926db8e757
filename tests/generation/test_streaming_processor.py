"""``ConstraintLogitsProcessor`` over an ``AutomatonConstraint`` (streaming, any length): the mask equals the brute-force
set of tokens after which an accepting completion exists (with and without an end-of-sequence token and a token
budget), rows are followed through beam-search reorderings, and Hugging Face ``generate`` (greedy, sampling, beam
search) on a tiny GPT-2 never writes a text the automaton rejects, while the same generation without it does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import pseudosl
from pseudosl.logic.automaton import DFA, SparseDFA, forbidden_sequences_dfa
from pseudosl.logic.errors import UnsatisfiableError
from pseudosl.generation import automaton_mask, banned, row_lineage
from pseudosl.tokens.constraint import AutomatonConstraint
from pseudosl.tokens.value_map import ValueMap
from pseudosl.generation.row_lineage import RowLineage
from tiny_models import tiny_gpt2

transformers = pytest.importorskip("transformers")
from transformers import LogitsProcessorList  # noqa: E402

V = 5  # tokens 0..4; token 0 doubles as the end-of-sequence token where one is used
EOS = 0


class Automaton:
    """A random automaton over 3 values read through a value map of 5 tokens, as an ``AutomatonConstraint`` (two
    default rows) and as the plain table the brute force runs."""

    def __init__(self, seed: int, n_states: int = 4) -> None:
        rng = np.random.default_rng(seed)
        self.n_states, k = n_states, 3
        self.delta = rng.integers(0, n_states, (n_states, k))
        self.accepting = frozenset(np.flatnonzero(rng.random(n_states) < 0.4).tolist()) or frozenset({n_states - 1})
        tokens = rng.choice(V, k - 1, replace=False).tolist()  # values 0, 1; every other token is value 2
        self.value_of = [tokens.index(t) if t in tokens else k - 1 for t in range(V)]
        row_of = rng.integers(0, 2, n_states)
        default = self.delta[[0, min(1, n_states - 1)]]
        s, c = np.nonzero(self.delta != default[row_of])
        dfa = SparseDFA(n_states, k, 0, self.accepting, default, np.stack([s, c, self.delta[s, c]], 1), row_of=row_of)
        assert (dfa.to_dense().delta == self.delta).all()
        self.constraint = AutomatonConstraint(dfa, ValueMap(tokens, V))

    def accepts(self, tokens) -> bool:
        s = 0
        for t in tokens:
            s = self.delta[s, self.value_of[t]]
        return s in self.accepting

    def allowed(self, prefix: tuple[int, ...], eos: int | None, left: int | None) -> list[bool]:
        """Brute force: per token, is there a completion the automaton accepts (``left`` tokens left, this one
        included; ``None``: any length, ``<= n_states - 1`` more tokens suffice)?  EOS ends the text."""
        text = [t for t in range(V) if t != eos]
        lengths = range(self.n_states) if left is None else range(left) if eos is not None else [left - 1]
        tails = [w for n in lengths for w in itertools.product(text, repeat=n)]
        ok = [t != eos and any(self.accepts(prefix + (t,) + w) for w in tails) for t in range(V)]
        if eos is not None:
            ok[eos] = self.accepts(prefix)
        return ok if any(ok) else [True] * V  # a row with no way out is left as it is


def feed(processor, ids: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Call the processor as ``generate`` does, one more token each time; the last call's finite mask."""
    for end in range(prompt_length, ids.shape[1] + 1):
        out = processor(ids[:, :end], torch.zeros(ids.shape[0], V))
    return torch.isfinite(out)


@pytest.fixture(params=["dense", "sparse", "no cache"])
def tables(request, monkeypatch):
    """Both ways of reading the automaton: a dense table, and the exceptions per step; and token lists that never
    stay cached (every call rebuilds them: the byte limits at their smallest)."""
    if request.param == "sparse":
        monkeypatch.setattr(automaton_mask, "DENSE_ENTRIES", 0)
    if request.param == "no cache":
        monkeypatch.setattr(automaton_mask, "MASK_CACHE_BYTES", -1)
    return request.param


@pytest.fixture(params=["banned lists", "allowed lists"])
def mask_path(request, monkeypatch):
    """Both ways of listing a state's mask: its banned tokens, or its allowed ones (a cleared row, then restored)."""
    monkeypatch.setattr(banned, "KEEP_BELOW", 0.0 if request.param == "banned lists" else 1.01)
    return request.param


SETTINGS = {"live": (None, None), "budget 4": (None, 4), "budget 2": (None, 2), "eos": (EOS, None),
            "eos, budget 4": (EOS, 4)}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("seed", range(4))
def test_mask_equals_brute_force(seed, setting, tables, mask_path):
    a, (eos, budget) = Automaton(seed), SETTINGS[setting]

    def make():
        return pseudosl.ConstraintLogitsProcessor(a.constraint, eos_token_id=eos, max_new_tokens=budget)

    if not any(a.accepts(w) for n in range(4 if budget is None else budget + 1)
               for w in itertools.product([t for t in range(V) if t != eos], repeat=n)
               if budget is None or eos is not None or n == budget):
        with pytest.raises(UnsatisfiableError, match="no text"):
            make()
        return
    text = [t for t in range(V) if t != eos]  # with an EOS, the texts before it
    for t in range(min(3, budget or 3)):
        prefixes = list(itertools.product(text, repeat=t))
        prompt = torch.tensor([[3, 1]]).expand(len(prefixes), 2)
        ids = torch.cat([prompt, torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), t)], 1)
        got = feed(make(), ids, 2)
        for row, prefix in enumerate(prefixes):
            left = None if budget is None else budget - t
            assert got[row].tolist() == a.allowed(prefix, eos, left), (t, prefix)


@pytest.mark.parametrize("seed", range(3))
def test_rows_are_followed_through_reordering(seed, tables, mask_path):
    """Rows are copied and shuffled within groups (beams of a prompt) between calls, as beam search does."""
    a, rng = Automaton(seed), np.random.default_rng(seed)
    groups, beams, steps = 3, 3, 7
    prompts = torch.randint(1, V, (groups, 2), generator=torch.Generator().manual_seed(seed))
    ids = prompts.repeat_interleave(beams, 0)
    for eos, budget in [(None, None), (EOS, steps)]:
        processor, rows = pseudosl.ConstraintLogitsProcessor(a.constraint, eos_token_id=eos, max_new_tokens=budget), ids
        for step in range(steps):
            got = torch.isfinite(processor(rows, torch.zeros(len(rows), V)))
            for i, row in enumerate(rows[:, 2:].tolist()):
                if eos is None or eos not in row:
                    left = None if budget is None else budget - step
                    assert got[i].tolist() == a.allowed(tuple(row), eos, left), (step, row)
            parents = np.arange(groups * beams) // beams * beams + rng.integers(0, beams, groups * beams)
            rows = torch.cat([rows[parents], torch.from_numpy(rng.integers(0, 3, (len(rows), 1)))], 1)


@pytest.mark.parametrize("form", ["tensor", "numpy"])  # the processor hands CPU rows over as NumPy arrays
@pytest.mark.parametrize("fingerprints", ["hashes", "all collide"])
def test_row_lineage_finds_an_equal_parent(fingerprints, form, monkeypatch):
    """Many equal rows and rows differing only far back; with every fingerprint equal the check by tokens still
    finds the parents (the fallback), and a row that continues none is told apart; rows kept in place (every third
    step) continue with no parents."""
    if fingerprints == "all collide":
        monkeypatch.setattr(row_lineage, "fingerprints", lambda rows: torch.zeros(len(rows), dtype=torch.long))
    rng = np.random.default_rng(0)
    given = (lambda t: t) if form == "tensor" else (lambda t: t.numpy())
    rows = torch.from_numpy(rng.integers(0, 2, (9, 3)))
    lineage = RowLineage(given(rows))
    for step in range(15):
        true = torch.arange(len(rows)) if step % 3 == 2 else torch.from_numpy(rng.integers(0, len(rows), len(rows)))
        new = torch.cat([rows[true], torch.from_numpy(rng.integers(0, 2, (len(rows), 1)))], 1)
        stranger = new.clone()
        stranger[4, :-1] = 7  # continues no row
        assert lineage.follow(given(stranger)) == (False, None)
        continues, found = lineage.follow(given(new))
        assert continues and torch.equal(rows[found] if found is not None else rows, rows[true])
        assert (found is None) == (step % 3 == 2 or torch.equal(rows[true], rows))
        rows = new


def test_row_lineage_scales_with_rows():
    """1,024 rows (4 beams of 256 identical prompts) over 40 steps of reordering within each item."""
    rng = np.random.default_rng(1)
    rows = torch.zeros(1024, 1, dtype=torch.long)
    lineage = RowLineage(rows)
    for _ in range(40):
        true = torch.from_numpy(np.arange(1024) // 4 * 4 + rng.integers(0, 4, 1024))
        new = torch.cat([rows[true], torch.from_numpy(rng.integers(0, 50, (1024, 1)))], 1)
        continues, found = lineage.follow(new)
        assert continues and torch.equal(rows if found is None else rows[found], rows[true])
        rows = new


# -- checks --------------------------------------------------------------------------------------------
def words_constraint() -> AutomatonConstraint:
    """No token 3, no 4 4 (tokens 3, 4 are values 0, 1; the rest value 2)."""
    return AutomatonConstraint(SparseDFA.from_dense(forbidden_sequences_dfa([[0], [1, 1]], 3)), ValueMap([3, 4], V))


@pytest.mark.parametrize("make", [lambda p: pseudosl.ConstraintLogitsProcessor(words_constraint(), prompt_length=p),
                                  lambda p: pseudosl.ConstraintLogitsProcessor(
                                      pseudosl.no_forbidden_sequences([[3], [4, 4]], 3, V, cache=False), p)],
                         ids=["streaming", "window"])
def test_a_wrong_prompt_length_is_refused_by_name(make):
    ids, scores = torch.ones(2, 4, dtype=torch.long), torch.zeros(2, V)
    for wrong in (3, 5):  # too small (would constrain the prompt's last token), too large
        with pytest.raises(ValueError, match=f"prompt_length={wrong} but the first call's input_ids hold 4 tokens.*"
                                             "pass prompt_length=4"):
            make(wrong)(ids, scores)
    assert torch.isfinite(make(4)(ids, scores)).any()


@pytest.mark.parametrize("window", [False, True], ids=["streaming", "window"])
def test_bad_input_ids_are_refused_by_name(window):
    constraint = pseudosl.no_forbidden_sequences([[3], [4, 4]], 4, V, cache=False) if window else words_constraint()
    scores = torch.zeros(1, V)
    for token in (-1, 999):
        with pytest.raises(ValueError, match=f"input_ids holds {token}, outside 0..4: pass the token ids"):
            pseudosl.ConstraintLogitsProcessor(constraint)(torch.tensor([[1, token]]), scores)
        processor = pseudosl.ConstraintLogitsProcessor(constraint)
        processor(torch.tensor([[1]]), scores)
        with pytest.raises(ValueError, match=f"tokens holds {token}, outside 0..4.*input_ids' last column"):
            processor(torch.tensor([[1, token]]), scores)
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(TypeError, match=f"input_ids must be an integer tensor of token ids.*{dtype}"):
            pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(1, 2, dtype=dtype), scores)
    with pytest.raises(TypeError, match="scores must be a float tensor"):
        pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(1, 2, dtype=torch.long), torch.zeros(1, V).long())
    with pytest.raises(ValueError, match="build the constraint with vocab_size=6"):
        pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(1, 2, dtype=torch.long), torch.zeros(1, 6))
    with pytest.raises(ValueError, match="must share their rows"):
        pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(2, 2, dtype=torch.long), torch.zeros(1, V))
    assert torch.isfinite(pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(1, 2, dtype=torch.int32),
                                                                          scores)).any()


def test_arguments_are_checked():
    make = pseudosl.ConstraintLogitsProcessor
    with pytest.raises(ValueError, match="eos_token_id holds 5, outside the vocabulary 0..4"):
        make(words_constraint(), eos_token_id=[0, 5])
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        make(words_constraint(), max_new_tokens=0)
    with pytest.raises(ValueError, match="root=0 picks a root of a circuit"):
        make(words_constraint(), root=0)
    window = pseudosl.no_forbidden_sequences([[3]], 3, V, cache=False)
    with pytest.raises(ValueError, match="max_new_tokens=2 is below the window's 3 tokens.*max_new_tokens >= 3"):
        make(window, max_new_tokens=2)
    with pytest.raises(ValueError, match="eos_token_id holds 7, outside the vocabulary 0..4"):
        make(window, eos_token_id=7)
    with pytest.raises(TypeError, match="eos_token_id must be an int, got float"):
        make(window, eos_token_id=0.0)
    # "an even length" in exactly 1 token: impossible; in at most 1 (the EOS may end the text at once): fine
    parity = AutomatonConstraint(SparseDFA(2, 3, 0, {0}, default=[[1, 1, 1], [0, 0, 0]], exceptions=[], row_of=[0, 1]),
                                 ValueMap([3, 4], V))
    with pytest.raises(UnsatisfiableError, match="no text of max_new_tokens=1 tokens.*raise max_new_tokens"):
        make(parity, max_new_tokens=1)
    make(parity, max_new_tokens=1, eos_token_id=0)


def test_an_unusable_value_does_not_count():
    """Value 1 has the EOS as its only token: from state 1 (after a 3) only value 1 leads back to acceptance, so with
    the EOS ending the text a 3 is masked (nothing can follow it), without it a 3 is allowed.  A row that has read a
    3 anyway (a prefix the processor did not make) has no token left: it is left unmasked."""
    dfa = SparseDFA(3, 3, 0, {0}, default=[[1, 2, 0], [2, 0, 2], [2, 2, 2]], exceptions=[], row_of=[0, 1, 2])
    constraint = AutomatonConstraint(dfa, ValueMap([3, 0], V))
    with_eos = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=0)(torch.ones(1, 1, dtype=torch.long),
                                                                             torch.zeros(1, V))
    without = pseudosl.ConstraintLogitsProcessor(constraint)(torch.ones(1, 1, dtype=torch.long), torch.zeros(1, V))
    assert torch.isinf(with_eos[0, 3]) and torch.isfinite(without[0, 3])
    after_3 = feed(pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=0), torch.tensor([[1, 3]]), 1)
    assert after_3.all()


# -- generate ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(16, V, 32).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(3.0)  # peaky: greedy and beam search have preferences to break
    return model


def parity_and_no_4_4() -> AutomatonConstraint:
    """An even number of 3s, and no 4 4: states (parity, last was a 4) + dead; a budget must plan for the parity."""
    delta = np.array([[2, 1, 0], [2, 4, 0], [0, 3, 2], [0, 4, 2], [4, 4, 4]])  # values: 3 -> 0, 4 -> 1, other -> 2
    return AutomatonConstraint(SparseDFA.from_dense(DFA(5, 3, 0, frozenset({0, 1}), delta)), ValueMap([3, 4], V))


DECODINGS = {"greedy": dict(do_sample=False), "sampling": dict(do_sample=True, top_k=0),
             "beam search": dict(do_sample=False, num_beams=3, num_return_sequences=2)}


def texts(out: torch.Tensor, prompt_length: int, eos: int | None) -> list[torch.Tensor]:
    """The generated texts: each row after the prompt, up to its first EOS when an EOS ends the text."""
    rows = list(out[:, prompt_length:])
    if eos is None:
        return rows
    return [row[:int(end[0])] if len(end := (row == eos).nonzero()) else row for row in rows]


@pytest.mark.parametrize("eos", [None, EOS], ids=["no eos", "eos"])
@pytest.mark.parametrize("decoding", DECODINGS)
def test_generate_never_writes_a_rejected_text(gpt2, decoding, eos):
    constraint = parity_and_no_4_4()
    ok, free_ok = [], []
    for seed, new in itertools.product(range(2), (1, 6)):
        prompts = torch.randint(1, V, (8, 3), generator=torch.Generator().manual_seed(seed))
        kw = dict(DECODINGS[decoding], max_new_tokens=new, pad_token_id=0, eos_token_id=0)
        if eos is None:
            kw["min_new_tokens"] = new  # no EOS ends the text: it has exactly `new` tokens
        processor = pseudosl.ConstraintLogitsProcessor(constraint, eos_token_id=eos, max_new_tokens=new)
        torch.manual_seed(seed)
        out = gpt2.generate(prompts, logits_processor=LogitsProcessorList([processor]), **kw)
        torch.manual_seed(seed)
        free = gpt2.generate(prompts, **kw)
        ok += [bool(constraint.satisfied(t[None])) for t in texts(out, 3, eos)]
        free_ok += [bool(constraint.satisfied(t[None])) for t in texts(free, 3, eos)]
    assert all(ok)
    assert not all(free_ok)  # the same generation without the processor writes rejected texts


@pytest.mark.parametrize("decoding", DECODINGS)
def test_without_a_budget_every_prefix_stays_live(gpt2, decoding):
    constraint = parity_and_no_4_4()
    live = constraint.dfa.live_states()
    prompts = torch.randint(1, V, (8, 3), generator=torch.Generator().manual_seed(0))
    kw = dict(DECODINGS[decoding], max_new_tokens=9, min_new_tokens=9, pad_token_id=0)
    torch.manual_seed(0)
    out = gpt2.generate(prompts, logits_processor=LogitsProcessorList([pseudosl.ConstraintLogitsProcessor(
        constraint)]), **kw)
    torch.manual_seed(0)
    free = gpt2.generate(prompts, **kw)
    states = lambda rows: [constraint.dfa.run(constraint.values(r).tolist()) for r in rows[:, 3:]]  # noqa: E731
    assert all(live[s] for s in states(out)) and not all(live[s] for s in states(free))
