"""Properties every registered env id must have (the contract in core.env.TextEnv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_gym
from gigpo_gym.core import INFO_KEYS
from gigpo_gym.registration import ENV_SPECS
from gigpo_gym.wrappers import wrap_for_llm

ENV_IDS = [spec.id for spec in ENV_SPECS if spec.available]


def _first_action(env: gym.Env, info: dict) -> str:
    """A valid action in the LLM's format: an admissible command, or the env's own tag."""
    if info["admissible_actions"]:
        return f"<action>{info['admissible_actions'][0]}</action>"
    tag = env.unwrapped.metadata["action_tags"][0]
    return f"<{tag}>the first query</{tag}>"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes_without_warnings(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_has_the_contract_keys_and_wrappers_work(env_id):
    env = wrap_for_llm(gym.make(env_id))
    prompt, info = env.reset(seed=3)
    assert set(INFO_KEYS) <= set(info) and isinstance(info["admissible_actions"], list)
    assert info["observation"] in prompt
    obs, reward, terminated, truncated, info = env.step(_first_action(env, info))
    assert set(INFO_KEYS) <= set(info) and info["action_valid"] is True
    obs, reward, terminated, truncated, info = env.step("no tags, just words")
    assert info["action_valid"] is False and info["parsed_action"] is None
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(42)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_over_long_action_names_the_bound(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    bound = env.unwrapped.max_action_length
    with pytest.raises(ValueError, match=f"max_action_length={bound}"):
        env.step("a" * (bound + 1))


_TRANSCRIPT = """
import json, sys, gymnasium as gym
env = gym.make(sys.argv[1])
obs, info = env.reset(seed=int(sys.argv[2]))
rows = [[obs, info["anchor"], info["admissible_actions"]]]
for step in range(6):
    actions = info["admissible_actions"] or ["<search>capital city</search>"]
    obs, reward, terminated, truncated, info = env.step(actions[(7 * step) % len(actions)])
    rows.append([obs, reward, info["anchor"], info["admissible_actions"]])
    if terminated or truncated:
        break
print(json.dumps(rows))
"""


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_transcript_in_any_process(env_id):
    """A third-party script (never importing gigpo_gym) under two hash seeds."""
    make_id = f"gigpo_gym:{env_id}"
    transcripts = []
    for hashseed in ("1", "999"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        out = subprocess.run([sys.executable, "-c", _TRANSCRIPT, make_id, "17"], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        transcripts.append(json.loads(out.stdout))
    assert transcripts[0] == transcripts[1]
    assert len(transcripts[0]) >= 2


def test_every_spec_is_registered_with_its_step_limit():
    for spec in ENV_SPECS:
        assert gym.spec(spec.id).max_episode_steps == spec.max_episode_steps
    assert {"gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0", "gigpo_gym/SearchQA-v0"} <= set(ENV_IDS)
    assert gigpo_gym.__version__
