"""Train a tiny autoregressive model with the pseudo-semantic loss alone and watch it learn a constraint.

    python examples/toy_psl.py [--steps 150] [--seed 0]

Model: an LSTM :class:`~pseudosl.RecurrentDecoder` over 4 positions with 4 values.  Constraint: the
4 values are all different (24 of the 256 sequences, ~9% of random guesses).  Each step samples a
batch from the model, computes ``-log p~_y(all different)`` around every sample with the prefix-reusing
engine and takes an Adam step.  The share of samples that satisfy the constraint rises towards 1.
"""

from __future__ import annotations

import argparse

import torch

import pseudosl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead

    circuit = pseudosl.constraints.compile_all_different(4, 4, [0, 1, 2, 3])
    model = pseudosl.RecurrentDecoder(n_values=4, length=4, hidden_size=32, num_layers=1, cell="lstm")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    eval_gen = torch.Generator().manual_seed(args.seed + 1)

    def satisfaction() -> float:
        y = model.sample(batch_size=2000, generator=eval_gen)
        return pseudosl.sample_satisfies(circuit, y).float().mean().item()

    print(f"step {0:4d}  satisfied {satisfaction():.3f}")
    for step in range(1, args.steps + 1):
        y = model.sample(batch_size=args.batch)  # (B, 4) detached long: the anchors of the loss
        loss, diag = pseudosl.pseudo_semantic_loss(pseudosl.as_engine(model), circuit, y, return_diagnostics=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 30 == 0:
            print(f"step {step:4d}  satisfied {satisfaction():.3f}  loss {loss.item():.3f}  "
                  f"p~(alpha) {diag.p_constraint.mean().item():.3f}  entropy {diag.entropy.mean().item():.2f}")


if __name__ == "__main__":
    main()
