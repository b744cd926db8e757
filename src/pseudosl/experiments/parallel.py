"""Several runs at a time in worker processes (``jobs > 1``): each (model, seed) run in a spawned process of its
own, results in the order asked.

The workers end with the process that started them (``kill -9`` too; :func:`.runs.watch_parent`: on Linux the
kernel kills them at once) and never write a file after it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .config import RunConfig
from .experiment import Experiment
from .loop import make_accelerator, train_run
from .runs import watch_parent

__all__ = ["train_parallel", "worker_pool"]


def _worker(exp: Experiment, cfg: RunConfig, name: str, seed: int, out: Path, resume: bool) -> dict:
    """One (model, seed) run in a worker process: its own accelerator, data from the disk cache."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    accelerator = make_accelerator()
    return train_run(exp, cfg, name, seed, exp.load_data(cfg), accelerator, out, resume=resume)


def worker_pool(n: int):
    """``n`` spawned worker processes that end with this process and never write a file after it.  The workers
    start in the thread that submits the first tasks, and Linux ties them to that thread: submit from the main
    thread."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=watch_parent,
                               initargs=(os.getpid(),))


def train_parallel(exp: Experiment, cfg: RunConfig, pairs: list[tuple[str, int]], out: Path, resume: bool) -> list[dict]:
    """``cfg.jobs`` runs at a time in spawned processes (they share the GPU); results in ``pairs`` order."""
    with worker_pool(min(cfg.jobs, len(pairs))) as pool:
        futures = [pool.submit(_worker, exp, cfg, name, seed, out, resume) for name, seed in pairs]
        try:
            return [f.result() for f in tqdm(futures, desc=f"{exp.name}: {len(pairs)} runs, {cfg.jobs} at a time")]
        except BaseException:  # one run failed: start no further run; those running finish under the lock
            pool.shutdown(wait=False, cancel_futures=True)
            raise
