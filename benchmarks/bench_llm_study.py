"""GiGPO against GRPO over training seeds (SearchQA), GRPO's pair on WebShop, and a WebShop teacher that reads only the page.

One command runs the whole study, stage by stage, in this order:

1. ``searchqa``: the recipe as it ships (``configs/searchqa_smollm2.yaml``) for each
   ``--seeds``: one SFT warm start for all seeds; per seed GiGPO, then GRPO, from it
   on the same task groups and sampling seeds (the seed changes both); each run
   evaluated greedy on every test question.
2. ``grpo-settings``: GRPO's other settings, so that it gets a fair chance: fewer
   iterations (``--grpo-iterations``: that checkpoint of the same run; with a constant
   learning rate and each iteration's draws taken from the seed and the iteration, it is
   the run trained that long) and, when asked, other learning rates (``--grpo-lr``, a
   run per seed).  Every setting is evaluated per seed on ``--validation`` questions of
   the train split that neither SFT nor any seed's RL drew, and on the test questions;
   the setting with the best validation mean over seeds is the one the report compares.
   The recipe's settings are evaluated as soon as its GRPO run ends (stage
   ``searchqa``), while the run's weights are still on the machine.
3. ``webshop``: ``configs/webshop_smollm2.yaml``'s GiGPO run and its GRPO pair (same
   warm start, task groups and setting), both on ``--webshop-goals`` test goals; the SFT,
   GiGPO and GRPO models also get their leaderboard rows (``--leaderboard-spec``), each
   in the prompts and observation mode it trained on, while their weights are here.
4. ``teacher``: the goal-aware expert and the page-reading teacher play the same test
   goals; then SFT on the teacher's transcripts (``sft.expert_kwargs: {style: page}``)
   and the GiGPO/GRPO pair from that warm start.
5. ``trl-settings``: the package's GRPO against TRL's on the SearchQA recipe: from the
   same warm start, one setting at a time moved to what TRL's ``GRPOTrainer`` does
   (``--trl-settings``, named in ``TRL_SETTINGS``), each for ``--trl-seeds`` and
   ``--trl-algos``, evaluated on the test questions like the recipe's runs
   (``seed{S}-{algo}-{setting}``).  The recipe before 2026-12-02 (an optimiser step per
   32 turns) is the setting ``mini-batch-32``: the carried runs that stages 1 and 2 made
   with it are named after it.

    python benchmarks/bench_llm_study.py --root runs/study --threads 2 \
        --carry benchmarks/results/llm_study_runs

Every run, checkpoint and evaluation writes its files when done and is skipped when
they exist (``bench_llm_learning``), so an interrupted study continues with the same
command.  A finished run keeps its checkpoints' weights but not their optimiser state
(1 GB each for SmolLM2; ``--keep-optimizer`` keeps it), so it cannot be resumed past
its end.  After each stage its results so far go to ``--results``
(``llm_study_searchqa.json`` / ``.png``, ``llm_study_webshop*``,
``llm_study_trl_settings.json``), leaving the other stages' files as they are;
``--report`` only rewrites those of ``--stages``.  Each invocation appends its commit, command,
machine and start time to ``ROOT/study.json``.

A study outlasts a sitting through ``--carry DIR`` (``benchmarks/results/llm_study_runs``,
committed; off unless given): after each stage the small results files of the finished
runs (evaluations, training curves, summaries, ``study.json``) are copied there, and a
later sitting's command copies them back first, so a run whose evaluation is carried is
not trained again.  An unfinished run resumes from its checkpoints under ROOT.  Where a
setting evaluation needs a carried run's weights, the run is trained again; its carried log
and summary stay, and ``retrained.json`` says whether the new training repeated it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_learning  # noqa: E402  (the over-seeds statistics: mean, s.e., Student-t interval)
import bench_llm_learning as bench  # noqa: E402  (warm start, runs, evaluations, paired gains)

ROOT = HERE.parent
STAGES = ("searchqa", "grpo-settings", "webshop", "teacher", "trl-settings")
ALGOS = ("gigpo", "grpo")


# -- the benchmark's arguments per stage ----------------------------------------------
def bench_args(args, config: str, folder: str, seeds, extra=(), eval_tasks=None) -> argparse.Namespace:
    """``bench_llm_learning``'s arguments for one run root of the study."""
    return argparse.Namespace(config=config, set=[*args.set, *extra], run_root=str(Path(args.root) / folder),
                              seeds=list(seeds), algos=list(ALGOS), warm_start_seed=0, iterations=None,
                              eval_tasks=eval_tasks, plot=None, keep_optimizer=args.keep_optimizer)


def searchqa_args(args, extra=()) -> argparse.Namespace:
    return bench_args(args, args.searchqa_config, "searchqa", args.seeds, extra, eval_tasks=args.questions)


