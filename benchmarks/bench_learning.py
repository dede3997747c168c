"""GiGPO vs GRPO, paired by seed, from one shared warm start (tiny model, embedded ALFWorld).

Protocol: one SFT warm start (the config's, with ``--warm-start-seed``) is trained
once, or read from ``--warm-start-file``.  For every seed, each algorithm trains a
copy of it with the same task groups, sampling seeds and held-out tasks, so a seed
is a matched pair.  Every run is evaluated on the held-out split before RL and after
``--iterations`` iterations (``--eval-episodes`` distinct tasks, at the config's eval
temperature).  Reported: held-out success per algorithm (mean +- s.e. over seeds, per
task type), the paired difference GiGPO - GRPO with a 95% confidence interval
(Student t over seeds) after the last iteration and at every held-out evaluation
before it (one algorithm may peak earlier and fall after), the training-rollout
learning curves of both in one PNG, and GiGPO's step-group diagnostics (size
histogram, share of rows in singleton groups: those get no step-level signal).
A run's result is its last iteration, whatever the config says; with ``--set
select_every=N --set "env.select_kwargs={split: valid_unseen}"`` it is the iteration
that scores best on the selection split instead (both algorithms chosen alike).

    python benchmarks/bench_learning.py --seeds 0 1 2 3 4 --iterations 30 --jobs 2
    python benchmarks/bench_learning.py --report runs/bench_learning   # re-aggregate finished runs
    python benchmarks/bench_learning.py --replot result.json --plot result.png   # redraw from a results JSON

``--jobs 2`` runs two trainings at once, one torch thread each (on a 2-core machine
this beats one two-thread run after another).  A run that has finished its
``--iterations`` is not run again; one that stopped earlier (interrupted, or finished
with fewer iterations) resumes from its newest checkpoint, which gives the run one
uninterrupted training would (every iteration's draws come from the seed and the
iteration number; tests/test_trainer.py checks it).  So a benchmark is extended by
asking for more iterations:

    python benchmarks/bench_learning.py --seeds 0 1 2 3 4 --iterations 40 --jobs 2   # 10 more each
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALGO_KWARGS = {"gigpo": "{gamma: 0.95}", "grpo": "{}"}
#: Two-sided 95% Student t quantiles by degrees of freedom (normal beyond).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    known = [d for d in T95 if d <= df]
    return T95[max(known)] if df <= 30 and known else 1.96


def run_config(args, seed: int, algo: str):
    from gigpo_gym.algos.training.config import load_config

    return load_config(args.config, [
        "select_every=0",  # the protocol's end point is the last iteration, unless --set asks otherwise
        *args.set, f"iterations={args.iterations}", f"env.eval_episodes={args.eval_episodes}",
        f"eval_every={args.eval_every}", f"seed={seed}", f"algo.name={algo}", f"algo.kwargs={ALGO_KWARGS.get(algo, '{}')}",
        "sft.steps=0", "eval_before=true", "progress=false", f"run_dir={Path(args.run_root) / f'seed{seed}-{algo}'}",
    ])


def warm_start_config(args):
    from gigpo_gym.algos.training.config import load_config

    return load_config(args.config, [*args.set, f"seed={args.warm_start_seed}", "progress=false", "algo.name=grpo",
                                     "algo.kwargs={}", f"run_dir={Path(args.run_root) / 'warm-start'}"])


def warm_start_file(args) -> Path:
    """The shared SFT warm start as a safetensors file (trained once, then reused)."""
    if args.warm_start_file:
        return Path(args.warm_start_file)
    path = Path(args.run_root) / "warm_start.safetensors"
    if path.is_file():
        return path
    from safetensors.torch import save_model

    from gigpo_gym.algos.training.trainer import Trainer
    from gigpo_gym.core.data import replacing

    trainer = Trainer(warm_start_config(args))
    try:
        trainer.warm_start(echo=print)
        with replacing(path) as tmp:
            save_model(trainer.policy, str(tmp), metadata={"tokenizer": tokenizer_digest(trainer.policy)})
    finally:
        trainer.close()
    return path


def tokenizer_digest(policy) -> str:
    from gigpo_gym.core.anchor import digest

    return digest(sorted(policy.tokenizer.get_vocab().items()))


def train_one(args, seed: int, algo: str) -> None:
    """One RL run from the warm start (in this process)."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    from gigpo_gym.algos.training.trainer import build_policy, run_training

    cfg = run_config(args, seed, algo)
    policy = build_policy(warm_start_config(args))  # the tiny tokenizer is the warm start's, whatever the seed
    path = str(warm_start_file(args))
    with safe_open(path, "pt") as f:
        saved = (f.metadata() or {}).get("tokenizer")
    if saved is not None and saved != tokenizer_digest(policy):
        # the tiny tokenizer is trained on the env's texts: other env kwargs, another vocabulary
        raise SystemExit(f"{path} was trained with another tokenizer than these settings build "
                         "(different env kwargs or model.tiny): train the warm start with the same --set values")
    load_model(policy, path)  # a resumed run then loads its checkpoint over it
    resume = "latest" if trained_iterations(Path(cfg.run_dir)) else None
    run_training(cfg, policy=policy, resume=resume, echo=lambda line: print(f"[{algo} seed {seed}] {line}", flush=True))


