"""gigpo_gym/WebShop-v0: pages, click rules, anchors, determinism, the expert."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.envs.webshop.env import WebShopEnv


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(split="test")


def to_item(env: WebShopEnv, seed: int = 0, with_options: bool = False):
    """Reset, search as the expert and open the goal product (the first from ``seed`` on with options)."""
    env.reset(seed=seed)
    while with_options and not env.shop.by_asin[env.session.goal.asin].options:
        seed += 1
        env.reset(seed=seed)
    while env.session.page != "item":
        obs, _, _, _, info = env.step(env.expert_action())
    return obs, info


def test_check_env_passes_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make("gigpo_gym/WebShop-v0").unwrapped, skip_render_check=True)


def test_search_page_text_and_admissible_actions(env):
    obs, info = env.reset(seed=0)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {env.session.goal.instruction_text} [SEP] Search"
    assert info["admissible_actions"] == ["search[<query>]"]
    assert info["task_type"] in {"beauty", "electronics", "fashion", "food", "furniture"}
    assert info["task_id"] == env.session.goal.task_id and info["score"] == 0.0


def test_results_pages_show_ten_hits_and_paging_buttons(env):
    env.reset(seed=0)
    obs, _, _, _, info = env.step("search[black shampoo for women with tea tree]")
    assert len(env.session.hits) == 50
    head = f"Instruction: [SEP] {env.session.goal.instruction_text} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] "
    assert obs.startswith(head)
    asins = [a for a in info["admissible_actions"] if a.startswith("click[b0")]
    assert len(asins) == 10 and info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    first = env.session.hits[0]
    product = env.shop.by_asin[first]
    assert f"{first} [SEP] {product.title} [SEP] {product.price_tag}" in obs
    obs, *_ , info = env.step("click[Next >]")  # case does not matter
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    assert info["admissible_actions"][:3] == ["click[back to search]", "click[< prev]", "click[next >]"]


def test_item_page_layout_options_and_sub_pages(env):
    obs, info = to_item(env, seed=1)
    product = env.shop.by_asin[env.session.asin]
    options = " [SEP] ".join(f"{n} [SEP] " + " [SEP] ".join(v) for n, v in product.options.items())
    expected = (
        f"Instruction: [SEP] {env.session.goal.instruction_text} [SEP] Back to Search [SEP] < Prev [SEP] "
        + (options + " [SEP] " if options else "")
        + f"{product.title} [SEP] Price: {product.price_tag} [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    assert obs == expected
    values = [f"click[{v}]" for vs in product.options.values() for v in vs]
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]", "click[description]",
                                          "click[features]", "click[reviews]", "click[buy now]", *values]  # fmt: skip
    obs, *_ = env.step("click[features]")
    assert obs.endswith("Back to Search [SEP] < Prev [SEP] " + " [SEP] ".join(product.bullets))
    obs, *_ = env.step("click[< prev]")
    assert obs == expected


def test_invalid_actions_change_nothing(env):
    obs0, info0 = env.reset(seed=2)
    for action in ["", "search[]", "click[search]", "Search[coffee]", " search[coffee]"]:
        obs, _, _, _, info = env.step(action)
        assert (obs, info["action_valid"], info["anchor"]) == (obs0, False, info0["anchor"]), action
    obs0, *_, info0 = env.step("search[coffee]")
    for action in ["", "click[search]", "search[tea]", "click[buy now]", "Click[next >]", "click[nothing here]", "buy"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert (obs, reward, terminated, info["action_valid"]) == (obs0, 0.0, False, False), action
        assert info["anchor"] == info0["anchor"]


def test_prev_from_item_forgets_options_but_sub_pages_keep_them(env):
    to_item(env, seed=3, with_options=True)
    product = env.shop.by_asin[env.session.asin]
    name, values = next(iter(product.options.items()))
    *_, info_chosen = env.step(f"click[{values[-1]}]")
    assert env.session.options == {name: values[-1]}
    *_, info_desc = env.step("click[description]")
    *_, info_back = env.step("click[< prev]")
    assert env.session.options == {name: values[-1]} and info_back["anchor"] == info_chosen["anchor"]
    env.step("click[< prev]")
    assert env.session.page == "results" and env.session.options == {}


def test_back_to_search_resets_the_session(env):
    _, info0 = env.reset(seed=4)
    to_item(env, seed=4)
    obs, *_, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["anchor"] == info0["anchor"]


def test_buying_ends_the_episode_with_the_score_as_reward(env):
    env.reset(seed=5)
    reward, info = 0.0, {}
    for _ in range(15):
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        if terminated:
            break
    assert terminated and reward == info["score"] == 1.0 and info["won"]
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    assert info["admissible_actions"] == [] and info["reward_info"]["r_type"] == 1.0
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("click[back to search]")


def test_text_rich_marks_buttons_chosen_options_and_visited_products():
    rich = WebShopEnv(split="test", observation_mode="text_rich")
    obs, _ = rich.reset(seed=6)
    assert obs.endswith("[button] Search [button_]\n")
    to_item(rich, seed=6, with_options=True)
    product = rich.shop.by_asin[rich.session.asin]
    value = next(iter(product.options.values()))[0]
    obs, *_ = rich.step(f"click[{value}]")
    assert obs.startswith(f"You have clicked {value}.\n") and f"  [clicked button] {value} [clicked button_]\n" in obs
    obs, *_ = rich.step("click[< prev]")
    assert f"\n[clicked button] {rich.session.visited[0]} [clicked button_]\n" in obs


def test_anchor_identifies_state_not_path():
    env = WebShopEnv(split="test")
    _, a = to_item(env, seed=7)
    env.step("click[reviews]")
    *_, b = env.step("click[< prev]")
    assert a["anchor"] == b["anchor"]
    env2 = WebShopEnv(split="test")
    _, other_task = to_item(env2, seed=8)
    assert other_task["anchor"] != a["anchor"]


def test_seed_and_task_id_pick_the_goal():
    env = WebShopEnv(split="test")
    env.reset(seed=505)
    assert env.session.goal.index == 5  # test holds goals 0-499: seed modulo the split size
    env.reset(options={"task_id": "webshop-1234"})
    assert env.session.goal.index == 1234
    with pytest.raises(ValueError, match="unknown WebShop task_id 'webshop-x'"):
        env.reset(options={"task_id": "webshop-x"})


def test_time_limit_truncates_after_fifteen_steps():
    env = gym.make("gigpo_gym/WebShop-v0", split="test")
    env.reset(seed=0)
    for step in range(15):
        *_, terminated, truncated, info = env.step("nonsense")
    assert truncated and not terminated and not info["action_valid"]


def test_bad_arguments_and_actions_raise_clear_errors(env, tmp_path):
    with pytest.raises(ValueError, match="did you mean 'text_rich'"):
        WebShopEnv(observation_mode="text-rich")
    with pytest.raises(ValueError, match="did you mean 'test'"):
        WebShopEnv(split="tset")
    with pytest.raises(ValueError, match="num_products must be a positive int"):
        WebShopEnv(num_products=0)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        WebShopEnv(data_dir=tmp_path / "missing")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(3)
    with pytest.raises(ValueError, match="max_action_length=1024"):
        env.step("x" * 1025)


def test_expert_solves_the_test_split():
    env = WebShopEnv(split="test")
    wins = 0
    for seed in range(len(env.goals)):
        env.reset(seed=seed)
        for _ in range(15):
            *_, terminated, _, info = env.step(env.expert_action())
            if terminated:
                break
        wins += info["won"]
    assert wins / len(env.goals) == 1.0


_TRANSCRIPT = """
import json, sys
from gigpo_gym.envs.webshop.env import WebShopEnv
env = WebShopEnv(split="test", observation_mode="text_rich")
out = []
for seed in (11, 12):
    obs, info = env.reset(seed=seed)
    out.append([obs, info["anchor"]])
    for action in ["search[green tea organic]", "click[next >]", "click[back to search]", ""]:
        obs, r, *_, info = env.step(action)
        out.append([obs, r, info["anchor"], info["admissible_actions"]])
    while True:
        obs, r, term, _, info = env.step(env.expert_action())
        out.append([obs, r, info["anchor"]])
        if term:
            break
json.dump(out, sys.stdout)
"""


def test_transcripts_are_identical_across_processes():
    runs = []
    for hash_seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", _TRANSCRIPT], capture_output=True, text=True, check=True,
                              env={"PYTHONHASHSEED": hash_seed, "PATH": ""})  # fmt: skip
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1] and len(runs[0]) > 8
