"""A Search-R1 compatible ``/retrieve`` server (``gigpo-gym serve retriever``).

``POST /retrieve`` with ``{"queries": [...], "topk": 3, "return_scores": true}``
answers ``{"result": [[{"document": {"id", "title", "contents"}, "score": s}, ...]]}``
(without scores each entry is the document).  Hostile input gets a 4xx and the
server stays up: the body size is checked before anything is parsed (413),
a body cut short or malformed JSON is a 400, and a bad field, too many queries or a
topk out of bounds is a 422.  A ``topk`` that is missing, ``null`` or ``0`` means the
default, 3, as Search-R1's server falls back to its own default.  Connections get the limits of
``core.net.ServerLimits`` (head size and fields, slow clients).  Binds to 127.0.0.1
unless told otherwise.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from gigpo_gym.core.net import BodyError, ServerLimits, listen_socket, read_body, serve_on
from gigpo_gym.envs.searchqa.retrieval import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUERIES,
    DEFAULT_MAX_SERVER_TOPK,
    MAX_QUERY_CHARS,
    MAX_TOPK,
    Retriever,
)

#: Passages per query when a request leaves ``topk`` out, null or 0 (Search-R1's default).
DEFAULT_TOPK = 3


def _validate(payload: Any, max_queries: int, max_topk: int) -> tuple[list[str], int, bool]:
    """``(queries, topk, return_scores)`` of a request, or ValueError naming the field."""
    if not isinstance(payload, dict):
        raise ValueError("the body must be a JSON object with a 'queries' list")
    if "queries" not in payload:
        raise ValueError("the body has no 'queries' field (a list of strings)")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError("'queries' must be a list of strings")
    if len(queries) > max_queries:
        raise ValueError(f"'queries' has {len(queries)} entries; the bound is {max_queries} per request")
    if any(len(q) > MAX_QUERY_CHARS for q in queries):
        raise ValueError(f"a query is longer than {MAX_QUERY_CHARS} characters")
    topk = payload.get("topk")
    if topk is None or (topk == 0 and type(topk) is int):
        topk = min(DEFAULT_TOPK, max_topk)
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
        raise ValueError(f"'topk' must be an int in [1, {max_topk}] (or null / 0 for {min(DEFAULT_TOPK, max_topk)}), "
                         f"got {topk!r}")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise ValueError("'return_scores' must be true or false")
    return queries, topk, return_scores


def create_app(
    retriever: Retriever,
    *,
    max_queries: int = DEFAULT_MAX_QUERIES,
    max_topk: int = DEFAULT_MAX_SERVER_TOPK,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The FastAPI app serving ``retriever`` under the given request bounds."""
    if not 1 <= max_topk <= MAX_TOPK:
        raise ValueError(f"max_topk must be in [1, {MAX_TOPK}], got {max_topk}")
    if max_queries < 1 or max_body_bytes < 64:
        raise ValueError(f"max_queries must be >= 1 and max_body_bytes >= 64, got {max_queries}, {max_body_bytes}")
    app = FastAPI(title="gigpo-gym retriever", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "max_queries": max_queries, "max_topk": max_topk, "max_body_bytes": max_body_bytes}

    @app.post("/retrieve")
    async def retrieve(request: Request):
        try:
            body = await read_body(request, max_body_bytes)
        except BodyError as e:
            return error(e.status, e.message)
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            return error(400, f"malformed JSON: {e}")
        try:
            queries, topk, return_scores = _validate(payload, max_queries, max_topk)
        except ValueError as e:
            return error(422, str(e))
        hits = await run_in_threadpool(retriever.search, queries, topk)
        result = []
        for ranked in hits:
            docs = [{"id": h.document.id, "title": h.document.title, "contents": h.document.contents} for h in ranked]
            if return_scores:
                result.append([{"document": d, "score": h.score} for d, h in zip(docs, ranked)])
            else:
                result.append(docs)
        return {"result": result}

    return app


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits = ServerLimits(),
          sock: socket.socket | None = None, **bounds: int) -> None:  # fmt: skip
    """Run the server with uvicorn until interrupted (on ``sock`` when given, already bound to ``host:port``)."""
    serve_on(create_app(retriever, **bounds), sock or listen_socket(host, port), host, limits)
