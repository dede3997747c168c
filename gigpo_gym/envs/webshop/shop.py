"""A loaded shop: products, goals, prices and the search index, shared per process.

Building the index is the only costly step (well under a second at 1,000 products,
minutes at 1.18 M), so ``load_shop`` memoises shops by their arguments: the
hundreds of env copies of a grouped rollout in one process share one read-only shop.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from gigpo_gym.envs.webshop.generator import DEFAULT_SEED, GENERATOR_VERSION, generate_catalog
from gigpo_gym.envs.webshop.goals import build_human_goals, build_synthetic_goals, product_price
from gigpo_gym.envs.webshop.loader import (
    HUMAN_INSTRUCTIONS,
    load_attributes,
    load_human_instructions,
    load_products,
    pick_files,
    synthetic_instructions,
)
from gigpo_gym.envs.webshop.schema import Goal, Product
from gigpo_gym.envs.webshop.search import SearchEngine

#: Distinct queries whose hits a shop remembers (group copies repeat their searches).
SEARCH_CACHE_SIZE = 4096


@dataclass
class Shop:
    """Everything the engine reads; never mutated after construction (but the search cache)."""

    products: list[Product]
    goals: list[Goal]
    #: asin -> the price paid when buying it.
    prices: dict[str, float]
    engine: SearchEngine
    #: Where the data came from, for ``info`` and error messages.
    source: str
    by_asin: dict[str, Product] = field(init=False)
    _hits: OrderedDict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}
        self._hits = OrderedDict()

    def search(self, query: str) -> tuple[str, ...]:
        """Asins of the (up to 50) hits of ``query``, best first (memoised)."""
        hits = self._hits.get(query)
        if hits is None:
            hits = tuple(self.products[i].asin for i in self.engine.search(query))
            self._hits[query] = hits
            if len(self._hits) > SEARCH_CACHE_SIZE:
                self._hits.popitem(last=False)
        else:
            self._hits.move_to_end(query)
        return hits


def build_shop(products: list[Product], goals: list[Goal], prices: dict[str, float], source: str) -> Shop:
    return Shop(products, goals, prices, SearchEngine(products), source)


@functools.lru_cache(maxsize=4)
def load_shop(data_dir: Path | None, num_products: int | None, human_goals: bool | None, seed: int = DEFAULT_SEED) -> Shop:
    """The embedded catalog (``data_dir=None``) or the real files of ``data_dir``.

    ``num_products`` limits the catalog (the generated size; or the first N entries of
    the file).  ``human_goals``: None = human goals where ``items_human_ins.json``
    exists (always for the embedded catalog), else the synthetic ``items_ins_v2`` goals.
    """
    if data_dir is None:
        if human_goals is False:
            raise ValueError("the embedded catalog has human-style goals only; pass human_goals=None or True")
        products, instructions = generate_catalog(num_products or 1000, seed)
        prices = {p.asin: product_price(p, seed) for p in products}
        goals = build_human_goals(products, instructions, prices, seed)
        return build_shop(products, goals, prices, f"embedded catalog v{GENERATOR_VERSION} (seed {seed})")
    products_path, attributes_path = pick_files(data_dir, num_products)
    attributes = load_attributes(attributes_path)
    products = load_products(products_path, attributes, num_products)
    prices = {p.asin: product_price(p, seed) for p in products}
    human_path = data_dir / HUMAN_INSTRUCTIONS
    if human_goals is None:
        human_goals = human_path.is_file()
    if human_goals:
        goals = build_human_goals(products, load_human_instructions(human_path), prices, seed)
    else:
        goals = build_synthetic_goals(products, synthetic_instructions(attributes_path, attributes), prices, seed)
    if not goals:
        raise ValueError(f"{data_dir}: no goal could be built (no product has an instruction with attributes)")
    return build_shop(products, goals, prices, str(products_path))
