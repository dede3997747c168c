"""The purchase score of WebShop, term by term (the original's formula).

    score = (attribute_matches + option_matches + price_ok)
            / (n_goal_attributes + n_goal_options + 1)  ×  r_type

- attribute: a goal attribute counts once if its fuzzy token-set ratio with one of
  the product's attributes is > 85, or else if it is a substring of the lower-cased
  title, the bullet points joined by spaces, or the description;
- option: goal and chosen option values both pass through ``normalize_color``; a
  goal option counts once if some chosen value has token-set ratio > 85 with it;
- price: 1 if the price paid is <= the goal's cap;
- r_type: 1.0; 0.5 if neither the query matches, nor >= 2 parts of the category path
  are shared, nor the title-noun overlap is > 0.2; 0.1 if that overlap is < 0.1;
  0 if it is 0.  Overlap = |nouns(bought) ∩ nouns(goal)| / |nouns(goal)| (0.2 when
  the goal title has no nouns).

The fuzzy ratio is rapidfuzz's ``token_set_ratio`` with the default processor
(lower-case, non-alphanumerics to spaces, trimmed) rounded to an integer, which is
what ``thefuzz`` (the original's library) computes: same processing, same
Levenshtein-based ratio, ``int(round(...))`` before the ``> 85`` test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from gigpo_gym.envs.webshop.normalize import normalize_color
from gigpo_gym.envs.webshop.nouns import title_nouns
from gigpo_gym.envs.webshop.schema import Goal, Product

FUZZY_THRESHOLD = 85


def fuzzy_ratio(a: str, b: str) -> int:
    """Token-set ratio in [0, 100] after the usual processing, rounded as thefuzz rounds."""
    return int(round(fuzz.token_set_ratio(a, b, processor=default_process)))


def nouns_of(product: Product) -> frozenset[str]:
    """The product's own nouns when known, else those of the installed extractor."""
    return product.nouns if product.nouns is not None else title_nouns(product.title)


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(bought: Product, goal: Goal, goal_nouns: frozenset[str], bought_nouns: frozenset[str]) -> TypeMatch:
    """Whether the bought product is of the goal's type (query, category path, title nouns)."""
    query_match = bought.query == goal.query
    bought_path = {part.strip() for part in bought.product_category.split("›")}
    goal_path = {part.strip() for part in goal.product_category.split("›")}
    category_match = len(bought_path & goal_path) >= 2
    title_score = 0.2 if not goal_nouns else len(bought_nouns & goal_nouns) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(bought: Product, goal_attributes: tuple[str, ...]) -> int:
    """How many goal attributes the product has (fuzzy on attributes, else substring of its text)."""
    title = bought.title.lower()
    bullets = " ".join(bought.bullets).lower()
    description = bought.description.lower()
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_ratio(have, wanted) > FUZZY_THRESHOLD for have in bought.attributes):
            matches += 1
        elif wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches


def option_matches(chosen: list[str], goal_options: tuple[str, ...]) -> int:
    """How many goal options some chosen option matches, after colour normalisation."""
    chosen_norm = [normalize_color(v) for v in chosen]
    matches = 0
    for wanted in goal_options:
        wanted_norm = normalize_color(wanted)
        if any(fuzzy_ratio(have, wanted_norm) > FUZZY_THRESHOLD for have in chosen_norm):
            matches += 1
    return matches


@dataclass(frozen=True)
class PurchaseScore:
    """The score and its parts (``info["reward_info"]`` at purchase)."""

    score: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attribute_matches: int
    option_matches: int
    price_ok: bool
    n_attributes: int
    n_options: int

    def as_dict(self) -> dict:
        return asdict(self)


def purchase_score(
    bought: Product,
    goal: Goal,
    price: float,
    chosen_options: Mapping[str, str],
    goal_product: Product | None = None,
    nouns: Callable[[Product], frozenset[str]] = nouns_of,
) -> PurchaseScore:
    """Score of buying ``bought`` at ``price`` with ``chosen_options`` for ``goal``.

    ``goal_product`` (the product the goal was written for) supplies the goal title's
    nouns when it carries its own; without it the goal name goes through the extractor.
    """
    goal_nouns = nouns(goal_product) if goal_product is not None else title_nouns(goal.name)
    kind = type_reward(bought, goal, goal_nouns, nouns(bought))
    n_attr = attribute_matches(bought, goal.attributes)
    n_opt = option_matches(list(chosen_options.values()), goal.options)
    price_ok = price <= goal.price_upper
    total = (n_attr + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return PurchaseScore(
        score=total * kind.r_type,
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        attribute_matches=n_attr,
        option_matches=n_opt,
        price_ok=price_ok,
        n_attributes=len(goal.attributes),
        n_options=len(goal.options),
    )