def webshop_args(args, teacher: bool = False) -> argparse.Namespace:
    extra = ["sft.expert_kwargs={style: page}"] if teacher else []
    return bench_args(args, args.webshop_config, "webshop-teacher" if teacher else "webshop", [0], extra,
                      eval_tasks=args.webshop_goals)


def grpo_settings(args) -> list[tuple[str, str | None, int | None]]:
    """(name, learning rate or None for the recipe's, iterations or None for the recipe's), the recipe first."""
    out = []
    for lr in [None, *args.grpo_lr]:
        for iterations in [None, *args.grpo_iterations]:
            name = "grpo" + (f"-lr{lr}" if lr else "") + (f"-{iterations}it" if iterations else "")
            out.append((name, lr, iterations))
    return out


def setting_args(args, lr: str | None) -> tuple[argparse.Namespace, str]:
    """The benchmark's arguments and run tag of GRPO at learning rate ``lr`` (None: the recipe's)."""
    return (searchqa_args(args, [f"optim.lr={lr}"]), f"-lr{lr}") if lr else (searchqa_args(args), "")


#: The recipe's settings moved to TRL's GRPOTrainer's (benchmarks/bench_trl_searchqa.py), one per entry: the
#: overrides of each.  TRL's learning rate (2e-5), KL coefficient (beta 0.01, k3), clip (0.2), std-normalised
#: group advantages, token-level loss (its "dapo" default: the summed token terms over the step's token count, as
#: the package's loss over a mini-batch) and one optimiser step per iteration over all 64 episodes are the
#: recipe's already (the last since 2026-12-02: this stage measured it as "whole-batch", and it became the recipe).
TRL_SETTINGS = {
    # the recipe until 2026-12-02: an optimiser step per 32 turns, about 38 over 15 iterations
    "mini-batch-32": ("optim.mini_batch_size=32",),
    # TRL pays the env's 0/1 and keeps every episode in the loss's token count; measured on mini-batches of 32
    "env-reward": ("optim.mini_batch_size=32", "reward.scale=1.0", "reward.source=env",
                   "reward.invalid_action_penalty=0.0", "optim.skip_zero_advantage=false"),
}
TRL_SETTINGS["both"] = TRL_SETTINGS["env-reward"][1:]  # TRL's reward on the recipe's one step per iteration
# env-reward's two changes one at a time (its reward scale alone changes nothing: advantages are
# divided by the group's spread): the invalid-action penalty, which that division blows up in a
# group whose episodes tied, and the tied groups themselves, which the recipe leaves out
TRL_SETTINGS["no-penalty"] = ("reward.invalid_action_penalty=0.0",)
TRL_SETTINGS["keep-tied"] = ("optim.skip_zero_advantage=false",)
# mini-batch-32 at about 15/38 of the recipe's 2e-5, so that its ~38 steps move the policy about as far as
# whole-batch's 15 at 2e-5: whether fewer steps or whole-iteration steps is what helps
TRL_SETTINGS["mini-batch-32-lr8e-6"] = ("optim.mini_batch_size=32", "optim.lr=8e-6")


# -- stages ---------------------------------------------------------------------------
def run_pairs(b, after_run=None) -> None:
    """The warm start, its evaluation, then per seed GiGPO and GRPO (each trained, then evaluated).

    ``after_run(seed, algo)`` runs after each, while the run's weights are here.
    """
    weights = bench.warm_start(b)
    bench.evaluation(b, "after-sft", lambda: bench.policy_with(b, weights), bench.warm_start_config(b))
    for seed in b.seeds:
        for algo in b.algos:
            bench.train(b, seed, algo)
            slim(b, seed, algo)
            if after_run is not None:
                after_run(seed, algo)


def slim(b, seed: int, algo: str, tag: str = "") -> None:
    """Delete a finished run's optimiser states, 1 GB a checkpoint for SmolLM2 (its weights stay)."""
    from gigpo_gym.algos.training.checkpoint import OPTIMIZER_FILE

    if b.keep_optimizer:
        return
    folder = Path(bench.run_config(b, seed, algo, tag).run_dir)
    if (folder / "summary.json").is_file():
        for path in (folder / "checkpoints").glob(f"iter-*/{OPTIMIZER_FILE}"):
            path.unlink()


def setting_weights(args, seed: int, lr: str | None, iterations: int | None) -> tuple[argparse.Namespace, Path]:
    """GRPO's weights at one setting for ``seed`` (trained when missing)."""
    from gigpo_gym.algos.training.checkpoint import POLICY_FILE, checkpoint_folder

    b, tag = setting_args(args, lr)
    final = trained_keeping_carried(b, seed, "grpo", tag)
    slim(b, seed, "grpo", tag)
    if iterations is None:
        return b, final
    path = checkpoint_folder(Path(bench.run_config(b, seed, "grpo", tag).run_dir) / "checkpoints", iterations) / POLICY_FILE
    if not path.is_file():
        raise SystemExit(f"{path} is missing: --grpo-iterations must be checkpoints the run keeps (save_every, "
                         f"keep_checkpoints)")
    return b, path


