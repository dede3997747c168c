"""The ``gigpo-gym`` command: list envs, play one by hand, serve, train."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence

#: What ``gigpo-gym --help`` says first (plain text: argparse shows a docstring's markup as is).
DESCRIPTION = "gigpo-gym: list the envs, play one by hand, serve the sites, train and evaluate LLM agents."
#: Modules that add sub-commands through ``add_cli(subparsers)`` (imported only if installed).
CONTRIBUTORS = ("gigpo_gym.envs.alfworld.cli", "gigpo_gym.algos.cli", "gigpo_gym.algos.show", "gigpo_gym.algos.leaderboard.cli",
                "gigpo_gym.algos.inspect.cli")
#: Modules that add a server under ``gigpo-gym serve`` through ``add_serve_cli(subparsers)``.
SERVERS = ("gigpo_gym.envs.searchqa.cli", "gigpo_gym.envs.webshop.cli", "gigpo_gym.integrations.cli")
#: Optional modules -> the extra that installs them (a command missing one says which extra to install).
EXTRA_OF_MODULE = {
    "torch": "train", "transformers": "train", "peft": "train", "safetensors": "train", "tokenizers": "train",
    "gguf": "train", "yaml": "train", "tensorboard": "train", "matplotlib": "train", "stable_baselines3": "sb3",
    "sb3_contrib": "sb3", "selenium": "browser", "psutil": "browser", "textworld": "alfworld", "alfworld": "alfworld",
    "sentence_transformers": "dense", "ray": "ray", "accelerate": "train", "deepspeed": "deepspeed", "vllm": "vllm",
    "openai": "api", "openenv": "openenv", "trl": "trl", "datasets": "trl", "skyrl_gym": "skyrl",
}
#: What ends a ``play`` session (besides end of input and Ctrl-C).
QUIT = {"q", "quit", "exit"}


def _optional_modules(names: Sequence[str]):
    for name in names:
        if importlib.util.find_spec(name) is not None:
            yield importlib.import_module(name)


def cmd_list(args: argparse.Namespace) -> int:
    """Print every env id with its backend, data in use and availability."""
    import os

    from gigpo_gym.core.extras import install_command
    from gigpo_gym.registration import ENV_SPECS

    rows = []
    for spec in ENV_SPECS:
        data = os.environ.get(spec.data_env or "") or "embedded default"
        state = "ok" if spec.available else f"needs the [{spec.extra}] extra"
        rows.append({"id": spec.id, "max_steps": spec.max_episode_steps, "backend": spec.backend,
                     "data": data, "status": state})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in rows[0]}
    print("  ".join(k.upper().ljust(w) for k, w in widths.items()))
    for row in rows:
        print("  ".join(str(row[k]).ljust(w) for k, w in widths.items()))
    if any(row["status"] != "ok" for row in rows):
        print(f"install an extra: {install_command('EXTRA')}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """Play an env in the terminal: a number picks an admissible action, text is sent as is."""
    import gymnasium as gym

    import gigpo_gym  # noqa: F401
    from gigpo_gym.registration import env_spec
    from gigpo_gym.wrappers import AnchorKey

    try:
        env_spec(args.env_id)  # a clear error for unknown ids
        kwargs = dict(_parse_kwarg(kv) for kv in args.kwarg)
        env = AnchorKey(gym.make(args.env_id, **kwargs), mode=args.anchor_mode)
    except (gym.error.Error, TypeError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    obs, info = env.reset(seed=args.seed)
    total, steps = 0.0, 0
    print("(a number picks an admissible action, other text is sent as is; q, quit, Ctrl-D or Ctrl-C ends)")
    try:
        while True:
            _show(obs, info)
            try:
                line = input("> ").strip()
            except EOFError:
                line = "quit"
                print()
            if line in QUIT:
                print(f"session ended after {steps} steps, return {total:g}")
                break
            admissible = info["admissible_actions"]
            action = admissible[int(line) - 1] if line.isdigit() and 1 <= int(line) <= len(admissible) else line
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            steps += 1
            print(f"reward {reward:g} (total {total:g})  valid {info['action_valid']}  won {info['won']}")
            if terminated or truncated:
                _show(obs, info)
                print(f"episode over after {steps} steps: {'won' if info['won'] else 'not won'}, return {total:g}")
                break
    except KeyboardInterrupt:
        print(f"\nsession ended after {steps} steps, return {total:g}")
    finally:
        env.close()
    return 0


def _show(obs: str, info: dict) -> None:
    print("\n" + obs)
    for k, action in enumerate(info["admissible_actions"], start=1):
        print(f"  {k:>3}. {action}")
    print(f"[task {info['task_id']} ({info['task_type']}) anchor {info['anchor']}]")


def _parse_kwarg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--kwarg expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    from gigpo_gym import __version__
    from gigpo_gym.core.commands import ExactOptionsParser
    from gigpo_gym.wrappers.anchor import ANCHOR_MODES

    parser = ExactOptionsParser(prog="gigpo-gym", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gigpo-gym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the env ids, their backends and the data in use",
                       description="Every registered env id with its backend, the data it reads (the embedded "
                       "default, or the folder its environment variable names) and whether its extra is installed.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("play", help="play an env by hand in the terminal",
                       description="Play one task of an env in the terminal: each step shows the observation and "
                       "the admissible actions; a number picks one, other text is sent as the action. Example: "
                       "gigpo-gym play gigpo_gym/ALFWorld-v0 --seed 3")
    p.add_argument("env_id", help="e.g. gigpo_gym/ALFWorld-v0 (see `gigpo-gym list`)")
    p.add_argument("--seed", type=int, default=0, help="task seed (default 0)")
    p.add_argument("--anchor-mode", choices=ANCHOR_MODES, default="state",
                   help="what info['anchor'] digests: the true state (default) or the observation text")
    p.add_argument("--kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="env constructor argument (JSON value or string); repeatable")
    p.set_defaults(func=cmd_play)

    servers = list(_optional_modules(SERVERS))
    if servers:
        serve = sub.add_parser("serve", help="run one of the suite's servers on loopback",
                               description="Run a server of the suite on 127.0.0.1 until interrupted: the WebShop "
                               "site, a Search-R1 style retriever, or any env id over openenv-core.")
        serve_sub = serve.add_subparsers(dest="server", required=True, metavar="SERVER")
        for module in servers:
            module.add_serve_cli(serve_sub)
    for module in _optional_modules(CONTRIBUTORS):
        module.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`gigpo-gym list | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ImportError as e:
        message = _missing_extra(e, args.command)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


def _missing_extra(e: ImportError, command: str) -> str | None:
    """One line naming the extra to install when an optional module is missing, else None."""
    from gigpo_gym.core.extras import MissingExtra, missing_extra_error

    if isinstance(e, MissingExtra):
        return str(e)
    module = (e.name or "").split(".")[0]
    if not isinstance(e, ModuleNotFoundError) or module not in EXTRA_OF_MODULE:
        return None
    return f"{missing_extra_error(EXTRA_OF_MODULE[module], f'gigpo-gym {command}')} ({module} is not installed)"


if __name__ == "__main__":
    sys.exit(main())
