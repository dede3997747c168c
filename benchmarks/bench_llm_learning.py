"""A pretrained LLM learns by writing its actions: SFT warm start, then GiGPO and GRPO paired by seed.

The recipe of ``configs/searchqa_smollm2.yaml`` (SmolLM2-135M-Instruct, free text, no
admissible-action scoring; ``--config configs/webshop_smollm2.yaml``: the same on WebShop),
measured at three points on the same held-out questions (WebShop: goals):

1. zero-shot: the untrained model;
2. after SFT: one warm start on the expert's transcripts (the config's ``sft``
   section, ``--warm-start-seed``), trained once and saved as
   ``RUN_ROOT/warm-start/selected.safetensors`` (a folder the leaderboard reads);
3. after RL: for every seed, GiGPO and GRPO each train a copy of the warm start
   with the same task groups and sampling seeds (a matched pair).

Every evaluation plays each question of the held-out split once, in order (or
``--eval-tasks`` of them, evenly spaced over the split), at the config's eval temperature (0:
greedy), and keeps each episode's outcome and replies in ``eval.json``.  Two
evaluations are thus paired question by question: the RL gain's standard error is
that of the per-question differences (the unpaired one, which treats the two
evaluations as independent, is printed beside it).  Reported: EM (success) per point with its
standard error, per question type (WebShop: product category), and where the env grades
partly (WebShop's purchase score) the mean score too; the RL gain over SFT per run and its mean over
seeds; GiGPO - GRPO; per-iteration timings (rollout, update, reference pass,
generated tokens/s) from the runs' metrics; the training-rollout learning curves.

    python benchmarks/bench_llm_learning.py --seeds 0 --out benchmarks/results/llm_searchqa.json \\
        --plot benchmarks/results/llm_searchqa.png
    python benchmarks/bench_llm_learning.py --config configs/webshop_smollm2.yaml --algos gigpo \\
        --run-root runs/bench_llm_webshop --eval-tasks 200 --out benchmarks/results/llm_webshop.json

Each stage writes its files when done and is skipped when they exist; an RL run that
stopped resumes from its newest checkpoint.  So an interrupted benchmark is continued
by running the same command again.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALGO_KWARGS = {"gigpo": "{gamma: 0.95}", "grpo": "{}"}
TIMINGS = {"rollout s": "rollout/seconds", "update s": "time/optimize_seconds", "reference pass s": "time/reference_seconds",
           "old log-probs + reference s": "time/score_seconds", "iteration s": "time/iteration_seconds",
           "generated tokens/s": "rollout/tokens_per_s", "rows": "rollout/rows"}


# -- configs -----------------------------------------------------------------------------
def base_config(args, *overrides: str):
    from gigpo_gym.algos.training.config import load_config

    return load_config(args.config, [*args.set, "progress=false", "env.eval_episodes=0", "eval_before=false", *overrides])


def warm_start_config(args):
    return base_config(args, f"seed={args.warm_start_seed}", f"run_dir={Path(args.run_root) / 'warm-start'}",
                       "algo.name=grpo", "algo.kwargs={}")


def run_config(args, seed: int, algo: str, tag: str = ""):
    """The RL run ``seed{seed}-{algo}{tag}`` (``tag`` names a run of other settings beside the recipe's)."""
    iterations = [f"iterations={args.iterations}"] if args.iterations is not None else []
    return base_config(args, f"seed={seed}", f"algo.name={algo}", f"algo.kwargs={ALGO_KWARGS.get(algo, '{}')}",
                       "sft.steps=0", *iterations, f"run_dir={Path(args.run_root) / f'seed{seed}-{algo}{tag}'}")


# -- stages ------------------------------------------------------------------------------
def warm_start(args) -> Path:
    """The shared SFT warm start's weights (trained once, then reused).

    Written as a run folder the leaderboard reads (``config.yaml`` and the weights as
    ``selected.safetensors``, iteration 0): ``gigpo-gym leaderboard --policy
    RUN_ROOT/warm-start/selected.safetensors`` evaluates it with the recipe's prompts.
    """
    from gigpo_gym.algos.training.checkpoint import RunFolder

    folder = Path(args.run_root) / "warm-start"
    path = folder / RunFolder.SELECTED_FILE
    if path.is_file():
        return path
    from gigpo_gym.algos.training.trainer import Trainer

    started = time.perf_counter()
    cfg = warm_start_config(args)  # its run_dir is ``folder``
    trainer = Trainer(cfg)
    try:
        losses = trainer.warm_start(echo=print)
        trainer.run.write_config(cfg)
        trainer.save_selected(0, float("nan"), loss=json.dumps(losses), seconds=repr(time.perf_counter() - started))
    finally:
        trainer.close()
    return path


def policy_with(args, weights: Path | None):
    """The config's policy, with ``weights`` (a safetensors file of the whole policy) loaded when given.

    With ``model.lora`` and weights saved without adapters (the SFT warm start), the
    weights load into the plain model and fresh adapters go on top of them.
    """
    import dataclasses

    from safetensors import safe_open
    from safetensors.torch import load_model

    from gigpo_gym.algos.training.trainer import build_policy

    cfg = warm_start_config(args)
    if weights is None:
        return build_policy(cfg)
    with safe_open(str(weights), framework="pt") as f:
        has_adapters = any("lora_" in k for k in f.keys())
    lora = cfg.model.lora if not has_adapters else None
    if lora is not None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=None))
    policy = build_policy(cfg)
    load_model(policy, str(weights))
    if lora is not None:
        policy.add_lora(lora)
    return policy


