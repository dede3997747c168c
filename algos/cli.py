"""``gigpo-gym train``: run the trainer from a YAML config plus command-line overrides.

Also ``python -m gigpo_gym.algos.cli train ...``, which is what ``accelerate launch -m`` and
``torchrun -m`` start in each process; ``--accelerate NAME --num-processes N`` launches that.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from pathlib import Path

from gigpo_gym.algos.training.config import CONFIGS_DIR, DEFAULT_CONFIG, resolve_config, shipped_configs
from gigpo_gym.core.commands import ExactOptionsParser

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
        "Example: gigpo-gym train --config demo",
    )
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help=f"a YAML config file, or the name of a shipped one ({', '.join(shipped_configs())}); unset keys "
                   f"keep their defaults (default: {DEFAULT_CONFIG}, a model that learns in about five minutes)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set optim.lr=1e-5 (repeatable)")
    p.add_argument("--algo", help="advantage estimator (gigpo, grpo, ppo, rloo, reinforce_pp, dapo, ...)")
    p.add_argument("--model", help="'tiny', 'smollm2', or a model path / hub id")
    p.add_argument("--iterations", type=int, help="RL iterations")
    p.add_argument("--sft-steps", type=int, help="supervised warm-start steps on expert demonstrations")
    p.add_argument("--run-dir", help="output folder (config, logs, checkpoints, curve); default: the config's run_dir "
                   "(runs/train when the config sets none)")
    p.add_argument("--seed", type=int, help="the run's seed: tasks, sampling, initial weights (default: the config's)")
    p.add_argument("--device", help="auto, cpu, cuda, ...")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="CHECKPOINT",
                   help="continue from the run's latest checkpoint (or the named checkpoint folder)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--accelerate", metavar="CONFIG",
                   help="train on several processes: an accelerate config file or a shipped one "
                   f"({', '.join(shipped_accelerate_configs())}); runs accelerate launch")
    p.add_argument("--num-processes", type=int, help="processes for --accelerate (default: the config's num_processes)")
    p.set_defaults(func=run_train_command)


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def run_train_command(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.training.checkpoint import CheckpointError
    from gigpo_gym.algos.training.config import ConfigError, load_config
    from gigpo_gym.algos.training.trainer import run_training

    overrides = flag_overrides(args)
    if args.no_progress:
        overrides.append("progress=false")
    try:
        args.config = resolve_config(args.config)
        _reset_algo_kwargs(args, overrides)
        cfg = load_config(args.config, overrides)
        check_model(cfg.model.name)
        if getattr(args, "accelerate", None) or getattr(args, "num_processes", None):
            return launch(args, cfg, overrides)
        summary = run_training(cfg, resume=args.resume)
    except (ConfigError, CheckpointError) as e:
        if _is_main_process():
            print(f"error: {e}", file=sys.stderr)
        return 2
    if not summary.get("main", True):
        return 0
    print(f"run folder: {summary['run_dir']}  (config.yaml, metrics.jsonl, tensorboard/, checkpoints/)")
    if summary.get("final_checkpoint"):
        print(f"checkpoint: {summary['final_checkpoint']}")
    if summary.get("selected"):  # select_every: the run's result, not the last checkpoint
        print(f"chosen weights: {summary['selected']['weights']} (iteration {summary['selected']['iteration']})")
    if summary.get("curve"):
        print(f"learning curve: {summary['curve']}")
    print(f"took {summary['seconds'] / 60:.1f} min")
    return 0


def shipped_accelerate_configs() -> dict[str, Path]:
    """Name -> file of the accelerate configs (``configs/accelerate/``)."""
    return {p.stem: p for p in sorted((CONFIGS_DIR / "accelerate").glob("*.yaml"))}


def resolve_accelerate_config(text: str) -> Path:
    """``--accelerate``: a file, or a shipped accelerate config by name (``fsdp``, ``fsdp.yaml``)."""
    from gigpo_gym.algos.training.config import ConfigError

    if Path(text).is_file():
        return Path(text)
    shipped = shipped_accelerate_configs()
    name = Path(text).stem if Path(text).suffix in (".yaml", ".yml") else text
    if name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"--accelerate {text!r} is neither a file nor a shipped accelerate config{hint}; "
                      f"shipped: {', '.join(shipped)}")


def launch(args: argparse.Namespace, cfg, overrides: list[str]) -> int:
    """Start ``accelerate launch -m gigpo_gym.algos.cli train`` with the same config and overrides."""
    import importlib.util

    import yaml

    from gigpo_gym.algos.training.config import ConfigError
    from gigpo_gym.core.extras import install_command, missing_extra_error

    if importlib.util.find_spec("accelerate") is None:
        raise ConfigError(f"--accelerate needs the accelerate package: {install_command('train')}")
    config = resolve_accelerate_config(args.accelerate or "multi_gpu")
    try:
        settings = yaml.safe_load(config.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--accelerate {config}: not valid YAML: {e}") from None
    if not isinstance(settings, dict) or "distributed_type" not in settings:
        raise ConfigError(f"--accelerate {config} is not an accelerate config (no distributed_type); "
                          "write one with `accelerate config` or use a shipped one")
    if str(settings["distributed_type"]).upper() == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        # fail before any process starts, rather than in each of them after the process group is up
        raise ConfigError(f"--accelerate {config.name}: {missing_extra_error('deepspeed', 'DeepSpeed ZeRO training')}")
    processes = args.num_processes or int(settings.get("num_processes", 1))
    if processes < 1:
        raise ConfigError(f"--num-processes must be >= 1, got {processes}")
    if processes > cfg.env.num_groups:
        raise ConfigError(
            f"env.num_groups={cfg.env.num_groups} cannot be split among {processes} processes: each process plays "
            f"whole task groups; run at most {cfg.env.num_groups} processes or raise env.num_groups")
    child = ["--config", str(args.config)] if args.config else []
    for assignment in overrides:
        child += ["--set", assignment]
    if args.resume:
        child += ["--resume", args.resume]
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--num_processes", str(processes), "-m", "gigpo_gym.algos.cli", "train", *child]
    print("running: " + " ".join(command), file=sys.stderr)
    return subprocess.run(command).returncode


def check_model(name: str) -> None:
    """``model.name`` must be 'tiny', 'smollm2', a model folder, or a hub id already in the local
    Hugging Face cache: nothing downloads at run time, so say so before building anything."""
    from gigpo_gym.algos.training.config import ConfigError

    path = Path(name).expanduser()
    if name in ("tiny", "smollm2") or (path / "config.json").is_file():
        return
    if path.is_dir():
        raise ConfigError(f"model.name {name!r} is a folder without a Hugging Face model (config.json)")
    hub_like = name.count("/") == 1 and not name.startswith((".", "/", "~"))
    if hub_like:
        try:
            from huggingface_hub import snapshot_download

            snapshot_download(name, local_files_only=True)
            return
        except Exception:  # not in the cache, or not a valid hub id
            pass
    fix = f"fetch it first with: huggingface-cli download {name}" if hub_like else \
        "use 'tiny', 'smollm2', a model folder or a cached hub id (org/name)"
    raise ConfigError(f"model.name {name!r} is not a folder and not a hub id cached offline "
                      f"(nothing downloads at run time); {fix}")


def flag_overrides(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> list[str]:
    """The ``--set`` overrides, then those of the shortcut flags (``SHORTCUTS``) but ``skip``'s: the flags win."""
    import yaml

    overrides = list(args.overrides)
    for flag, key in SHORTCUTS.items():
        value = getattr(args, flag, None)
        if value is not None and flag not in skip:
            overrides.append(f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}")
    return overrides


def _reset_algo_kwargs(args: argparse.Namespace, overrides: list[str]) -> None:
    """``--algo X`` on a config written for another algorithm drops that algorithm's kwargs.

    ``configs/demo.yaml`` sets GiGPO's ``gamma``; ``--algo grpo`` should just run GRPO
    (with its defaults) rather than fail on a key GRPO does not have.  Kwargs given with
    ``--set algo.kwargs...`` are kept.
    """
    from gigpo_gym.algos.training.config import load_config

    if args.algo is None or any(o.strip().startswith("algo.kwargs") for o in args.overrides):
        return
    written = load_config(args.config, flag_overrides(args, skip=("algo",))).algo  # the other flags may be needed
    if written.name != args.algo and written.kwargs:
        print(f"note: --algo {args.algo} replaces {written.name}; its algo.kwargs {written.kwargs} are not used",
              file=sys.stderr)
        overrides.append("algo.kwargs={}")


def main(argv: list[str] | None = None) -> int:
    """``python -m gigpo_gym.algos.cli train ...`` (what the launchers start in each process)."""
    parser = ExactOptionsParser(prog="python -m gigpo_gym.algos.cli")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