def trained_iterations(folder: Path) -> int:
    """The iteration of the run's newest complete checkpoint (0: none; a run always saves its last)."""
    from gigpo_gym.algos.training.checkpoint import checkpoint_iteration, list_checkpoints

    found = list_checkpoints(folder / "checkpoints")
    return checkpoint_iteration(found[-1]) if found else 0


def launch(args, seed: int, algo: str) -> None:
    folder = Path(args.run_root) / f"seed{seed}-{algo}"
    done = trained_iterations(folder)
    if done > args.iterations:
        raise SystemExit(f"{folder} has trained {done} iterations, more than --iterations {args.iterations}: "
                         "ask for at least that many or use another --run-root")
    if done == args.iterations and (folder / "summary.json").is_file():
        return
    cmd = [sys.executable, __file__, "--one", str(seed), algo, *forwarded(args)]
    env = dict(os.environ)
    if args.jobs > 1:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    with open(Path(args.run_root) / f"seed{seed}-{algo}.log", "w") as log:
        done = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"run seed {seed} {algo} failed: see {log.name}")
    print(f"finished seed {seed} {algo}", flush=True)


def forwarded(args) -> list[str]:
    out = ["--config", args.config, "--iterations", str(args.iterations), "--eval-episodes", str(args.eval_episodes),
           "--eval-every", str(args.eval_every), "--run-root", args.run_root, "--warm-start-seed", str(args.warm_start_seed)]
    out += ["--warm-start-file", args.warm_start_file] if args.warm_start_file else []
    for item in args.set:
        out += ["--set", item]
    return out