def trained_keeping_carried(b, seed: int, algo: str, tag: str = "") -> Path:
    """A run's final weights, trained when missing; a carried run trained again keeps its carried log and summary.

    A run whose results came from an earlier sitting has no weights on a new machine, and
    a setting evaluation needs them.  The new training's log would replace the one the
    report cites, so that one is set aside first and put back after; ``retrained.json``
    says whether the new training repeated it (the same training-rollout success in every
    iteration) and how long it took.
    """
    import shutil

    from gigpo_gym.algos.training.checkpoint import list_checkpoints

    folder = Path(bench.run_config(b, seed, algo, tag).run_dir)
    kept = folder / "carried"
    if (folder / "eval.json").is_file() and (kept.is_dir() or not list_checkpoints(folder / "checkpoints")):
        if not kept.is_dir():  # not set aside by an interrupted retraining already
            kept.mkdir()
            for name in ("metrics.jsonl", "summary.json"):
                if (folder / name).is_file():
                    shutil.copy2(folder / name, kept / name)
        final = bench.trained(b, seed, algo, tag)
        new = json.loads((folder / "summary.json").read_text())
        curves = [[r["rollout/success"] for r in bench.read_metrics(where)] for where in (kept, folder)]
        for name in ("metrics.jsonl", "summary.json"):
            if (kept / name).is_file():
                shutil.copy2(kept / name, folder / name)
        (folder / "retrained.json").write_text(json.dumps({"same_rollout_success": curves[0] == curves[1],
                                                           "rollout_success": curves[1], "seconds": new.get("seconds")}))
        shutil.rmtree(kept)
        print(f"[{algo}{tag} seed {seed}] trained again for its weights: "
              f"{'the same' if curves[0] == curves[1] else 'ANOTHER'} training-rollout curve as the carried run's",
              flush=True)
        return final
    return bench.trained(b, seed, algo, tag)


def validation_tasks(args) -> list[str]:
    """``--validation`` train-split questions that neither the SFT transcripts nor any seed's RL groups drew.

    Chosen once and kept in ``validation/tasks.json``.  The draws are replayed as the
    trainer makes them: SFT's episode k resets with ``derive_seed(derive_seed(seed, 5), k)``,
    RL's iteration ``it`` resets its grouped envs with ``derive_seed(seed, it)``.
    """
    import gymnasium as gym

    import gigpo_gym
    from gigpo_gym.core.data import write_atomically
    from gigpo_gym.core.env import derive_seed

    b = searchqa_args(args)
    path = Path(b.run_root) / "validation" / "tasks.json"
    if path.is_file():
        return json.loads(path.read_text())["task_ids"]
    cfg = bench.warm_start_config(b)
    env = gym.make(cfg.env.id, **cfg.env.kwargs)
    sft_seed = derive_seed(cfg.seed, 5)
    seen = {env.reset(seed=derive_seed(sft_seed, k))[1]["task_id"] for k in range(cfg.sft.episodes)}
    for seed in args.seeds:
        run = bench.run_config(b, seed, "grpo")
        e = run.env
        envs = gigpo_gym.make_grouped(e.id, e.num_groups, e.group_size, seed=seed, env_kwargs=e.kwargs)
        for it in range(1, run.iterations + 1):
            seen.update(str(t) for t in envs.reset(seed=derive_seed(seed, it))[1]["task_id"])
        envs.close()
    unseen = [t for t in env.unwrapped.task_ids if t not in seen]
    env.close()
    chosen = bench.evenly_spaced(unseen, args.validation)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"split": cfg.env.kwargs.get("split"), "task_ids": chosen, "drawn": len(seen),
                                       "of": len(unseen) + len(seen)}, indent=1))
    return chosen


def choose(means: dict[str, float]) -> str:
    """The setting with the best mean validation score (the first listed, the recipe, on a tie)."""
    return max(means, key=lambda name: (means[name], -list(means).index(name)))


def leaderboard_row(args, b, run: str) -> Path:
    """The leaderboard's row of one model of ``b``'s root (``warm-start``: the SFT model), unless it is there already.

    The row is named after the recipe and its observation mode: the leaderboard plays a
    run folder in the prompts and observation mode the run trained on.
    """
    from gigpo_gym.algos.leaderboard.cli import main as leaderboard
    from gigpo_gym.algos.leaderboard.specs import load_spec, result_filename

    label = {"warm-start": "SFT", "seed0-gigpo": "SFT+GiGPO", "seed0-grpo": "SFT+GRPO"}[run]
    cfg = bench.warm_start_config(b)
    mode = f", {cfg.prompt.observation_mode}" if cfg.prompt.observation_mode else ""
    name = f"SmolLM2-135M-Instruct {label} ({Path(b.config).stem}{mode})"
    spec = load_spec(args.leaderboard_spec).name  # a spec's name or its file
    path = Path(args.results) / result_filename({"spec": {"name": spec}, "policy": {"name": name}})
    if not path.is_file():
        folder = Path(b.run_root) / run
        policy = bench.warm_start(b) if run == "warm-start" else folder  # a run folder: its selected or last weights
        code = leaderboard(["leaderboard", "--policy", str(policy), "--envs", args.leaderboard_spec, "--name", name,
                            "--results-dir", str(args.results), "--resume", "--no-progress"])
        if code:
            raise SystemExit(f"the leaderboard row of {folder} failed ({code})")
    return path


