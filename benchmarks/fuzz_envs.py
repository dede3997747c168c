"""Fuzz every env id with hostile actions: any ``str`` must come back as an observation.

Plays random actions from ``gigpo_gym.core.fuzz`` (lone surrogates, NULs, control
characters, bidi and zero-width marks, random code points, command shapes with junk
inside, admissible actions with junk spliced in, actions at and past
``max_action_length``) and checks the contract on every step: a 5-tuple, a ``str``
observation within the space and UTF-8 encodable, a finite float reward, bool flags,
the ``info`` keys; past the bound, a ValueError naming it.  Prints a summary of the
failures grouped by kind and exits 1 when there is any.

    python benchmarks/fuzz_envs.py                          # 100,000 actions on every available id
    python benchmarks/fuzz_envs.py --env-ids gigpo_gym/WebShop-v0 --actions 20000 --seed 3
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import gymnasium as gym
from tqdm import tqdm

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.core.fuzz import fuzz_env
from gigpo_gym.registration import ENV_SPECS


def fuzz_one(env_id: str, actions: int, seed: int, show: int) -> int:
    """Fuzz ``env_id``; print its line and failure kinds; return the number of failures."""
    env = gym.make(env_id)
    kinds: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    start = time.perf_counter()
    try:
        with tqdm(total=actions, desc=env_id, unit="action", leave=False, file=sys.stderr) as bar:
            for failure in fuzz_env(env, actions, seed=seed, progress=bar.update):
                kind = failure.problem.splitlines()[0][:160]
                kinds[kind] += 1
                examples.setdefault(kind, str(failure))
    finally:
        env.close()
    seconds = time.perf_counter() - start
    failures = sum(kinds.values())
    print(f"{env_id:<34} {actions:>9,} actions  {failures:>6,} failures  {actions / seconds:>9,.0f} actions/s")
    for kind, count in kinds.most_common(show):
        print(f"    {count:>6,} x {kind}\n           e.g. {examples[kind][:600]}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    available = [spec.id for spec in ENV_SPECS if spec.available]
    parser.add_argument("--env-ids", default=",".join(available),
                        help=f"comma-separated ids (default: every available one: {', '.join(available)})")  # fmt: skip
    parser.add_argument("--actions", type=int, default=100_000, help="actions per env (default 100,000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the action stream and of the first reset")
    parser.add_argument("--show", type=int, default=10, help="failure kinds to print per env (default 10)")
    args = parser.parse_args()
    env_ids = [e for e in args.env_ids.split(",") if e]
    unknown = [e for e in env_ids if e not in gym.registry]
    if unknown:
        parser.error(f"unknown env ids {unknown}; the suite has {[spec.id for spec in ENV_SPECS]}")
    print(f"fuzzing {len(env_ids)} env ids, {args.actions:,} actions each, seed {args.seed}")
    total = sum(fuzz_one(env_id, args.actions, args.seed, args.show) for env_id in env_ids)
    print(f"total failures: {total:,}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
