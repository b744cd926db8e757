"""``TokenMatcher`` over ``compile_mask``, driven by a decoding loop of one's own (no ``generate``): rows copied,
reordered and rolled back keep their ancestors' masks, a plain greedy loop ends in the constraint, and its
arguments are refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pseudosl.generation import TokenMatcher, compile_mask
from test_processor_calls import window
from test_streaming_processor import EOS, V, Automaton, parity_and_no_4_4
from tiny_models import circuit_from_truth, tiny_gpt2

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt2():
    model = tiny_gpt2(16, V, 48).eval()
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(3.0)  # peaky, as in test_processor_calls
    return model


def test_matcher_rollback_returns_each_row_to_its_ancestor():
    """Rows copied and reordered between steps, then rolled back: each row's mask is its ancestor's."""
    rng = np.random.default_rng(0)
    for mask in (compile_mask(Automaton(2).constraint, eos_token_id=EOS, max_new_tokens=6), compile_mask(window())):
        m = TokenMatcher(mask, rows=4)
        history, ancestry = [m.allowed()], [np.arange(4)]
        for step in range(5):
            parents = torch.from_numpy(rng.integers(0, 4, 4))
            m.advance(torch.from_numpy(rng.integers(1, V, 4)), parents if step % 2 else None)
            ancestry = [a[parents.numpy()] if step % 2 else a for a in ancestry] + [np.arange(4)]
            history.append(m.allowed())
        for back in (2, 1, 2):
            m.rollback(back)
            assert torch.equal(m.allowed(), history[m.generated][ancestry[m.generated]])
        assert m.generated == 0
        with pytest.raises(ValueError, match="cannot roll back 1 tokens: the rows have read 0"):
            m.rollback(1)


def test_matcher_in_a_plain_greedy_loop(gpt2):
    """No ``generate``: a loop that feeds the model and the matcher one token at a time ends in the constraint."""
    constraint = parity_and_no_4_4()
    mask = compile_mask(constraint, max_new_tokens=7)
    ids = torch.randint(1, V, (5, 3), generator=torch.Generator().manual_seed(0))
    m = TokenMatcher(mask, rows=5)
    with torch.no_grad():
        for _ in range(7):
            token = m.mask(gpt2(ids).logits[:, -1]).argmax(-1)
            m.advance(token)
            ids = torch.cat([ids, token[:, None]], 1)
    assert constraint.satisfied(ids[:, 3:]).all()
    with pytest.raises(ValueError, match="already have max_new_tokens=7 tokens: reset"):
        m.advance(token)


def test_matcher_arguments_are_checked():
    m = TokenMatcher(compile_mask(window()), rows=2)
    with pytest.raises(TypeError, match=r"tokens must be an integer tensor of shape \(2,\), got torch.float32"):
        m.advance(torch.zeros(2))
    with pytest.raises(ValueError, match="tokens holds 5, outside 0..4"):
        m.advance(torch.tensor([1, 5]))
    with pytest.raises(ValueError, match="parents holds 2, outside 0..1: pass row indices"):
        m.advance(torch.tensor([1, 1, 1]), torch.tensor([0, 2, 1]))
    with pytest.raises(TypeError, match="mask must come from pseudosl.generation.compile_mask"):
        TokenMatcher(window())
    with pytest.raises(ValueError, match="scores have 6 tokens.*build the constraint with vocab_size=6"):
        m.mask(torch.zeros(2, 6))
    bare = TokenMatcher(compile_mask(circuit_from_truth(np.ones(9, bool), 2, 3)), rows=1)
    with pytest.raises(ValueError, match="any vocabulary.*vocab_size=V"):
        bare.allowed()
    assert TokenMatcher(compile_mask(circuit_from_truth(np.ones(9, bool), 2, 3)), vocab_size=5).allowed().tolist() == \
        [[True, True, True, False, False]]


def test_window_tokens_with_each_rows_allowed_values_are_the_enumerated_ones():
    """``WindowMask.allowed_tokens(prefix, V, allowed)``: the tokens ``c`` after which some completion satisfies
    ``alpha AND allowed`` (each row its own ``allowed``), by enumeration over the 3^4 sequences; with ``eos_token_id``
    refused by name (its completions are checked against ``alpha`` alone)."""
    from oracle import assignments

    n, k, vocab = 4, 3, 5  # a bare circuit over token ids 0..2 read from scores over 5 tokens
    rng = np.random.default_rng(3)
    truth = rng.random(k ** n) < 0.3
    mask = compile_mask(circuit_from_truth(truth, n, k))
    ys = np.asarray(assignments(n, k))
    checked = 0
    for t in range(n):
        prefixes = ys[rng.integers(len(ys), size=24), :t]
        allowed = torch.as_tensor(rng.random((24, n, k)) < 0.7)
        got, _ = mask.allowed_tokens(torch.as_tensor(prefixes), vocab, allowed)
        assert got.shape == (24, vocab) and not got[:, k:].any()
        for r in range(24):
            fits = truth & allowed[r].numpy()[np.arange(n), ys].all(1) & (ys[:, :t] == prefixes[r]).all(1)
            want = np.zeros(k, dtype=bool)
            want[ys[fits, t]] = True
            assert got[r, :k].numpy().tolist() == want.tolist(), (t, r)
            checked += int(want.any())
    assert checked > 20  # rows with a completion are compared, not only empty ones
    with pytest.raises(ValueError, match="allowed= restricts.*eos_token_ids"):
        compile_mask(circuit_from_truth(truth, n, k), eos_token_id=2).allowed_tokens(
            torch.zeros(1, 0, dtype=torch.long), vocab, allowed[:1])