def setting_evaluations(args, seed: int, lr: str | None) -> None:
    """GRPO's settings at learning rate ``lr`` (None: the recipe's) for ``seed``, on the validation and the test questions.

    Run as soon as the setting's run is trained: a later sitting may not have its weights
    (they would be trained again).  The recipe's own test evaluation is the pair's.
    """
    b = searchqa_args(args)
    for name, setting_lr, iterations in grpo_settings(args):
        todo = [f"validation/seed{seed}-{name}", *([f"seed{seed}-{name}"] if name != "grpo" else [])]
        todo = [where for where in todo if not (Path(b.run_root) / where / "eval.json").is_file()]
        if setting_lr != lr or not todo:
            continue
        sb, weights = setting_weights(args, seed, lr, iterations)
        for where in todo:
            tasks = ({}, validation_tasks(args)) if where.startswith("validation/") else None  # the train split
            bench.evaluation(sb, where, lambda: bench.policy_with(sb, weights), bench.warm_start_config(sb), tasks)


def grpo_settings_stage(args) -> None:
    """Every GRPO setting per seed on the validation and the test questions (the choice is the report's)."""
    bench.warm_start(searchqa_args(args))
    for seed in args.seeds:
        for lr in [None, *args.grpo_lr]:
            setting_evaluations(args, seed, lr)


def trl_settings_stage(args) -> None:
    """Each ``--trl-settings`` setting's runs per seed and algorithm, from the recipe's warm start, each evaluated."""
    weights = bench.warm_start(searchqa_args(args))
    sft = searchqa_args(args)
    bench.evaluation(sft, "after-sft", lambda: bench.policy_with(sft, weights), bench.warm_start_config(sft))
    for seed in args.trl_seeds:
        for name in args.trl_settings:
            for algo in args.trl_algos:
                b = searchqa_args(args, TRL_SETTINGS[name])
                bench.train(b, seed, algo, f"-{name}")
                slim(b, seed, algo, f"-{name}")


def trl_grpo_episodes(args, seed: int) -> list[dict[str, Any]] | None:
    """TRL's GRPO model's test outcomes on ``seed``, from ``bench_trl_searchqa.py``'s carried evaluation in
    ``--results`` (seed 0's in ``trl_searchqa_runs``, another seed's in ``trl_searchqa_runs_seed{S}``), or None."""
    folder = "trl_searchqa_runs" if seed == 0 else f"trl_searchqa_runs_seed{seed}"
    return trl_episodes(Path(args.results) / folder / "grpo" / "eval.json")


def trl_episodes(path: Path) -> list[dict[str, Any]] | None:
    """The test outcomes in one of ``bench_trl_searchqa.py``'s ``eval.json`` (EM by task id), or None without it."""
    ev = _read(path)
    return None if ev is None else [{"task_id": task, "won": won} for task, won in ev["em"].items()]


