"""``gigpo-gym prompt``: what a model reads at step K of a task, and what the run pays, for configs and specs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.algos.show import env_rewards, show
from gigpo_gym.algos.training.config import ConfigError, load_config
from gigpo_gym.wrappers import InputFormat, wrap_for_llm

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_s_first_prompt_is_the_one_its_training_envs_give(config):
    cfg = load_config(ROOT / "configs" / f"{config}.yaml")
    shown = show(config=config, env_seed=3)
    env = wrap_for_llm(gym.make(cfg.env.id, **cfg.env_kwargs("train")), cfg.prompt, cfg.env.anchor_mode)
    first, info = env.reset(seed=3)
    assert shown.text == first and shown.task_id == info["task_id"] and shown.step == 1
    assert shown.admissible_actions == info["admissible_actions"]
    assert shown.pays == f"the trainer {cfg.reward.describe()}" and shown.env_rewards
    assert shown.response_prefix == cfg.prompt.response_prefix


def test_a_later_step_shows_the_expert_s_history_and_what_the_trainer_pays_for_it():
    second = show(config="demo", step=2)
    assert "You have taken 1 step(s)" in second.text and second.step == 2 and second.steps >= 2
    assert second.reply.startswith("<action>") and second.action_valid and second.paid == 0.0
    last = show(config="demo", step=second.steps)
    assert last.paid == 10.0 and last.episode["won"] and last.episode["env_return"] == 1.0
    paid = show(config="webshop_smollm2", step=1, overrides=["reward.invalid_action_penalty=0.5"])
    assert paid.pays == "the trainer pays 10 x the env's reward, - 0.5 per invalid action"


@pytest.mark.parametrize("template", ["default", "paper", "tools"])
def test_a_spec_s_prompts_in_each_template(template):
    shown = show(spec="searchqa-test", template=template, step=2)
    assert shown.template == template and shown.pays.startswith("a leaderboard run pays nothing")
    if template == "tools":  # a chat: the tool instructions, the expert's call, the tool's answer
        assert [m["role"] for m in shown.messages] == ["user", "assistant", "tool"]
        assert [t["function"]["name"] for t in shown.tools] == ["answer", "search"]
    elif template == "paper":
        assert shown.text.startswith("Answer the given question. You must conduct reasoning")
    else:
        assert shown.messages is None and "Current observation (step 2)" in shown.text


def test_a_config_in_the_paper_s_template():
    shown = show(config="alfworld_paper", overrides=["prompt.template=paper"], step=2)
    assert shown.text.startswith("\nYou are an expert agent operating in the ALFRED Embodied Environment.")


def test_the_token_count_is_the_policy_s(tmp_path):
    """With a tokenizer, the count is what ``HFPolicy.encode_prompt`` feeds the model (no chat template here)."""
    from gigpo_gym.algos.policies.hf import HFPolicy
    from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

    folder = build_tiny(["go to desk 1", "You are a household agent.", "<action>look</action>"],
                        TinySpec(vocab_size=300, hidden_size=16, intermediate_size=32, num_layers=1), name="show-test")
    shown = show(config="alfworld_smollm2", step=2, tokenizer=str(folder))
    policy = HFPolicy.from_pretrained(folder, device="cpu", input_format=InputFormat(response_prefix="<action>"),
                                      max_prompt_tokens=100_000)
    assert shown.tokens == len(policy.encode_prompt(shown.text)) and shown.model_text == shown.text + "<action>"
    assert shown.messages is None  # the tiny tokenizer has no chat template


@pytest.mark.slow
def test_with_a_chat_template_the_count_and_the_text_are_smollm2_s():
    from gigpo_gym.algos.policies.hf import HFPolicy
    from gigpo_gym.algos.policies.smollm import smollm2_path

    shown = show(config="searchqa_smollm2", step=2, tokenizer="smollm2")
    policy = HFPolicy.from_pretrained(smollm2_path(), device="cpu", max_prompt_tokens=100_000)
    assert shown.tokens == len(policy.encode_prompt(shown.text))
    assert [m["role"] for m in shown.messages] == ["user"] and shown.model_text.startswith("<|im_start|>")


def test_mistakes_are_one_line_each():
    with pytest.raises(ValueError, match=r"the expert's episode of this task ends after \d+ steps; --step must be <= \d+"):
        show(config="searchqa_smollm2", step=40)
    with pytest.raises(ValueError, match=r"--step counts from 1 \(the first prompt\), got 0"):
        show(config="demo", step=0)
    with pytest.raises(ValueError, match=r"--prompt picks a spec's template; with --config set prompt.template"):
        show(config="demo", template="paper")
    with pytest.raises(ValueError, match=r"--set overrides a config's keys"):
        show(spec="searchqa-test", overrides=["prompt.history_length=1"])
    with pytest.raises(ConfigError, match=r"--config 'dem' is neither a file nor a shipped config \(did you mean 'demo'\?\)"):
        show(config="dem")


def test_the_env_s_rewards_come_from_its_docstring():
    assert env_rewards("gigpo_gym/ALFWorld-v0") == "1.0 on the step that completes the goal, else 0.0."
    assert env_rewards("gigpo_gym/SearchQA-v0").startswith("Exact match (0/1)")


def test_the_command_prints_the_prompt_and_the_reward():
    run = [sys.executable, "-m", "gigpo_gym.cli", "prompt", "--config", "demo", "--step", "2"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "what the model reads:\nYou are a household agent." in out.stdout
    assert "what is paid: the trainer pays 10 x success (1 on the winning step), - 0.1 per invalid action" in out.stdout
    as_json = subprocess.run(run + ["--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert json.loads(as_json.stdout)["step"] == 2
    bad = subprocess.run([*run[:4], "--spec", "nope"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown leaderboard spec 'nope'")
    assert len(bad.stderr.strip().splitlines()) == 1
