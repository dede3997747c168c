"""``gigpo-gym leaderboard``: evaluate a policy on versioned specs, or render the board.

    gigpo-gym leaderboard --policy expert --envs alfworld-valid_seen webshop-test searchqa-test
    gigpo-gym leaderboard --policy runs/demo --envs alfworld-valid_seen --episodes 24
    gigpo-gym leaderboard render
"""

from __future__ import annotations

import argparse
import sys


def add_cli(subparsers) -> None:
    from gigpo_gym.algos.leaderboard.specs import RESULTS_DIR, SPECS_DIR

    p = subparsers.add_parser(
        "leaderboard",
        help="evaluate a policy on the leaderboard specs (or `render` the board)",
        description="Evaluate a policy on versioned specs and write one result JSON per spec, or "
        "`gigpo-gym leaderboard render` to merge the results into LEADERBOARD.md and a chart.",
        epilog="POLICY: random | expert | smollm2 | a trainer run / checkpoint folder / its selected.safetensors | "
        "a Hugging Face model folder | "
        "a hub id already in the local HF cache | sb3:PATH.zip",
    )
    p.add_argument("action", nargs="?", choices=("run", "render"), default="run",
                   help="run (default): evaluate --policy; render: write LEADERBOARD.md + chart from the results")
    p.add_argument("--policy", help="what to evaluate (see below)")
    p.add_argument("--envs", nargs="+", default=None, metavar="SPEC",
                   help=f"spec names (files in {SPECS_DIR}) or spec file paths; default: every spec")
    p.add_argument("--episodes", type=int, default=None,
                   help="episodes per round seed (default: the spec's; fewer plays the spec's first tasks)")
    p.add_argument("--name", default=None, help="policy name shown on the board (default: derived from --policy)")
    p.add_argument("--seed", type=int, default=0, help="policy seed (random policy, sampling); default 0")
    p.add_argument("--temperature", type=float, default=None,
                   help="LLM sampling temperature (default: 0 = greedy; checkpoints: their eval temperature)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="LLM response length cap")
    p.add_argument("--choose-admissible", action="store_true",
                   help="LLMs answer by choosing among the admissible actions with their own likelihoods (WebShop's "
                        "search[<query>] filled with the instruction) instead of free generation; not for SearchQA")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per generate call")
    p.add_argument("--backend", choices=("sync", "async"), default="sync", help="grouped vector env backend")
    p.add_argument("--results-dir", default=str(RESULTS_DIR), help="where result JSONs go / are read from")
    p.add_argument("--specs-dir", default=str(SPECS_DIR), help="where spec names are looked up")
    p.add_argument("--out", default=None, help="render: the Markdown file (default RESULTS_DIR/LEADERBOARD.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_leaderboard_command)


def run_leaderboard_command(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.specs import LeaderboardError

    try:
        return _render(args) if args.action == "render" else _run(args)
    except LeaderboardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _render(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.render import render

    table, chart = render(args.results_dir, args.out)
    print(f"wrote {table}" + (f" and {chart}" if chart else " (no chart: matplotlib is missing)"))
    return 0


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gigpo_gym.algos.leaderboard.runner import LeaderboardError, available_specs, load_spec, result_filename, run_spec, write_result
    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    if not args.policy:
        raise LeaderboardError("--policy is required (random, expert, smollm2, a checkpoint folder, a model, sb3:PATH)")
    names = args.envs or list(available_specs(args.specs_dir))
    specs = [load_spec(n, args.specs_dir) for n in names]  # every spec is checked before anything runs
    for spec in specs:
        loaded = resolve_policy(args.policy, spec.env_id, device=args.device, seed=args.seed,
                                temperature=args.temperature, max_new_tokens=args.max_new_tokens, name=args.name,
                                choose_admissible=args.choose_admissible)
        result = run_spec(spec, loaded, episodes=args.episodes, backend=args.backend, batch_size=args.batch_size,
                          progress=not args.no_progress)
        path = write_result(result, Path(args.results_dir) / result_filename(result))
        m = result["metrics"]
        extra = "  ".join(f"{k} {100 * m[k]['mean']:.1f}±{100 * m[k]['stderr']:.1f}" for k in spec.final_info_metrics)
        print(f"{spec.name:<22} {loaded.name}: success {100 * m['success']['mean']:.1f}±{100 * m['success']['stderr']:.1f}"
              f"  {extra}  ({result['counts']['episodes']} episodes, {result['counts']['crashed']} crashed, "
              f"{result['wall_seconds']:.0f} s) -> {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the leaderboard command alone (``python -m gigpo_gym.algos.leaderboard.cli``)."""
    parser = argparse.ArgumentParser(prog="gigpo-gym")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