def evaluate(args, policy, cfg, tasks: tuple[dict, list[str]] | None = None) -> dict[str, Any]:
    """Each held-out question once, in order: one record per episode (outcome, replies), played by the episode player.

    ``tasks``: (env kwargs, task ids) to play instead, e.g. questions of the train split
    that no run trained on, to choose a setting without looking at the test split.
    """
    import gymnasium as gym

    import gigpo_gym
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.core.env import derive_seed

    if tasks is None:
        kwargs = cfg.env_kwargs("eval")
        probe = gym.make(cfg.env.id, **kwargs)
        task_ids = held_out_tasks(probe.unwrapped, args.eval_tasks)
        probe.close()
    else:
        kwargs, task_ids = {**cfg.env_kwargs("train"), **tasks[0]}, list(tasks[1])
    envs = gigpo_gym.make_grouped(cfg.env.id, len(task_ids), 1, env_kwargs=kwargs, wrappers=(cfg.wrapper(),))
    started = time.perf_counter()
    try:
        played = collect(policy, envs, cfg.sampling.params(evaluation=True, seed=derive_seed(cfg.seed, 999)), seed=0,
                         options={"env_options": [{"task_id": t} for t in task_ids]})
    finally:
        envs.close()
    records = [{"task_id": t, "task_type": ep.task_type, "won": ep.won, "score": ep.env_return, "steps": ep.length,
                "invalid": ep.invalid_steps, "cut": ep.cut_replies, "replies": [], "actions": []}
               for t, ep in zip(task_ids, played.episodes)]
    for traj, reply, action in zip(played.traj_ids, played.replies, played.actions):
        records[traj]["replies"].append(reply)
        records[traj]["actions"].append(action)
    return {"episodes": records, "seconds": time.perf_counter() - started, "generated_tokens": played.generated_tokens}


def held_out_tasks(env, count: int | None) -> list[str]:
    """The split's task ids (SearchQA's questions, WebShop's goals); ``count`` of them evenly spaced over the list."""
    return evenly_spaced(list(env.task_ids) if hasattr(env, "task_ids") else [g.task_id for g in env.goals], count)


def evenly_spaced(ids: list[str], count: int | None) -> list[str]:
    """``count`` of ``ids`` evenly spaced over the list, in order (all of them when ``count`` is None or larger)."""
    if count is None or count >= len(ids):
        return list(ids)
    return [ids[int(k * len(ids) / count)] for k in range(count)]


