"""``gigpo-gym leaderboard``: evaluate a policy on versioned specs, or render the board.

    gigpo-gym leaderboard --policy expert --envs alfworld-valid_seen webshop-test searchqa-test
    gigpo-gym leaderboard --policy runs/demo --envs alfworld-valid_seen --episodes 24
    gigpo-gym leaderboard --policy openai:gpt-4o --prompt paper --envs webshop-test --max-concurrency 16
    gigpo-gym leaderboard --policy runs/trl_searchqa/gigpo --prompt tools --max-observation-tokens 160 --envs searchqa-test
    gigpo-gym leaderboard render
"""

from __future__ import annotations

import argparse
import sys

from gigpo_gym.core.commands import ExactOptionsParser

POLICIES = ("random | random-search | expert | smollm2 | openai:MODEL (a model behind an OpenAI-compatible "
            "server: --base-url, key in $OPENAI_API_KEY) | a trainer run / checkpoint folder / its "
            "selected.safetensors | a Hugging Face model folder | a hub id already in the local HF cache | sb3:PATH.zip")


def _results_dir_help() -> str:
    from gigpo_gym.algos.leaderboard.specs import default_results_dir

    return ("where result files go and are read from (default: the current directory, or the checkout's "
            f"benchmarks/results when run inside the checkout; here: {default_results_dir()})")


def _run_options(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """The run's options (on ``leaderboard`` itself and on ``leaderboard run``)."""
    from gigpo_gym.algos.leaderboard.specs import SPECS_DIR
    from gigpo_gym.wrappers.stack import PROMPT_TEMPLATES

    def add(*names: str, default=None, **kw) -> None:
        p.add_argument(*names, default=argparse.SUPPRESS if suppress else default, **kw)

    add("--policy", help="what to evaluate: " + POLICIES)
    add("--envs", nargs="+", metavar="SPEC", help=f"spec names (files in {SPECS_DIR}) or spec file paths; "
        "default: every spec")
    add("--episodes", type=int, help="episodes per round seed (default: the spec's; fewer plays the spec's first "
        "tasks, more is refused)")
    add("--name", help="policy name shown on the board (default: derived from --policy)")
    add("--notes", default="", help="a note kept in the result, e.g. why it has fewer episodes than the spec "
        "(default: none)")
    add("--seed", type=int, default=0, help="policy seed (random policy, sampling); default 0")
    add("--temperature", type=float, help="LLM sampling temperature (default: 0 = greedy; checkpoints: their eval "
        "temperature)")
    add("--top-p", type=float, default=1.0, help="LLM nucleus sampling mass (default 1.0)")
    add("--max-new-tokens", type=int, help="LLM response length cap (default: 32 for <action> answers, 96 on SearchQA, "
        "512 with --prompt paper)")
    add("--prompt", choices=PROMPT_TEMPLATES, default="default",
        help="LLM prompts: the env's own (default; a trainer run's: its own), the GiGPO paper's (think, then <action>; "
             "Search-R1's on SearchQA) or tools: the tool-calling chat a model trained with TRL "
             "(gigpo_gym.integrations.trl) played, for a Hugging Face model folder or openai:MODEL")
    add("--max-observation-tokens", type=int,
        help="with --prompt tools: tool results cut to this many tokens (of a model folder's tokenizer; UTF-8 bytes "
             "for served models), the max_observation_tokens of training's environment_class (default 512)")
    add("--choose-admissible", action="store_true", default=False,
        help="LLMs answer by choosing among the admissible actions with their own likelihoods (WebShop's "
             "search[<query>] filled with the instruction) instead of free generation; not for SearchQA")
    add("--device", default="auto", help="auto, cpu, cuda, ... (in-process models; default auto)")
    add("--batch-size", type=int, default=16, help="prompts per generate call (in-process models; default 16)")
    add("--backend", choices=("sync", "async"), default="sync", help="grouped vector env backend (default sync)")
    add("--results-dir", help=_results_dir_help())
    add("--specs-dir", default=str(SPECS_DIR), help=f"where spec names are looked up (default {SPECS_DIR})")
    add("--resume", action="store_true", default=False,
        help="continue a killed run of the same config from its episode file (<result>.<hash>.episodes.jsonl)")
    add("--overwrite", action="store_true", default=False,
        help="replace a result of another config at the same path, and (without --resume) start an unfinished "
             "run's episodes over")
    add("--no-progress", action="store_true", default=False, help="no progress bar")
    server = p.add_argument_group("served models (openai:MODEL)")

    def add_server(*names: str, default=None, **kw) -> None:
        server.add_argument(*names, default=argparse.SUPPRESS if suppress else default, **kw)

    add_server("--base-url", help="the server's OpenAI-compatible API, e.g. http://localhost:8000/v1 (default: "
               "$OPENAI_BASE_URL, else https://api.openai.com/v1)")
    add_server("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
               help="the environment variable that holds the key (default OPENAI_API_KEY); the key is never written")
    add_server("--max-concurrency", type=int, default=8, help="requests in flight at once (default 8)")
    add_server("--max-retries", type=int, default=5, help="retries of a request on 429, 5xx, timeouts and dropped "
               "connections, after Retry-After or an exponential backoff with jitter (default 5)")
    add_server("--request-timeout", type=float, default=120.0, help="seconds one request may take (default 120)")
    add_server("--system-prompt", help="a system message before each prompt (default: none)")


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "leaderboard",
        help="evaluate a policy on the leaderboard specs (or `render` the board)",
        description="Evaluate a policy on versioned specs and write one result JSON per spec, or "
        "`gigpo-gym leaderboard render` to merge the results into LEADERBOARD.md and a chart.",
        epilog="POLICY: " + POLICIES,
    )
    _run_options(p)
    actions = p.add_subparsers(dest="action", metavar="{run,render}",
                               description="run (default): evaluate --policy; render: write LEADERBOARD.md + chart")
    run = actions.add_parser("run", help="evaluate --policy (what `gigpo-gym leaderboard` does without a word)",
                             description="Evaluate a policy on versioned specs and write one result JSON per spec.",
                             epilog="POLICY: " + POLICIES)
    _run_options(run, suppress=True)
    render = actions.add_parser("render", help="write LEADERBOARD.md and leaderboard.png from the result files",
                                description="Merge the result files of a folder into LEADERBOARD.md and a chart.")
    render.add_argument("--results-dir", default=argparse.SUPPRESS, help=_results_dir_help())
    render.add_argument("--out", default=argparse.SUPPRESS,
                        help="the Markdown file (default: LEADERBOARD.md in the results folder)")
    p.set_defaults(func=run_leaderboard_command, action=None, out=None)


