"""Your own model under the PSL: learning rates of a tiny GPT-2, and diversity under a PSL-only objective.

    python examples/psl_diversity.py [--study lr|diversity|all] [--seeds 5] [--steps 300]

Constraint: 6 positions with 3 values, no two adjacent positions equal (96 of the 729 sequences, 13 %).
Models (docs/psl.md, "Use it on your own model"): an LSTM written by hand (embedding of the previous value,
``nn.LSTM``, linear head) and a 2-layer GPT-2 built from a ``GPT2Config`` (vocabulary = the 3 values + BOS),
both made engines by ``pseudosl.as_engine``.  Each run trains ``--steps`` Adam steps on batches of 64 and then
draws 2,000 samples: ``satisfied`` = the share that satisfies the constraint, ``distinct`` = the number of
distinct valid sequences among them (at most 96; a uniform model over the valid sequences shows ~96).

Objectives (``--study diversity``; each its own term per batch of 64):

* ``psl``        -- the PSL around the model's own samples, alone;
* ``psl+ent``    -- plus an entropy bonus ``-0.1 * sum_t H(p(. | y_<t))`` on the samples (engine.step_log_probs);
* ``psl+0.01ent`` -- the same bonus at weight 0.01;
* ``data``       -- the data term alone: the NLL of 64 valid sequences drawn uniformly (a stand-in for training data);
* ``data+psl``   -- the data term plus the PSL (weight 1);
* ``data+0.1psl``-- the data term plus the PSL at weight 0.1.

Prints one table per study (mean ± std over seeds) and the per-seed paired differences against ``psl`` with a 95 %
t-interval; ``--json FILE`` writes every run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from torch import nn

import pseudosl

N, K, STEPS, BATCH = 6, 3, 300, 64
OBJECTIVES = ["psl", "psl+ent", "psl+0.01ent", "data", "data+psl", "data+0.1psl"]


class LSTMDecoder(nn.Module):
    """The user's LSTM: value ``K`` is the start input."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(K + 1, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, K)


def make(model: str, seed: int) -> tuple[nn.Module, pseudosl.Engine]:
    torch.manual_seed(seed)
    if model == "lstm":
        m = LSTMDecoder()
        return m, pseudosl.as_engine(m, rnn=m.lstm, embed=m.embed, head=m.out, start=K, length=N)
    from transformers import GPT2Config, GPT2LMHeadModel, logging
    logging.set_verbosity_error()
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=K + 1, n_positions=N + 1, bos_token_id=K,
                     eos_token_id=K)
    m = GPT2LMHeadModel(cfg)
    return m, pseudosl.as_engine(m, prompt_ids=torch.tensor([[K]]), n_values=K)


def valid_sequences() -> torch.Tensor:
    grid = torch.cartesian_prod(*[torch.arange(K)] * N)
    return grid[(grid[:, 1:] != grid[:, :-1]).all(1)]  # (96, N)


def run(model: str, objective: str, lr: float, seed: int, steps: int) -> dict:
    m, engine = make(model, seed)
    y = pseudosl.positions(N, K)
    circuit = pseudosl.compile_categorical(pseudosl.logic.categorical.all_of(y[i] != y[i + 1] for i in range(N - 1)))
    data = valid_sequences()
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed + 1000)
    start = time.time()
    for _ in range(steps):
        loss = torch.zeros(())
        ids = engine.example_ids(BATCH)
        if objective.startswith("data"):
            batch = data[torch.randint(0, len(data), (BATCH,), generator=g)]
            loss = loss - engine.log_joint(batch, ids).mean()
        if "psl" in objective:
            weight = 0.1 if "0.1psl" in objective else 1.0
            sample = engine.sample(batch_size=BATCH, length=N)
            loss = loss + weight * pseudosl.pseudo_semantic_loss(engine, circuit, sample)
            if objective.endswith("ent"):
                beta = 0.01 if objective == "psl+0.01ent" else 0.1
                logp = engine.step_log_probs(sample, ids)  # (B, N, V): p(. | y_<t) along the samples
                loss = loss + beta * (logp.exp() * logp).sum((-1, -2)).mean()  # - beta * sum_t H(p(. | y_<t))
        opt.zero_grad()
        loss.backward()
        opt.step()
    samples = engine.sample(batch_size=2000, length=N, generator=torch.Generator().manual_seed(seed + 2000))
    ok = pseudosl.sample_satisfies(circuit, samples)
    return dict(model=model, objective=objective, lr=lr, seed=seed, steps=steps,
                satisfied=ok.float().mean().item(), distinct=len({tuple(s) for s in samples[ok].tolist()}),
                seconds=time.time() - start)


def ci95(diffs: list[float]) -> str:
    """Mean and 95 % t-interval of paired per-seed differences."""
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}.get(len(diffs), 1.96)
    mean = statistics.mean(diffs)
    half = t * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return f"{mean:+.3g} [{mean - half:+.3g}, {mean + half:+.3g}]"


def table(rows: list[dict], key: str, base: str | float) -> None:
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    print(f"| {key} | satisfied | distinct valid (of 96) | Δ satisfied vs {base} | Δ distinct vs {base} |")
    print("|---|---|---|---|---|")
    ref = {r["seed"]: r for r in groups[base]}
    for name, rs in groups.items():
        sat, dis = [r["satisfied"] for r in rs], [r["distinct"] for r in rs]
        d_sat = ci95([r["satisfied"] - ref[r["seed"]]["satisfied"] for r in rs]) if name != base else "—"
        d_dis = ci95([r["distinct"] - ref[r["seed"]]["distinct"] for r in rs]) if name != base else "—"
        print(f"| {name} | {statistics.mean(sat):.3f} ± {statistics.stdev(sat):.3f} | "
              f"{statistics.mean(dis):.1f} ± {statistics.stdev(dis):.1f} | {d_sat} | {d_dis} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--study", choices=["lr", "diversity", "all"], default="all")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--models", nargs="+", default=["lstm", "gpt2"], choices=["lstm", "gpt2"])
    ap.add_argument("--objectives", nargs="+", default=OBJECTIVES, choices=OBJECTIVES,
                    help="for --study diversity (psl, the baseline of the differences, is always run)")
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    rows = []
    if args.study in ("lr", "all"):
        lr_rows = [run("gpt2", "psl", lr, s, args.steps) for lr in (1e-3, 3e-3, 1e-2) for s in range(args.seeds)]
        print(f"\nGPT-2 (2 layers, d = 32) under the PSL alone, {args.steps} Adam steps, batch 64, {args.seeds} seeds")
        table(lr_rows, "lr", 1e-3)
        rows += lr_rows
    if args.study in ("diversity", "all"):
        for model, lr in (("lstm", 1e-2), ("gpt2", 1e-3)):
            if model not in args.models:
                continue
            objs = ["psl"] + [o for o in args.objectives if o != "psl"]
            div_rows = [run(model, o, lr, s, args.steps) for o in objs for s in range(args.seeds)]
            print(f"\n{model} (Adam lr {lr}), {args.steps} steps, batch 64, {args.seeds} seeds")
            table(div_rows, "objective", "psl")
            rows += div_rows
    print(f"\n{sum(r['seconds'] for r in rows) / 60:.1f} min of training in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
