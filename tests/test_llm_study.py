"""benchmarks/bench_llm_study.py: the study skips what is done, redoes only what is missing, and its statistics over seeds."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.name=tiny", "model.device=cpu", "model.tiny.corpus_episodes=2", "model.tiny.vocab_size=300",
        "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "sft.steps=1", "sft.episodes=3", "iterations=2",
        "save_every=1", "env.num_groups=1", "env.group_size=2", "sampling.max_new_tokens=6", "optim.micro_batch_size=4",
        "model.max_prompt_tokens=128"]


def load_study():
    spec = importlib.util.spec_from_file_location("bench_llm_study", ROOT / "benchmarks" / "bench_llm_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    return study


def test_over_seeds_is_the_student_t_interval_with_n_minus_1_df_and_counts_the_seeds_each_side_wins():
    study = load_study()
    d = study.over_seeds({0: 0.05, 1: -0.01, 2: 0.03, 3: 0.03})
    sd = math.sqrt(((0.05 - 0.025) ** 2 + 0.035 ** 2 + 2 * 0.005 ** 2) / 3)  # mean 0.025, n - 1 = 3
    half = 3.182 * sd / 2  # t(0.975, 3 df) * sd / sqrt(4)
    assert d["mean"] == pytest.approx(0.025)
    assert d["ci95"] == pytest.approx([0.025 - half, 0.025 + half])
    assert (d["favour_first"], d["favour_second"], d["ties"]) == (3, 1, 0)
    assert study.over_seeds({0: 0.0, 1: 0.02})["ties"] == 1
    # the better setting on validation, the recipe (listed first) on a tie
    assert study.choose({"grpo": 0.40, "grpo-10it": 0.45, "grpo-lr1e-5": 0.45}) == "grpo-10it"
    assert study.choose({"grpo": 0.45, "grpo-10it": 0.45}) == "grpo"


@pytest.mark.slow
def test_the_study_skips_every_finished_stage_and_redoes_only_what_is_missing(tmp_path, monkeypatch):
    """A tiny model through the SearchQA stages: warm start, a GiGPO/GRPO pair, GRPO's settings on validation."""
    study = load_study()
    argv = ["--root", str(tmp_path / "study"), "--results", str(tmp_path / "results"), "--stages", "searchqa",
            "grpo-settings", "--seeds", "0", "--grpo-lr", "--grpo-iterations", "1", "--questions", "2",
            "--validation", "2", *(x for o in TINY for x in ("--set", o))]
    study.main(argv)
    root = tmp_path / "study" / "searchqa"
    # GRPO's other setting (its iteration-1 checkpoint) on both question sets, whichever validation chooses
    for name in ("after-sft", "seed0-gigpo", "seed0-grpo", "validation/seed0-grpo", "validation/seed0-grpo-1it",
                 "seed0-grpo-1it"):
        assert (root / name / "eval.json").is_file(), name
    assert not list(root.glob("seed0-*/checkpoints/iter-*/optimizer.pt"))  # finished runs keep weights only
    assert (root / "seed0-grpo" / "checkpoints" / "iter-000001" / "policy.safetensors").is_file()
    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    loaded = resolve_policy(str(root / "seed0-grpo"), "gigpo_gym/SearchQA-v0", device="cpu")  # the leaderboard's rows
    assert loaded.details["algo"] == "grpo" and loaded.details["iteration"] >= 1
    loaded.close()
    validation = json.loads((root / "validation" / "tasks.json").read_text())["task_ids"]
    test = [e["task_id"] for e in json.loads((root / "seed0-grpo" / "eval.json").read_text())["episodes"]]
    assert len(validation) == 2 and not set(validation) & set(test)
    result = json.loads((tmp_path / "results" / "llm_study_searchqa.json").read_text())
    assert result["grpo_chosen"] in ("grpo", "grpo-1it") and set(result["per_seed"]["0"]) >= {"sft", "gigpo", "grpo"}
    assert (tmp_path / "results" / "llm_study_searchqa.png").is_file()

    # the same command again: nothing is trained or evaluated
    from gigpo_gym.algos.training import trainer

    run_training = trainer.run_training

    def refuse(*a, **k):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(trainer, "run_training", refuse)
    monkeypatch.setattr(trainer.Trainer, "warm_start", refuse)
    monkeypatch.setattr(study.bench, "evaluate", refuse)
    study.main(argv)

    # an evaluation killed before it wrote its file, and one of the validation's: those two run, nothing else
    (root / "seed0-grpo" / "eval.json").unlink()
    (root / "validation" / "seed0-grpo-1it" / "eval.json").unlink()
    played: list[int] = []
    monkeypatch.setattr(study.bench, "evaluate", lambda args, policy, cfg, tasks=None: played.append(tasks is None) or
                        {"episodes": [{"task_id": t, "task_type": "", "won": False, "score": 0.0, "steps": 1, "invalid": 0,
                                       "cut": 0, "replies": [], "actions": []} for t in (validation if tasks else test)],
                         "seconds": 0.0, "generated_tokens": 0})
    study.main(argv)
    assert sorted(played) == [False, True]  # one validation evaluation, one test evaluation

    # a later sitting on a new machine: the carried results, no weights; a setting evaluation trains GRPO again,
    # and the carried log the report cites stays as it was
    import shutil

    logged = (root / "seed0-grpo" / "metrics.jsonl").read_text()
    shutil.rmtree(root / "seed0-grpo" / "checkpoints")
    (root / "validation" / "seed0-grpo-1it" / "eval.json").unlink()
    monkeypatch.setattr(trainer, "run_training", run_training)
    played.clear()
    study.main(argv)
    assert played == [False]  # the validation evaluation of the retrained run's checkpoint, nothing else
    assert (root / "seed0-grpo" / "metrics.jsonl").read_text() == logged and not (root / "seed0-grpo" / "carried").exists()
    retrained = json.loads((root / "seed0-grpo" / "retrained.json").read_text())
    assert retrained["same_rollout_success"] and len(retrained["rollout_success"]) == 2