def evaluation(args, name: str, make_policy, cfg, tasks: tuple[dict, list[str]] | None = None) -> dict[str, Any]:
    """The evaluation ``name`` (run_root/name/eval.json), run once (``tasks``: see ``evaluate``)."""
    from gigpo_gym.core.data import write_atomically

    path = Path(args.run_root) / name / "eval.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = evaluate(args, make_policy(), cfg, tasks)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(result, indent=1))
    print(f"{name:<16} {format_em(result['episodes'])}  ({result['seconds'] / 60:.1f} min)", flush=True)
    return result


def trained(args, seed: int, algo: str, tag: str = "") -> Path:
    """One RL run from the warm start (trained, or resumed from its newest checkpoint, unless done); its final weights."""
    from gigpo_gym.algos.training.checkpoint import POLICY_FILE, checkpoint_iteration, latest_checkpoint, list_checkpoints
    from gigpo_gym.algos.training.checkpoint import RunFolder
    from gigpo_gym.algos.training.trainer import run_training

    cfg = run_config(args, seed, algo, tag)
    folder = Path(cfg.run_dir)
    done = list_checkpoints(folder / "checkpoints")
    last = checkpoint_iteration(done[-1]) if done else 0
    if last < cfg.iterations or not (folder / "summary.json").is_file():
        policy = policy_with(args, warm_start(args))
        run_training(cfg, policy=policy, resume="latest" if last else None,
                     echo=lambda line: print(f"[{algo}{tag} seed {seed}] {line}", flush=True))
    chosen = folder / RunFolder.SELECTED_FILE
    return chosen if chosen.is_file() else latest_checkpoint(folder / "checkpoints") / POLICY_FILE


def train(args, seed: int, algo: str, tag: str = "") -> dict[str, Any]:
    """One RL run from the warm start, then its evaluation (neither, when the evaluation is done already)."""
    done = Path(args.run_root) / f"seed{seed}-{algo}{tag}" / "eval.json"
    if done.is_file():  # e.g. carried over from an earlier sitting, without the run's weights
        return json.loads(done.read_text())
    final = trained(args, seed, algo, tag)
    return evaluation(args, f"seed{seed}-{algo}{tag}", lambda: policy_with(args, final), run_config(args, seed, algo, tag))


