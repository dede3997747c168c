"""The WebShop teacher that reads only the page (``expert_action(style="page")``)."""

from __future__ import annotations

import dataclasses

import pytest

from gigpo_gym.envs.webshop import pages as P
from gigpo_gym.envs.webshop.env import WebShopEnv
from gigpo_gym.envs.webshop.schema import Product
from gigpo_gym.envs.webshop.teacher import named_value, page_teacher_action, price_cap, search_words

INSTRUCTION = "i need a green tea with lemon flavor, size 20 count (pack of 1), and price lower than 30.00 dollars"


def product(asin: str, title: str, price: float, options=None) -> Product:
    return Product(asin=asin, title=title, description="", bullets=(), pricing=(price,), category="food", query="tea",
                   product_category="", options=options or {})


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(split="test", observation_mode="text_rich")


def play(env: WebShopEnv, style: str, task_id: str) -> tuple[list[str], dict]:
    env.reset(seed=0, options={"task_id": task_id})
    actions, done, info = [], False, {}
    while not done and len(actions) < 15:
        actions.append(env.expert_action(style=style))
        _, _, done, _, info = env.step(actions[-1])
    return actions, info


def test_the_search_drops_the_price_clause_and_the_cap_is_read_from_it():
    assert search_words(INSTRUCTION) == "i need a green tea with lemon flavor, size 20 count (pack of 1)"
    assert price_cap(INSTRUCTION) == 30.0 and price_cap("i want a red mug") is None
    page = P.search_page(INSTRUCTION)
    assert page_teacher_action(page) == f"search[{search_words(INSTRUCTION)}]"


def test_on_the_results_it_opens_the_best_matching_title_under_the_cap_and_never_pages():
    hits = [product("B1", "Oak Coffee Table", 20.0), product("B2", "Green Tea with Lemon, 20 Count", 45.0),
            product("B3", "Lemon Green Tea Bags", 12.5), product("B4", "Lemon Green Tea Bags", 9.0)]
    page = P.results_page(INSTRUCTION, 1, 50, hits, visited=[])
    assert page_teacher_action(page) == "click[b3]"  # B4 ties B3 and is listed later
    assert page_teacher_action(P.results_page("i want a green tea with 20 count", 1, 50, hits, [])) == "click[b2]"
    cheap = P.results_page("i want a green tea with 20 count, and price lower than 40.00 dollars", 1, 50, hits, [])
    assert page_teacher_action(cheap) == "click[b3]"  # B2 matches best but costs more than the cap
    over = P.results_page("i need an oak coffee table, and price lower than 5.00 dollars", 1, 50, hits, visited=[])
    assert page_teacher_action(over) == "click[b1]"  # nothing under the cap: the best title
    assert page_teacher_action(P.results_page(INSTRUCTION, 1, 0, [], visited=[])) == "click[back to search]"


def test_on_the_item_it_picks_each_option_the_instruction_names_then_buys():
    tea = product("B3", "Lemon Green Tea Bags", 12.5, {"flavor name": ("mint", "lemon"),
                                                       "size": ("20 count (pack of 6)", "20 count (pack of 1)"),
                                                       "style": ("bags", "loose")})
    chosen: dict[str, str] = {}
    actions = []
    for _ in range(4):
        action = page_teacher_action(P.item_page(INSTRUCTION, tea, chosen))
        actions.append(action)
        value = action.removeprefix("click[").removesuffix("]")
        group = next((name for name, values in tea.options.items() if value in values), None)
        if group is None:
            break
        chosen[group] = value
    assert actions == ["click[lemon]", "click[20 count (pack of 1)]", "click[buy now]"]  # style: not named, left alone
    assert page_teacher_action(P.sub_page(INSTRUCTION, tea, P.REVIEWS)) == "click[< prev]"
    assert named_value(["black", "blackberry"], "a blackberry jam") == "blackberry"  # whole words only
    assert named_value(["red", "dark red"], "in dark red color") == "dark red"  # the longest of several


def test_it_reads_only_the_page_a_hidden_goal_product_changes_nothing(env):
    """The same instruction with another goal product and options: the same actions (the expert's change)."""
    task_id = env.goals[3].task_id
    teacher, _ = play(env, "page", task_id)
    expert, _ = play(env, "goal", task_id)
    goal = env._goal_by_id[task_id]
    other = next(g for g in env.shop.goals if g.asin != goal.asin)
    env._goal_by_id[task_id] = dataclasses.replace(goal, asin=other.asin, options=other.options,
                                                   option_names=other.option_names)
    try:
        assert play(env, "page", task_id)[0] == teacher
        assert play(env, "goal", task_id)[0] != expert  # the expert reads the goal: the change shows
    finally:
        env._goal_by_id[task_id] = goal


def test_the_teacher_buys_in_every_episode_without_paging_and_scores_well_on_train_goals():
    env = WebShopEnv(split="train", observation_mode="text_rich")
    ids = [g.task_id for g in env.goals][::40][:60]
    outcomes = [play(env, "page", t) for t in ids]
    assert all(a[-1] == "click[buy now]" and info["action_valid"] for a, info in outcomes)
    assert not any("click[next >]" in a for actions, _ in outcomes for a in actions)
    won = sum(info["won"] for _, info in outcomes) / len(ids)
    score = sum(info["score"] for _, info in outcomes) / len(ids)
    assert won >= 0.3 and score >= 0.6, (won, score)  # measured on 300 train goals: 46% success, score 0.79
    assert [play(env, "page", t)[0] for t in ids[:5]] == [a for a, _ in outcomes[:5]]  # deterministic


def test_unknown_expert_style_names_the_styles(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expert style must be one of \['goal', 'page'\], got 'pager'"):
        env.expert_action(style="pager")


def test_sft_demonstrations_take_the_teacher_through_expert_kwargs():
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.sft import expert_demonstrations

    cfg = load_config(None, ["env.id=gigpo_gym/WebShop-v0", "env.kwargs={max_episode_steps: 10}",
                             "prompt.observation_mode=text_rich", "sft.expert_kwargs={style: page}"])
    demos = expert_demonstrations(cfg.env.id, 8, env_kwargs=cfg.env_kwargs(), expert_kwargs=cfg.sft.expert_kwargs,
                                  wrapper=cfg.wrapper())
    replies = [r for _, r in demos]
    assert replies and not any("next >" in r for r in replies)
    goal = expert_demonstrations(cfg.env.id, 8, env_kwargs=cfg.env_kwargs(), wrapper=cfg.wrapper())
    assert [r for _, r in goal] != replies