# -- report ------------------------------------------------------------------------------
def read_run(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rollouts = [r for r in records if "rollout/success" in r]
    hist: dict[str, float] = {}
    for r in rollouts:
        for k, v in r.items():
            if k.startswith("rollout/step_group_size_hist/"):
                hist[k.rsplit("/", 1)[1]] = hist.get(k.rsplit("/", 1)[1], 0.0) + v
    rows = sum(r["rollout/rows"] for r in rollouts)
    shared = sum(r["rollout/step_rows_in_shared_groups"] * r["rollout/rows"] for r in rollouts)
    before = summary["evals"]["initial"]
    after = summary["evals"].get("after RL", before)  # --iterations 0: the policy is the initial one
    return {
        "before": before["eval/success"], "after": after["eval/success"],
        "after_per_type": {k.split("/")[-1]: v for k, v in after.items() if k.startswith("eval/success/")},
        "before_per_type": {k.split("/")[-1]: v for k, v in before.items() if k.startswith("eval/success/")},
        "evals": [(r["iteration"], r["eval/success"]) for r in records if "eval/success" in r],
        "rollout_success": [r["rollout/success"] for r in rollouts],
        "step_group_size_hist": hist, "rows": rows, "singleton_row_share": 1.0 - shared / max(rows, 1),
        "seconds": summary.get("seconds"),
        "selected_iteration": summary.get("selected", {}).get("iteration"),  # select_every: the run's chosen weights
    }


def mean_sem(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def paired(diffs) -> dict:
    """Mean of paired differences with its s.e. and a Student-t 95% interval over the seeds."""
    mean, sem = mean_sem(diffs)
    half = t95(len(diffs) - 1) * sem
    return {"per_seed": list(diffs), "mean": mean, "sem": sem, "ci95": [mean - half, mean + half]}


def report(args) -> dict:
    root = Path(args.run_root)
    runs = {(s, a): read_run(root / f"seed{s}-{a}") for s in args.seeds for a in args.algos
            if (root / f"seed{s}-{a}" / "summary.json").is_file()}
    seeds = [s for s in args.seeds if all((s, a) in runs for a in args.algos)]
    table = {}
    for algo in args.algos:
        mine = [runs[(s, algo)] for s in seeds]
        after, sem = mean_sem([r["after"] for r in mine])
        before, _ = mean_sem([r["before"] for r in mine])
        types = sorted({t for r in mine for t in r["after_per_type"]})
        table[algo] = {"after_mean": after, "after_sem": sem, "before_mean": before,
                       "per_type_after": {t: mean_sem([r["after_per_type"].get(t, 0.0) for r in mine])[0] for t in types},
                       "per_seed_after": [r["after"] for r in mine]}
        chosen = [r["selected_iteration"] for r in mine]
        print(f"{algo:>6}: held-out success {100 * before:5.1f} -> {100 * after:5.1f} +- {100 * sem:.1f} "
              f"(seeds {[round(100 * r['after'], 1) for r in mine]})"
              + (f", chosen on the selection split at iterations {chosen}" if any(c is not None for c in chosen) else ""))
    result = {"seeds": seeds, "summary": table, "runs": {f"seed{s}-{a}": r for (s, a), r in runs.items()}}
    if len(args.algos) == 2 and len(seeds) >= 2:
        a, b = args.algos
        result["paired_difference"] = paired([runs[(s, a)]["after"] - runs[(s, b)]["after"] for s in seeds])
        result["paired_difference"]["of"] = f"{a} - {b}"
        d = result["paired_difference"]
        print(f"paired {a} - {b}: {100 * d['mean']:+5.1f} points, 95% CI [{100 * d['ci95'][0]:+5.1f}, "
              f"{100 * d['ci95'][1]:+5.1f}] over {len(seeds)} seeds")
        # an end point alone can mislead: one algorithm may peak earlier and fall after
        evals = {key: dict(run["evals"]) for key, run in runs.items()}
        common = sorted(set.intersection(*(set(evals[(s, algo)]) for s in seeds for algo in (a, b))) - {0})
        result["paired_difference_by_iteration"] = {}
        for it in common:
            d = paired([evals[(s, a)][it] - evals[(s, b)][it] for s in seeds])
            result["paired_difference_by_iteration"][it] = d
            means = [mean_sem([evals[(s, algo)][it] for s in seeds])[0] for algo in (a, b)]
            print(f"  iteration {it:>3}: {a} {100 * means[0]:5.1f}, {b} {100 * means[1]:5.1f}, paired "
                  f"{100 * d['mean']:+5.1f} [{100 * d['ci95'][0]:+5.1f}, {100 * d['ci95'][1]:+5.1f}]")
    if "gigpo" in args.algos and any(runs[(s, "gigpo")]["rows"] for s in seeds):  # --iterations 0: no rollouts
        gig = [runs[(s, "gigpo")] for s in seeds]
        hist: dict[str, float] = {}
        for r in gig:
            for k, v in r["step_group_size_hist"].items():
                hist[k] = hist.get(k, 0.0) + v
        singleton = mean_sem([r["singleton_row_share"] for r in gig])
        result["gigpo_step_groups"] = {"size_hist_groups": hist, "singleton_row_share": singleton[0]}
        print(f"GiGPO step groups: {100 * singleton[0]:.1f}% of rows are alone in their step group "
              f"(no step-level signal); group-size histogram (groups) {hist}")
    if args.plot:
        plot(args, runs, seeds, result, Path(args.plot))
    return result


def plot(args, runs, seeds, result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curve, bars) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for algo in args.algos:
        curves = np.array([runs[(s, algo)]["rollout_success"] for s in seeds])
        x = np.arange(1, curves.shape[1] + 1)
        mean = curves.mean(0)
        sem = curves.std(0, ddof=1) / math.sqrt(len(seeds)) if len(seeds) > 1 else np.zeros_like(mean)
        line, = curve.plot(x, mean, label=f"{algo} rollout (train tasks)")
        curve.fill_between(x, mean - sem, mean + sem, alpha=0.2, color=line.get_color())
        evals = {}
        for s in seeds:
            for it, v in runs[(s, algo)]["evals"]:
                evals.setdefault(it, []).append(v)
        its = sorted(evals)
        curve.errorbar(its, [np.mean(evals[i]) for i in its],
                       yerr=[np.std(evals[i], ddof=1) / math.sqrt(len(evals[i])) if len(evals[i]) > 1 else 0 for i in its],
                       fmt="o--", color=line.get_color(), label=f"{algo} held-out", capsize=3)
        chosen = [(runs[(s, algo)]["selected_iteration"], runs[(s, algo)]["after"]) for s in seeds
                  if runs[(s, algo)].get("selected_iteration") is not None]
        if chosen:  # select_every: each seed's result is the iteration its selection score chose
            curve.scatter(*zip(*chosen), marker="*", s=90, color=line.get_color(), edgecolors="black",
                          linewidths=0.5, zorder=3, label=f"{algo} chosen iteration (one star a seed)")
    curve.set_xlabel("iteration")
    curve.set_ylabel("success rate")
    curve.set_title(f"mean +- s.e. over {len(seeds)} paired seeds")
    curve.grid(alpha=0.3)
    curve.legend(fontsize=8)
    hist = result.get("gigpo_step_groups", {}).get("size_hist_groups", {})
    if hist:
        labels = sorted(hist, key=lambda k: int(k.split("-")[0].rstrip("+")))  # 1, 2, 3-4, ..., 17+
        bars.bar(labels, [hist[k] for k in labels])
        bars.set_xlabel("step-group size (rows sharing a state within a task group)")
        bars.set_ylabel("step groups, all GiGPO iterations")
        share = result["gigpo_step_groups"]["singleton_row_share"]
        bars.set_title(f"GiGPO step groups ({100 * share:.0f}% of rows in singletons)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")


def replot(args, result_json: Path) -> None:
    if not args.plot:
        raise SystemExit("--replot needs --plot PNG: where to draw the figure")
    result = json.loads(result_json.read_text())
    args.algos = list(result["summary"])
    runs = {}
    for key, run in result["runs"].items():  # "seed3-gigpo"
        seed, algo = key.removeprefix("seed").split("-", 1)
        runs[(int(seed), algo)] = run
    plot(args, runs, result["seeds"], result, Path(args.plot))


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    p.add_argument("--algos", nargs="+", default=["gigpo", "grpo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--eval-episodes", type=int, default=128, help="held-out tasks per evaluation")
    p.add_argument("--eval-every", type=int, default=10, help="held-out evaluation every this-many iterations")
    p.add_argument("--run-root", default="runs/bench_learning")
    p.add_argument("--warm-start-seed", type=int, default=0, help="seed of the one SFT warm start every run starts from")
    p.add_argument("--warm-start-file", default=None, help="take the warm start from this safetensors file instead")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each with one torch thread when > 1)")
    p.add_argument("--report", metavar="RUN_ROOT", default=None, help="only aggregate the finished runs under RUN_ROOT")
    p.add_argument("--plot", default=None, help="write the learning-curve PNG here")
    p.add_argument("--replot", metavar="RESULT_JSON", default=None,
                   help="only draw --plot again from a results JSON this script wrote (its runs folders may be gone)")
    p.add_argument("--out", default=None, help="write the results JSON here")
    p.add_argument("--warm-start-only", action="store_true", help="train (or find) the warm start, then stop")
    p.add_argument("--one", nargs=2, metavar=("SEED", "ALGO"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return train_one(args, int(args.one[0]), args.one[1])
    if args.replot:
        return replot(args, Path(args.replot))
    if args.report:
        args.run_root = args.report
    else:
        Path(args.run_root).mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        print(f"warm start: {warm_start_file(args)}", flush=True)
        if args.warm_start_only:
            return
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda job: launch(args, *job), [(s, a) for s in args.seeds for a in args.algos]))
        print(f"all runs done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    result = report(args)
    result.update({"benchmark": "learning_gigpo_vs_grpo", "config": args.config, "overrides": args.set,
                   "iterations": args.iterations, "eval_episodes": args.eval_episodes,
                   "warm_start_seed": args.warm_start_seed})
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