# -- statistics --------------------------------------------------------------------------
def em_sem(won) -> tuple[float, float]:
    v = np.asarray(won, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def by_type(episodes) -> dict[str, tuple[float, float, int]]:
    types = sorted({e["task_type"] for e in episodes})
    out = {}
    for t in types:
        won = [e["won"] for e in episodes if e["task_type"] == t]
        out[t] = (*em_sem(won), len(won))
    return out


def format_em(episodes) -> str:
    mean, sem = em_sem([e["won"] for e in episodes])
    cells = "  ".join(f"{t} {100 * m:5.1f} +- {100 * s:4.1f}" for t, (m, s, _) in by_type(episodes).items())
    invalid = sum(e["invalid"] for e in episodes) / max(sum(e["steps"] for e in episodes), 1)
    steps = np.mean([e["steps"] for e in episodes])
    score = ""
    if has_graded_scores(episodes):
        score = "score {:5.1f} +- {:4.1f}  ".format(*(100 * v for v in em_sem([e["score"] for e in episodes])))
    return (f"EM {100 * mean:5.1f} +- {100 * sem:4.1f} (n={len(episodes)})  {score}{cells}  | invalid {100 * invalid:4.1f}%"
            f"  steps {steps:.2f}")


def has_graded_scores(episodes) -> bool:
    """Whether a score says more than success (WebShop's purchase score in [0, 1]; SearchQA's EM is 0 or 1)."""
    return any(e["score"] != float(e["won"]) for e in episodes)


def paired_gain(before, after, key: str = "won") -> dict[str, float]:
    """After - before on the same questions: mean, paired s.e. (per-question differences), unpaired s.e., and how
    many questions each side won.

    ``key``: the episode's outcome compared (``won``: EM / success; ``score``: WebShop's purchase score).
    """
    b = {e["task_id"]: float(e[key]) for e in before}
    a = {e["task_id"]: float(e[key]) for e in after}
    common = [t for t in a if t in b]
    diffs = np.array([a[t] - b[t] for t in common])
    unpaired = math.hypot(em_sem([b[t] for t in common])[1], em_sem([a[t] for t in common])[1])
    sem = float(diffs.std(ddof=1) / math.sqrt(len(diffs))) if len(diffs) > 1 else 0.0
    return {"mean": float(diffs.mean()), "sem_paired": sem, "sem_unpaired": unpaired, "questions": len(common),
            "won": int((diffs > 0).sum()), "lost": int((diffs < 0).sum())}


def paired_score_gain(before, after) -> dict[str, float] | None:
    """``paired_gain`` of the purchase score, or None where the env's score is only success (SearchQA)."""
    return paired_gain(before, after, key="score") if has_graded_scores(before + after) else None


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    from gigpo_gym.algos.training.metrics import read_jsonl

    path = folder / "metrics.jsonl"
    return [r for r in read_jsonl(path) if "rollout/success" in r] if path.is_file() else []


def timings(records) -> dict[str, float]:
    return {name: float(np.mean([r[key] for r in records if key in r])) for name, key in TIMINGS.items()
            if any(key in r for r in records)}


def report(args) -> dict[str, Any]:
    root = Path(args.run_root)
    evals = {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob("*/eval.json"))}
    if "after-sft" not in evals:
        raise SystemExit(f"{root} has no after-SFT evaluation yet")
    sft = evals["after-sft"]["episodes"]
    result: dict[str, Any] = {"points": {}, "runs": {}}
    for name, ev in evals.items():
        mean, sem = em_sem([e["won"] for e in ev["episodes"]])
        result["points"][name] = {"em": mean, "sem": sem, "per_type": by_type(ev["episodes"]),
                                  "questions": len(ev["episodes"]), "eval_seconds": ev["seconds"]}
        if has_graded_scores(ev["episodes"]):
            result["points"][name]["score"] = em_sem([e["score"] for e in ev["episodes"]])
        print(f"{name:<16} {format_em(ev['episodes'])}")
    for algo in args.algos:
        gains = []
        for seed in args.seeds:
            name = f"seed{seed}-{algo}"
            if name not in evals:
                continue
            gain = paired_gain(sft, evals[name]["episodes"])
            types = {t: paired_gain([e for e in sft if e["task_type"] == t],
                                    [e for e in evals[name]["episodes"] if e["task_type"] == t])["mean"]
                     for t in by_type(sft)}
            records = read_metrics(root / name)
            summary = json.loads((root / name / "summary.json").read_text()) if (root / name / "summary.json").is_file() else {}
            score_gain = paired_score_gain(sft, evals[name]["episodes"])
            result["runs"][name] = {"gain": gain, "score_gain": score_gain, "gain_per_type": types, "timings": timings(records),
                                    "rollout_success": [r["rollout/success"] for r in records],
                                    "train_seconds": summary.get("seconds"), "selected": summary.get("selected")}
            gains.append(gain["mean"])
            print(f"RL gain {name:<12} {100 * gain['mean']:+5.1f} +- {100 * gain['sem_paired']:.1f} paired "
                  f"({100 * gain['sem_unpaired']:.1f} unpaired)  "
                  + "  ".join(f"{t} {100 * v:+5.1f}" for t, v in types.items())
                  + (f"  score {100 * score_gain['mean']:+5.1f} +- {100 * score_gain['sem_paired']:.1f}" if score_gain else "")
                  + f"  | {len(records)} iterations in {(summary.get('seconds') or 0) / 60:.1f} min")
        if gains:
            result.setdefault("mean_gain", {})[algo] = em_sem(gains) if len(gains) > 1 else (gains[0], 0.0)
    if len(args.algos) == 2:
        a, b = args.algos
        diffs = {s: paired_gain(evals[f"seed{s}-{b}"]["episodes"], evals[f"seed{s}-{a}"]["episodes"])
                 for s in args.seeds if f"seed{s}-{a}" in evals and f"seed{s}-{b}" in evals}
        for s, d in diffs.items():
            print(f"{a} - {b} seed {s}: {100 * d['mean']:+5.1f} +- {100 * d['sem_paired']:.1f} (paired by question)")
        result["difference"] = {"of": f"{a} - {b}", "per_seed": diffs}
        scores = {s: paired_score_gain(evals[f"seed{s}-{b}"]["episodes"], evals[f"seed{s}-{a}"]["episodes"]) for s in diffs}
        scores = {s: d for s, d in scores.items() if d is not None}
        for s, d in scores.items():
            print(f"{a} - {b} seed {s}: score {100 * d['mean']:+5.1f} +- {100 * d['sem_paired']:.1f} (paired)")
        if scores:
            result["difference"]["score_per_seed"] = scores
    for name, run in result["runs"].items():
        t = run["timings"]
        if t:
            print(f"timings {name:<12} " + "  ".join(f"{k} {v:.1f}" for k, v in t.items()))
    if args.plot:
        plot(args, result, Path(args.plot))
    return result