def run_leaderboard_command(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.specs import LeaderboardError

    try:
        return _render(args) if args.action == "render" else _run(args)
    except LeaderboardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if not getattr(e, "fatal", False):  # a served model's key, name or server: one line, no traceback
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2


def _render(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.render import render

    from gigpo_gym.algos.leaderboard.specs import default_results_dir

    results_dir = args.results_dir if args.results_dir is not None else default_results_dir()
    table, chart = render(results_dir, args.out)
    print(f"read the results in {results_dir}; wrote {table}" + (f" and {chart}" if chart else
                                                                   " (no chart: matplotlib is missing)"))
    return 0


def _run(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.policies import ServerSettings, resolve_policy
    from gigpo_gym.algos.leaderboard.runner import Evaluation, LeaderboardError, available_specs, load_spec, run_to_file
    from gigpo_gym.algos.leaderboard.specs import default_results_dir

    if not args.policy:
        raise LeaderboardError("--policy is required: " + POLICIES)
    results_dir = args.results_dir if args.results_dir is not None else default_results_dir()
    names = args.envs or list(available_specs(args.specs_dir))
    specs = [load_spec(n, args.specs_dir) for n in names]  # every spec is checked before anything runs
    server = ServerSettings(args.base_url, args.api_key_env, args.max_concurrency, args.max_retries,
                            args.request_timeout, args.system_prompt)
    for spec in specs:
        loaded = resolve_policy(args.policy, spec.env_id, device=args.device, seed=args.seed,
                                temperature=args.temperature, max_new_tokens=args.max_new_tokens, name=args.name,
                                choose_admissible=args.choose_admissible, template=args.prompt, top_p=args.top_p,
                                server=server, max_observation_tokens=args.max_observation_tokens)
        evaluation = Evaluation.of(spec, loaded, args.episodes)
        journal = evaluation.journal_path(results_dir)
        try:
            result, path = run_to_file(evaluation, results_dir, resume=args.resume, overwrite=args.overwrite,
                                       backend=args.backend, batch_size=args.batch_size, progress=not args.no_progress,
                                       notes=args.notes)
        except KeyboardInterrupt:
            print(f"interrupted: the finished episodes are kept in {journal}; the same command with --resume "
                  "continues", file=sys.stderr)
            return 130
        except Exception as e:
            if getattr(e, "fatal", False) and journal.is_file():
                raise LeaderboardError(f"{e}; the finished episodes are kept in {journal}: the same command with "
                                       "--resume continues") from e
            raise
        finally:
            loaded.close()
        print(_summary(spec, loaded.name, result, path))
    return 0


def _summary(spec, name: str, result: dict, path) -> str:
    m = result["metrics"]
    extra = "  ".join(f"{k} {100 * m[k]['mean']:.1f}±{100 * m[k]['stderr']:.1f}" for k in spec.final_info_metrics)
    usage = result.get("usage")
    tokens = ""
    if usage:
        per = usage["per_episode"]
        tokens = f", {per['prompt_tokens']['mean']:.0f} + {per['completion_tokens']['mean']:.0f} tokens/episode"
    return (f"{spec.name:<22} {name}: success {100 * m['success']['mean']:.1f}±{100 * m['success']['stderr']:.1f}"
            f"  {extra}  ({result['counts']['episodes']} episodes, {result['counts']['crashed']} crashed, "
            f"{result['wall_seconds']:.0f} s{tokens}) -> {path}")


def main(argv: list[str] | None = None) -> int:
    """Run the leaderboard command alone (``python -m gigpo_gym.algos.leaderboard.cli``)."""
    parser = ExactOptionsParser(prog="gigpo-gym")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
