"""The scripted expert: search the goal's words, open the goal product, pick its options, buy.

It reads the goal (privileged), so it is an upper bound for policies, not a
baseline.  The search uses the instruction without its price clause; when that
query does not retrieve the goal product, the goal product's title instead (the
expert may consult the engine to know).  Goal options are matched to the product's
option values by the reward's own fuzzy rule (exact names for synthetic goals).
"""

from __future__ import annotations

import re

from gigpo_gym.envs.webshop import pages as P
from gigpo_gym.envs.webshop.engine import Session
from gigpo_gym.envs.webshop.normalize import normalize_color
from gigpo_gym.envs.webshop.reward import fuzzy_ratio
from gigpo_gym.envs.webshop.schema import Goal, Product
from gigpo_gym.envs.webshop.shop import Shop

_PRICE_CLAUSE = re.compile(r", and price lower than [\d.]+ dollars$")


def expert_query(shop: Shop, goal: Goal) -> str:
    """The query the expert types: the instruction's words if they find the product."""
    words = _PRICE_CLAUSE.sub("", goal.instruction_text).lower()
    if goal.asin in shop.search(words) or goal.asin not in shop.by_asin:
        return words
    return shop.by_asin[goal.asin].title.lower()


def goal_option_clicks(product: Product, goal: Goal) -> list[tuple[str, str]]:
    """(option name, value) of ``product`` to choose for each goal option."""
    choices: list[tuple[str, str]] = []
    if goal.option_names is not None:
        for name, value in zip(goal.option_names, goal.options):
            if value in product.options.get(name, ()):
                choices.append((name, value))
        return choices
    candidates = [(name, v) for name, values in product.options.items() for v in values]
    for wanted in goal.options:
        if not candidates:
            break
        target = normalize_color(wanted)
        best = max(candidates, key=lambda nv: (nv[1] == wanted, fuzzy_ratio(normalize_color(nv[1]), target)))
        choices.append(best)
        candidates = [nv for nv in candidates if nv[0] != best[0]]  # one value per option name
    return choices


def expert_action(shop: Shop, s: Session) -> str:
    """The expert's next action from session ``s`` ("" once the episode is over)."""
    goal = s.goal
    if s.page == P.DONE:
        return ""
    if s.page == P.SEARCH:
        return f"search[{expert_query(shop, goal)}]"
    if s.page == P.RESULTS:
        if goal.asin not in s.hits:
            return "click[back to search]"
        target_page = s.hits.index(goal.asin) // P.PAGE_SIZE + 1
        if target_page > s.page_num:
            return "click[next >]"
        if target_page < s.page_num:
            return "click[< prev]"
        return f"click[{goal.asin.lower()}]"
    if s.page in P.SUB_PAGES or s.asin != goal.asin:
        return "click[< prev]"
    for name, value in goal_option_clicks(shop.by_asin[s.asin], goal):
        if s.options.get(name) != value:
            return f"click[{value}]"
    return "click[buy now]"
