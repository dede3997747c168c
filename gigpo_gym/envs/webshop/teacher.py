"""A teacher that reads only the page: what a policy could learn to do from the observation.

The scripted expert (``expert.py``) knows the goal product and pages through the
results until it shows; a model imitating it sees only the page and learns to page.
This teacher sees what the page model shows (the observation is rendered from it)
and nothing of the session or the goal:

- search page: search the instruction's words (without its price clause);
- results page: open the visible result whose title best matches the instruction
  (rapidfuzz's token-set ratio), preferring one priced under the instruction's cap;
  it never pages;
- item page: for each option group with nothing chosen, click the value the
  instruction names (the value as whole words of the instruction; the longest when
  several are); then buy;
- a sub-page: go back to the item.

It is a baseline a policy could match, not an upper bound: the title that matches the
instruction best is often not the goal's product, so its purchases score partly.
"""

from __future__ import annotations

import re

from rapidfuzz import fuzz

from gigpo_gym.envs.webshop import pages as P

_PRICE_CLAUSE = re.compile(r",? and price lower than ([\d.]+) dollars$")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def search_words(instruction: str) -> str:
    """The instruction lower-cased, without its ``, and price lower than N dollars`` clause."""
    return _PRICE_CLAUSE.sub("", instruction.strip().lower())


def price_cap(instruction: str) -> float | None:
    """The instruction's price cap in dollars, None when it names none."""
    m = _PRICE_CLAUSE.search(instruction.strip().lower())
    return float(m.group(1)) if m else None


def _instruction(page: P.Page) -> str:
    return next((e.text for e in page.elements if e.role == "instruction"), "")


def _results(page: P.Page) -> list[tuple[str, str, float | None]]:
    """(click text, title, lowest price) of each result the page lists, in order."""
    out: list[tuple[str, str, float | None]] = []
    for i, e in enumerate(page.elements):
        if e.kind == P.LINK:
            title = page.elements[i + 1].text if i + 1 < len(page.elements) else ""
            price = page.elements[i + 2].text if i + 2 < len(page.elements) else ""
            number = _NUMBER.search(price)
            out.append((e.click, title, float(number.group()) if number else None))
    return out


def best_result(page: P.Page) -> str | None:
    """The click text of the result whose title best matches the instruction (None: no results).

    Ranked by: priced under the cap (or no cap), then the token-set ratio of title and
    instruction words, then the search engine's order.
    """
    instruction = _instruction(page)
    words, cap = search_words(instruction), price_cap(instruction)
    ranked = [((cap is None or (price is not None and price < cap)), fuzz.token_set_ratio(words, title.lower()), -k, click)
              for k, (click, title, price) in enumerate(_results(page))]
    return max(ranked)[-1] if ranked else None


def named_value(values: list[str], instruction: str) -> str | None:
    """The option value the instruction names as whole words (the longest of several), else None."""
    text = instruction.lower()
    named = [v for v in values if re.search(rf"(?<!\w){re.escape(v.lower())}(?!\w)", text)]
    return max(named, key=len) if named else None


def page_teacher_action(page: P.Page) -> str:
    """The teacher's next action on ``page`` ("" once the episode is over)."""
    if page.name == P.SEARCH:
        return f"search[{search_words(_instruction(page))}]"
    if page.name == P.RESULTS:
        click = best_result(page)
        return f"click[{click}]" if click is not None else f"click[{P.BACK_TO_SEARCH.lower()}]"
    if page.name in P.SUB_PAGES:
        return f"click[{P.PREV_PAGE.lower()}]"
    if page.name != P.ITEM:
        return ""
    groups: dict[str, list[P.Element]] = {}
    for e in page.elements:
        if e.kind == P.OPTION:
            groups.setdefault(e.group, []).append(e)
    instruction = _instruction(page)
    for options in groups.values():
        if any(e.selected for e in options):
            continue
        value = named_value([e.text for e in options], instruction)
        if value is not None:
            return f"click[{value}]"
    return f"click[{P.BUY_NOW.lower()}]"
