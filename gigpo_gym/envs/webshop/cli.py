"""``gigpo-gym serve webshop``: the WebShop web site, to shop by hand or for browser envs."""

from __future__ import annotations

import argparse
import sys

from gigpo_gym.core.net import listen_socket, warn_if_public
from gigpo_gym.envs.webshop import DATA_ENV, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS

#: What ``serve webshop --help`` says first (plain text).
DESCRIPTION = "Serve the WebShop web site: shop by hand in a browser, or point WebShop-Browser-v0 at it."


def add_serve_cli(serve_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``webshop`` under the ``serve`` command's sub-parsers."""
    parser = serve_subparsers.add_parser(
        "webshop",
        help="serve the WebShop site (open it in a browser, or point WebShop-Browser-v0 at it)",
        description=DESCRIPTION,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=3000,
                        help="port (default 3000, as the original site; 0: any free port)")
    parser.add_argument(
        "--data-dir", default=None, help=f"folder with the original JSON files (else ${DATA_ENV}, else the embedded catalog)"
    )
    parser.add_argument("--num-products", type=int, default=None, help="catalog size (embedded default 1,000)")
    parser.add_argument("--human-goals", choices=("auto", "yes", "no"), default="auto",
                        help="real files: human goals where items_human_ins.json exists (auto, the default), always (yes), never (no)")  # fmt: skip
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help=f"live sessions; when all are in use, /start answers 503 + Retry-After (default {DEFAULT_MAX_SESSIONS})")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help=f"largest request body in bytes (default {DEFAULT_MAX_BODY_BYTES})")
    parser.set_defaults(func=run_serve_webshop)
    return parser


def run_serve_webshop(args: argparse.Namespace) -> int:
    from gigpo_gym.core.data import resolve_data_dir
    from gigpo_gym.envs.webshop.shop import load_shop
    from gigpo_gym.envs.webshop.site import serve

    if args.num_products is not None and args.num_products < 1:
        print(f"error: --num-products must be positive, got {args.num_products}", file=sys.stderr)
        return 2
    path = resolve_data_dir(args.data_dir, DATA_ENV)
    human_goals = {"auto": None, "yes": True, "no": False}[args.human_goals]
    try:
        sock = listen_socket(args.host, args.port)  # a port in use is one line, before the catalog is loaded
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with sock:
        try:
            shop = load_shop(path, args.num_products or (1000 if path is None else None), human_goals)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        warn_if_public(args.host, "shop")
        port = sock.getsockname()[1]
        print(f"WebShop ({shop.source}, {len(shop.products)} products, {len(shop.goals)} goals) "
              f"on http://{args.host}:{port}/", file=sys.stderr)  # fmt: skip
        serve(shop, host=args.host, port=port, sock=sock, max_sessions=args.max_sessions,
              max_body_bytes=args.max_body_bytes)
    return 0
