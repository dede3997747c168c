"""``gigpo-gym inspect RUN_DIR [--iteration N] [--out FILE.html]``: write the run's page (``inspect.page``)."""

from __future__ import annotations

import argparse
import sys


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="see a run's step groups: its recorded episodes side by side, as one HTML page",
        description="Write one self-contained HTML page (no server, no network) of a training run's recorded task "
        "groups (a TRL GiGPOTrainer output folder too) or of a leaderboard episode file: episodes side by side, "
        "steps coloured by their advantage, equal anchors marked, charts over the iterations. "
        "Example: gigpo-gym inspect runs/demo",
    )
    p.add_argument("path", metavar="RUN_DIR", help="a training run folder, or a leaderboard *.episodes.jsonl file")
    p.add_argument("--iteration", type=int, help="put only this iteration's groups on the page (default: every "
                   "recorded iteration, the last shown first)")
    p.add_argument("--out", metavar="FILE.html", help="where to write the page (default: RUN_DIR/inspect.html, or "
                   "FILE.html beside a leaderboard file)")
    p.set_defaults(func=run_inspect_command)


def run_inspect_command(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.inspect.page import InspectError, write_page

    try:
        out = write_page(args.path, args.out, args.iteration)
    except InspectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (open it in a browser; it needs no server)")
    return 0
