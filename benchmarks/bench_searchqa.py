"""SearchQA speed: env steps/s on the embedded world, BM25 build and query latency by corpus size.

    python benchmarks/bench_searchqa.py                      # 10k and 1M passages
    python benchmarks/bench_searchqa.py --sizes 10000 --queries 100

Passages come from the generated world (``generate_world``), scaled to the size
asked; queries are the world's own questions.  The cache goes to a temp folder, so
nothing of the user's is read or written.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import tempfile
import time

import numpy as np


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def bench_env(steps: int) -> list[tuple[str, str]]:
    """Steps/s of the registered env with a mixed policy and with the expert."""
    import gymnasium as gym

    import gigpo_gym  # noqa: F401

    t0 = time.perf_counter()
    env = gym.make("gigpo_gym/SearchQA-v0")
    env.reset(seed=0)
    make_s = time.perf_counter() - t0
    rows = [("env construction (world + BM25, cold cache)", f"{make_s:.2f} s")]
    for policy in ("mixed", "expert"):
        done, n, seed = True, 0, 0
        start = time.perf_counter()
        while n < steps:
            if done:
                obs, _ = env.reset(seed=seed)
                seed += 1
            if policy == "expert":
                action = env.unwrapped.expert_action()
            else:
                action = (f"<search>{obs[:200]}</search>", "no tag here", "<answer>nobody</answer>")[n % 5 % 3]
            obs, _, terminated, truncated, _ = env.step(action)
            done, n = terminated or truncated, n + 1
        rate = n / (time.perf_counter() - start)
        rows.append((f"env steps/s ({policy} policy, resets included)", f"{rate:,.0f}"))
    return rows


def _passages(n: int):
    from gigpo_gym.envs.searchqa.corpus import Corpus
    from gigpo_gym.envs.searchqa.world import generate_world
    from gigpo_gym.envs.searchqa.world_text import world_passages, world_questions

    world = generate_world(max(20, math.ceil(n / 2.2)), seed=0)
    docs = []
    for doc in world_passages(world):
        docs.append(doc)
        if len(docs) == n:
            break
    questions = [q.question for q in world_questions(world)]
    return Corpus(docs), questions


def bench_bm25(n: int, num_queries: int) -> list[tuple[str, str]]:
    from gigpo_gym.envs.searchqa.bm25 import BM25Retriever

    t0 = time.perf_counter()
    corpus, questions = _passages(n)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = BM25Retriever.build(corpus)
    build_s = time.perf_counter() - t0
    scores = retriever.model.scores
    index_mib = sum(scores[k].nbytes for k in ("data", "indices", "indptr")) / 2**20
    picks = np.linspace(0, len(questions) - 1, num_queries).astype(int)
    latencies = []
    for i in picks:
        t0 = time.perf_counter()
        retriever.search([questions[i]], topk=3)
        latencies.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    retriever.search([questions[i] for i in picks], topk=3)
    batch_ms = (time.perf_counter() - t0) * 1000 / len(picks)
    p50, p95 = np.percentile(latencies, [50, 95])
    label = f"BM25 {len(corpus):,} passages"
    return [
        (f"{label}: generate passages", f"{gen_s:.1f} s"),
        (f"{label}: index build (tokenise + score)", f"{build_s:.1f} s"),
        (f"{label}: index arrays", f"{index_mib:,.0f} MiB"),
        (f"{label}: query latency p50 / p95 (1 query)", f"{p50:.2f} / {p95:.2f} ms"),
        (f"{label}: per query in a batch of {len(picks)}", f"{batch_ms:.2f} ms"),
        (f"{label}: process peak RSS so far", f"{_peak_rss_mib():,.0f} MiB"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 1_000_000], help="corpus sizes (passages)")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per size")
    parser.add_argument("--env-steps", type=int, default=5000, help="env steps timed per policy (0: skip)")
    args = parser.parse_args(argv)
    os.environ["GIGPO_GYM_CACHE"] = tempfile.mkdtemp(prefix="bench_searchqa_")
    rows: list[tuple[str, str]] = []
    if args.env_steps:
        rows += bench_env(args.env_steps)
    for size in sorted(args.sizes):
        rows += bench_bm25(size, args.queries)
    print(f"SearchQA benchmark (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)\n")
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
