"""SearchQA env: the Search-R1 protocol, the info contract, anchors, seeding and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.envs.searchqa.env import SearchQAEnv
from gigpo_gym.envs.searchqa.protocol import INVALID_MESSAGE

ENV_ID = "gigpo_gym/SearchQA-v0"
FIXTURES = Path(__file__).parent / "fixtures" / "searchqa" / "flashrag"


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Generated data goes to a temp cache, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GIGPO_GYM_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("GIGPO_SEARCHQA_DATA", raising=False)
        yield


@pytest.fixture()
def env():
    env = gym.make(ENV_ID)
    yield env
    env.close()


def test_check_env_passes_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make(ENV_ID).unwrapped)


def test_reset_shows_the_question_and_declares_the_protocol(env):
    obs, info = env.reset(seed=0)
    question = env.unwrapped._question
    assert obs == question.question and obs.endswith("?")
    assert info["admissible_actions"] == [] and info["action_valid"] and not info["won"]
    assert info["task_type"] in ("single_hop", "bridge", "comparison")
    assert info["anchor_text"] == obs and "em" not in info and "gold_answers" not in info
    assert env.metadata["action_tags"] == ("search", "answer")
    assert "<search>" in env.metadata["prompt_intro"] and "<answer>" in env.metadata["prompt_intro"]


def test_the_llm_prompt_asks_for_search_or_answer_tags_not_command_tags():
    from gigpo_gym.wrappers import HistoryPrompt

    obs, _ = HistoryPrompt(gym.make("gigpo_gym/SearchQA-v0"), history_length=2).reset(seed=0)
    closing = obs.rstrip().splitlines()[-1]
    assert "<search> query </search>" in closing and "<answer> answer </answer>" in closing
    assert "<action>" not in obs  # SearchQA's actions are its own tags


def test_search_returns_information_block_with_topk_docs(env):
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("<think>look it up</think><search> In which city </search>")
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    lines = obs.strip().removeprefix("<information>").removesuffix("</information>").split("\n")
    assert [line.split("(Title:")[0] for line in lines] == ["Doc 1", "Doc 2", "Doc 3"]
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, False, True)
    assert info["anchor_text"] == obs and "em" not in info


def test_answer_ends_episode_with_exact_match_reward_and_scores(env):
    env.reset(seed=2)
    gold = env.unwrapped._question.golden_answers[0]
    obs, reward, terminated, _, info = env.step(f"<answer> The {gold.upper()}. </answer>")
    assert (obs, reward, terminated, info["won"]) == ("", 1.0, True, True)
    assert info["em"] == 1.0 and info["f1"] == 1.0 and info["gold_answers"] == [gold]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("<answer>x</answer>")


def test_wrong_answer_scores_zero_with_partial_f1():
    env = gym.make(ENV_ID)
    env.reset(options={"task_id": next(t for t in env.unwrapped.task_ids if t.startswith("comparison"))})
    gold = env.unwrapped._question.golden_answers[0]
    wrong = "Nobody" if gold not in ("yes", "no") else ("no" if gold == "yes" else "yes")
    _, reward, terminated, _, info = env.step(f"<answer>{wrong}</answer>")
    assert (reward, terminated, info["won"], info["em"], info["f1"]) == (0.0, True, False, 0.0, 0.0)


@pytest.mark.parametrize(
    "action",
    ["", "just text", "<search>unclosed", "<search></search>", "<answer>   </answer>", "<search>q</answer>"],
)
def test_malformed_actions_are_invalid_and_the_episode_goes_on(env, action):
    _, first = env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(action)
    assert (obs, reward, terminated, truncated) == (INVALID_MESSAGE, 0.0, False, False)
    assert info["action_valid"] is False and info["anchor"] == first["anchor"]
    assert "My previous action is invalid" in obs


def test_overlong_search_query_is_cut_not_raised(env):
    env.reset(seed=3)
    obs, _, _, _, info = env.step("<search>" + "born city " * 1000 + "</search>")
    assert obs.startswith("\n\n<information>Doc 1") and info["action_valid"]


def test_first_tag_wins():
    env = gym.make(ENV_ID)
    env.reset(seed=4)
    gold = env.unwrapped._question.golden_answers[0]
    _, reward, terminated, _, _ = env.step(f"<answer>{gold}</answer> then <search>more</search>")
    assert (reward, terminated) == (1.0, True)


def test_fourth_turn_truncates(env):
    env.reset(seed=5)
    for turn in range(4):
        _, reward, terminated, truncated, info = env.step("<search>city</search>" if turn % 2 else "no tag")
        assert (reward, terminated, truncated) == (0.0, False, turn == 3) and "em" not in info


def test_anchor_is_the_question_and_the_set_of_retrieved_docs(env):
    _, start = env.reset(seed=6)
    _, _, _, _, a = env.step("<search>city founded</search>")
    _, _, _, _, b = env.step("<search>city founded</search>")  # same docs again: same state
    _, _, _, _, c = env.step("<search>painter symphony novel</search>")
    assert start["anchor"] != a["anchor"] == b["anchor"] != c["anchor"]
    other = gym.make(ENV_ID)
    _, other_start = other.reset(seed=7)
    assert other_start["task_id"] != start["task_id"] and other_start["anchor"] != start["anchor"]


def test_seed_picks_the_task_and_task_id_option_picks_by_id(env):
    tasks = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(tasks) > 15
    assert env.reset(seed=11)[1]["task_id"] == gym.make(ENV_ID).reset(seed=11)[1]["task_id"]
    task_id = env.unwrapped.task_ids[42]
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    assert info["task_id"] == task_id


def test_bad_reset_options_name_the_problem(env):
    task_id = env.unwrapped.task_ids[0]
    with pytest.raises(KeyError, match=rf"no task_id '{task_id}x'.*Close matches: \['{task_id}'"):
        env.reset(options={"task_id": task_id + "x"})
    with pytest.raises(ValueError, match="unknown reset option 'task'"):
        env.reset(options={"task": task_id})


def test_action_type_and_length_are_checked(env):
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a str, got int"):
        env.step(3)
    with pytest.raises(ValueError, match="max_action_length=16384"):
        env.step("<search>" + "x" * 16400 + "</search>")


def test_expert_solves_every_task_type_within_the_turn_limit():
    env = gym.make(ENV_ID)
    solved: dict[str, list[float]] = {}
    for seed in range(60):
        _, info = env.reset(seed=seed)
        done, turns = False, 0
        while not done:
            _, reward, terminated, truncated, step_info = env.step(env.unwrapped.expert_action())
            done, turns = terminated or truncated, turns + 1
        solved.setdefault(info["task_type"], []).append(reward)
        assert turns <= 3
    assert set(solved) == {"single_hop", "bridge", "comparison"}
    assert all(sum(r) / len(r) >= 0.9 for r in solved.values()), solved


def test_test_split_is_disjoint_from_train():
    train, test = gym.make(ENV_ID).unwrapped, gym.make(ENV_ID, split="test").unwrapped
    assert not set(train.task_ids) & set(test.task_ids)
    assert {q.task_type for q in test.questions} == {"single_hop", "bridge", "comparison"}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"split": "tset"}, ValueError, "split must be one of .* Did you mean 'test'"),
        ({"retriever": "bm52"}, ValueError, "retriever must be one of .* Did you mean 'bm25'"),
        ({"topk": 0}, ValueError, r"topk must be an int in \[1, 100\]"),
        ({"world_size": 3}, ValueError, "world_size must be an int >= 20"),
        ({"data_dir": "/no/such/folder"}, FileNotFoundError, "data_dir names '/no/such/folder'"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SearchQAEnv(**kwargs)


def test_real_data_folder_by_environment_variable(monkeypatch):
    monkeypatch.setenv("GIGPO_SEARCHQA_DATA", str(FIXTURES))
    env = gym.make(ENV_ID, split="test")
    obs, info = env.reset(options={"task_id": "test_0"})
    assert obs == "Which sea does the Varn estuary open into?" and info["task_type"] == "flashrag"
    obs, *_ = env.step("<search>Varn estuary</search>")
    assert 'Doc 1(Title: "Varn estuary") The Varn estuary opens into the Grey Sea.' in obs
    _, reward, *_ = env.step("<answer>Grey Sea</answer>")
    assert reward == 1.0


_TRANSCRIPT = """
import json, gymnasium as gym
env = gym.make("gigpo_gym:gigpo_gym/SearchQA-v0")
out = []
for seed in (0, 1, 2):
    obs, info = env.reset(seed=seed)
    out.append([obs, info["anchor"]])
    for action in ("<search>born city</search>", "<search>founded by</search>", env.unwrapped.expert_action()):
        obs, reward, term, trunc, info = env.step(action)
        out.append([obs, reward, info["anchor"]])
        if term or trunc:
            break
print(json.dumps(out))
"""


def test_same_seed_same_transcript_across_processes(tmp_path):
    """The first process builds the world and index caches, the second reads them."""

    def run(hash_seed: str) -> list:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "GIGPO_GYM_CACHE": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", _TRANSCRIPT], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first, second = run("1"), run("2")
    assert first == second
    assert sum(1 for row in first if len(row) == 3 and "<information>" in row[0]) >= 4
