"""``gigpo-gym train``: run the trainer from a YAML config plus command-line overrides."""

from __future__ import annotations

import argparse
import sys

#: Flags that are shortcuts for ``--set key=value``.
SHORTCUTS = {
    "algo": "algo.name",
    "model": "model.name",
    "iterations": "iterations",
    "sft_steps": "sft.steps",
    "run_dir": "run_dir",
    "seed": "seed",
    "device": "model.device",
}


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train an LLM agent (GiGPO, GRPO, PPO, ...) on an env of the suite",
        description="Rollout -> advantages -> clipped-surrogate updates, with checkpoints, evals and a learning curve. "
        "Example: gigpo-gym train --config configs/demo.yaml",
    )
    p.add_argument("--config", help="YAML config file (see configs/); unset keys keep their defaults")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set optim.lr=1e-5 (repeatable)")
    p.add_argument("--algo", help="advantage estimator (gigpo, grpo, ppo, rloo, reinforce_pp, dapo, ...)")
    p.add_argument("--model", help="'tiny', 'smollm2', or a model path / hub id")
    p.add_argument("--iterations", type=int, help="RL iterations")
    p.add_argument("--sft-steps", type=int, help="supervised warm-start steps on expert demonstrations")
    p.add_argument("--run-dir", help="output folder (config, logs, checkpoints, curve)")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", help="auto, cpu, cuda, ...")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="CHECKPOINT",
                   help="continue from the run's latest checkpoint (or the named checkpoint folder)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_train_command)


def run_train_command(args: argparse.Namespace) -> int:
    import yaml

    from gigpo_gym.algos.training.checkpoint import CheckpointError
    from gigpo_gym.algos.training.config import ConfigError, load_config
    from gigpo_gym.algos.training.trainer import run_training

    overrides = list(args.overrides)
    for flag, key in SHORTCUTS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}")
    if args.no_progress:
        overrides.append("progress=false")
    try:
        _reset_algo_kwargs(args, overrides)
        cfg = load_config(args.config, overrides)
        summary = run_training(cfg, resume=args.resume)
    except (ConfigError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"run folder: {summary['run_dir']}  (config.yaml, metrics.jsonl, tensorboard/, checkpoints/)")
    if summary.get("final_checkpoint"):
        print(f"checkpoint: {summary['final_checkpoint']}")
    if summary.get("curve"):
        print(f"learning curve: {summary['curve']}")
    print(f"took {summary['seconds'] / 60:.1f} min")
    return 0


def _reset_algo_kwargs(args: argparse.Namespace, overrides: list[str]) -> None:
    """``--algo X`` on a config written for another algorithm drops that algorithm's kwargs.

    ``configs/demo.yaml`` sets GiGPO's ``gamma``; ``--algo grpo`` should just run GRPO
    (with its defaults) rather than fail on a key GRPO does not have.  Kwargs given with
    ``--set algo.kwargs...`` are kept.
    """
    from gigpo_gym.algos.training.config import load_config

    if args.algo is None or any(o.strip().startswith("algo.kwargs") for o in args.overrides):
        return
    written = load_config(args.config, args.overrides).algo
    if written.name != args.algo and written.kwargs:
        print(f"note: --algo {args.algo} replaces {written.name}; its algo.kwargs {written.kwargs} are not used",
              file=sys.stderr)
        overrides.append("algo.kwargs={}")
