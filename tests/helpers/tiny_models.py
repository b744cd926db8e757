"""Small explicit autoregressive models and circuits for the PSL tests (float64)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

import oracle
import pseudosl
from pseudosl import Circuit, CircuitBuilder


class TableModel(torch.nn.Module):
    """A full joint table over ``k**n`` sequences (any joint factorises autoregressively): ``log_joint(y)``."""

    def __init__(self, n: int, k: int, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.n, self.n_values = n, k
        self.logits = torch.nn.Parameter(2 * torch.randn(k ** n, generator=g, dtype=torch.float64))

    def table(self) -> Tensor:  # (k,)*n log-probabilities
        return self.logits.log_softmax(0).view((self.n_values,) * self.n)

    def forward(self, y: Tensor) -> Tensor:
        return self.table()[tuple(y.t())]

    def log_joint(self, y: Tensor, example: Tensor) -> Tensor:
        """``log p(y)`` of every row (no inputs: ``example`` is not needed)."""
        return self(y)

    def engine(self) -> "pseudosl.Engine":
        """The table as an engine: the generic path (every neighbour scored through the table)."""
        return pseudosl.as_engine(self.log_joint, n_values=self.n_values)

    def oracle_conditionals(self, sample: Tensor) -> Tensor:
        """``(B, n, k)`` conditionals read off the joint table by slicing (independent of neighbour building)."""
        t = self.table()
        out = []
        for y in sample.tolist():
            rows = []
            for i in range(self.n):
                idx = list(y)
                idx[i] = slice(None)
                rows.append(t[tuple(idx)].log_softmax(-1))
            out.append(torch.stack(rows))
        return torch.stack(out)


def circuit_from_truth(truth: np.ndarray, n: int, k: int) -> Circuit:
    """Deterministic DNF of complete assignments (a model of ``truth`` per term)."""
    b = CircuitBuilder(n, k)
    terms = [b.and_(*(b.literal(v, int(c)) for v, c in enumerate(a)))
             for a, t in zip(oracle.assignments(n, k), truth) if t]
    return Circuit(b.build(b.or_(*terms)))


def tiny_gpt2(n_embd: int, vocab_size: int, n_positions: int) -> torch.nn.Module:
    """A randomly initialised 2-layer GPT-2 in float64 (token 0 is BOS/EOS); skips the test without transformers."""
    import pytest
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=n_embd, n_head=2, vocab_size=vocab_size, n_positions=n_positions,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).double()
