"""WebShop speed: text-env steps/s on the 1k catalog, search latency at 1k and at scale.

    python benchmarks/bench_webshop.py                      # 1k env + search, 200k-product search
    python benchmarks/bench_webshop.py --products 1181436   # the size of the full WebShop catalog

Prints a Markdown table.  The large catalog is generated (same generator as the
embedded 1k one); memory is the growth of the process's resident set while the
catalog and its index are built.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gigpo_gym.envs.webshop.env import WebShopEnv  # noqa: E402
from gigpo_gym.envs.webshop.expert import expert_query  # noqa: E402
from gigpo_gym.envs.webshop.generator import generate_catalog  # noqa: E402
from gigpo_gym.envs.webshop.search import SearchEngine  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def env_steps_per_s(policy: str, steps: int, seed: int) -> float:
    """Steps/s of the text env with the expert or a random-admissible policy (searching goal words)."""
    env = WebShopEnv(split="gigpo_train")
    rng = random.Random(seed)
    done, episode, n = True, 0, 0
    start = time.perf_counter()
    while n < steps:
        if done:
            _, info = env.reset(seed=seed + episode)
            episode, t = episode + 1, 0
        if policy == "expert" or env.session.page == "search":
            action = env.expert_action()
        else:
            action = rng.choice(info["admissible_actions"])
        _, _, terminated, _, info = env.step(action)
        n, t = n + 1, t + 1
        done = terminated or t >= 15
    return n / (time.perf_counter() - start)


def search_latency_ms(engine: SearchEngine, queries: list[str]) -> tuple[float, float]:
    times = []
    for q in queries:
        start = time.perf_counter()
        engine.search(q)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", type=int, default=200_000, help="size of the large generated catalog (0: skip)")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per policy on the 1k catalog")
    parser.add_argument("--queries", type=int, default=300, help="search queries timed per catalog")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rows = []
    start = time.perf_counter()
    env = WebShopEnv(split="all")
    rows.append(("1k catalog: generate + index (s)", f"{time.perf_counter() - start:.2f}"))
    for policy in ("expert", "random"):
        rows.append((f"1k env steps/s ({policy} policy)", f"{env_steps_per_s(policy, args.steps, args.seed):,.0f}"))
    queries = [expert_query(env.shop, g) for g in env.shop.goals[: args.queries]]
    p50, p95 = search_latency_ms(env.shop.engine, queries)
    rows.append(("1k search p50 / p95 (ms)", f"{p50:.2f} / {p95:.2f}"))

    if args.products:
        rss0 = rss_mb()
        start = time.perf_counter()
        products, instructions = generate_catalog(args.products, args.seed)
        generated = time.perf_counter() - start
        start = time.perf_counter()
        engine = SearchEngine(products)
        indexed = time.perf_counter() - start
        rss1 = rss_mb()
        rng = random.Random(args.seed)
        picks = [products[rng.randrange(len(products))] for _ in range(args.queries)]
        queries = [instructions[p.asin][0].instruction.lower() for p in picks]
        p50, p95 = search_latency_ms(engine, queries)
        n = f"{args.products:,}"
        rows += [
            (f"{n} products: generate (s)", f"{generated:.1f}"),
            (f"{n} products: build index (s)", f"{indexed:.1f}"),
            (f"{n} products: memory, catalog + index (MB)", f"{rss1 - rss0:,.0f}"),
            (f"{n} products: search p50 / p95 (ms)", f"{p50:.2f} / {p95:.2f}"),
        ]

    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
