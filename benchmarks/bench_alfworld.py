"""Speed and memory of the native ALFWorld engine (not a test).

Measures, on generated tasks with random admissible play:
  * engine step: ``Engine.step`` + admissible list + won + anchor (what an env step needs);
  * env step: ``ALFWorldEnv.step`` (unwrapped) including the info dict;
  * reset, cached task (grouped envs reset copies of one task) and fresh task (generated);
  * memory per env instance (tracemalloc), each on its own task or 8 per task;
  * one synchronous step of a batch of envs (default 1,024).

Run: ``.venv/bin/python benchmarks/bench_alfworld.py [--steps N] [--envs N]``.
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from gigpo_gym.envs.alfworld.engine import Engine
from gigpo_gym.envs.alfworld.env import ALFWorldEnv
from gigpo_gym.envs.alfworld.generator import generate_task


def bench_engine_step(steps: int, seed: int) -> float:
    rng = random.Random(seed)
    engines = [Engine(generate_task(seed, "train", i)) for i in range(50)]
    plans = []
    for engine in engines:  # pre-draw random admissible walks, replayed under the clock
        engine.reset()
        walk = []
        for _ in range(50):
            cmd = rng.choice(engine.admissible_commands())
            walk.append(cmd)
            engine.step(cmd)
        plans.append(walk)
    done = 0
    elapsed = 0.0
    while done < steps:
        for engine, walk in zip(engines, plans):
            engine.reset()
            engine.admissible_commands()
            t0 = time.perf_counter()
            for cmd in walk:
                engine.step(cmd)
                engine.admissible_commands()
                engine.anchor()
            elapsed += time.perf_counter() - t0
            done += len(walk)
    return elapsed / done


def bench_env_step(steps: int, seed: int) -> float:
    rng = random.Random(seed)
    env = ALFWorldEnv(seed=seed)
    done, elapsed, episode = 0, 0.0, 0
    while done < steps:
        _, info = env.reset(seed=episode)
        episode += 1
        for _ in range(50):
            cmd = rng.choice(info["admissible_actions"])
            t0 = time.perf_counter()
            _, _, terminated, _, info = env.step(cmd)
            elapsed += time.perf_counter() - t0
            done += 1
            if terminated:
                break
    return elapsed / done


def bench_reset(n: int, seed: int) -> tuple[float, float]:
    env = ALFWorldEnv(seed=seed)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(n):
        env.reset(seed=0)
    cached = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for i in range(n):
        env.reset(seed=1000 + i)  # a new task each time: generated on the spot
    fresh = (time.perf_counter() - t0) / n
    return cached, fresh


def bench_memory(n: int, seed: int, group_size: int) -> float:
    """Bytes per env; envs in groups of ``group_size`` share a task (and its world)."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    envs = []
    for i in range(n):
        env = ALFWorldEnv(seed=seed)
        env.reset(seed=5000 * group_size + i // group_size)
        envs.append(env)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return total / n


def bench_batch(n_envs: int, rounds: int, seed: int) -> float:
    rng = random.Random(seed)
    envs = [ALFWorldEnv(seed=seed) for _ in range(n_envs)]
    infos = [env.reset(seed=i // 8)[1] for i, env in enumerate(envs)]  # groups of 8 share a task
    best = float("inf")
    for _ in range(rounds):
        actions = [rng.choice(info["admissible_actions"]) for info in infos]
        t0 = time.perf_counter()
        for i, (env, action) in enumerate(zip(envs, actions)):
            _, _, terminated, _, infos[i] = env.step(action)
            if terminated:
                infos[i] = env.reset(seed=i // 8)[1]
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000, help="steps to time (default 20000)")
    parser.add_argument("--resets", type=int, default=500, help="resets to time (default 500)")
    parser.add_argument("--envs", type=int, default=1024, help="batch size for the batch step (default 1024)")
    parser.add_argument("--memory-envs", type=int, default=200, help="envs for the memory estimate (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    engine_step = bench_engine_step(args.steps, args.seed)
    env_step = bench_env_step(args.steps, args.seed)
    cached, fresh = bench_reset(args.resets, args.seed)
    memory = bench_memory(args.memory_envs, args.seed, 1)
    memory_grouped = bench_memory(args.memory_envs, args.seed, 8)
    batch = bench_batch(args.envs, 10, args.seed)
    rows = [
        ("engine step (step + admissible + won + anchor)", f"{engine_step * 1e6:8.1f} µs", f"{1 / engine_step:10,.0f} steps/s"),
        ("env step (ALFWorldEnv.step, info dict)", f"{env_step * 1e6:8.1f} µs", f"{1 / env_step:10,.0f} steps/s"),
        ("reset, cached task", f"{cached * 1e6:8.1f} µs", f"{1 / cached:10,.0f} resets/s"),
        ("reset, fresh generated task", f"{fresh * 1e6:8.1f} µs", f"{1 / fresh:10,.0f} resets/s"),
        ("memory per env instance, own task", f"{memory / 1024:8.1f} KiB", ""),
        ("memory per env instance, groups of 8 on one task", f"{memory_grouped / 1024:8.1f} KiB", ""),
        (f"one step of {args.envs} envs (sync, best of 10)", f"{batch * 1e3:8.1f} ms", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'time':>11}  {'rate':>19}")
    for name, value, rate in rows:
        print(f"{name:<{width}}  {value:>11}  {rate:>19}")


if __name__ == "__main__":
    main()
