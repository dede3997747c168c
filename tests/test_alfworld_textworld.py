"""``ALFWorldTextWorldEnv``: the reference TextWorld engine behind the native env's contract.

Its gymnasium checks and cross-process transcripts are in test_suite.py, with every registered id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gigpo_gym.core import INFO_KEYS
from gigpo_gym.envs.alfworld.env import ALFWorldEnv
from gigpo_gym.envs.alfworld.textworld_env import ALFWorldTextWorldEnv, reference_engine

try:
    reference_engine()
    MISSING = None
except ImportError as e:
    MISSING = str(e)
needs_engine = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def test_missing_engine_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fast_downward", None)  # import fails as when not installed
    with pytest.raises(ImportError, match=r'ALFWorld-TextWorld-v0 .*pip install "gigpo-gym\[alfworld\]"'):
        ALFWorldTextWorldEnv()


@pytest.fixture(scope="module")
def env():
    if MISSING:
        pytest.skip(MISSING)
    env = ALFWorldTextWorldEnv(split="valid_seen")
    yield env
    env.close()


@needs_engine
@pytest.mark.alfworld_engine
def test_importing_the_engine_keeps_alfworld_data_unset():
    """``import alfworld`` sets $ALFWORLD_DATA to its empty cache; the native env must not see it."""
    script = (
        "import os; from gigpo_gym.envs.alfworld.textworld_env import reference_engine; reference_engine(); "
        "from gigpo_gym.envs.alfworld.env import ALFWorldEnv; ALFWorldEnv().reset(seed=0); "
        "print(os.environ.get('ALFWORLD_DATA'))"
    )
    run_env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=run_env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


@needs_engine
@pytest.mark.alfworld_engine
def test_same_task_info_keys_and_anchors_as_the_native_env(env):
    native = ALFWorldEnv(split="valid_seen")
    obs, info = env.reset(seed=5)
    obs_n, info_n = native.reset(seed=5)
    assert set(INFO_KEYS) <= set(info) and set(info) == set(info_n)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-") and obs == obs_n
    for key in ("admissible_actions", "anchor", "task_id", "task_type", "goal", "won", "anchor_text"):
        assert info[key] == info_n[key], key
    assert Path(info["gamefile"]).name == "game.tw-pddl" and Path(info["gamefile"]).is_file()
    cmd = info["admissible_actions"][0]
    step, step_n = env.step(cmd), native.step(cmd)
    assert step[:4] == step_n[:4] and step[4]["anchor"] == step_n[4]["anchor"]


@needs_engine
@pytest.mark.alfworld_engine
def test_invalid_commands_answer_nothing_happens_and_keep_the_state(env):
    _, info = env.reset(options={"task_id": "valid_seen/3"})
    assert info["task_id"] == ALFWorldEnv(split="valid_seen").tasks.get(3).task_id
    for bad in ("", "Look", "go to nowhere 1"):
        obs, reward, terminated, truncated, after = env.step(bad)
        assert (obs, reward, terminated, after["action_valid"]) == ("Nothing happens.", 0.0, False, False)
        assert after["anchor"] == info["anchor"] and after["admissible_actions"] == info["admissible_actions"]
    assert env.step("  look  ")[4]["action_valid"] is True  # TextWorld strips, as the native env
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(3)
    with pytest.raises(ValueError, match="max_action_length=1024"):
        env.step("x" * 1025)


@needs_engine
@pytest.mark.alfworld_engine
@pytest.mark.slow
def test_the_planner_expert_wins(env):
    _, info = env.reset(seed=2)
    for _ in range(50):
        action = env.unwrapped.expert_action()
        assert action in info["admissible_actions"]
        _, reward, terminated, _, info = env.step(action)
        if terminated:
            break
    assert terminated and reward == 1.0 and info["won"]
    assert env.expert_action() == "look" and env.expert_plan() == []


@needs_engine
@pytest.mark.alfworld_engine
def test_generated_games_are_exported_once_to_the_cache(env):
    path = Path(env.game_file(7))
    assert path.is_file() and os.environ["GIGPO_GYM_CACHE"] in str(path)
    stamp = path.stat().st_mtime_ns
    again = ALFWorldTextWorldEnv(split="valid_seen")
    assert again.game_file(7) == str(path) and path.stat().st_mtime_ns == stamp
    data = json.loads(path.read_text())
    assert data["solvable"] is True and "UNKNOWN GOAL" not in data["grammar"] and data["walkthrough"]


@needs_engine
@pytest.mark.alfworld_engine
def test_plays_real_game_files_from_data_dir(tmp_path):
    from test_alfworld_reference import FIXTURE_DATA, with_reference_logic

    root = with_reference_logic(FIXTURE_DATA, tmp_path / "data")
    env = ALFWorldTextWorldEnv(split="train", data_dir=str(root))
    native = ALFWorldEnv(split="train", data_dir=str(root))
    assert env.num_tasks == native.num_tasks == 1  # the fixture's skip rules, as the reference
    obs, info = env.reset(seed=0)
    obs_n, info_n = native.reset(seed=0)
    assert (obs, info["anchor"], info["task_id"]) == (obs_n, info_n["anchor"], info_n["task_id"])
    assert info["gamefile"].endswith("trial_T20000101_000001/game.tw-pddl")
    env.close()


@needs_engine
@pytest.mark.alfworld_engine
def test_bad_kwargs_are_clear():
    with pytest.raises(ValueError, match="Did you mean 'valid_seen'"):
        ALFWorldTextWorldEnv(split="valid_sen")
    with pytest.raises(ValueError, match="num_tasks must be a positive int"):
        ALFWorldTextWorldEnv(num_tasks=0)
