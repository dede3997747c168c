"""WebShop (Yao et al. 2022) as a text env: catalog, BM25 search, pages, the purchase score.

The engine modules (schema, loader, generator, goals, search, pages, render,
reward, engine, expert, shop) import no gymnasium; ``env.WebShopEnv`` is the thin
adapter registered as ``gigpo_gym/WebShop-v0``.  The names below are imported on
first use: the search index (bm25s) costs half a second to import, which
``gigpo-gym --help`` and the other commands should not pay.
"""

from __future__ import annotations

from gigpo_gym.core.lazy import lazy_names

#: The environment variable naming a folder with the original WebShop files.
DATA_ENV = "WEBSHOP_DATA"
#: The web site's default limits (here, so ``gigpo-gym serve webshop --help`` needs no FastAPI).
DEFAULT_MAX_BODY_BYTES = 8192
DEFAULT_MAX_SESSIONS = 4096

#: Names served lazily: name -> module.
_LAZY = {
    "Session": "engine",
    "WebShopEngine": "engine",
    "parse_action": "engine",
    "PurchaseScore": "reward",
    "purchase_score": "reward",
    "Goal": "schema",
    "Product": "schema",
    "Shop": "shop",
    "load_shop": "shop",
    "WebShopEnv": "env",
}
__getattr__ = lazy_names(__name__, _LAZY)


__all__ = ["DATA_ENV", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_SESSIONS", *_LAZY]