def plot(args, result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curve, bars) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for name, run in result["runs"].items():
        curve.plot(np.arange(1, len(run["rollout_success"]) + 1), run["rollout_success"], label=name)
    curve.set_xlabel("iteration")
    curve.set_ylabel("training-rollout EM (sampled, T=1)")
    curve.grid(alpha=0.3)
    curve.legend(fontsize=8)
    points = result["points"]
    names = [n for n in ("zero-shot", "after-sft", *sorted(result["runs"])) if n in points]
    types = sorted({t for n in names for t in points[n]["per_type"]})
    width = 0.8 / (len(types) + 1)
    for k, t in enumerate(["all", *types]):
        means = [points[n]["em"] if t == "all" else points[n]["per_type"].get(t, (0, 0, 0))[0] for n in names]
        sems = [points[n]["sem"] if t == "all" else points[n]["per_type"].get(t, (0, 0, 0))[1] for n in names]
        bars.bar(np.arange(len(names)) + k * width, means, width, yerr=sems, capsize=2, label=t)
    bars.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, fontsize=8, rotation=15)
    bars.set_ylabel("held-out EM (+- s.e.)")
    bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "searchqa_smollm2.yaml"))
    p.add_argument("--algos", nargs="+", default=["gigpo", "grpo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--iterations", type=int, default=None, help="RL iterations (default: the config's)")
    p.add_argument("--eval-tasks", type=int, default=None,
                   help="held-out tasks, evenly spaced over the split (default: every one of it)")
    p.add_argument("--run-root", default="runs/bench_llm_learning")
    p.add_argument("--warm-start-seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    p.add_argument("--skip-zero-shot", action="store_true", help="do not evaluate the untrained model")
    p.add_argument("--report", action="store_true", help="only aggregate what RUN_ROOT holds")
    p.add_argument("--plot", default=None, help="write the learning-curve PNG here")
    p.add_argument("--out", default=None, help="write the results JSON here")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if not args.report:
        Path(args.run_root).mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        cfg = warm_start_config(args)
        if not args.skip_zero_shot:
            evaluation(args, "zero-shot", lambda: policy_with(args, None), cfg)
        weights = warm_start(args)
        evaluation(args, "after-sft", lambda: policy_with(args, weights), cfg)
        for seed in args.seeds:
            for algo in args.algos:
                train(args, seed, algo)
        print(f"benchmark done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    result = report(args)
    result.update({"benchmark": "llm_learning", "config": args.config, "overrides": args.set, "seeds": args.seeds,
                   "warm_start_seed": args.warm_start_seed, "eval_tasks": args.eval_tasks})
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
