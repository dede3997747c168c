"""WebShop data: the real-file loader, the embedded generator, goals, splits and search."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gigpo_gym.envs.webshop.env import WebShopEnv
from gigpo_gym.envs.webshop.generator import generate_catalog
from gigpo_gym.envs.webshop.goals import SPLITS, price_cap, split_goals
from gigpo_gym.envs.webshop.loader import WebShopDataError
from gigpo_gym.envs.webshop.search import SearchEngine
from gigpo_gym.envs.webshop.shop import load_shop

FIXTURES = Path(__file__).parent / "fixtures" / "webshop"


def copy_fixtures(tmp_path: Path) -> Path:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def edit_product(data_dir: Path, index: int, **fields) -> None:
    path = data_dir / "items_shuffle_1000.json"
    items = json.loads(path.read_text())
    items[index].update(fields)
    for k, v in list(items[index].items()):
        if v is ...:
            del items[index][k]
    path.write_text(json.dumps(items))


# -- the real files ---------------------------------------------------------------------
def test_loader_normalises_like_the_original():
    shop = load_shop(FIXTURES, None, None)
    assert [p.asin for p in shop.products] == ["B09QKP7XQL", "B08KDS1PQR", "B07ZZ4HJKL", "B01N5VX2AB"]  # nan, dup skipped
    deo, stick, shoes, knob = shop.products
    assert deo.options == {"scent": ("bright citrus", "calming lavender"), "size": ("travel set (4-pack)", "3 ounce (pack of 1)")}
    assert shoes.options["color"] == ("dark blue", "black | white")
    assert deo.query == "deodorant" and deo.price_tag == "$10.99"
    assert stick.bullets == ("Long lasting freshness for men and women",) and stick.price_tag == "$5.5 to $9.75"
    assert 5.5 <= shop.prices[stick.asin] <= 9.75
    assert knob.pricing == (100.0,) and knob.attributes == ("DUMMY_ATTR",)
    assert deo.attributes == ("aluminum free", "sensitive skin", "long lasting")


def test_human_goals_skip_instructions_without_attributes_and_get_price_caps():
    goals = load_shop(FIXTURES, None, None).goals
    assert len(goals) == 3
    deo = next(g for g in goals if g.asin == "B09QKP7XQL")
    assert deo.options == ("bright citrus",) and deo.price_upper in (20.0, 30.0, 40.0, 50.0)
    assert deo.instruction_text == f"i need an aluminum free deodorant for sensitive skin in the bright citrus scent, and price lower than {deo.price_upper:.2f} dollars"


def test_synthetic_goals_take_every_option_combination():
    goals = load_shop(FIXTURES, None, False).goals
    assert len(goals) == 4 + 2 + 6  # scent x size, scent, colour x size; the knob has no instruction
    g = next(g for g in goals if g.asin == "B08KDS1PQR" and g.options == ("ginger fresh",))
    assert g.option_names == ("scent",)
    assert g.instruction_text.startswith("i need a long lasting deodorant stick with scent: ginger fresh, and price lower than")


def test_the_expert_solves_the_real_format_goals():
    env = WebShopEnv(split="all", data_dir=FIXTURES)
    for goal in env.goals:
        env.reset(options={"task_id": goal.task_id})
        for _ in range(15):
            *_, terminated, _, info = env.step(env.expert_action())
            if terminated:
                break
        assert info["score"] == 1.0, (goal, info["reward_info"])


def test_malformed_product_entries_name_file_entry_and_field(tmp_path):
    data = copy_fixtures(tmp_path)
    edit_product(data, 1, pricing=12)
    with pytest.raises(WebShopDataError, match=r"items_shuffle_1000.json: entry 1 \(asin 'B08KDS1PQR'\): field 'pricing' must be str or null, got int"):
        load_shop(data, None, None)
    edit_product(data, 1, pricing="$1", name=...)
    with pytest.raises(WebShopDataError, match=r"entry 1 .*field 'name' is missing"):
        load_shop(data, None, None)
    edit_product(data, 1, name="ok", pricing="$x")
    with pytest.raises(WebShopDataError, match=r"field 'pricing' is not a '\$a' or '\$a - \$b' price"):
        load_shop(data, None, None)
    edit_product(data, 1, pricing="$1", customization_options={"Color": [{"name": "red"}]})
    with pytest.raises(WebShopDataError, match="option 'Color' must be a list of"):
        load_shop(data, None, None)


def test_missing_field_suggests_the_close_key(tmp_path):
    data = copy_fixtures(tmp_path)
    edit_product(data, 0, full_description=..., full_descripton="typo")
    with pytest.raises(WebShopDataError, match="did you mean 'full_descripton'"):
        load_shop(data, None, None)


def test_bad_json_and_missing_files_are_reported(tmp_path):
    data = copy_fixtures(tmp_path)
    (data / "items_human_ins.json").write_text('{"B0": [\n  {"instruction": }]}')
    with pytest.raises(WebShopDataError, match=r"items_human_ins.json: not valid JSON \(line 2"):
        load_shop(data, None, None)
    (data / "items_ins_v2_1000.json").unlink()
    with pytest.raises(WebShopDataError, match="needs items_shuffle_1000.json \\+ items_ins_v2_1000.json"):
        load_shop(data, None, None)


# -- the embedded catalog ---------------------------------------------------------------
def test_generator_is_deterministic_and_prefix_stable():
    small, small_ins = generate_catalog(50, seed=3)
    large, large_ins = generate_catalog(120, seed=3)
    assert small == large[:50] and all(small_ins[p.asin] == large_ins[p.asin] for p in small)
    assert generate_catalog(50, seed=4)[0] != small


def test_embedded_shop_has_the_original_shape():
    shop = load_shop(None, None, None)
    assert len(shop.products) == 1000 and len({p.asin for p in shop.products}) == 1000
    assert {p.category for p in shop.products} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert all(len(p.asin) == 10 and p.asin.startswith("B0") for p in shop.products)
    assert sum(1 for p in shop.products if p.options) > 800
    assert len(shop.goals) > 1500 and [g.index for g in shop.goals] == list(range(len(shop.goals)))
    assert all(g.attributes for g in shop.goals)
    capped = [g for g in shop.goals if g.price_upper < 1e6]
    assert all(g.instruction_text.endswith(f", and price lower than {g.price_upper:.2f} dollars") for g in capped)
    assert all(shop.prices[g.asin] < g.price_upper for g in shop.goals)


def test_splits_follow_the_original_convention():
    goals = load_shop(None, None, None).goals
    assert [g.index for g in split_goals(goals, "test")] == list(range(500))
    assert split_goals(goals, "eval")[0].index == 500 and len(split_goals(goals, "eval")) == 1000
    assert split_goals(goals, "train")[0].index == 1500 and split_goals(goals, "gigpo_train")[0].index == 500
    assert set(SPLITS) == {"test", "eval", "train", "gigpo_train", "all"}


def test_price_cap_takes_the_larger_of_two_of_the_next_four_tens():
    import random

    caps = {price_cap(23.5, random.Random(s)) for s in range(200)}
    assert caps == {40.0, 50.0, 60.0}  # two of 30, 40, 50, 60: the larger is never 30
    assert price_cap(985.0, random.Random(0)) is None  # only 990 is above: no cap


# -- search -----------------------------------------------------------------------------
def test_search_ranks_by_bm25_and_returns_at_most_fifty():
    shop = load_shop(None, None, None)
    target = shop.products[17]
    hits = shop.search(target.title.lower())
    assert hits[0] == target.asin and len(hits) == 50
    assert shop.search("zzzz qqqq") == () and shop.search("the of and") == ()
    assert shop.search("Shampoos") == shop.search("shampoo")  # stemming, case


def test_search_ties_break_by_catalog_order():
    products, _ = generate_catalog(30, seed=1)
    engine = SearchEngine(products + products)  # every product twice: equal scores
    hits = engine.search(products[0].title.lower(), k=4)
    assert hits[:2] == [0, 30]
