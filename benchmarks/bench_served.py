"""Served vs in-process: one model, the same prompts and episodes, through a server and in this process.

    python benchmarks/bench_served.py --envs searchqa-test --episodes 4 --max-new-tokens 64

Starts ``transformers serve`` on 127.0.0.1 with SmolLM2-135M-Instruct (``smollm2_path()``,
offline; ``--base-url`` uses a server already running instead), plays the spec's first
``--episodes`` episodes greedily with the GiGPO paper's prompts through it
(``openai:<model>``, ``--max-concurrency``) and then with the in-process Hugging Face
policy (``--batch-size`` prompts per forward pass), and prints the wall time per
episode of each path, their token counts, and how many episodes came out the same.
Both run in one invocation on the same machine; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """``transformers serve`` of ``folder`` (served under the folder's name) and its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(sys.executable).with_name("transformers")
    proc = subprocess.Popen([str(script), "serve", folder.name, "--device", "cpu", "--host", "127.0.0.1", "--port",
                             str(port)], cwd=folder.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"transformers serve {folder} did not start (pip install \".[test]\" brings its deps)")
            time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["searchqa-test"], help="leaderboard specs (default searchqa-test)")
    parser.add_argument("--episodes", type=int, default=4, help="first episodes of each spec (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="reply budget (default 64)")
    parser.add_argument("--max-concurrency", type=int, default=8, help="requests in flight (default 8)")
    parser.add_argument("--batch-size", type=int, default=16, help="in-process prompts per pass (default 16)")
    parser.add_argument("--base-url", help="a server already serving the model (default: start transformers serve)")
    parser.add_argument("--request-timeout", type=float, default=1800.0, help="seconds per request (default 1800)")
    args = parser.parse_args(argv)

    from gigpo_gym.algos.leaderboard.policies import ServerSettings, resolve_policy
    from gigpo_gym.algos.leaderboard.runner import load_spec, run_spec
    from gigpo_gym.algos.policies.smollm import smollm2_path

    folder = smollm2_path()
    proc, url = (None, args.base_url) if args.base_url else start_server(folder)
    server = ServerSettings(url, max_concurrency=args.max_concurrency, request_timeout=args.request_timeout)
    print(f"model {folder.name}; paper prompts, greedy, {args.max_new_tokens} new tokens at most; "
          f"served: transformers serve, {args.max_concurrency} requests in flight; in process: batches of "
          f"{args.batch_size}; {os.cpu_count()} CPU cores")
    print(f"{'spec':<22}{'path':<12}{'episodes':>9}{'wall s':>9}{'s/episode':>11}{'prompt tok':>12}"
          f"{'reply tok':>11}{'success':>9}")
    try:
        for name in args.envs:
            spec = load_spec(name)
            results = {}
            for path in ("served", "in process"):
                if path == "served":
                    loaded = resolve_policy(f"openai:{folder.name}", spec.env_id, template="paper",
                                            max_new_tokens=args.max_new_tokens, server=server)
                else:
                    loaded = resolve_policy("smollm2", spec.env_id, device="cpu", template="paper",
                                            max_new_tokens=args.max_new_tokens)
                try:
                    r = run_spec(spec, loaded, episodes=args.episodes, batch_size=args.batch_size, progress=False)
                finally:
                    loaded.close()
                results[path] = r
                usage = r.get("usage", {}).get("per_episode", {})
                tokens = [f"{usage[k]['mean']:.0f}" if usage else "–" for k in ("prompt_tokens", "completion_tokens")]
                print(f"{name:<22}{path:<12}{r['counts']['episodes']:>9}{r['wall_seconds']:>9.0f}"
                      f"{r['wall_seconds'] / r['counts']['episodes']:>11.1f}{tokens[0]:>12}{tokens[1]:>11}"
                      f"{100 * r['metrics']['success']['mean']:>8.1f}%", flush=True)
            served, local = results["served"], results["in process"]
            same = sum({k: v for k, v in a.items() if k != "usage"} == b
                       for a, b in zip(served["episodes"], local["episodes"]))
            print(f"{name}: served / in process wall time per episode = "
                  f"{served['wall_seconds'] / local['wall_seconds']:.2f}x; {same} of {len(local['episodes'])} "
                  "episodes the same (steps, actions' validity, outcome)", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
