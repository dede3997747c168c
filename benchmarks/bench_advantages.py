"""Advantage cost of GRPO vs GiGPO (exact anchors) from 10^3 to 10^6 rows.

Layout of each synthetic batch (like an ALFWorld rollout): task groups of 8
trajectories, episodes of 1..50 steps, anchors drawn from a small pool of states per
group so that step groups form, a terminal success reward of 10 for about half the
trajectories and a -0.1 invalid-action penalty on about 10% of the steps; rows are
shuffled (a real rollout interleaves trajectories).

    python benchmarks/bench_advantages.py                 # 1e3, 1e4, 1e5, 1e6 rows
    python benchmarks/bench_advantages.py --rows 1000000 --repeats 5

Times are the best of ``--repeats`` calls of ``algo.advantages(batch)``.  Building the
``StepBatch`` from arrays (type checks, copies, anchors handed to Arrow) is timed apart
("build s"); "with build" is (build + gigpo) / (build + grpo), the ratio a trainer sees
since it builds one batch per iteration whatever the algorithm.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gigpo_gym.algos import StepBatch, get_algorithm


def synthetic_arrays(rows: int, group_size: int = 8, max_steps: int = 50, states_per_step: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """``StepBatch`` fields for about ``rows`` rows (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n_traj = max(group_size, round(rows / ((1 + max_steps) / 2) / group_size) * group_size)
    lengths = rng.integers(1, max_steps + 1, n_traj)
    traj = np.repeat(np.arange(n_traj), lengths)
    starts = np.cumsum(lengths) - lengths
    step = np.arange(len(traj)) - starts[traj]
    group = traj // group_size
    last = step == lengths[traj] - 1
    won = rng.random(n_traj) < 0.5
    rewards = np.where(last & won[traj], 10.0, 0.0) - 0.1 * (rng.random(len(traj)) < 0.1)
    state = rng.integers(0, states_per_step, len(traj))  # states repeat across the group's trajectories
    anchors = np.array([f"{g:08x}{t:04x}{s:04x}" for g, t, s in zip(group.tolist(), step.tolist(), state.tolist())], dtype=object)  # 16 hex, like digest()
    perm = rng.permutation(len(traj))
    return dict(group_ids=group[perm], traj_ids=traj[perm], step_ids=step[perm], rewards=rewards[perm], anchors=anchors[perm])


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6], help="approximate rows per batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per size (the best is reported)")
    parser.add_argument("--group-size", type=int, default=8, help="trajectories per task group")
    parser.add_argument("--max-steps", type=int, default=50, help="longest episode")
    args = parser.parse_args(argv)

    grpo, gigpo = get_algorithm("grpo"), get_algorithm("gigpo")
    print(f"{'rows':>9} {'groups':>7} {'step groups':>11} {'build s':>9} {'grpo s':>9} {'gigpo s':>9} {'gigpo/grpo':>10} {'with build':>10}")
    for rows in args.rows:
        arrays = synthetic_arrays(rows, args.group_size, args.max_steps)
        start = time.perf_counter()
        batch = StepBatch(**arrays)
        build = time.perf_counter() - start
        t_grpo = best_time(lambda: grpo.advantages(batch), args.repeats)
        t_gigpo = best_time(lambda: gigpo.advantages(batch), args.repeats)
        n_step_groups = gigpo.step_groups(batch)[1]
        n_groups = len(np.unique(batch.group_ids))
        ratio, with_build = t_gigpo / t_grpo, (build + t_gigpo) / (build + t_grpo)
        print(f"{len(batch):>9} {n_groups:>7} {n_step_groups:>11} {build:>9.4f} {t_grpo:>9.4f} {t_gigpo:>9.4f} {ratio:>10.2f} {with_build:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