def trl_settings_results(args) -> dict[str, Any] | None:
    """Every TRL setting's EM gain over the warm start per seed (paired by question), its mean over seeds, wall times;
    and, paired the same way, its difference from the recipe's run on that seed and TRL's GRPO's from it (each per
    seed and over seeds), and GiGPO's from GRPO's in the same setting (per seed and over seeds: the recipe's
    comparison, in that setting)."""
    root = Path(searchqa_args(args).run_root)
    sft = _read(root / "after-sft" / "eval.json")
    if sft is None:
        return None
    out: dict[str, Any] = {"settings": {k: list(v) for k, v in TRL_SETTINGS.items()}, "runs": {}, "gigpo_minus_grpo": {}}
    seeds = sorted({*args.seeds, *args.trl_seeds})
    trl_by_seed = {seed: trl_grpo_episodes(args, seed) for seed in seeds}
    evals_by_setting: dict[str, dict[str, dict[int, Any]]] = {}  # the recipe's ("") first: the others pair with it
    for name in ["", *TRL_SETTINGS]:
        evals = evals_by_setting.setdefault(name, {})
        for algo in ALGOS:
            gains = {}
            for seed in seeds:
                run = root / f"seed{seed}-{algo}{'-' + name if name else ''}"
                ev = _read(run / "eval.json")
                if ev is None:
                    continue
                evals.setdefault(algo, {})[seed] = ev
                gains[seed] = run_result(sft["episodes"], ev, run)
                recipe = evals_by_setting[""].get(algo, {}).get(seed) if name else None
                if recipe is not None:
                    gains[seed]["over_recipe"] = bench.paired_gain(recipe["episodes"], ev["episodes"])
                if trl_by_seed[seed] is not None:
                    gains[seed]["trl_grpo_over_this"] = bench.paired_gain(ev["episodes"], trl_by_seed[seed])
            if gains:
                key = f"{algo}-{name}" if name else f"{algo} (recipe)"
                out["runs"][key] = {"per_seed": gains,
                                    "over_seeds": over_seeds({s: g["gain"]["mean"] for s, g in gains.items()})}
                for paired in ("over_recipe", "trl_grpo_over_this"):  # each paired difference, over seeds
                    per_seed = {s: g[paired]["mean"] for s, g in gains.items() if paired in g}
                    if per_seed:
                        out["runs"][key][f"{paired}_over_seeds"] = over_seeds(per_seed)
                print(f"{key:<22} " + "  ".join(f"seed {s} {100 * g['gain']['mean']:+5.1f} +- "
                                                 f"{100 * g['gain']['sem_paired']:.1f}" for s, g in gains.items()))
        paired_seeds = sorted(set(evals.get("gigpo", {})) & set(evals.get("grpo", {})))
        if paired_seeds:
            diffs = {s: bench.paired_gain(evals["grpo"][s]["episodes"], evals["gigpo"][s]["episodes"])
                     for s in paired_seeds}
            out["gigpo_minus_grpo"][name or "recipe"] = {
                "per_seed": diffs, "over_seeds": over_seeds({s: d["mean"] for s, d in diffs.items()})}
    return out


def validation_means(b, args) -> dict[str, float]:
    """Mean validation EM over the seeds of each GRPO setting whose evaluations are all done."""
    means = {}
    for name, _, _ in grpo_settings(args):
        paths = [Path(b.run_root) / "validation" / f"seed{s}-{name}" / "eval.json" for s in args.seeds]
        if all(p.is_file() for p in paths):
            means[name] = float(np.mean([np.mean([e["won"] for e in json.loads(p.read_text())["episodes"]]) for p in paths]))
    return means


def play_teachers(args) -> dict[str, Any]:
    """The goal-aware expert and the page-reading teacher on the evaluation's test goals (``teachers.json``), played
    through the episode player (``rollout.collect``) and the run's prompt stack."""
    import gymnasium as gym

    import gigpo_gym
    from gigpo_gym.algos.policies.base import SamplingParams
    from gigpo_gym.algos.policies.reference import ExpertPolicy
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.core.data import write_atomically

    b = webshop_args(args, teacher=True)
    path = Path(b.run_root) / "teachers.json"
    if path.is_file():
        return json.loads(path.read_text())
    cfg = bench.warm_start_config(b)
    kwargs = {**cfg.env.kwargs, **cfg.env.eval_kwargs}  # the pages the teachers read: the env's own rendering
    env = gym.make(cfg.env.id, **kwargs)
    ids = bench.held_out_tasks(env.unwrapped, b.eval_tasks)
    env.close()
    envs = gigpo_gym.make_grouped(cfg.env.id, len(ids), 1, env_kwargs=kwargs, wrappers=(cfg.wrapper(),))
    out: dict[str, Any] = {}
    try:
        for style in ("goal", "page"):
            played = collect(ExpertPolicy(), envs, SamplingParams(max_new_tokens=1), seed=0,
                             options={"env_options": [{"task_id": t} for t in ids]}, expert_kwargs={"style": style},
                             final_keys=("score",))
            actions: dict[int, list[str]] = {}
            for traj, action in zip(played.traj_ids, played.actions):
                actions.setdefault(traj, []).append(action)
            out[style] = {"episodes": [{"task_id": ep.task_id, "task_type": ep.task_type, "won": ep.won,
                                        "score": ep.final["score"], "steps": ep.length, "actions": actions[ep.traj_id]}
                                       for ep in played.episodes]}
    finally:
        envs.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(out, indent=1))
    return out


# -- results --------------------------------------------------------------------------
def em(ev) -> float:
    return float(np.mean([e["won"] for e in ev["episodes"]]))


def run_result(sft_episodes, ev, run: Path) -> dict[str, Any]:
    """One evaluated run: its EM, its gain over the warm start paired by question, its training-rollout curve and
    wall times.  Training time is the iterations' own, summed from its log: a resumed run's summary counts only since
    the resume."""
    rows = bench.read_metrics(run)
    return {"em": em(ev), "gain": bench.paired_gain(sft_episodes, ev["episodes"]), "eval_seconds": ev["seconds"],
            "train_seconds": float(sum(r.get("time/iteration_seconds", 0.0) for r in rows)) if rows else None,
            "rollout_success": [r["rollout/success"] for r in rows]}