def test_a_later_sitting_carries_the_results_files_over_and_does_not_train_what_they_hold(tmp_path):
    study = load_study()
    old, new = tmp_path / "carried", tmp_path / "root"
    files = {"study.json": [{"started": "2026-11-27T13:16:02+00:00", "commit": "a"}],
             "searchqa/seed0-gigpo/eval.json": {"episodes": [{"won": True}]},
             "searchqa/seed0-gigpo/metrics.jsonl": "", "searchqa/seed0-gigpo/summary.json": {},
             "searchqa/seed0-gigpo/checkpoints/iter-000015/state.json": {}, "searchqa/seed0-gigpo/model.safetensors": "",
             "searchqa/seed1-gigpo/metrics.jsonl": "", "searchqa/seed1-gigpo/config.yaml": "",  # seed 1: unfinished
             # seed 0's GRPO run, being trained again for its weights: its log is the new, unfinished one
             "searchqa/seed0-grpo/eval.json": {}, "searchqa/seed0-grpo/metrics.jsonl": "new",
             "searchqa/seed0-grpo/carried/metrics.jsonl": "old"}
    for name, content in files.items():
        (old / name).parent.mkdir(parents=True, exist_ok=True)
        (old / name).write_text(content if isinstance(content, str) else json.dumps(content))
    (new).mkdir()
    (new / "study.json").write_text(json.dumps([{"started": "2026-11-28T09:00:00+00:00", "commit": "b"}]))
    copied = study.carry(old, new)
    assert sorted(p.relative_to(new).as_posix() for p in copied) == [
        "searchqa/seed0-gigpo/eval.json", "searchqa/seed0-gigpo/metrics.jsonl", "searchqa/seed0-gigpo/summary.json"]
    # (in a sitting the carried folder holds seed 0's GRPO files already; a retraining in progress never replaces them)
    assert [e["commit"] for e in json.loads((new / "study.json").read_text())] == ["a", "b"]  # both sittings, in order
    # the carried evaluation stands for the run: nothing trains (this namespace could not build a config)
    args = study.argparse.Namespace(run_root=str(new / "searchqa"))
    assert study.bench.train(args, 0, "gigpo") == {"episodes": [{"won": True}]}

    # the sitting's results go back with update=True: a changed file replaces the carried one, a kept one stays
    (new / "searchqa" / "seed0-gigpo" / "eval.json").write_text(json.dumps({"episodes": [{"won": False}]}))
    assert [p.relative_to(old).as_posix() for p in study.carry(new, old, update=True)] == ["searchqa/seed0-gigpo/eval.json"]
    assert json.loads((old / "searchqa" / "seed0-gigpo" / "eval.json").read_text()) == {"episodes": [{"won": False}]}


