"""Goals from products and instructions: price caps, the fixed shuffle, the splits.

The original builds one goal per human instruction (skipping those without
attributes) or, for synthetic goals, one per combination of a product's option
values; gives each a price cap sampled above the product's price; shuffles the list
with ``random.seed(233)``; and reads splits off positions of the shuffled list.
Here the shuffle uses a local ``random.Random(233)`` (the same permutation, no global
state) and the price draws are derived from a seed and the goal's position, so the
same files give the same goals in every process.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Mapping, Sequence

from gigpo_gym.envs.webshop.schema import Instruction, NO_PRICE_CAP, Goal, Product

#: Candidate price caps 10, 20, ..., 990 (the original's PRICE_RANGE).
PRICE_CAPS = tuple(10.0 * i for i in range(1, 100))
SHUFFLE_SEED = 233
#: Split name -> [start, stop) positions in the shuffled goal list.  test/eval/train is
#: the original's convention; gigpo_train (500+) is what the GiGPO trainer trains on.
SPLITS: dict[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "eval": (500, 1500),
    "train": (1500, None),
    "gigpo_train": (500, None),
    "all": (0, None),
}


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) derived from ``parts`` (same in every process)."""
    raw = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(raw, "big") / 2**64


def product_price(product: Product, seed: int) -> float:
    """The price paid: the single price, or a value drawn uniformly from the range."""
    if len(product.pricing) == 1:
        return product.pricing[0]
    lo, hi = product.pricing[:2]
    return lo + (hi - lo) * _unit("price", seed, product.asin)


def price_cap(price: float, rng: random.Random) -> float | None:
    """Two of the first four caps above ``price``, keep the larger; None if fewer than two."""
    above = [cap for cap in PRICE_CAPS if cap > price][:4]
    if len(above) < 2:
        return None
    return max(rng.sample(above, 2))


def _with_price(text: str, cap: float | None) -> tuple[str, float]:
    if cap is None:
        return text, NO_PRICE_CAP
    return f"{text}, and price lower than {cap:.2f} dollars", cap


def build_human_goals(
    products: Sequence[Product],
    instructions: Mapping[str, Sequence[Instruction]],
    prices: Mapping[str, float],
    seed: int,
) -> list[Goal]:
    """One goal per instruction with attributes, in product order, then shuffled."""
    drafts = []
    for product in products:
        for ins in instructions.get(product.asin, ()):
            if not ins.attributes:  # the original skips these
                continue
            rng = random.Random(int(_unit("cap", seed, len(drafts)) * 2**63))
            text, cap = _with_price(ins.instruction.strip("."), price_cap(prices[product.asin], rng))
            drafts.append((product, text, ins.attributes, ins.options, cap, None))
    return _finish(drafts)


def build_synthetic_goals(
    products: Sequence[Product],
    instructions: Mapping[str, Instruction],
    prices: Mapping[str, float],
    seed: int,
) -> list[Goal]:
    """One goal per combination of a product's option values (``items_ins_v2`` style)."""
    drafts = []
    for product in products:
        ins = instructions.get(product.asin)
        if ins is None or not ins.instruction:
            continue
        rng = random.Random(int(_unit("cap", seed, product.asin) * 2**63))
        cap = price_cap(prices[product.asin], rng)  # one cap per product, as the original
        names = sorted(product.options)
        for combo in itertools.product(*(product.options[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo))
            text, upper = _with_price(f"{ins.instruction} with {option_text}" if option_text else ins.instruction, cap)
            drafts.append((product, text, ins.attributes, tuple(combo), upper, tuple(names)))
    return _finish(drafts)


def _finish(drafts: list[tuple]) -> list[Goal]:
    random.Random(SHUFFLE_SEED).shuffle(drafts)
    return [
        Goal(
            index=i,
            asin=product.asin,
            instruction_text=text,
            attributes=tuple(attributes),
            options=tuple(options),
            price_upper=cap,
            name=product.title,
            query=product.query,
            category=product.category,
            product_category=product.product_category,
            option_names=names,
        )
        for i, (product, text, attributes, options, cap, names) in enumerate(drafts)
    ]


def split_goals(goals: Sequence[Goal], split: str) -> list[Goal]:
    """The goals of ``split`` (positions in the shuffled list, see ``SPLITS``)."""
    if split not in SPLITS:
        import difflib

        close = difflib.get_close_matches(split, list(SPLITS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}{hint}")
    start, stop = SPLITS[split]
    return list(goals[start:stop])
