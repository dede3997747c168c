"""``gigpo_gym/ALFWorld-v0``: the contract, seeding, anchors, bad input, demos."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_gym
from gigpo_gym.core.env import INFO_KEYS
from gigpo_gym.envs.alfworld.cli import add_cli
from gigpo_gym.envs.alfworld.demos import export_expert_demos
from gigpo_gym.envs.alfworld.env import ALFWorldEnv

DATA = Path(__file__).parent / "fixtures" / "alfworld"


def test_check_env_passes_without_warnings():
    env = gym.make("gigpo_gym/ALFWorld-v0", render_mode="ansi").unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)
    env.reset(seed=0)
    assert env.render().startswith("-= Welcome to TextWorld, ALFRED! =-")


def test_info_contract_and_reset_by_seed_and_id():
    env = ALFWorldEnv(num_tasks=10)
    obs, info = env.reset(seed=13)
    assert set(INFO_KEYS) <= set(info) and {"gamefile", "anchor_text"} <= set(info)
    assert info["task_id"] == ALFWorldEnv(num_tasks=10).reset(seed=3)[1]["task_id"]  # 13 % 10
    assert info["anchor_text"] == obs and info["task_type"] in {"pick", "look", "clean", "heat", "cool", "pick2"}
    again, info2 = env.reset(options={"task_id": info["task_id"]})
    assert again == obs and info2["anchor"] == info["anchor"]
    assert env.reset(options={"task_id": "train/3"})[0] == obs
    with pytest.raises(KeyError, match="unknown task_id 'train/99'"):
        env.reset(options={"task_id": "train/99"})


def test_win_gives_reward_one_and_terminates():
    env = gym.make("gigpo_gym/ALFWorld-v0")
    obs, info = env.reset(seed=1)
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            break
    assert terminated and not truncated and total == 1.0 and info["won"] and steps < 20
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step("look")


def test_truncation_after_50_steps():
    env = gym.make("gigpo_gym/ALFWorld-v0")
    env.reset(seed=2)
    for i in range(50):
        _, reward, terminated, truncated, _ = env.step("look")
        assert not terminated and reward == 0.0
    assert truncated


def test_bad_input():
    env = ALFWorldEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(3)
    with pytest.raises(ValueError, match="max_action_length=1024"):
        env.step("x" * 2000)
    for bad in ["", "dance", "<action>look</action>"]:
        obs, reward, terminated, _, info = env.step(bad)
        assert (obs, reward, terminated, info["action_valid"]) == ("Nothing happens.", 0.0, False, False)
    assert env.step("look")[4]["action_valid"]


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="unknown task type 'heating'.*Did you mean 'heat'"):
        ALFWorldEnv(task_types=["heating"])
    with pytest.raises(ValueError, match="unknown split 'trian'.*Did you mean 'train'"):
        ALFWorldEnv(split="trian")
    with pytest.raises(ValueError, match="num_tasks must be a positive int"):
        ALFWorldEnv(num_tasks=0)
    env = ALFWorldEnv(split="eval_out_of_distribution", task_types="pick_clean_then_place_in_recep")
    assert env.split == "valid_unseen" and env.num_tasks == 134
    assert {env.reset(seed=s)[1]["task_type"] for s in range(5)} == {"clean"}


def test_anchor_sees_inventory_behind_identical_text():
    env = ALFWorldEnv(split="train", data_dir=str(DATA))
    env.reset(seed=0)
    empty_obs, _, _, _, empty = env.step("go to sinkbasin 1")
    for cmd in ("go to countertop 1", "take mug 2 from countertop 1"):
        env.step(cmd)
    full_obs, _, _, _, full = env.step("go to sinkbasin 1")
    assert empty_obs == full_obs == "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."
    assert empty["anchor"] != full["anchor"]
    # Equal states give equal anchors (look changes nothing).
    assert env.step("look")[4]["anchor"] == full["anchor"]


def test_anchor_is_scoped_to_the_task():
    env = ALFWorldEnv()
    anchors = {env.reset(seed=s)[1]["anchor"] for s in range(20)}
    assert len(anchors) == 20


_TRANSCRIPT = """
import json, random, sys
import gymnasium as gym
import gigpo_gym
env = gym.make("gigpo_gym/ALFWorld-v0", split="valid_unseen")
rng, rows = random.Random(5), []
for seed in (0, 7, 21):
    obs, info = env.reset(seed=seed)
    rows.append([obs, info["anchor"], info["admissible_actions"]])
    for _ in range(15):
        obs, r, term, trunc, info = env.step(rng.choice(info["admissible_actions"]))
        rows.append([obs, r, info["anchor"], info["admissible_actions"]])
json.dump(rows, sys.stdout)
"""


def test_transcripts_are_identical_across_processes():
    outputs = []
    for hash_seed in ("1", "987"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run([sys.executable, "-c", _TRANSCRIPT], capture_output=True, text=True, env=env, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 48


def test_export_expert_demos(tmp_path):
    out = tmp_path / "demos" / "train.jsonl"
    rows = export_expert_demos(out, split="train", n=5, seed=0)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == rows > 5
    assert set(lines[0]) == {"task_id", "task_type", "step", "obs", "admissible_actions", "action", "reward", "done", "won"}
    finals = [row for row in lines if row["done"]]
    assert len(finals) == 5 and all(row["won"] and row["reward"] == 1.0 for row in finals)
    assert all(row["action"] in row["admissible_actions"] for row in lines)
    assert not list(out.parent.glob(".*.tmp"))


def test_cli_parser_adds_alfworld_demos(tmp_path):
    parser = argparse.ArgumentParser(prog="gigpo-gym")
    add_cli(parser.add_subparsers(dest="command"))
    out = tmp_path / "d.jsonl"
    args = parser.parse_args(["alfworld", "demos", "--split", "valid_seen", "--n", "2", "--out", str(out)])
    assert args.func(args) == 0 and out.exists()


def test_registered_with_the_suite():
    assert gigpo_gym.registration.env_spec("gigpo_gym/ALFWorld-v0").max_episode_steps == 50


def test_search_expert_sweeps_the_listed_receptacles_and_wins():
    """The imitable expert only acts on what it has seen, and still finishes (almost) every task."""
    env = gym.make("gigpo_gym/ALFWorld-v0", max_episode_steps=80)
    won = 0
    for seed in range(60):
        obs, info = env.reset(seed=seed)
        listed = [name.removeprefix("and ").removeprefix("a ").strip() for name in
                  obs.split("you see ")[1].split(".\n")[0].rstrip(".").split(", ")]
        moves = []
        while True:
            command = env.unwrapped.expert_action("search")
            assert command in info["admissible_actions"]
            obs, _, terminated, truncated, info = env.step(command)
            if command.startswith("go to ") and not moves:
                moves.append(command.removeprefix("go to "))
            if terminated or truncated:
                break
        won += info["won"]
        assert moves[0] == listed[0]  # the sweep starts where the room description starts
    assert won >= 57
    with pytest.raises(ValueError, match="'plan' or 'search'"):
        env.unwrapped.expert_action("guess")
