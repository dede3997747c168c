"""``gigpo-gym serve openenv ENV_ID``: any env id over openenv-core's WebSocket protocol."""

from __future__ import annotations

import argparse
import json
import sys

#: What ``serve openenv --help`` says first (plain text).
DESCRIPTION = ("Serve an env id through openenv-core: each WebSocket session plays its own env; the action is "
               'one string field, {"message": REPLY}, so openenv-core\'s GenericEnvClient drives it.')


def add_serve_cli(serve_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``openenv`` under the ``serve`` command's sub-parsers (nothing of openenv-core is imported here)."""
    from gigpo_gym.wrappers.anchor import ANCHOR_MODES

    parser = serve_subparsers.add_parser("openenv", help="serve an env id over openenv-core (the [openenv] extra)",
                                         description=DESCRIPTION)
    parser.add_argument("env_id", help="e.g. gigpo_gym/SearchQA-v0 (see `gigpo-gym list`)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    parser.add_argument("--max-sessions", type=int, default=8, help="WebSocket sessions at once (default 8)")
    parser.add_argument("--session-timeout", type=float, default=600.0,
                        help="seconds an idle session is kept before it is closed (default 600)")
    parser.add_argument("--anchor-mode", choices=ANCHOR_MODES, default="state",
                        help="what the anchor field digests: the true state (default) or the observation text")
    parser.add_argument("--kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="env constructor argument (JSON value or string); repeatable")
    parser.set_defaults(func=run_serve_openenv)
    return parser


def run_serve_openenv(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from gigpo_gym.core.net import listen_socket, warn_if_public
    from gigpo_gym.integrations.openenv import create_server, serve  # the version check: an ImportError names the extra

    if args.max_sessions < 1 or not args.session_timeout > 0:
        print(f"error: --max-sessions must be >= 1 and --session-timeout > 0, got {args.max_sessions} and "
              f"{args.session_timeout}", file=sys.stderr)
        return 2
    try:
        kwargs = dict(_kwarg(text) for text in args.kwarg)
        sock = listen_socket(args.host, args.port)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with sock:
        try:
            app = create_server(args.env_id, max_sessions=args.max_sessions, session_timeout=args.session_timeout,
                                anchor_mode=args.anchor_mode, **kwargs)
        except (gym.error.Error, TypeError, ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        warn_if_public(args.host, "env server")
        port = sock.getsockname()[1]
        print(f"{args.env_id} over openenv-core on ws://{args.host}:{port}/ws "
              f"(up to {args.max_sessions} sessions)", file=sys.stderr)
        serve(app, sock, args.host)
    return 0


def _kwarg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--kwarg expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