@pytest.mark.slow
def test_the_webshop_stage_gives_seed_0s_models_leaderboard_rows_in_their_own_observation_mode(tmp_path, monkeypatch):
    study = load_study()
    spec = json.loads((ROOT / "benchmarks" / "specs" / "webshop-test.json").read_text())
    spec.update(name="webshop-tiny", episodes=2, max_steps=3)
    (tmp_path / "webshop-tiny.json").write_text(json.dumps(spec))
    argv = ["--root", str(tmp_path / "study"), "--results", str(tmp_path / "results"), "--stages", "webshop",
            "--webshop-goals", "2", "--leaderboard-spec", str(tmp_path / "webshop-tiny.json"),
            *(x for o in TINY for x in ("--set", o))]
    study.main(argv)
    rows = {json.loads(p.read_text())["policy"]["name"]: json.loads(p.read_text())
            for p in (tmp_path / "results").glob("webshop-tiny__*.json")}
    assert sorted(rows) == [f"SmolLM2-135M-Instruct {m} (webshop_smollm2, text_rich)" for m in ("SFT", "SFT+GRPO", "SFT+GiGPO")]
    assert all(r["counts"]["episodes"] == 2 for r in rows.values())
    assert rows["SmolLM2-135M-Instruct SFT+GRPO (webshop_smollm2, text_rich)"]["policy"]["details"]["algo"] == "grpo"

    # the same command again: the rows are there, so no model plays them again
    from gigpo_gym.algos.leaderboard import cli

    monkeypatch.setattr(cli, "main", lambda argv: pytest.fail(f"a row ran again: {argv}"))
    study.main(argv)


def test_each_trl_setting_moves_only_its_own_fields_of_the_searchqa_recipe():
    from gigpo_gym.algos.training.config import load_config

    study = load_study()
    config = ROOT / "configs" / "searchqa_smollm2.yaml"
    recipe = load_config(config)
    before, paid, both, no_penalty, keep_tied = (load_config(config, study.TRL_SETTINGS[name]) for name in
                                                 ("mini-batch-32", "env-reward", "both", "no-penalty", "keep-tied"))
    assert recipe.optim.mini_batch_size is None  # one optimiser step per iteration, as TRL
    assert before.optim == dataclasses.replace(recipe.optim, mini_batch_size=32) and before.reward == recipe.reward
    assert (paid.reward.scale, paid.reward.source, paid.reward.invalid_action_penalty) == (1.0, "env", 0.0)
    assert paid.optim == dataclasses.replace(before.optim, skip_zero_advantage=False) and paid.env == recipe.env
    assert both.reward == paid.reward and both.optim == dataclasses.replace(recipe.optim, skip_zero_advantage=False)
    assert no_penalty.reward == dataclasses.replace(recipe.reward, invalid_action_penalty=0.0)
    assert no_penalty.optim == recipe.optim
    assert keep_tied.optim == dataclasses.replace(recipe.optim, skip_zero_advantage=False)
    assert keep_tied.reward == recipe.reward


@pytest.mark.slow
def test_the_trl_settings_stage_trains_each_setting_from_the_shared_warm_start_and_reports_its_gain(tmp_path):
    study = load_study()
    argv = ["--root", str(tmp_path / "study"), "--results", str(tmp_path / "results"), "--stages", "trl-settings",
            "--trl-seeds", "0", "--trl-settings", "mini-batch-32", "env-reward", "--questions", "2",
            *(x for o in TINY for x in ("--set", o))]
    study.main(argv)
    root = tmp_path / "study" / "searchqa"
    assert [p.name for p in sorted(root.glob("*/eval.json"))] == ["eval.json"] * 3
    assert sorted(p.parent.name for p in root.glob("*/eval.json")) == [
        "after-sft", "seed0-grpo-env-reward", "seed0-grpo-mini-batch-32"]
    assert "mini_batch_size: 32" in (root / "seed0-grpo-mini-batch-32" / "config.yaml").read_text()
    result = json.loads((tmp_path / "results" / "llm_study_trl_settings.json").read_text())
    assert set(result["runs"]) == {"grpo-mini-batch-32", "grpo-env-reward"}
    assert list(result["runs"]["grpo-env-reward"]["per_seed"]) == ["0"]
    assert len(list((root / "warm-start").glob("*.safetensors"))) == 1  # one warm start for every setting
    # the stage writes only its own results file: the seed study's stays as the searchqa stage wrote it
    assert sorted(p.name for p in (tmp_path / "results").glob("*.json")) == ["llm_study_trl_settings.json"]


