"""Native ALFWorld engine vs the reference TextWorld engine, side by side (not a test).

Both envs (``ALFWorldEnv`` and ``ALFWorldTextWorldEnv``, same kwargs) play the
same games (the reference plays them as exported ``game.tw-pddl`` files) with the
same commands (a random admissible walk drawn once on the native engine), in one
run.  Measured per env, at the env API (info dict, anchor, admissible list included):

* step: ``env.step`` on the walk's commands;
* reset, same game: ``reset`` of the game just played (the group-copy case);
* reset, new game: ``reset`` to another game (the reference loads the file: PDDL
  parse, grammar, fast-downward translation; exports are made before the clock).

Needs the ``[alfworld]`` extra.  Run:
``.venv/bin/python benchmarks/bench_alfworld_reference.py [--games N] [--steps N]``.
"""

from __future__ import annotations

import argparse
import random
import time

from gigpo_gym.envs.alfworld.env import ALFWorldEnv
from gigpo_gym.envs.alfworld.textworld_env import ALFWorldTextWorldEnv


def walks(kwargs: dict, games: int, steps: int, seed: int) -> list[list[str]]:
    """A random admissible walk per game, drawn on the native engine (the same on both)."""
    rng = random.Random(seed)
    env = ALFWorldEnv(**kwargs)
    out = []
    for game in range(games):
        _, info = env.reset(seed=game)
        walk = []
        for _ in range(steps):
            cmd = rng.choice(info["admissible_actions"])
            walk.append(cmd)
            _, _, terminated, _, info = env.step(cmd)
            if terminated:
                break
        out.append(walk)
    return out


def measure(env, plays: list[list[str]]) -> dict[str, float]:
    """Seconds per step, per same-game reset and per new-game reset."""
    step_time = same_reset = new_reset = 0.0
    n_steps = 0
    for game, walk in enumerate(plays):
        t0 = time.perf_counter()
        env.reset(seed=game)
        new_reset += time.perf_counter() - t0
        t0 = time.perf_counter()
        env.reset(seed=game)
        same_reset += time.perf_counter() - t0
        t0 = time.perf_counter()
        for cmd in walk:
            env.step(cmd)
        step_time += time.perf_counter() - t0
        n_steps += len(walk)
    return {"step": step_time / n_steps, "same": same_reset / len(plays), "new": new_reset / len(plays)}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=8, help="games played by both engines (default 8)")
    parser.add_argument("--steps", type=int, default=20, help="commands per game (default 20)")
    parser.add_argument("--split", default="valid_seen", help="split of the generated tasks (default valid_seen)")
    parser.add_argument("--data-dir", default=None, help="real ALFWorld data instead of generated tasks")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random walks (default 0)")
    args = parser.parse_args()

    kwargs = {"split": args.split, "data_dir": args.data_dir}
    plays = walks(kwargs, args.games, args.steps, args.seed)
    native, reference = ALFWorldEnv(**kwargs), ALFWorldTextWorldEnv(**kwargs)
    for game in range(args.games):  # export (generated tasks) and warm both up before the clock
        reference.game_file(game)
        native.reset(seed=game)
    reference.reset(seed=args.games - 1)
    results = {"native": measure(native, plays), "reference": measure(reference, plays)}
    reference.close()

    rows = [("step", "steps/s"), ("same", "resets/s, same game"), ("new", "resets/s, new game")]
    print(f"{args.games} games, {sum(map(len, plays))} steps, split {args.split!r}"
          f"{' (data ' + args.data_dir + ')' if args.data_dir else ' (generated)'}")
    print(f"{'measure':<22}{'native':>14}{'TextWorld':>14}{'native/TextWorld':>18}")
    for key, label in rows:
        n, r = 1 / results["native"][key], 1 / results["reference"][key]
        print(f"{label:<22}{n:>14,.1f}{r:>14,.2f}{n / r:>17,.0f}x")
    print(f"{'(ms per step)':<22}{1e3 * results['native']['step']:>14.3f}{1e3 * results['reference']['step']:>14.1f}")


if __name__ == "__main__":
    main()
