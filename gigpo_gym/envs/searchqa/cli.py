"""``gigpo-gym serve retriever``: serve a corpus over HTTP for SearchQA envs and Search-R1 scripts."""

from __future__ import annotations

import argparse
import sys

from gigpo_gym.core.data import resolve_data_dir
from gigpo_gym.core.net import listen_socket, warn_if_public
from gigpo_gym.envs.searchqa.dataset import locate_corpus
from gigpo_gym.envs.searchqa.factory import LOCAL_RETRIEVERS, open_retriever
from gigpo_gym.envs.searchqa.retrieval import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUERIES, DEFAULT_MAX_SERVER_TOPK

#: What ``serve retriever --help`` says first (plain text).
DESCRIPTION = ("Serve a corpus over HTTP (a Search-R1 compatible /retrieve endpoint) for SearchQA envs and "
               "Search-R1 scripts.")


def add_serve_cli(serve_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``retriever`` under the ``serve`` command's sub-parsers."""
    parser = serve_subparsers.add_parser(
        "retriever",
        help="serve a corpus on a Search-R1 compatible /retrieve endpoint",
        description=DESCRIPTION,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    parser.add_argument("--retriever", choices=LOCAL_RETRIEVERS, default="bm25",
                        help="bm25 (default; bm25s over the passages) or dense (all-MiniLM-L6-v2 embeddings, "
                        "the [dense] extra)")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder with corpus.jsonl (else $GIGPO_SEARCHQA_DATA, else the embedded world)",
    )
    parser.add_argument("--world-size", type=int, default=600, help="people in the embedded world (default 600)")
    parser.add_argument("--max-queries", type=int, default=DEFAULT_MAX_QUERIES, help=f"queries per request (default {DEFAULT_MAX_QUERIES})")
    parser.add_argument("--max-topk", type=int, default=DEFAULT_MAX_SERVER_TOPK, help=f"largest topk a request may ask (default {DEFAULT_MAX_SERVER_TOPK})")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help=f"largest request body in bytes (default {DEFAULT_MAX_BODY_BYTES})")
    parser.set_defaults(func=run_serve_retriever)
    return parser


def run_serve_retriever(args: argparse.Namespace) -> int:
    from gigpo_gym.envs.searchqa.server import serve  # fastapi/uvicorn only when serving

    try:
        source = locate_corpus(resolve_data_dir(args.data_dir, "GIGPO_SEARCHQA_DATA"), world_size=args.world_size)
        sock = listen_socket(args.host, args.port)  # a port in use is one line, before the index is built
    except OSError as e:  # FileNotFoundError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    with sock:
        warn_if_public(args.host, "retriever")
        retriever = open_retriever(args.retriever, source)
        port = sock.getsockname()[1]
        print(f"serving {source.corpus_path} ({args.retriever}) on http://{args.host}:{port}/retrieve", file=sys.stderr)
        serve(retriever, host=args.host, port=port, sock=sock, max_queries=args.max_queries, max_topk=args.max_topk,
              max_body_bytes=args.max_body_bytes)
    return 0
