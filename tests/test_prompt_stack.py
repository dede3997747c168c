"""One prompt stack: a model sees, task for task and step for step, the prompts it trained on when it is evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gigpo_gym.algos.leaderboard.policies import resolve_policy
from gigpo_gym.algos.leaderboard.runner import Evaluation, load_spec
from gigpo_gym.algos.policies.reference import ExpertPolicy
from gigpo_gym.algos.training.checkpoint import RunFolder
from gigpo_gym.algos.training.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SPEC_OF = {"gigpo_gym/ALFWorld-v0": "alfworld-valid_seen", "gigpo_gym/WebShop-v0": "webshop-test",
           "gigpo_gym/SearchQA-v0": "searchqa-test"}
#: Every shipped config, and the paper's prompts on the paper's setting.
CASES = [(p.name, []) for p in sorted((ROOT / "configs").glob("*.yaml"))] + [("alfworld_paper.yaml", ["prompt.template=paper"])]


def _played(envs, steps: int = 3, **reset) -> list[str]:
    """The prompts of env 0's first ``steps`` steps, the expert acting."""
    obs, _ = envs.reset(**reset)
    prompts = [obs[0]]
    for _ in range(steps - 1):
        action = envs.call("expert_action")[0]
        reply = action if action.startswith("<") else f"<action>{action}</action>"  # SearchQA's expert writes its tags
        obs, _, terminated, truncated, _ = envs.step([reply])
        if terminated[0] or truncated[0]:
            break
        prompts.append(obs[0])
    envs.close()
    return prompts


@pytest.mark.parametrize("config, overrides", CASES, ids=[f"{c}{' paper' if o else ''}" for c, o in CASES])
def test_a_run_s_prompts_on_the_leaderboard_are_its_training_prompts_byte_for_byte(config, overrides, tmp_path,
                                                                                    monkeypatch):
    cfg = load_config(ROOT / "configs" / config, [*overrides, f"run_dir={tmp_path / 'run'}"])
    spec = load_spec(SPEC_OF[cfg.env.id])
    run = RunFolder(cfg.run_dir)
    run.write_config(cfg)
    (run.checkpoints / "iter-000001").mkdir(parents=True)
    (run.checkpoints / "latest").write_text("iter-000001\n")
    # the prompts are the question, not the model: the run's policy is stood in for
    monkeypatch.setattr("gigpo_gym.algos.training.models.build_policy", lambda cfg: ExpertPolicy())
    monkeypatch.setattr(RunFolder, "load_weights", lambda self, weights, policy: {"iteration": 1})
    evaluation = Evaluation.of(spec, resolve_policy(str(run.path), spec.env_id, device="cpu"), 1)
    assert evaluation.prompt == cfg.prompt and evaluation.anchor_mode == cfg.env.anchor_mode

    # the trainer's held-out envs (its training envs' stack and prompt, the spec's tasks): the spec fixes the tasks
    # and the env's protocol (split, task types, world, top-k, step limit); the run, what it sees of them
    tasks = json.dumps(spec.env_kwargs)
    trained = load_config(run.path / RunFolder.CONFIG_FILE, [f"env.kwargs={tasks}", "env.eval_kwargs={}",
                                                               "env.eval_episodes=1", "env.backend=sync"])
    in_training = trained.make_envs("eval")
    task = in_training.reset(seed=5)[1]["task_id"][0]
    expected = _played(in_training, seed=5)
    seen = _played(evaluation.make_envs(), seed=spec.seeds[0], options={"env_options": [{"task_id": task}]})
    assert seen == expected and len(seen) >= 2
    if cfg.prompt.observation_mode is not None:  # WebShop's text_rich pages reach the leaderboard too
        assert evaluation.env_kwargs["observation_mode"] == cfg.prompt.observation_mode


@pytest.mark.slow
def test_the_paper_s_prompts_train_a_model(tmp_path):
    """``prompt.template: paper``: the warm start's transcripts and the rollouts are the paper's (Search-R1's) prompts."""
    from gigpo_gym.algos.training.sft import expert_demonstrations
    from gigpo_gym.algos.training.trainer import Trainer
    from gigpo_gym.envs.searchqa.prompts import SEARCH_R1_TEMPLATE

    cfg = load_config(None, [
        "env.id=gigpo_gym/SearchQA-v0", "env.num_groups=1", "env.group_size=2", "env.eval_episodes=0",
        "prompt.template=paper", "prompt.history_length=1", "model.device=cpu", "model.tiny.corpus_episodes=8",
        "model.tiny.vocab_size=512", "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64",
        "model.tiny.num_layers=1", "model.max_prompt_tokens=512", "sampling.max_new_tokens=6",
        "sampling.stop=['</search>', '</answer>']", "sft.steps=2", "sft.episodes=4", "sft.batch_size=4",
        "optim.mini_batch_size=8", "optim.micro_batch_size=8", "iterations=1", "eval_before=false", "progress=false",
        f"run_dir={tmp_path / 'run'}"])
    question = SEARCH_R1_TEMPLATE.split("{question}")[0]
    demos = expert_demonstrations(cfg.env.id, 2, env_kwargs=cfg.env_kwargs(), wrapper=cfg.wrapper())
    assert demos and all(prompt.startswith(question) for prompt, _ in demos)
    with Trainer(cfg) as trainer:
        summary = trainer.train(echo=lambda *_: None)
        rollout = trainer.rollout(2)
    assert summary["sft_loss"] and (tmp_path / "run" / "checkpoints" / "iter-000001").is_dir()
    assert rollout.prompts and all(p.startswith(question) for p in rollout.prompts)