def over_seeds(diffs: dict[int, float]) -> dict[str, Any]:
    """Paired differences over seeds: mean, s.e., 95% Student-t interval (n-1 df), seeds favouring each side."""
    values = list(diffs.values())
    out = bench_learning.paired(values) if len(values) > 1 else {"per_seed": values, "mean": values[0] if values else None}
    out.update(seeds=list(diffs), favour_first=sum(v > 0 for v in values), favour_second=sum(v < 0 for v in values),
               ties=sum(v == 0 for v in values))
    return out


def searchqa_results(args) -> dict[str, Any] | None:
    """Per-seed table, GiGPO - GRPO over seeds (recipe and chosen GRPO), curves."""
    b = searchqa_args(args)
    root = Path(b.run_root)
    evals = {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob("*/eval.json"))}
    if "after-sft" not in evals:
        return None
    sft = evals["after-sft"]["episodes"]
    means = validation_means(b, args)
    chosen = choose(means) if len(means) == len(grpo_settings(args)) else None
    names = ["gigpo", "grpo", *([chosen] if chosen not in (None, "grpo") else [])]
    per_seed: dict[int, dict[str, Any]] = {}
    for s in args.seeds:
        row: dict[str, Any] = {"sft": em(evals["after-sft"])}
        for name in names:
            ev = evals.get(f"seed{s}-{name}")
            if ev is None:
                continue
            folder = root / f"seed{s}-{name}"
            row[name] = run_result(sft, ev, folder)
        for other in names[1:]:
            if "gigpo" in row and other in row:
                row[f"gigpo - {other}"] = bench.paired_gain(evals[f"seed{s}-{other}"]["episodes"],
                                                            evals[f"seed{s}-gigpo"]["episodes"])
        per_seed[s] = row
    result: dict[str, Any] = {"runs": names, "per_seed": per_seed, "grpo_validation_means": means, "grpo_chosen": chosen,
                              "validation": _read(root / "validation" / "tasks.json"), "over_seeds": {}}
    for name in names:
        result["over_seeds"][f"{name} - sft"] = over_seeds({s: r[name]["gain"]["mean"] for s, r in per_seed.items() if name in r})
    for other in names[1:]:
        key = f"gigpo - {other}"
        result["over_seeds"][key] = over_seeds({s: r[key]["mean"] for s, r in per_seed.items() if key in r})
    return result


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def print_searchqa(result) -> None:
    names = result["runs"]
    print("seed   SFT   " + "  ".join(f"{n:>16}" for n in names) + "   (held-out EM %, gain over SFT paired by question)")
    for s, row in result["per_seed"].items():
        cells = [f"{100 * row[n]['em']:5.1f} ({100 * row[n]['gain']['mean']:+5.1f})" if n in row else " " * 16 for n in names]
        print(f"{s:>4} {100 * row['sft']:5.1f}   " + "  ".join(f"{c:>16}" for c in cells))
    for key, d in result["over_seeds"].items():
        if d.get("mean") is None:
            continue
        ci = f"  95% CI [{100 * d['ci95'][0]:+5.1f}, {100 * d['ci95'][1]:+5.1f}]" if "ci95" in d else ""
        print(f"{key:<24} {100 * d['mean']:+5.1f} over seeds {d['seeds']}{ci}  favour: {d['favour_first']} vs "
              f"{d['favour_second']} ({d['ties']} ties)")
    if result["grpo_validation_means"]:
        print("GRPO settings, validation EM over seeds: "
              + ", ".join(f"{n} {100 * v:.1f}" for n, v in result["grpo_validation_means"].items())
              + (f"  -> {result['grpo_chosen']}" if result["grpo_chosen"] else "  (not all evaluated yet)"))


