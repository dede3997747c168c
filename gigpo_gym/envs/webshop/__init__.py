"""WebShop (Yao et al. 2022) as a text env: catalog, BM25 search, pages, the purchase score.

The engine modules (schema, loader, generator, goals, search, pages, render,
reward, engine, expert, shop) import no gymnasium; ``env.WebShopEnv`` is the thin
adapter registered as ``gigpo_gym/WebShop-v0``.
"""

from __future__ import annotations

from typing import Any

from gigpo_gym.envs.webshop.engine import Session, WebShopEngine, parse_action
from gigpo_gym.envs.webshop.reward import PurchaseScore, purchase_score
from gigpo_gym.envs.webshop.schema import Goal, Product
from gigpo_gym.envs.webshop.shop import Shop, load_shop

__all__ = ["Goal", "Product", "PurchaseScore", "Session", "Shop", "WebShopEngine", "WebShopEnv", "load_shop",
           "parse_action", "purchase_score"]  # fmt: skip


def __getattr__(name: str) -> Any:  # the gym adapter only when asked for
    if name == "WebShopEnv":
        from gigpo_gym.envs.webshop.env import WebShopEnv

        return WebShopEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
