"""Every switch of the public API and the configs is read by one strict check (``check_bool``), issue 39 item 4: a
value that is not a bool -- a string (``"no"`` is truthy), an int, ``None`` where it means nothing -- is a
``TypeError`` naming the switch before any work, never read by its truth value.  The values here are other than the
issue's (``"False"``, ``None``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pseudosl
from tiny_models import tiny_gpt2
from pseudosl import CircuitBuilder, RecurrentDecoder, as_engine, compile_cnf, pseudo_semantic_loss
from pseudosl.generation import constrained_sample
from pseudosl.losses import product_log_prob, semantic_loss
from pseudosl.psl import CausalLMEngine, local_fidelity
from pseudosl.psl.neighbours import local_conditionals
from pseudosl.psl.sampling import sample_from_logits

pytestmark = pytest.mark.usefixtures("one_thread")

NOT_BOOLS = ["no", "", 1, 0, np.float64(1.0), [True]]


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    circuit = compile_cnf([[1, 2]], cache=False)  # y_0 or y_1, over two Booleans
    dec = RecurrentDecoder(n_values=2, length=2, hidden_size=4)
    engine = as_engine(dec)
    return circuit, dec, engine, engine.sample(batch_size=3)


def _refused(name, call):
    with pytest.raises(TypeError, match=rf"^{name} must be True(, False or None \(.*\))? or False|^{name} must be "
                                        rf"True, False or None"):
        call()


@pytest.mark.parametrize("bad", NOT_BOOLS)
def test_the_losses_switches(setup, bad):
    circuit, _, engine, y = setup
    x = torch.randn(3, 2, 2).log_softmax(-1)
    for name in ("negate", "condition", "return_diagnostics"):
        _refused(name, lambda: pseudo_semantic_loss(engine, circuit, y, **{name: bad}))
    for name in ("negate", "condition"):
        _refused(name, lambda: product_log_prob(circuit, x, **{name: bad}))
    _refused("condition", lambda: semantic_loss(circuit, torch.zeros(3, 2), condition=bad))


@pytest.mark.parametrize("bad", NOT_BOOLS)
def test_constrained_sampling_switches(setup, bad):
    circuit, _, engine, y = setup
    for name in ("keep_satisfying", "return_diagnostics"):
        _refused(name, lambda: constrained_sample(engine, circuit, y, **{name: bad}))


@pytest.mark.parametrize("bad", NOT_BOOLS)
def test_engine_and_sampling_switches(setup, bad):
    _, dec, engine, y = setup
    _refused("dropout", lambda: as_engine(dec, dropout=bad))
    _refused("greedy", lambda: engine.sample(batch_size=2, greedy=bad))
    _refused("greedy", lambda: sample_from_logits(torch.zeros(2, 3), greedy=bad))
    _refused("recompute", lambda: as_engine(lambda y, e: y.sum(-1).double(), n_values=2, recompute=bad))
    _refused("recompute", lambda: local_conditionals(lambda s, e: s.sum(-1).double(), y, n_values=2, recompute=bad))
    _refused("exact", lambda: local_fidelity(engine, y, exact=bad))
    if bad is not None:
        _refused("fused", lambda: as_engine(dec, fused=bad))


@pytest.mark.parametrize("bad", ["off", 1, 0.0])
def test_the_causal_lm_engines_switches(bad):
    gpt2 = tiny_gpt2(n_embd=16, vocab_size=10, n_positions=16)
    prompt = torch.tensor([[0]])
    _refused("dropout", lambda: CausalLMEngine(gpt2, prompt, dropout=bad))
    _refused("recompute", lambda: CausalLMEngine(gpt2, prompt, recompute=bad))
    _refused("grad", lambda: CausalLMEngine(gpt2, prompt).memory_plan(1, 3, grad=bad))


@pytest.mark.parametrize("bad", NOT_BOOLS)
def test_the_compilers_and_circuits_switches(tmp_path, bad):
    for name in ("minimize", "allow_unsat", "cache"):
        _refused(name, lambda: compile_cnf([[1, -2]], **{name: bad}))
    _refused("allow_unsat", lambda: pseudosl.compile_categorical(pseudosl.logic.categorical.positions(2, 2)[0] == 1,
                                                                allow_unsat=bad))
    _refused("progress", lambda: pseudosl.constraints.simple_path(2, 2, progress=bad, cache=False))
    circuit = compile_cnf([[1, -2]], cache=False)
    _refused("determinism", lambda: circuit.check(determinism=bad))
    path = circuit.save(tmp_path / "c")
    _refused("deterministic", lambda: pseudosl.Circuit.load(path, deterministic=bad))
    b = CircuitBuilder(2, 2)
    _refused("deterministic", lambda: b.or_(b.literal(0, 1), b.literal(1, 1), deterministic=bad))
    _refused("validate_inputs", lambda: setattr(circuit, "validate_inputs", bad))
    assert circuit.validate_inputs is None  # unchanged


def test_the_configs_switches_are_strict():
    from pseudosl.experiments.config import ConfigError
    from pseudosl.experiments.sudoku.config import SudokuConfig
    for bad in ("yes", 1, 0):
        with pytest.raises(ConfigError, match=rf"augment = {bad!r}: expected true or false"):
            SudokuConfig(augment=bad)
    assert SudokuConfig(augment=True).augment is True


def test_real_bools_still_work(setup):
    circuit, dec, engine, y = setup
    loss, diag = pseudo_semantic_loss(engine, circuit, y, return_diagnostics=np.bool_(True), negate=False)
    assert torch.isfinite(loss) and diag.satisfied.shape == (3,)
    out = constrained_sample(engine, circuit, y, keep_satisfying=False, generator=torch.Generator().manual_seed(0))
    assert bool(pseudosl.sample_satisfies(circuit, out).all())