def plot_searchqa(result, path: Path) -> None:
    """Training-rollout EM per iteration (mean and min-max band over seeds) beside every run's held-out EM."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curve, dots) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    names = result["runs"]
    for name, color in zip(names[:2], ("tab:blue", "tab:orange")):
        curves = [r[name]["rollout_success"] for r in result["per_seed"].values() if name in r and r[name]["rollout_success"]]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        arr = 100 * np.array([c[:n] for c in curves])
        x = np.arange(1, n + 1)
        curve.plot(x, arr.mean(0), color=color, label=f"{name} (mean of {len(curves)} seeds)")
        curve.fill_between(x, arr.min(0), arr.max(0), color=color, alpha=0.2)
    curve.set_xlabel("iteration")
    curve.set_ylabel("training-rollout EM %\n(sampled, T=1; band: min-max over seeds)")
    curve.grid(alpha=0.3)
    curve.legend(fontsize=8)
    sft = [100 * r["sft"] for r in result["per_seed"].values()]
    if sft:
        dots.axhline(sft[0], color="gray", ls="--", label="after SFT (the shared warm start)")
    for s, row in result["per_seed"].items():
        xs = [k for k, n in enumerate(names) if n in row]
        dots.plot(xs, [100 * row[names[k]]["em"] for k in xs], "o-", alpha=0.7, label=f"seed {s}")
    dots.set_xticks(range(len(names)), names)
    dots.set_ylabel("held-out EM % (438 test questions, greedy)")
    dots.grid(alpha=0.3)
    dots.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def webshop_results(args, teacher: bool) -> dict[str, Any] | None:
    """``bench_llm_learning``'s report of one WebShop run root (GiGPO - GRPO paired by goal), with the teachers' play."""
    b = webshop_args(args, teacher)
    if not (Path(b.run_root) / "after-sft" / "eval.json").is_file():
        return None
    b.plot = str(Path(args.results) / f"llm_study_{'webshop_teacher' if teacher else 'webshop'}.png")
    result = bench.report(b)
    evals = {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(b.run_root).glob("*/eval.json"))}
    result["paging"] = {name: paging_share(ev["episodes"]) for name, ev in evals.items()}
    if teacher and (Path(b.run_root) / "teachers.json").is_file():
        played = play_teachers(args)
        result["teachers"] = {style: {"success": bench.em_sem([e["won"] for e in p["episodes"]]),
                                      "score": bench.em_sem([e["score"] for e in p["episodes"]]),
                                      "steps": float(np.mean([e["steps"] for e in p["episodes"]])),
                                      "paging": paging_share(p["episodes"])}
                              for style, p in played.items()}
        for style, t in result["teachers"].items():
            print(f"teacher {style:<5} success {100 * t['success'][0]:5.1f} +- {100 * t['success'][1]:.1f}  "
                  f"score {100 * t['score'][0]:5.1f} +- {100 * t['score'][1]:.1f}  steps {t['steps']:.2f}  "
                  f"next-page clicks {100 * t['paging']:.1f}% of actions")
    return result


def paging_share(episodes) -> float:
    """The share of actions that page the results (``click[next >]``)."""
    actions = [a for e in episodes for a in e["actions"] if a]
    return sum("click[next >]" in a.lower() for a in actions) / max(len(actions), 1)


#: The results files each stage writes (``--report`` writes those of ``--stages``): a stage leaves the others' as they are.
STAGE_RESULTS = {"searchqa": "searchqa", "grpo-settings": "searchqa", "webshop": "webshop", "teacher": "teacher",
                 "trl-settings": "trl-settings"}


def write_results(args, stages) -> None:
    """The results of what ROOT holds: the files of ``stages`` (``STAGE_RESULTS``), leaving the others' as they are."""
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"study": "bench_llm_study", "seeds": args.seeds, "overrides": args.set, "runs": _read(Path(args.root) / "study.json")}
    wanted = {STAGE_RESULTS[stage] for stage in stages}
    searchqa = searchqa_results(args) if "searchqa" in wanted else None
    if searchqa is not None:
        print_searchqa(searchqa)
        plot_searchqa(searchqa, out / "llm_study_searchqa.png")
        (out / "llm_study_searchqa.json").write_text(json.dumps({**meta, "config": args.searchqa_config, **searchqa}, indent=1))
    trl = trl_settings_results(args) if "trl-settings" in wanted else None
    if trl is not None and trl["runs"]:
        (out / "llm_study_trl_settings.json").write_text(json.dumps({**meta, "config": args.searchqa_config, **trl},
                                                                    indent=1))
    for teacher in (False, True):
        if ("teacher" if teacher else "webshop") not in wanted:
            continue
        result = webshop_results(args, teacher)
        if result is not None:
            name = "llm_study_webshop_teacher.json" if teacher else "llm_study_webshop.json"
            (out / name).write_text(json.dumps({**meta, "config": args.webshop_config, **result}, indent=1))


#: The small files of a study's run root that hold its results (the weights stay behind): what one sitting
#: carries to the next through ``--carry``.
CARRIED = ("study.json", "eval.json", "metrics.jsonl", "summary.json", "config.yaml", "tasks.json", "teachers.json",
           "retrained.json")


def carry(source: Path, target: Path, update: bool = False) -> list[Path]:
    """Copy the results files (``CARRIED``) of finished runs under ``source`` to the same places under ``target``.

    A run is finished once its folder holds ``eval.json``; an unfinished run's files stay
    behind (its checkpoints are what resumes it).  Files already in ``target`` are kept,
    unless ``update`` (a sitting's results going to the carried folder) and they differ.
    A run whose evaluation is carried is not trained again; a stage that needs a run's
    weights (a seed's first run, GRPO's other settings) trains what is not carried.
    """
    import shutil

    copied = []
    for path in sorted(p for p in source.rglob("*") if p.name in CARRIED and "tensorboard" not in p.parts):
        parts = path.relative_to(source).parts
        if "checkpoints" in parts or (path.parent / "carried").is_dir() or (
                path.name not in ("study.json", "tasks.json", "teachers.json") and not (path.parent / "eval.json").is_file()):
            # (a run with a carried/ folder is being trained again: its log is the new training's, unfinished;
            # the set-aside files in carried/ have no eval.json beside them)
            continue
        to = target / path.relative_to(source)
        if path.name == "study.json" and to.exists():  # both sides' invocations, once each, in order
            log = {entry["started"]: entry for entry in (_read(to) or []) + (_read(path) or [])}
            to.write_text(json.dumps([log[k] for k in sorted(log)], indent=1))
        elif not to.exists() or (update and to.read_bytes() != path.read_bytes()):
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, to)
            copied.append(to)
    return copied


