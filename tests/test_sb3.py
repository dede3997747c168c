"""Stable-Baselines3 adapters: slots and masks, stable hashed features, PPO trains, leaderboard policy."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import gigpo_gym  # noqa: F401
from gigpo_gym.algos.policies.sb3 import SB3Policy
from gigpo_gym.wrappers.sb3 import AdmissibleDiscrete, HashedText, TextHasher, make_sb3_env

pytest.importorskip("stable_baselines3")


def test_slots_follow_the_admissible_list_and_unused_slots_are_masked():
    env = AdmissibleDiscrete(gym.make("gigpo_gym/ALFWorld-v0", split="valid_seen"), max_actions=48)
    _, info = env.reset(seed=3)
    slots = info["slots"]
    assert slots == info["admissible_actions"][:48] and env.action_space == gym.spaces.Discrete(48)
    mask = env.action_masks()
    assert mask.shape == (48,) and mask.dtype == bool and mask.sum() == len(slots) and mask[: len(slots)].all()
    target = slots.index("look") if "look" in slots else 0
    _, _, _, _, info = env.step(target)
    assert info["action_valid"] and info["slot_used"]
    _, _, _, _, info = env.step(47)  # an unused slot: an invalid action, nothing raises
    assert not info["action_valid"] and not info["slot_used"]


def test_too_many_admissible_actions_are_cut_and_counted():
    env = AdmissibleDiscrete(gym.make("gigpo_gym/ALFWorld-v0", split="valid_seen"), max_actions=3)
    _, info = env.reset(seed=0)
    assert len(info["slots"]) == 3 and info["slots_dropped"] == len(info["admissible_actions"]) - 3
    assert env.action_masks().all()


def test_open_action_space_env_is_refused():
    env = AdmissibleDiscrete(gym.make("gigpo_gym/SearchQA-v0"), max_actions=8)
    with pytest.raises(ValueError, match=r"needs an env that lists admissible actions; gigpo_gym/SearchQA-v0"):
        env.reset(seed=0)


def test_hashed_features_are_fixed_size_normalised_and_stable_across_processes():
    hasher = TextHasher(dim=64)
    vec = hasher("put a mug in the sink", "You arrive at sink 1.", ["go to sink 1", "look"])
    assert vec.shape == (64,) and vec.dtype == np.float32 and np.isclose(np.linalg.norm(vec), 1.0)
    assert not np.allclose(vec, hasher("put a mug in the sink", "You arrive at sink 1.", ["look", "go to sink 1"]))
    code = ("from gigpo_gym.wrappers.sb3 import TextHasher; "
            "print(TextHasher(dim=64)('put a mug in the sink', 'You arrive at sink 1.', ['go to sink 1', 'look']).tolist())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert np.allclose(eval(other), vec)
    with pytest.raises(ValueError, match="dim must be an int >= 8"):
        TextHasher(dim=4)


def test_wrapped_env_passes_sb3_env_checker():
    from stable_baselines3.common.env_checker import check_env

    env = make_sb3_env("gigpo_gym/WebShop-v0", max_actions=16, dim=128, env_kwargs={"split": "train"})
    check_env(env, warn=False)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert isinstance(env, HashedText) and env.action_masks().any()


@pytest.mark.parametrize("env_id", ["gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0"])
def test_plain_ppo_learns_a_few_hundred_steps(env_id):
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    env = make_sb3_env(env_id, max_actions=32, dim=128, env_kwargs={"split": "train", "max_episode_steps": 10})
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu",
                policy_kwargs={"net_arch": [32]})
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3 would make a /tmp/SB3-* folder per run
    model.learn(total_timesteps=192)
    assert model.num_timesteps >= 192


def test_maskable_ppo_model_joins_the_leaderboard(tmp_path):
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from stable_baselines3.common.logger import Logger
    from gigpo_gym.algos.leaderboard.runner import load_spec, run_spec, validate_result
    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    env = make_sb3_env("gigpo_gym/ALFWorld-v0", max_actions=32, dim=128, env_kwargs={"split": "train", "max_episode_steps": 10})
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu",
                                    policy_kwargs={"net_arch": [32]})
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(total_timesteps=128)
    path = tmp_path / "model.zip"
    SB3Policy(model, {"algo": "MaskablePPO", "dim": 128, "max_actions": 32, "timesteps": 128}).save(path)
    spec = load_spec("alfworld-valid_seen")
    loaded = resolve_policy(f"sb3:{path}", spec.env_id)
    result = run_spec(spec, loaded, episodes=2, progress=False)
    validate_result(result)
    assert result["policy"]["kind"] == "sb3" and result["counts"]["crashed"] == 0
    # masked greedy actions are always admissible
    assert all(e["invalid_steps"] == 0 for e in result["episodes"])


def test_module_example_runs():
    import doctest

    from gigpo_gym.wrappers import sb3

    result = doctest.testmod(sb3)
    assert result.attempted > 0 and result.failed == 0


def test_webshop_search_template_becomes_a_search_for_the_instruction():
    env = AdmissibleDiscrete(gym.make("gigpo_gym/WebShop-v0", split="test"), max_actions=16)
    _, info = env.reset(seed=1)
    assert info["slots"] == [f"search[{info['instruction']}]"]
    obs, _, _, _, info = env.step(0)
    assert info["action_valid"] and "Total results: 0" not in obs and info["page"] != "search"