def test_the_trl_settings_report_pairs_each_setting_with_the_recipe_and_trls_grpo_by_question(tmp_path):
    study = load_study()
    root, results = tmp_path / "study", tmp_path / "results"
    questions = [f"q{i}" for i in range(6)]

    def episodes(won):  # the outcome of each question, in order
        return {"episodes": [{"task_id": q, "won": w} for q, w in zip(questions, won)], "seconds": 1.0}

    evals = {"after-sft": [0, 0, 1, 1, 0, 0], "seed0-grpo": [0, 1, 1, 0, 0, 0],
             "seed0-grpo-env-reward": [1, 1, 1, 0, 0, 1], "seed0-gigpo-env-reward": [1, 1, 1, 1, 1, 0],
             "seed1-grpo": [1, 1, 1, 1, 0, 0]}
    for run, won in evals.items():
        (root / "searchqa" / run).mkdir(parents=True)
        (root / "searchqa" / run / "eval.json").write_text(json.dumps(episodes(won)))
    resumed = root / "searchqa" / "seed0-grpo-env-reward"  # resumed after iteration 1: its summary counts from there
    (resumed / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "rollout/success": 0.5,
                                                                "time/iteration_seconds": 60.0}) + "\n" for i in (1, 2)))
    (resumed / "summary.json").write_text(json.dumps({"seconds": 70.0}))
    trl = results / "trl_searchqa_runs" / "grpo"  # TRL's evaluation keeps EM per question id
    trl.mkdir(parents=True)
    (trl / "eval.json").write_text(json.dumps({"em": dict(zip(questions, [1, 1, 1, 1, 0, 0])), "seconds": 1.0}))
    trl_seed1 = results / "trl_searchqa_runs_seed1" / "grpo"  # another seed's TRL run, in its own folder
    trl_seed1.mkdir(parents=True)
    (trl_seed1 / "eval.json").write_text(json.dumps({"em": dict(zip(questions, [1, 1, 1, 1, 1, 0])), "seconds": 1.0}))
    (results / "llm_study_searchqa.json").write_text("the seed study's, kept")

    study.main(["--root", str(root), "--results", str(results), "--report", "--stages", "trl-settings",
                "--seeds", "0", "1", "--trl-seeds", "0"])
    out = json.loads((results / "llm_study_trl_settings.json").read_text())
    seed0 = out["runs"]["grpo-env-reward"]["per_seed"]["0"]
    # env-reward - the recipe: +1 on q0 and q5, 0 elsewhere: mean 2/6, both questions won, none lost
    assert seed0["over_recipe"]["mean"] == pytest.approx(2 / 6)
    assert (seed0["over_recipe"]["won"], seed0["over_recipe"]["lost"], seed0["over_recipe"]["questions"]) == (2, 0, 6)
    assert seed0["over_recipe"]["sem_paired"] == pytest.approx(math.sqrt((2 / 6) * (4 / 6) * 6 / 5 / 6))
    # TRL's GRPO - env-reward: +1 on q3, -1 on q5
    assert (seed0["trl_grpo_over_this"]["mean"], seed0["trl_grpo_over_this"]["won"],
            seed0["trl_grpo_over_this"]["lost"]) == (0.0, 1, 1)
    assert seed0["gain"]["mean"] == pytest.approx(2 / 6)  # over the warm start, as before
    assert seed0["train_seconds"] == 120.0 and seed0["rollout_success"] == [0.5, 0.5]  # both iterations' time
    assert "over_recipe" not in out["runs"]["grpo (recipe)"]["per_seed"]["0"]
    assert out["runs"]["grpo-env-reward"]["over_recipe_over_seeds"]["mean"] == pytest.approx(2 / 6)
    # TRL's GRPO - the recipe's GRPO: +2/6 on seed 0 (q0, q3), +1/6 on seed 1 (q4); over seeds, ahead on both
    behind_trl = out["runs"]["grpo (recipe)"]["trl_grpo_over_this_over_seeds"]
    assert behind_trl["mean"] == pytest.approx(1 / 4) and behind_trl["favour_first"] == 2
    assert behind_trl["seeds"] == [0, 1]
    # GiGPO - GRPO in the setting: +1 on q3 and q4, -1 on q5; only where both algorithms ran
    assert list(out["gigpo_minus_grpo"]) == ["env-reward"]
    gigpo_over_grpo = out["gigpo_minus_grpo"]["env-reward"]["per_seed"]["0"]
    assert (gigpo_over_grpo["mean"], gigpo_over_grpo["won"], gigpo_over_grpo["lost"]) == (pytest.approx(1 / 6), 2, 1)
    assert out["gigpo_minus_grpo"]["env-reward"]["over_seeds"]["mean"] == pytest.approx(1 / 6)
    # --report with --stages rewrote that stage's file only
    assert (results / "llm_study_searchqa.json").read_text() == "the seed study's, kept"
