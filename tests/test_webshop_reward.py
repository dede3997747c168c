"""WebShop's purchase score, term by term, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_gym.envs.webshop.normalize import normalize_color
from gigpo_gym.envs.webshop.nouns import fallback_nouns
from gigpo_gym.envs.webshop.reward import attribute_matches, option_matches, purchase_score, type_reward
from gigpo_gym.envs.webshop.schema import Goal, Product, parse_pricing

PATH = "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"


def product(**kw) -> Product:
    base = dict(asin="B000000001", title="Tea Tree Shampoo", description="", bullets=(), pricing=(10.0,),
                category="beauty", query="shampoo", product_category=PATH, attributes=(), nouns=None)  # fmt: skip
    base.update(kw)
    return Product(**base)


def goal(**kw) -> Goal:
    base = dict(index=0, asin="B000000001", instruction_text="i need a shampoo", attributes=("tea tree",), options=(),
                price_upper=20.0, name="Tea Tree Shampoo", query="shampoo", category="beauty", product_category=PATH)  # fmt: skip
    base.update(kw)
    return Goal(**base)


# -- attributes ---------------------------------------------------------------------------
def test_attributes_match_fuzzily_against_the_product_attributes():
    bought = product(attributes=("tea tree", "essential oil", "natural ingredients"))
    assert attribute_matches(bought, ("tea tree", "essential oils", "natural ingredients")) == 3


def test_attributes_fall_back_to_substrings_of_title_bullets_and_description():
    bought = product(
        title="Lemon Shampoo",
        bullets=("This shampoo has Essential Oils and smells like lemons",),
        description="Best shampoo on the market, made with natural ingredients",
    )
    assert attribute_matches(bought, ("tea tree", "essential oils", "natural ingredients")) == 2


def test_unrelated_attributes_do_not_match_and_each_goal_attribute_counts_once():
    bought = product(title="English tea for breakfast", attributes=("tea bag", "earl gray", "lipton"),
                     bullets=("Soothing aroma",), description="Best tea made by Lipton")  # fmt: skip
    assert attribute_matches(bought, ("tea tree", "essential oils", "natural ingredients")) == 0
    twice = product(attributes=("tea tree", "tea tree oil"), title="tea tree tea tree")
    assert attribute_matches(twice, ("tea tree",)) == 1


# -- options ------------------------------------------------------------------------------
def test_colour_normalisation_takes_the_first_colour_word_of_the_list():
    assert normalize_color("dark blue") == "blue"  # "blue" precedes "dark" in the list
    assert normalize_color("black | white") == "black"
    assert normalize_color("9.5") == "9.5"


def test_options_count_goal_options_some_chosen_value_matches():
    assert option_matches(["pack of 12", "grey", "xl"], ("grey", "xl", "pack of 12")) == 3
    assert option_matches(["pack of 12", "blue", "xl"], ("grey", "xl", "pack of 12")) == 2
    assert option_matches(["powder snow"], ("cool powder snow",)) == 1  # token-set subset
    assert option_matches(["dark blue"], ("navy blue",)) == 1  # both normalise to "blue"
    assert option_matches([], ("grey",)) == 0


def test_options_are_case_insensitive_like_thefuzz():
    assert option_matches(["xl"], ("XL",)) == 1


# -- type -----------------------------------------------------------------------------------
def test_type_term_rules():
    g = goal(query="shampoo", product_category="a › b › c")
    five = frozenset("abcde")
    same_query = product(query="shampoo", product_category="x › y")
    other = product(query="soap", product_category="a › x › y")  # one shared part: no category match
    assert type_reward(same_query, g, five, frozenset("a")).r_type == 1.0  # 0.2 overlap, query matches
    assert type_reward(other, g, five, frozenset("a")).r_type == 0.5  # 0.2 is not > 0.2
    assert type_reward(other, g, five, frozenset("ab")).r_type == 1.0  # 0.4 > 0.2
    assert type_reward(product(query="soap", product_category="c › a"), g, five, frozenset("a")).category_match
    twelve = frozenset("abcdefghijkl")
    assert type_reward(same_query, g, twelve, frozenset("a")).r_type == 0.1  # 1/12 < 0.1
    assert type_reward(same_query, g, five, frozenset("z")).r_type == 0.0  # no shared noun
    assert type_reward(other, g, frozenset(), frozenset("z")).title_score == 0.2  # goal without nouns


def test_fallback_nouns_drop_function_words_adjectives_and_colours():
    assert fallback_nouns("PEAK High Top Mens Basketball Shoes, Black") == {"peak", "top", "mens", "basketball", "shoes"}


# -- price and the total ----------------------------------------------------------------
def test_pricing_strings_parse_like_the_original():
    assert parse_pricing("$12.99") == (12.99,)
    assert parse_pricing("$3.50 - $7.25") == (3.5, 7.25)
    assert parse_pricing("") == (100.0,)
    with pytest.raises(ValueError, match="has no number"):
        parse_pricing("$abc")


def test_total_score_combines_every_term_and_scales_by_type():
    g = goal(attributes=("tea tree", "sulfate free", "argan oil"), options=("grey", "xl"), price_upper=20.0,
             name="Tea Tree Shampoo")  # fmt: skip
    bought = product(attributes=("tea tree", "sulfate free"), nouns=frozenset({"tea", "tree", "shampoo"}))
    goal_product = product(nouns=frozenset({"tea", "tree", "shampoo"}))
    full = purchase_score(bought, g, 10.0, {"color": "grey", "size": "xl"}, goal_product=goal_product)
    assert math.isclose(full.score, (2 + 2 + 1) / (3 + 2 + 1))
    over = purchase_score(bought, g, 25.0, {"color": "blue"}, goal_product=goal_product)
    assert math.isclose(over.score, (2 + 0 + 0) / 6) and not over.price_ok
    at_cap = purchase_score(bought, g, 20.0, {}, goal_product=goal_product)
    assert at_cap.price_ok  # the cap is inclusive
    six_nouns = product(nouns=frozenset({"tea", "tree", "shampoo", "oil", "bottle", "pack"}))
    other_type = product(query="soap", product_category="x › y", attributes=("tea tree", "sulfate free"),
                         nouns=frozenset({"tea", "soap"}))  # fmt: skip
    half = purchase_score(other_type, g, 10.0, {"color": "grey", "size": "xl"}, goal_product=six_nouns)
    assert half.r_type == 0.5 and math.isclose(half.score, 5 / 6 * 0.5)  # overlap 1/6: in [0.1, 0.2]


# -- the property: the goal product with the goal options under the cap scores 1 -----------
_words = st.from_regex(r"[a-z][a-z0-9]{1,8}( [a-z][a-z0-9]{1,8}){0,2}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(
    attributes=st.lists(_words, min_size=1, max_size=5, unique=True),
    options=st.dictionaries(_words, st.lists(_words, min_size=1, max_size=4, unique=True), max_size=3),
    title=_words,
    data=st.data(),
)
def test_buying_the_goal_product_with_its_options_under_the_cap_scores_one(attributes, options, title, data):
    bought = product(title=title, attributes=tuple(attributes), options={k: tuple(v) for k, v in options.items()})
    wanted_attrs = data.draw(st.lists(st.sampled_from(attributes), min_size=1, unique=True))
    chosen = {name: data.draw(st.sampled_from(values)) for name, values in options.items()}
    price = data.draw(st.floats(0, 990))
    cap = data.draw(st.floats(price, 1e6))
    g = goal(attributes=tuple(wanted_attrs), options=tuple(chosen.values()), price_upper=cap, name=title)
    assert purchase_score(bought, g, price, chosen, goal_product=bought).score == 1.0
