"""``gigpo-gym alfworld demos|export``: expert demonstrations and ALFWorld data trees."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _run_demos(args: argparse.Namespace) -> int:
    from gigpo_gym.envs.alfworld.demos import export_expert_demos

    try:
        rows = export_expert_demos(
            args.out, args.split, args.n, args.seed, task_types=args.task_types, data_dir=args.data_dir, progress=True
        )
    except (ValueError, FileNotFoundError) as e:  # a bad split, task type or data folder: one line, as `play` gives
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {rows} rows to {args.out}")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from gigpo_gym.envs.alfworld.export import DATA_FOLDER, export_split
    from gigpo_gym.envs.alfworld.generator import canonical_split

    try:
        games = export_split(args.out, args.split, args.n, args.seed, task_types=args.task_types, progress=True)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(games)} games under {Path(args.out) / DATA_FOLDER / canonical_split(args.split)}")
    print(f"play them with ALFWorld: ALFWORLD_DATA={args.out} (or data_dir={args.out!r} here)")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", default="train", help="train, valid_seen or valid_unseen (default: train)")
    parser.add_argument("--n", type=int, default=None, help="number of tasks (default: the whole split)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    parser.add_argument("--task-types", nargs="+", default=None, help="subset of pick look clean heat cool pick2")


def add_cli(subparsers: Any) -> None:
    """Add ``alfworld demos`` and ``alfworld export`` to the ``gigpo-gym`` command."""
    alf = subparsers.add_parser("alfworld", help="ALFWorld tools (expert demonstrations, data export)",
                                description="ALFWorld tools: the expert's trajectories as JSONL (demos), and "
                                "generated tasks as a data tree ALFWorld's own code plays (export).")
    sub = alf.add_subparsers(dest="alfworld_command", required=True)
    demos = sub.add_parser("demos", help="export expert trajectories as JSONL (one row per step)",
                           description="Play ALFWorld's expert on the tasks of a split and write every step as one "
                           "JSON line: the task, the observation, the admissible actions, the action, the reward, "
                           "whether the episode is done and won (no prompts). Example: gigpo-gym alfworld demos "
                           "--split train --n 100 --out demos.jsonl")
    _common(demos)
    demos.add_argument("--data-dir", default=None, help="a downloaded ALFWorld data folder (default: generated)")
    demos.add_argument("--out", required=True, help="output JSONL file")
    demos.set_defaults(func=_run_demos)
    export = sub.add_parser(
        "export",
        help="write generated tasks as an ALFWorld data tree (json_2.1.1/<split>/<task>/trial_*/game.tw-pddl)",
        description="Write generated tasks as a real ALFWorld data tree, playable by ALFWorld's own code "
        "(needs the [alfworld] extra for ALFWorld's PDDL domain and grammar).",
    )
    _common(export)
    export.add_argument("--out", required=True, help="output folder (use it as $ALFWORLD_DATA)")
    export.set_defaults(func=_run_export)
