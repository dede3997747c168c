"""Grouped vector stepping: sync vs async (vs ray) env steps per second on one env id.

Every env plays random admissible actions (or a fixed search for open-action envs)
from a seeded generator; the same action sequence is played on each backend.

    python benchmarks/bench_grouped.py --env-id gigpo_gym/SearchQA-v0 --groups 8 --group-size 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gigpo_gym


def measure(env_id: str, backend: str, groups: int, group_size: int, steps: int, workers: int | None) -> dict:
    build = time.perf_counter()
    envs = gigpo_gym.make_grouped(env_id, groups, group_size, backend=backend, seed=0, num_workers=workers,
                                  autoreset=True)
    build = time.perf_counter() - build
    rng = np.random.default_rng(0)
    try:
        obs, info = envs.reset()
        start = time.perf_counter()
        for _ in range(steps):
            actions = []
            for i in range(envs.num_envs):
                admissible = info["admissible_actions"][i] or ["<search>history of the city</search>"]
                actions.append(admissible[rng.integers(len(admissible))])
            obs, reward, terminated, truncated, info = envs.step(actions)
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    return {"backend": backend, "env_steps_per_s": steps * envs.num_envs / elapsed, "build_s": build}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="gigpo_gym/ALFWorld-v0")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100, help="vector steps per backend")
    parser.add_argument("--workers", type=int, default=None, help="async workers (default: CPU cores)")
    parser.add_argument("--backends", default="sync,async", help="comma-separated, e.g. sync,async,ray")
    args = parser.parse_args()
    backends = args.backends.split(",")
    rows = [measure(args.env_id, b, args.groups, args.group_size, args.steps, args.workers) for b in backends]
    print(f"{args.env_id}: {args.groups} groups x {args.group_size} copies, {args.steps} vector steps")
    print(f"{'backend':<8} {'env steps/s':>12} {'build s':>8}")
    for row in rows:
        print(f"{row['backend']:<8} {row['env_steps_per_s']:>12,.0f} {row['build_s']:>8.2f}")
    for row in rows[1:]:
        print(f"{row['backend']} / {rows[0]['backend']} = {row['env_steps_per_s'] / rows[0]['env_steps_per_s']:.2f}")


if __name__ == "__main__":
    main()
