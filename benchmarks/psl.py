"""Pseudo-semantic loss: fast neighbour engines vs the naive full expansion, side by side in one process.

    python benchmarks/psl.py [--device cpu|cuda] [--quick] [--reps 3] [--threads 1] [--case all|lstm|gpt2|sudoku]
                             [--sudoku-batch 64] [--naive]

One loss-and-backward step per engine, warm median over ``--reps`` runs after one warm-up:

(a) LSTM :class:`RecurrentDecoder`, n = 81, k = 9, hidden 128, 5 layers, 10 samples, the Sudoku
    all-different circuit (27 roots).  naive = generic ``local_conditionals`` with the decoder's full
    ``log_joint`` (all n*k neighbours, full length); engine = :class:`RecurrentEngine` (prefix reuse).
(b) GPT-2 (4 layers, d = 256, vocabulary 8192), prompt of 1 token, n = 10 positions, 450 candidates per
    position (49 distinguished tokens + sample + 399 top-k + 1 representative; catch-all folding).
    naive = generic ``local_conditionals`` over the same 450 candidates: all 4500 neighbour sequences
    through the full model with full-vocab logits; engine = :class:`CausalLMEngine` (KV-cache reuse),
    also with ``recompute=True`` (one checkpointed chunk per position).
(c) the Sudoku RNN + PSL training step (see :func:`bench_sudoku_step`): the engine step by step, fused,
    with the givens conditioned on (blank cells only), optionally the naive expansion, the whole training
    step of the experiment (:func:`bench_training_step`; the target on one H100: <= 60 ms per step at
    B = 64), and the floor of one fused multi-layer RNN call over all suffixes; then the error of the
    low-precision modes against strict float32 (:func:`conditional_errors`).

Work counted first: neighbour token-steps, naive ``B K n (P + n)`` vs engine ``B K n (n - 1) / 2``
(+ the one pass over the sample).  Memory: on CUDA ``torch.cuda.max_memory_allocated``; on CPU the
activation bytes saved for backward (see :class:`PeakMemory`), a deterministic proxy for the peak.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from pseudosl import Circuit, CircuitBuilder
from pseudosl.numerics import log1mexp
from pseudosl.losses import constraint_log_prob
from pseudosl.constraints import compile_all_different
from pseudosl.psl import CausalLMEngine, RecurrentDecoder, as_engine, local_conditionals, pseudo_semantic_loss
from pseudosl.tokens import ValueMap


class PeakMemory:
    """Peak memory (bytes) of a ``with`` block.

    CUDA: growth of ``torch.cuda.max_memory_allocated``.  CPU: the bytes of the distinct tensor storages
    autograd saves for backward (``saved_tensors_hooks``) -- the activation memory alive when the
    forward pass ends, which is where a loss-and-backward step peaks; transient forward-only buffers
    (e.g. a ``torch.no_grad`` block) are not counted.
    """

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak = device, 0

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.seen: dict[int, int] = {}

            def pack(t: torch.Tensor) -> torch.Tensor:
                st = t.untyped_storage()
                self.seen[st.data_ptr()] = max(self.seen.get(st.data_ptr(), 0), st.nbytes())
                return t

            self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
            self.hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.hooks.__exit__(*exc)
            self.peak = sum(self.seen.values())


def timed(step, device: torch.device, reps: int) -> tuple[float, float]:
    """(median seconds, peak bytes) of ``step()`` after one warm-up; memory from the first timed run."""
    step()
    times, peak = [], 0
    for r in range(reps):
        with PeakMemory(device) as m:
            t0 = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        peak = max(peak, m.peak)
    return statistics.median(times), peak


def sudoku_circuit():
    rows = [[9 * r + c for c in range(9)] for r in range(9)]
    cols = [[9 * r + c for r in range(9)] for c in range(9)]
    boxes = [[9 * (3 * br + r) + 3 * bc + c for r in range(3) for c in range(3)] for br in range(3) for bc in range(3)]
    return compile_all_different(81, 9, rows + cols + boxes)


def bench_lstm(device: torch.device, reps: int, quick: bool) -> list[tuple]:
    n, k, b = 81, 9, 4 if quick else 10
    torch.manual_seed(0)
    dec = RecurrentDecoder(k, n, 128, num_layers=5, cell="lstm").to(device).eval()
    circuit = sudoku_circuit().to(device)
    y = dec.sample(batch_size=b)
    eng = dec.engine()

    def step(model, **kw):
        def run():
            dec.zero_grad(set_to_none=True)
            pseudo_semantic_loss(model, circuit, y, **kw).backward()
        return run

    work_naive, work_eng = b * k * n * n, b * (k * n * (n - 1) // 2 + n)
    t_e, m_e = timed(step(eng), device, reps)
    t_n, m_n = timed(step(as_engine(lambda s, example: dec.log_joint(s), n_values=k)), device, reps)
    return [("(a) LSTM n=81 k=9 h=128 L=5 B=%d" % b, work_naive, work_eng, t_n, t_e, m_n, m_e)]


def bench_gpt2(device: torch.device, reps: int, quick: bool) -> list[tuple]:
    from transformers import GPT2Config, GPT2LMHeadModel, logging
    logging.set_verbosity_error()
    vocab, n, b, p_len = 8192, 10, 1, 1
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2 if quick else 4, n_embd=256, n_head=4, vocab_size=vocab, n_positions=64)
    model = GPT2LMHeadModel(cfg).to(device).eval()
    prompt = torch.zeros(b, p_len, dtype=torch.long, device=device)
    naive_eng = CausalLMEngine(model, prompt)  # its log_joint is the naive full-sequence scorer
    y = naive_eng.sample(length=n)
    # 49 distinguished tokens (not in the sample, so all 450 candidates are distinct) -> 50 circuit values
    vm = ValueMap([t for t in range(1, vocab) if t not in set(y.flatten().tolist())][:49], vocab)
    eng = CausalLMEngine(model, prompt, value_map=vm, top_k=399)
    eng_rc = CausalLMEngine(model, prompt, value_map=vm, top_k=399, chunk_size=450, recompute=True)
    bld = CircuitBuilder(n, vm.n_values)  # "no distinguished token at any position" (a detox-like constraint)
    circuit = Circuit(bld.build(bld.and_(*(bld.literal(v, vm.other) for v in range(n)))))
    circuit = circuit.to(device)
    with torch.no_grad():  # the same 450 candidates per position for the naive expansion
        out = model(torch.cat([prompt, y], 1)).logits[:, p_len - 1:-1].log_softmax(-1)
        cand, _, _ = eng._candidates(y, out, None)
    K = cand.shape[-1]

    def run_engine(e=eng):
        model.zero_grad(set_to_none=True)
        pseudo_semantic_loss(e, circuit, y, negate=True).backward()

    def run_naive():
        model.zero_grad(set_to_none=True)
        cond = local_conditionals(naive_eng.log_joint, y, candidates=cand)  # (B, n, 450) over the candidates
        lp = cond.new_full((b, n, vocab), float("-inf")).scatter(-1, cand, cond)
        per_value = vm.fold(lp)
        (-log1mexp(constraint_log_prob(circuit, per_value).clamp(max=0))).mean().backward()

    work_naive, work_eng = b * K * n * (p_len + n), b * (K * n * (n - 1) // 2 + p_len + n)
    t_e, m_e = timed(run_engine, device, reps)
    t_r, m_r = timed(lambda: run_engine(eng_rc), device, reps)
    t_n, m_n = timed(run_naive, device, reps)
    name = "(b) GPT-2 L=%d d=256 V=8192 n=10 K=%d" % (cfg.n_layer, K)
    return [(name, work_naive, work_eng, t_n, t_e, m_n, m_e),
            (name + " recompute", work_naive, work_eng, t_n, t_r, m_n, m_r)]


def bench_sudoku_step(device: torch.device, reps: int, batch: int, naive: bool) -> list[tuple]:
    """(c) The Sudoku RNN + PSL training step: the experiment's SudokuRNN (Elman, 5 x 128, dropout 0.2,
    train mode), ``batch`` puzzles with 10 blanks, the PSL on every example, forward + backward.

    Rows: the engine step by step / fused, with ``givens = "condition"`` (blanks only), the naive
    expansion (``naive``), and the fused-call floor: one multi-layer ``nn.RNN`` call over the
    ``batch * 80 * 9`` suffixes padded to 80 steps (forward + backward of the recurrence alone).
    """
    from pseudosl.experiments.sudoku.constraint import givens_mask, sudoku_circuit as circuit_of
    from pseudosl.experiments.sudoku.data import generate
    from pseudosl.experiments.sudoku.models import SudokuRNN
    torch.manual_seed(0)
    model = SudokuRNN().to(device).train()
    circuit = circuit_of().to(device)
    data = generate(batch, seed=0)
    puzzles = data.puzzles.to(device)
    allowed = givens_mask(puzzles)
    y = model.generate(puzzles, greedy=False) - 1
    ctx, steps = model.conditioning(puzzles)
    n, k = 81, 9
    rows = []

    def step(engine_kw: dict, condition: bool = False):
        def run():
            model.zero_grad(set_to_none=True)
            eng = model.decoder.engine(ctx, steps, **engine_kw)
            pseudo_semantic_loss(eng, circuit, y, allowed=allowed, condition=condition).backward()
        return run

    blanks = int((puzzles == 0).sum())
    work_all, work_free = batch * k * n * (n - 1) // 2, blanks * k * (n - 1)  # suffix token-steps (upper bound)
    cases = [("engine step-by-step", {"fused": False}, False, work_all),
             ("engine fused", {"fused": True}, False, work_all),
             ("engine, givens=condition", {}, True, work_free)]
    if device.type == "cuda":  # bfloat16 suffix recurrence (error vs float32: docs/psl.md)
        cases += [("engine fused, bf16 suffixes", {"fused": True, "suffix_dtype": torch.bfloat16}, False, work_all),
                  ("engine, givens=condition, bf16", {"suffix_dtype": torch.bfloat16}, True, work_free)]
    for label, kw, cond, work in cases:
        t, m = timed(step(kw, cond), device, reps)
        rows.append((f"(c) Sudoku step B={batch}: {label}", work, t, m))
    if naive:
        def run_naive():
            model.zero_grad(set_to_none=True)
            eng = model.decoder.engine(ctx, steps)
            pseudo_semantic_loss(as_engine(eng.log_joint, n_values=k), circuit, y, allowed=allowed).backward()
        t, m = timed(run_naive, device, reps)
        rows.append((f"(c) Sudoku step B={batch}: naive expansion", batch * k * n * n, t, m))
    rows += bench_training_step(device, reps, batch)
    rnn = model.decoder.rnn
    R, T = batch * (n - 1) * k, n - 1
    x = torch.randn(R, T, rnn.input_size, device=device)
    h0 = torch.randn(rnn.num_layers, R, rnn.hidden_size, device=device, requires_grad=True)

    def floor():
        out, _ = rnn(x, h0)
        out.sum().backward()
    t, m = timed(floor, device, reps)
    rows.append((f"(c) Sudoku step B={batch}: fused-call floor ({R} rows x {T})", R * T, t, m))
    return rows


def bench_training_step(device: torch.device, reps: int, batch: int) -> list[tuple]:
    """The whole training step of ``pseudosl sudoku train --preset paper --models rnn_psl``: the experiment's
    ``Objective`` (augmentation, teacher-forced cross-entropy, a sample per puzzle, the PSL on every puzzle),
    backward and an Adam step; with the paper's ``givens = "condition"`` and with the givens conjoined (all 81
    positions' conditionals), and on CUDA under bfloat16 autocast (what ``accelerate launch --mixed_precision
    bf16`` does: the cross-entropy and sampling in bfloat16, the PSL engine still in float32)."""
    from pseudosl.experiments.sudoku.config import load_config, preset_path
    from pseudosl.experiments.sudoku.data import generate
    from pseudosl.experiments.sudoku.models import build_model
    from pseudosl.experiments.sudoku.train import Objective
    data = generate(batch, seed=1)
    puzzles, solutions = data.puzzles.to(device), data.solutions.to(device)
    blanks = int((data.puzzles == 0).sum())
    rows = []
    cases = [("condition", None), ("conjoin", None)] + ([("condition", torch.bfloat16)] if device.type == "cuda" else [])
    for givens, amp in cases:
        cfg = load_config(preset_path("paper"), givens=givens, models=["rnn_psl"])
        torch.manual_seed(0)
        model = build_model("rnn_psl", cfg).to(device)
        objective = Objective(model, "rnn_psl", cfg).to(device).train()
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)

        def step():
            with torch.autocast(device.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
                loss, _ = objective(puzzles, solutions)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        t, m = timed(step, device, reps)
        work = blanks * 9 * 80 if givens == "condition" else batch * 9 * 81 * 80 // 2
        label = f"training step, givens={givens}" + (", bf16 autocast" if amp else "") + (" (paper)" if givens == "condition" and not amp else "")
        rows.append((f"(c) Sudoku step B={batch}: {label}", work, t, m))
    return rows


def conditional_errors(device: torch.device, batch: int = 8) -> list[tuple[str, float, float, float]]:
    """Error of the low-precision modes against strict float32 (TF32 off), on the Sudoku RNN's conditionals of
    ``batch`` puzzles (all 81 x 9, untrained model, train mode as in training): ``(mode, max |dp|, mean |dp|,
    max |d log p| where p > 1e-6)``."""
    from pseudosl.experiments.sudoku.data import generate
    from pseudosl.experiments.sudoku.models import SudokuRNN
    torch.manual_seed(0)
    model = SudokuRNN().to(device).train()
    puzzles = generate(batch, seed=2).puzzles.to(device)
    y = model.generate(puzzles, greedy=False) - 1
    ctx, steps = model.conditioning(puzzles)
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)

    def conditionals(tf32: bool, **kw) -> torch.Tensor:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        with torch.no_grad():
            return model.decoder.engine(ctx, steps, **kw).local_conditionals(y).float()
    try:
        ref = conditionals(False)
        modes = [("bf16 suffixes (engine suffix_dtype)", conditionals(False, suffix_dtype=torch.bfloat16))]
        with torch.autocast(device.type, dtype=torch.bfloat16):  # the engine switches a caller's autocast off
            modes.append(("caller's bf16 autocast (mixed-precision training)", conditionals(False)))
        if device.type == "cuda":
            modes.insert(0, ("TF32 (cuDNN's default on CUDA)", conditionals(True)))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    out = []
    for name, c in modes:
        dp = (c.exp() - ref.exp()).abs()
        live = ref.exp() > 1e-6
        out.append((name, dp.max().item(), dp.mean().item(), (c - ref).abs()[live].max().item()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller batch / model, one timed rep")
    ap.add_argument("--case", choices=["all", "lstm", "gpt2", "sudoku"], default="all")
    ap.add_argument("--sudoku-batch", type=int, default=None,
                    help="puzzles in the Sudoku training-step case (default 64 on CUDA, 4 on a CPU)")
    ap.add_argument("--naive", action="store_true", help="also time the naive expansion in the Sudoku case")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 avoids oversubscription "
                    "when the machine is shared)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    reps = 1 if args.quick else args.reps
    print(f"device={device} threads={torch.get_num_threads()} torch={torch.__version__} reps={reps}"
          f"{' (quick)' if args.quick else ''}; memory = "
          + ("cuda max_memory_allocated growth" if device.type == "cuda" else "bytes saved for backward"))
    rows = (bench_lstm(device, reps, args.quick) if args.case in ("all", "lstm") else []) + \
        (bench_gpt2(device, reps, args.quick) if args.case in ("all", "gpt2") else [])
    if args.case in ("all", "sudoku"):
        batch = args.sudoku_batch or (64 if device.type == "cuda" else 4)
        srows = bench_sudoku_step(device, reps, batch, args.naive)
        floor = srows[-1][2]
        print(f"{'Sudoku training step (c)':62s} {'token-steps':>12s} {'ms/step':>9s} {'x floor':>8s} {'MB':>9s}")
        for name, work, t, m in srows:
            print(f"{name:62s} {work:12d} {t * 1e3:9.1f} {t / floor:8.2f} {m / 2**20:9.1f}")
        print(f"\n{'error against strict float32 (Sudoku RNN conditionals)':62s} {'max |dp|':>10s} {'mean |dp|':>10s} "
              f"{'max |dlog p|':>12s}")
        for name, mx, mean, mxl in conditional_errors(device):
            print(f"{name:62s} {mx:10.2e} {mean:10.2e} {mxl:12.2e}")
        if args.case == "sudoku":
            return
    hdr = (f"{'case':50s} {'steps naive':>12s} {'steps eng':>10s} {'theory x':>8s} {'naive s':>8s} {'engine s':>8s}"
           f" {'speed x':>7s} {'naive MB':>9s} {'engine MB':>9s} {'mem x':>6s}")
    print(hdr)
    print("-" * len(hdr))
    for name, wn, we, tn, te, mn, me in rows:
        print(f"{name:50s} {wn:12d} {we:10d} {wn / we:8.2f} {tn:8.3f} {te:8.3f} {tn / te:7.2f}"
              f" {mn / 2**20:9.1f} {me / 2**20:9.1f} {mn / max(me, 1):6.1f}")


if __name__ == "__main__":
    main()
