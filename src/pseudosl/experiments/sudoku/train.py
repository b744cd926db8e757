"""Sudoku as autoregressive generation (paper Table 1): train and evaluate four models.

    pseudosl sudoku train --quick                 # all four models, small data, ~minutes on a CPU
    pseudosl sudoku train --preset paper          # 9K/1K puzzles, 3 seeds (GPU)
    accelerate launch -m pseudosl.cli sudoku train --quick

Models (``models.py``): ``convnet`` (cross-entropy), ``convnet_sl`` (+ semantic loss),
``rnn`` (teacher-forced cross-entropy), ``rnn_psl`` (+ pseudo-semantic loss).
For every model and seed: a checkpoint per epoch in ``<out>/<model>-seed<seed>/checkpoint.pt``
(config, model, optimizer, RNG states, epoch, history; ``--resume`` continues exactly), then
greedy decoding on the test split -> Exact (grid == solution) and Consistent (all 27 groups
distinct and the givens kept).  At the end: ``results.json``, the table, ``curves.png``, ``grids.png``.
Runs unchanged under ``accelerate launch``: only the main process writes files.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

import pseudosl

from .config import MODELS, SudokuConfig
from .constraint import givens_mask, is_consistent, sudoku_circuit
from .data import SudokuData, load_csv, load_or_generate, load_satnet
from .models import SudokuRNN, build_model

__all__ = ["main", "load_data", "Objective", "train_run", "evaluate", "predict", "summarize", "format_table",
           "evaluate_checkpoints", "PAPER_EXACT"]

PAPER_EXACT = {"convnet": 16.80, "convnet_sl": 22.10, "rnn": 22.40, "rnn_psl": 28.20}
LABELS = {"convnet": "ConvNet", "convnet_sl": "ConvNet + SL", "rnn": "RNN", "rnn_psl": "RNN + PSL"}


# -- data -----------------------------------------------------------------------------------------
def load_data(cfg: SudokuConfig) -> tuple[SudokuData, SudokuData]:
    """Train and test splits: the first ``n_train`` puzzles train, the next ``n_test`` test."""
    n = cfg.n_train + cfg.n_test
    if cfg.data == "generate":
        data = load_or_generate(n, cfg.n_missing, cfg.data_seed, cfg.satnet_dist, cfg.data_dir)
    elif cfg.data.startswith("satnet:"):
        data = load_satnet(cfg.data.split(":", 1)[1])
    else:
        data = load_csv(cfg.data.split(":", 1)[1])
    if len(data) < n:
        raise ValueError(f"{cfg.data}: {len(data)} puzzles, but n_train + n_test = {n}; lower them")
    return data[: cfg.n_train], data[cfg.n_train: n]


# -- the training objective ----------------------------------------------------------------------
class Objective(nn.Module):
    """Cross-entropy on the solution + weight x (SL or PSL); ``forward`` returns ``(loss, parts)``.

    Wrapping the loss in a module lets ``accelerator.prepare`` (DDP) see every parameter use.
    """

    def __init__(self, model: nn.Module, name: str, cfg: SudokuConfig) -> None:
        super().__init__()
        self.model, self.name, self.cfg = model, name, cfg
        self.circuit = sudoku_circuit() if name in ("convnet_sl", "rnn_psl") else None

    def forward(self, puzzles: Tensor, solutions: Tensor, constrained: bool = True) -> tuple[Tensor, dict[str, float]]:
        target = solutions - 1                                            # classes 0..8, (B, 81)
        if isinstance(self.model, SudokuRNN):
            logits = self.model(puzzles, solutions)                       # teacher forcing, (B, 81, 9)
        else:
            logits = self.model(puzzles)                                  # (B, 81, 9)
        ce = F.cross_entropy(logits.reshape(-1, 9), target.reshape(-1))
        parts = {"ce": ce.item()}
        loss = ce
        if not constrained:  # warm-up epochs before cfg.constraint_start_epoch: cross-entropy only
            return loss, parts
        if self.name == "convnet_sl":
            sl = pseudosl.semantic_loss(self.circuit, logits, allowed=givens_mask(puzzles),
                                        condition=self.cfg.condition_on_givens)
            loss = loss + self.cfg.sl_weight * sl
            parts["sl"] = sl.item()
        elif self.name == "rnn_psl":
            m = self.cfg.psl_examples or puzzles.shape[0]                 # PSL on a sub-batch (cost: 81*9 neighbours)
            p = puzzles[:m]
            sample = self.model.generate(p, greedy=False)                 # y ~ p(. | x) (train mode), (m, 81), no grad
            sample = torch.where(p > 0, p, sample)                        # keep the givens (they are unit constraints)
            # the pseudo-semantic loss: the semantic loss of the local conditionals p(y_i | y_-i, x),
            # (m, 81, 9), computed by the prefix-reusing recurrent engine; circuit values are digits - 1
            psl = pseudosl.pseudo_semantic_loss(self.model.engine(p), self.circuit, sample - 1,
                                                allowed=givens_mask(p), condition=self.cfg.condition_on_givens)
            loss = loss + self.cfg.psl_weight * psl
            parts["psl"] = psl.item()
        return loss, parts


# -- evaluation ------------------------------------------------------------------------------------
@torch.no_grad()
def predict(model: nn.Module, puzzles: Tensor) -> Tensor:
    """Greedy decoding: digits ``(B, 81)``."""
    if isinstance(model, SudokuRNN):
        return model.generate(puzzles, greedy=True)
    return model(puzzles).argmax(-1) + 1


@torch.no_grad()
def evaluate(accelerator: Accelerator, model: nn.Module, data: SudokuData,
             batch_size: int = 500) -> tuple[dict[str, float], Tensor]:
    """Exact, Consistent and blank-cell accuracy (in %) on ``data``, and the predictions ``(N, 81)``.

    Greedy decoding; predictions are gathered over processes (``gather_for_metrics``).
    """
    model = accelerator.unwrap_model(model)
    was_training = model.training
    model.eval()
    loader = accelerator.prepare(DataLoader(TensorDataset(data.puzzles, data.solutions), batch_size=batch_size))
    preds, puzzles, solutions = [], [], []
    for p, s in loader:
        out = predict(model, p)
        out, p, s = accelerator.gather_for_metrics((out, p, s))
        preds.append(out.cpu()); puzzles.append(p.cpu()); solutions.append(s.cpu())
    model.train(was_training)
    pred, puz, sol = torch.cat(preds), torch.cat(puzzles), torch.cat(solutions)
    exact = (pred == sol).all(1).float().mean().item() * 100
    consistent = is_consistent(pred, puz).float().mean().item() * 100
    blank = puz == 0
    blank_acc = ((pred == sol) & blank).sum().item() / max(int(blank.sum()), 1) * 100  # extra: accuracy on blanks
    return {"exact": exact, "consistent": consistent, "blank_acc": blank_acc}, pred


# -- one model, one seed -----------------------------------------------------------------------------
def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if s["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def train_run(cfg: SudokuConfig, name: str, seed: int, train: SudokuData, test: SudokuData,
              accelerator: Accelerator, resume: bool = False) -> dict:
    """Train ``name`` with ``seed`` for ``cfg.epochs`` epochs; returns metrics, history and predictions."""
    run_dir = Path(cfg.out) / f"{name}-seed{seed}"
    ckpt_path = run_dir / "checkpoint.pt"
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)
    model = build_model(name, cfg)
    objective = Objective(model, name, cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    start_epoch, history, wall = 0, [], 0.0
    if resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        _check_resumable(ckpt["config"], cfg, ckpt_path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_epoch, history, wall = ckpt["epoch"], ckpt["history"], ckpt.get("wall_s", 0.0)
        _set_rng_state(ckpt["rng"])
        accelerator.print(f"[{name} seed {seed}] resumed from {ckpt_path} at epoch {start_epoch}")
    objective, optimizer = accelerator.prepare(objective, optimizer)

    dataset = TensorDataset(train.puzzles, train.solutions)
    for epoch in range(start_epoch, cfg.epochs):
        t0 = time.time()
        # the batch order is a function of (seed, epoch) only, so a resumed run sees the same batches
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        loader = accelerator.prepare(DataLoader(torch.utils.data.Subset(dataset, order.tolist()),
                                                batch_size=cfg.batch_size, shuffle=False))
        objective.train()
        total, count = 0.0, 0
        bar = tqdm(loader, desc=f"{name} s{seed} ep {epoch + 1}/{cfg.epochs}", leave=False,
                   disable=not accelerator.is_main_process)
        constrained = epoch + 1 >= cfg.constraint_start_epoch  # SL/PSL warm-up
        for puzzles, solutions in bar:
            loss, parts = objective(puzzles, solutions, constrained=constrained)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            optimizer.step()
            total, count = total + loss.item(), count + 1
            bar.set_postfix(loss=f"{total / count:.4f}", **{k: f"{v:.3f}" for k, v in parts.items()})
        record = {"epoch": epoch + 1, "train_loss": accelerator.gather(torch.tensor([total / count])).mean().item()}
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            metrics, _ = evaluate(accelerator, accelerator.unwrap_model(objective).model, test)
            record.update({f"test_{k}": v for k, v in metrics.items()})
        wall += time.time() - t0
        history.append(record)
        accelerator.print(f"[{name} seed {seed}] epoch {epoch + 1}: " +
                          ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k != "epoch"))
        if accelerator.is_main_process:
            run_dir.mkdir(parents=True, exist_ok=True)
            state = {"config": cfg.to_dict(), "model_name": name, "seed": seed, "epoch": epoch + 1,
                     "model": accelerator.unwrap_model(objective).model.state_dict(),
                     "optimizer": optimizer.state_dict(), "rng": _rng_state(), "history": history, "wall_s": wall}
            torch.save(state, run_dir / "checkpoint.tmp")
            (run_dir / "checkpoint.tmp").replace(ckpt_path)
        accelerator.wait_for_everyone()

    metrics, pred = evaluate(accelerator, accelerator.unwrap_model(objective).model, test)
    return {"model": name, "seed": seed, **metrics, "history": history, "wall_s": wall, "predictions": pred}


_RESUME_FREE = {"epochs", "out", "models", "seeds", "eval_every", "preset", "data_dir", "threads"}


def _check_resumable(saved: dict, cfg: SudokuConfig, path: Path) -> None:
    diff = {k: (saved.get(k), v) for k, v in cfg.to_dict().items() if k not in _RESUME_FREE and saved.get(k) != v}
    if diff:
        raise ValueError(f"--resume: {path} was trained with a different config "
                         + ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
                         + "; use the same settings or another --out")


# -- summary -----------------------------------------------------------------------------------------
def summarize(runs: list[dict]) -> dict[str, dict[str, float]]:
    """Mean and sample standard deviation (ddof=1; 0 for one seed) per model, in %."""
    out = {}
    for name in MODELS:
        rs = [r for r in runs if r["model"] == name]
        if not rs:
            continue
        row = {"seeds": [r["seed"] for r in rs]}
        for k in ("exact", "consistent", "blank_acc"):
            v = np.array([r[k] for r in rs])
            row[f"{k}_mean"], row[f"{k}_std"] = float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0
        out[name] = row
    return out


def format_table(summary: dict, preset: str = "") -> str:
    lines = [f"Sudoku (test split, greedy decoding, mean ± std over seeds{', preset ' + preset if preset else ''})",
             f"{'Model':<14}{'Exact %':>16}{'Consistent %':>18}{'Blank-cell acc %':>20}{'Paper exact %':>16}",
             "-" * 84]
    for name, row in summary.items():
        lines.append(f"{LABELS[name]:<14}{row['exact_mean']:>9.2f} ± {row['exact_std']:<5.2f}"
                     f"{row['consistent_mean']:>11.2f} ± {row['consistent_std']:<5.2f}"
                     f"{row['blank_acc_mean']:>13.2f} ± {row['blank_acc_std']:<5.2f}{PAPER_EXACT[name]:>11.2f}")
    return "\n".join(lines)


def _accelerator() -> Accelerator:
    # without a GPU, Accelerator() ignores a torchrun / accelerate-launch world of several processes;
    # cpu=True makes it a gloo MULTI_CPU group (and a plain single process otherwise)
    return Accelerator(cpu=not torch.cuda.is_available())


# -- entry points ------------------------------------------------------------------------------------
def main(cfg: SudokuConfig, resume: bool = False) -> dict:
    """Train every model in ``cfg.models`` for every seed, then write results, table and figures."""
    accelerator = _accelerator()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train, test = load_data(cfg)
    accelerator.print(f"data: {len(train)} train / {len(test)} test puzzles, "
                      f"{(train.puzzles == 0).sum(1).float().mean():.1f} blanks on average; out: {out}")
    runs = []
    for name in cfg.models:
        for seed in cfg.seeds:
            runs.append(train_run(cfg, name, seed, train, test, accelerator, resume=resume))
            accelerator.print(f"[{name} seed {seed}] test exact {runs[-1]['exact']:.2f}%, "
                              f"consistent {runs[-1]['consistent']:.2f}% ({runs[-1]['wall_s']:.0f}s)")
    summary = summarize(runs)
    result = {"config": cfg.to_dict(), "summary": summary, "paper_exact": PAPER_EXACT,
              "wall_s": time.time() - t0, "world_size": accelerator.num_processes,
              "runs": [{k: v for k, v in r.items() if k != "predictions"} for r in runs]}
    if accelerator.is_main_process:
        from .plots import plot_curves, plot_grids
        (out / "results.json").write_text(json.dumps(result, indent=2))
        plot_curves(result["runs"], out / "curves.png")
        first: dict[str, Tensor] = {}
        for r in runs:
            first.setdefault(r["model"], r["predictions"])  # the first seed of each model
        plot_grids(test, first, out / "grids.png", labels=LABELS)
        table = format_table(summary, cfg.preset)
        (out / "table.txt").write_text(table + "\n")
        print(table)
        print(f"wrote {out / 'results.json'}, {out / 'curves.png'}, {out / 'grids.png'} "
              f"({result['wall_s']:.0f}s in all)")
    return result


def evaluate_checkpoints(out: str | Path) -> dict:
    """Re-evaluate every ``<out>/*/checkpoint.pt`` on its config's test split; print the table."""
    accelerator = _accelerator()
    paths = sorted(Path(out).glob("*/checkpoint.pt"))
    if not paths:
        raise ValueError(f"no checkpoints under {out}/*/checkpoint.pt; train first (pseudosl sudoku train)")
    runs, cache, cfg = [], {}, None
    for path in paths:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        cfg = SudokuConfig(**ckpt["config"])
        key = (cfg.data, cfg.n_train, cfg.n_test, cfg.n_missing, cfg.satnet_dist, cfg.data_seed)
        if key not in cache:
            cache[key] = load_data(cfg)[1]
        model = build_model(ckpt["model_name"], cfg)
        model.load_state_dict(ckpt["model"])
        model = accelerator.prepare(model)
        metrics, _ = evaluate(accelerator, model, cache[key])
        runs.append({"model": ckpt["model_name"], "seed": ckpt["seed"], "epoch": ckpt["epoch"], **metrics})
        accelerator.print(f"{path}: epoch {ckpt['epoch']}, exact {metrics['exact']:.2f}%, "
                          f"consistent {metrics['consistent']:.2f}%")
    summary = summarize(runs)
    accelerator.print(format_table(summary, cfg.preset if cfg else ""))
    return {"summary": summary, "runs": runs}
