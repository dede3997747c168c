"""Where GiGPO's step-level signal is present: one policy's rollouts at several group sizes.

GiGPO's step advantage A^S of a row is non-zero only when its anchor state recurs in
its task group (a step group of two or more rows) *and* the discounted returns from
that state differ.  For each group size G this plays ``--rollouts`` rollouts of
``num_groups x G`` training episodes with the given weights (no update) and reports
the share of rows in shared step groups, the share with a non-zero step advantage and,
for comparison, the share with a non-zero episode advantage (their task group has both
wins and losses).

    python benchmarks/bench_step_signal.py --weights runs/bench_learning/warm_start.safetensors \\
        --set prompt.list_actions=false --group-sizes 2 4 8 16
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def measure(args, group_size: int) -> dict:
    from safetensors.torch import load_model

    from gigpo_gym.algos import Trainer, collect, get_algorithm, load_config
    from gigpo_gym.core.env import derive_seed

    cfg = load_config(args.config, [*args.set, f"env.group_size={group_size}", f"env.num_groups={args.num_groups}",
                                    "env.eval_episodes=0", "progress=false", f"run_dir={tempfile.mkdtemp()}"])
    trainer = Trainer(cfg)
    load_model(trainer.policy, args.weights)
    gamma = cfg.algo.kwargs.get("gamma", 0.95)
    totals = {"rows": 0, "shared": 0, "step_signal": 0, "episode_signal": 0, "episodes": 0, "won": 0}
    try:
        for r in range(args.rollouts):
            rollout = collect(trainer.policy, trainer.envs, trainer.sampling(r + 1), seed=derive_seed(cfg.seed, 100 + r),
                              shaping=trainer.shaping)
            batch = rollout.to_step_batch()
            gigpo = get_algorithm("gigpo", gamma=gamma, omega=1.0)
            episode = np.asarray(get_algorithm("gigpo", gamma=gamma, omega=0.0).advantages(batch))
            step = np.asarray(gigpo.advantages(batch)) - episode
            codes, n_codes = gigpo.step_groups(batch)
            sizes = np.bincount(codes, minlength=n_codes)
            totals["rows"] += len(batch)
            totals["shared"] += int(np.sum(sizes[codes] > 1))
            totals["step_signal"] += int(np.sum(np.abs(step) > 1e-9))
            totals["episode_signal"] += int(np.sum(np.abs(episode) > 1e-9))
            totals["episodes"] += len(rollout.episodes)
            totals["won"] += sum(e.won for e in rollout.episodes)
    finally:
        trainer.close()
    rows = max(totals["rows"], 1)
    return {"group_size": group_size, "num_groups": args.num_groups, **totals,
            "success": totals["won"] / max(totals["episodes"], 1), "shared_share": totals["shared"] / rows,
            "step_signal_share": totals["step_signal"] / rows, "episode_signal_share": totals["episode_signal"] / rows}


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    p.add_argument("--weights", required=True, help="safetensors weights of the policy (e.g. bench_learning's warm start)")
    p.add_argument("--group-sizes", nargs="+", type=int, default=[2, 4, 8, 16])
    p.add_argument("--num-groups", type=int, default=8, help="task groups per rollout")
    p.add_argument("--rollouts", type=int, default=2, help="rollouts per group size (different sampling seeds)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--out", default=None, help="write the results JSON here")
    args = p.parse_args()
    results = []
    print(f"{'G':>3} {'rows':>6} {'success':>8} {'in shared step groups':>22} {'non-zero A^S':>13} {'non-zero A^E':>13}")
    for g in args.group_sizes:
        r = measure(args, g)
        results.append(r)
        print(f"{g:>3} {r['rows']:>6} {100 * r['success']:7.1f}% {100 * r['shared_share']:21.1f}% "
              f"{100 * r['step_signal_share']:12.1f}% {100 * r['episode_signal_share']:12.1f}%", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"benchmark": "gigpo_step_signal", "config": args.config,
                                              "overrides": args.set, "weights": args.weights, "results": results},
                                             indent=2))


if __name__ == "__main__":
    main()