def record_start(args) -> None:
    """Append this invocation (commit, command, machine, time) to ``ROOT/study.json``."""
    from gigpo_gym.core.data import write_atomically

    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else platform.processor()
    path = Path(args.root) / "study.json"
    log = _read(path) or []
    log.append({"started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "commit": git("rev-parse", "HEAD"),
                "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")), "command": sys.argv,
                "cwd": str(Path.cwd()), "machine": f"{platform.node()}: {cpu}, {_cores()} cores", "threads": args.threads})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(log, indent=1))


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def run_stage(args, stage: str) -> None:
    started = time.perf_counter()
    print(f"== stage {stage} ({datetime.datetime.now():%Y-%m-%d %H:%M})", flush=True)
    if stage == "searchqa":
        run_pairs(searchqa_args(args), after_run=lambda seed, algo: algo == "grpo" and setting_evaluations(args, seed, None))
    elif stage == "grpo-settings":
        grpo_settings_stage(args)
    elif stage == "webshop":
        b = webshop_args(args)
        leaderboard_row(args, b, "warm-start")
        run_pairs(b, after_run=lambda seed, algo: seed == 0 and leaderboard_row(args, b, f"seed{seed}-{algo}"))
    elif stage == "teacher":
        play_teachers(args)
        run_pairs(webshop_args(args, teacher=True))
    elif stage == "trl-settings":
        trl_settings_stage(args)
    print(f"== stage {stage} done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    write_results(args, [stage])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="runs/study", help="where every run and evaluation goes")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"), help="where the results JSON and figures go")
    p.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3], help="SearchQA training seeds")
    p.add_argument("--grpo-lr", nargs="*", default=[],
                   help="GRPO learning rates beside the recipe's, a run per seed each (default: none; the recipe's "
                        "pilots found 1e-5 barely moves the warm start in 15 iterations)")
    p.add_argument("--grpo-iterations", nargs="*", type=int, default=[10],
                   help="GRPO iteration counts beside the recipe's (checkpoints of its runs)")
    p.add_argument("--questions", type=int, default=None,
                   help="SearchQA test questions, evenly spaced over the split (default: all of them)")
    p.add_argument("--validation", type=int, default=200, help="train-split questions to choose GRPO's setting on")
    p.add_argument("--webshop-goals", type=int, default=200, help="WebShop test goals, evenly spaced over the split")
    p.add_argument("--searchqa-config", default=str(ROOT / "configs" / "searchqa_smollm2.yaml"))
    p.add_argument("--webshop-config", default=str(ROOT / "configs" / "webshop_smollm2.yaml"))
    p.add_argument("--leaderboard-spec", default="webshop-test",
                   help="the leaderboard spec of the WebShop models' rows (written to --results)")
    p.add_argument("--trl-settings", nargs="+", choices=list(TRL_SETTINGS), default=["mini-batch-32", "env-reward", "both"],
                   help="stage trl-settings: the settings moved to TRL's, one run each per seed and algorithm")
    p.add_argument("--trl-seeds", nargs="+", type=int, default=[0, 1], help="stage trl-settings: training seeds")
    p.add_argument("--trl-algos", nargs="+", choices=ALGOS, default=["grpo"], help="stage trl-settings: algorithms")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override for every run (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    p.add_argument("--keep-optimizer", action="store_true", help="keep finished runs' optimiser states")
    p.add_argument("--report", action="store_true",
                   help="only write the results of what ROOT holds: those of --stages (default: all)")
    p.add_argument("--carry", metavar="DIR", default=None,
                   help="results files of earlier sittings (the study's: benchmarks/results/llm_study_runs): copied "
                        "into ROOT at the start (what they hold is not run again), and ROOT's copied there after each "
                        "stage; commit that folder to carry a study over (default: no carrying)")
    return p


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.report:
        write_results(args, args.stages)
        return
    if args.carry:
        carried = carry(Path(args.carry), Path(args.root))
        print(f"carried over {len(carried)} results files from {args.carry}", flush=True)
    record_start(args)
    for stage in args.stages:
        run_stage(args, stage)  # each ends by writing the results so far
        if args.carry:
            carry(Path(args.root), Path(args.carry), update=True)


if __name__ == "__main__":
    main()
