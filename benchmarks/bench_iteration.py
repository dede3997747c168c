"""Wall time of one RL iteration (rollout + update), this checkout against an older revision.

Each code version runs in its own process on the same config, seeds and starting
weights, and times ``collect`` (split into generation and the rest: env stepping,
prompts) and ``Trainer.update`` for a few iterations after one warm-up iteration.
Versions alternate (old, new, old, new, ...) so a machine that gets busier half way
hurts both alike; the ratio is of the medians.  The old revision is exported with
``git archive`` into a temporary folder and imported from there, so nothing in the
checkout changes.

    python benchmarks/bench_iteration.py --baseline 36e22eb --weights runs/demo/reference.safetensors

``--weights`` is a safetensors file of the policy (the demo writes its SFT warm start
to ``runs/demo/reference.safetensors``): a trained policy plays the episodes a real
iteration sees.  Without it the untrained model plays, whose prompts are longer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """Time ``--iterations`` iterations after a warm-up one; print one JSON line."""
    import torch

    from gigpo_gym.algos import Trainer, collect, load_config
    from gigpo_gym.core.env import derive_seed

    overrides = [f"run_dir={tempfile.mkdtemp(prefix='bench-iteration-')}", "env.eval_episodes=0", "progress=false",
                 *args.set]
    cfg = load_config(args.config, overrides)
    trainer = Trainer(cfg)
    if args.weights:
        from safetensors.torch import load_model

        load_model(trainer.policy, args.weights, strict=False)
    trainer.freeze_reference()
    records = []
    try:
        for it in range(1, args.iterations + 2):
            t0, c0 = time.perf_counter(), time.process_time()
            rollout = collect(trainer.policy, trainer.envs, trainer.sampling(it), seed=derive_seed(cfg.seed, it),
                              shaping=trainer.shaping)
            t1, c1 = time.perf_counter(), time.process_time()
            trainer.update(rollout, it)
            t2, c2 = time.perf_counter(), time.process_time()
            records.append({
                "rollout_cpu_s": c1 - c0, "update_cpu_s": c2 - c1, "iteration_cpu_s": c2 - c0,
                "rows": len(rollout), "prompt_tokens": sum(len(p) for p in rollout.prompt_ids),
                "success": sum(e.won for e in rollout.episodes) / len(rollout.episodes),
                "rollout_s": t1 - t0, "generate_s": rollout.generate_seconds, "update_s": t2 - t1,
                "iteration_s": t2 - t0,
            })
    finally:
        trainer.close()
    print(json.dumps({"torch_threads": torch.get_num_threads(), "iterations": records[1:]}))


def export_revision(revision: str, into: Path) -> Path:
    """The package of ``revision`` as an import root (``gigpo_gym`` with its algos and wrappers)."""
    archive = into / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    src = into / "src"
    for name in ("algos", "wrappers"):  # setup.cfg's package_dir, as symlinks
        (src / "gigpo_gym" / name).symlink_to(src / name, target_is_directory=True)
    return src


def run_version(label: str, pythonpath: Path | None, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, __file__, "--worker", "--config", args.config, "--iterations", str(args.iterations)]
    cmd += ["--weights", args.weights] if args.weights else []
    for item in args.set:
        cmd += ["--set", item]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{label} run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict]) -> dict:
    its = [r for run in runs for r in run["iterations"]]
    keys = ("iteration_s", "rollout_s", "generate_s", "update_s", "iteration_cpu_s", "rollout_cpu_s", "update_cpu_s",
            "rows", "prompt_tokens", "success")
    return {k: statistics.median(r[k] for r in its) for k in keys} | {"n": len(its)}


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"), help="training config (default: the demo's)")
    p.add_argument("--weights", default=None, help="safetensors weights to start from (e.g. the demo's SFT warm start)")
    p.add_argument("--baseline", default=None, help="git revision to compare against (default: this checkout only)")
    p.add_argument("--iterations", type=int, default=2, help="timed iterations per process, after one warm-up")
    p.add_argument("--repeats", type=int, default=2, help="processes per version (alternating old/new)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per process (1 keeps a busy machine's figures comparable; default: torch's)")
    p.add_argument("--out", default=None, help="write the results JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    args.config = str(Path(args.config).resolve())
    args.weights = str(Path(args.weights).resolve()) if args.weights else None
    runs: dict[str, list[dict]] = {"new": []}
    with tempfile.TemporaryDirectory(prefix="bench-iteration-") as tmp:
        old_root = None
        if args.baseline:
            old_root = export_revision(args.baseline, Path(tmp))
            runs["old"] = []
        for _ in range(args.repeats):
            if old_root is not None:
                runs["old"].append(run_version("old", old_root, args))
            runs["new"].append(run_version("new", None, args))
    result = {"benchmark": "rl_iteration_seconds", "config": args.config, "weights": args.weights,
              "baseline": args.baseline, "summary": {k: summarise(v) for k, v in runs.items()}, "runs": runs}
    for label, s in result["summary"].items():
        print(f"{label:>4}: iteration {s['iteration_s']:6.2f} s (rollout {s['rollout_s']:5.2f} s, of which generation "
              f"{s['generate_s']:5.2f} s; update {s['update_s']:5.2f} s)  {s['rows']:.0f} rows, "
              f"{s['prompt_tokens'] / max(s['rows'], 1):.0f} prompt tokens/row, success {s['success']:.2f}, "
              f"CPU {s['iteration_cpu_s']:6.2f} s  [median of {s['n']}]")
    if "old" in result["summary"]:
        old, new = result["summary"]["old"], result["summary"]["new"]
        result["speedup"] = old["iteration_s"] / new["iteration_s"]
        result["speedup_cpu"] = old["iteration_cpu_s"] / new["iteration_cpu_s"]
        print(f"speed-up of this checkout over {args.baseline}: {result['speedup']:.2f}x wall, "
              f"{result['speedup_cpu']:.2f}x CPU time")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
