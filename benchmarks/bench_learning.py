"""GiGPO vs GRPO at equal samples on embedded ALFWorld (tiny model, several seeds).

Per seed: one SFT warm start on expert demonstrations, then each algorithm trains a
copy of that same warm-started policy with the same groups, iterations and sampling
seeds (so the same number of episodes), and is evaluated on the held-out split
before and after.  Reports held-out success per algorithm and seed, the mean over
seeds, and the mean change from the shared starting point.

    python benchmarks/bench_learning.py --seeds 0 1 2 --iterations 6
    python benchmarks/bench_learning.py --warm-start-seed 0   # one warm start shared by every seed
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np

from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.training.trainer import Trainer, _warm_start, build_policy, run_training


def warm_start(cfg) -> dict:
    """The state dict of the policy after the config's SFT warm start."""
    trainer = Trainer(cfg)
    try:
        _warm_start(trainer, echo=print)
        return copy.deepcopy(trainer.policy.state_dict())
    finally:
        trainer.close()


def _read_policy(cfg, path: str) -> dict:
    from safetensors.torch import load_model

    policy = build_policy(cfg)
    load_model(policy, path)
    return copy.deepcopy(policy.state_dict())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"))
    p.add_argument("--algos", nargs="+", default=["gigpo", "grpo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=None, help="override the config's iterations")
    p.add_argument("--run-root", default="runs/bench_learning")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=None, help="write the results JSON here")
    p.add_argument("--warm-start-seed", type=int, default=None,
                   help="one SFT warm start (with this seed) shared by every seed: the seeds then vary the RL only")
    p.add_argument("--warm-start-file", default=None,
                   help="with --warm-start-seed: take that warm start from a file instead of training it (the "
                        "reference.safetensors of a run that began from it, e.g. runs/bench_learning/seed0-gigpo)")
    args = p.parse_args()
    extra = list(args.overrides) + ([f"iterations={args.iterations}"] if args.iterations is not None else [])
    rows = []
    started = time.perf_counter()
    shared = None
    for seed in args.seeds:
        sft_seed = seed if args.warm_start_seed is None else args.warm_start_seed
        if shared is None or args.warm_start_seed is None:
            base = load_config(args.config, [*extra, f"seed={sft_seed}", "progress=false", "algo.name=grpo",
                                             "algo.kwargs={}", f"run_dir={args.run_root}/seed{sft_seed}-sft"])
            shared = warm_start(base) if args.warm_start_file is None else _read_policy(base, args.warm_start_file)
        state = shared
        for algo in args.algos:
            kwargs = "{gamma: 0.95}" if algo == "gigpo" else "{}"
            cfg = load_config(args.config, [
                *extra, f"seed={seed}", f"algo.name={algo}", f"algo.kwargs={kwargs}", "sft.steps=0", "eval_before=true",
                "progress=false", f"run_dir={args.run_root}/seed{seed}-{algo}",
            ])
            # the tiny model's tokenizer is built from the seed's demonstrations: take the warm start's
            policy = build_policy(cfg if args.warm_start_seed is None else base)
            policy.load_state_dict(state)
            summary = run_training(cfg, policy=policy, echo=lambda line, a=algo, s=seed: print(f"[{a} seed {s}] {line}"))
            before, after = summary["evals"]["initial"], summary["evals"]["after RL"]
            rows.append({"seed": seed, "algo": algo, "before": before["eval/success"], "after": after["eval/success"],
                         "after_per_type": {k.split("/")[-1]: v for k, v in after.items() if k.startswith("eval/success/")},
                         "invalid_before": before["eval/invalid_action_rate"],
                         "invalid_after": after["eval/invalid_action_rate"], "seconds": summary["seconds"]})
    table = {}
    for algo in args.algos:
        mine = [r for r in rows if r["algo"] == algo]
        after = np.array([r["after"] for r in mine])
        gain = after - np.array([r["before"] for r in mine])
        table[algo] = {"after_mean": float(after.mean()), "after_sem": float(after.std(ddof=1) / np.sqrt(len(after)))
                       if len(after) > 1 else 0.0, "gain_mean": float(gain.mean()), "per_seed": after.tolist()}
        print(f"{algo:>6}: held-out success {100 * after.mean():5.1f} +- {100 * table[algo]['after_sem']:.1f} "
              f"(change from the shared start {100 * gain.mean():+5.1f}; seeds {[round(100 * float(a), 1) for a in after]})")
    result = {"benchmark": "learning_gigpo_vs_grpo", "config": args.config, "overrides": extra, "seeds": args.seeds,
              "rows": rows, "summary": table, "seconds": time.perf_counter() - started}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
