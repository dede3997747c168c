"""Advantage cost of GRPO vs GiGPO (exact anchors) from 10^3 to 10^6 rows.

Layout of each synthetic rollout (like an ALFWorld one): task groups of 8
trajectories, episodes of 1..50 steps, anchors drawn from a small pool of states per
(group, step) so that step groups form, each state's anchor a random 64-bit digest
written as 16 hex digits (what ``core.anchor.digest`` returns), a terminal success
reward of 10 for about half the trajectories and a -0.1 invalid-action penalty on
about 10% of the steps; rows are shuffled (a real rollout interleaves trajectories).

    python benchmarks/bench_advantages.py                 # 1e3, 1e4, 1e5, 1e6 rows
    python benchmarks/bench_advantages.py --rows 1000000 --repeats 5

The batch is built as the trainer builds it, by ``Rollout.to_step_batch`` (digest
anchors become uint64), timed apart as "build s".  GRPO and GiGPO then get that same
batch; their times are the best of ``--repeats`` calls of ``algo.advantages(batch)``
alone, the two algorithms taking turns.  "gigpo s" is the default
backend (the compiled loops of ``[fast]`` when numba is installed, on numba's threads;
the header says which and how many), "1 thread s" the same on one thread (what it
costs in CPU time, and the time on a one-core machine), "numpy s" the numpy reference
on the same batch.  "with build" is
(build + gigpo) / (build + grpo), the ratio a trainer sees since it builds one batch
per iteration whatever the algorithm.  The first call of each size is a warm-up (it
compiles or loads the numba loops) and is not timed.  A second table is for third-party batches that
keep str anchors: "hex str s" is GiGPO on the same digests as str (read as uint64
inside the estimator), "other str s" on non-digest str anchors (Arrow's string
hashing), timed in the same rounds.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np

from gigpo_gym.algos import StepBatch, get_algorithm
from gigpo_gym.algos.estimators import compiled
from gigpo_gym.algos.training.rollout import Rollout


def hex_strings(keys: np.ndarray) -> np.ndarray:
    """uint64 values as str of 16 lowercase hex digits (vectorised)."""
    nibbles = (keys[:, None] >> np.arange(60, -4, -4, dtype=np.uint64)) & np.uint64(15)
    return np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles].view("S16").ravel().astype(str)


def synthetic_rollout(rows: int, group_size: int = 8, max_steps: int = 50, states_per_step: int = 3, seed: int = 0) -> Rollout:
    """A ``Rollout`` of about ``rows`` rows (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n_traj = max(group_size, round(rows / ((1 + max_steps) / 2) / group_size) * group_size)
    lengths = rng.integers(1, max_steps + 1, n_traj)
    traj = np.repeat(np.arange(n_traj), lengths)
    starts = np.cumsum(lengths) - lengths
    step = np.arange(len(traj)) - starts[traj]
    group = traj // group_size
    last = step == lengths[traj] - 1
    won = rng.random(n_traj) < 0.5
    penalties = 0.1 * (rng.random(len(traj)) < 0.1)
    rewards = np.where(last & won[traj], 10.0, 0.0) - penalties
    state = rng.integers(0, states_per_step, len(traj))  # states repeat across the group's trajectories
    digests = rng.integers(0, 2**64, (group.max() + 1) * max_steps * states_per_step, dtype=np.uint64)
    anchors = hex_strings(digests[(group * max_steps + step) * states_per_step + state])
    perm = rng.permutation(len(traj))
    return Rollout(
        group_ids=group[perm].tolist(), traj_ids=traj[perm].tolist(), step_ids=step[perm].tolist(),
        rewards=rewards[perm].tolist(), penalties=penalties[perm].tolist(), anchors=anchors[perm].tolist(),
        anchor_texts=[""] * len(perm), action_valid=[True] * len(perm),
    )  # fmt: skip


def on_one_thread(fn):
    """``fn`` run with numba's threads set to one (unchanged without numba)."""
    if not compiled.AVAILABLE:
        return fn
    import numba

    def run():
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn()
        finally:
            numba.set_num_threads(before)

    return run


def threads_note() -> str:
    if not compiled.AVAILABLE:
        return 'numpy (pip install ".[fast]" in a gigpo-gym clone for the compiled one)'
    import numba

    return f"numba (compiled), {numba.get_num_threads()} threads"


def best_times(fns: list, repeats: int) -> list[float]:
    """Best wall time of each function over ``repeats`` rounds in which they take turns."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6], help="approximate rows per batch")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per size (the best is reported)")
    parser.add_argument("--group-size", type=int, default=8, help="trajectories per task group")
    parser.add_argument("--max-steps", type=int, default=50, help="longest episode")
    args = parser.parse_args(argv)

    grpo, gigpo, gigpo_numpy = get_algorithm("grpo"), get_algorithm("gigpo"), get_algorithm("gigpo", backend="numpy")
    print(f"gigpo backend: {threads_note()}")
    print(f"{'rows':>9} {'groups':>7} {'step groups':>11} {'build s':>9} {'grpo s':>9} {'gigpo s':>9} {'1 thread s':>10} "
          f"{'numpy s':>9} {'gigpo/grpo':>10} {'1 thread/grpo':>13} {'with build':>10}")
    str_lines = []
    for rows in args.rows:
        rollout = synthetic_rollout(rows, args.group_size, args.max_steps)
        start = time.perf_counter()
        batch = rollout.to_step_batch()
        build = time.perf_counter() - start
        assert batch.anchors.dtype == np.uint64
        fields = {"group_ids": batch.group_ids, "traj_ids": batch.traj_ids, "step_ids": batch.step_ids, "rewards": batch.rewards}
        hex_batch = StepBatch(**fields, anchors=np.asarray(rollout.anchors, dtype=object))
        other_batch = StepBatch(**fields, anchors=np.asarray(["s" + a for a in rollout.anchors], dtype=object))
        calls = [partial(grpo.advantages, batch), partial(gigpo.advantages, batch), on_one_thread(partial(gigpo.advantages, batch)),
                 partial(gigpo_numpy.advantages, batch), *(partial(gigpo.advantages, b) for b in (hex_batch, other_batch))]
        best_times(calls, 1)
        t_grpo, t_gigpo, t_one, t_numpy, t_hex, t_other = best_times(calls, args.repeats)
        n_step_groups = gigpo.step_groups(batch)[1]
        n_groups = len(np.unique(batch.group_ids))
        ratio, with_build = t_gigpo / t_grpo, (build + t_gigpo) / (build + t_grpo)
        print(f"{len(batch):>9} {n_groups:>7} {n_step_groups:>11} {build:>9.4f} {t_grpo:>9.4f} {t_gigpo:>9.4f} {t_one:>10.4f} "
              f"{t_numpy:>9.4f} {ratio:>10.2f} {t_one / t_grpo:>13.2f} {with_build:>10.2f}")
        str_lines.append(f"{len(batch):>9} {t_hex:>10.4f} {t_other:>11.4f}")
    print(f"\nGiGPO on str anchors (third-party batches)\n{'rows':>9} {'hex str s':>10} {'other str s':>11}", *str_lines, sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
