"""Both servers (WebShop site, retriever) under hostile connections, sent byte for byte over raw sockets.

Each server runs on a free loopback port with short limits (0.5 s timeouts, 32
connections) so that the slow-client cases finish in about a second.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from pathlib import Path

import pytest

from gigpo_gym.core.net import ServerLimits, ThreadedServer

LIMITS = ServerLimits(head_timeout=0.5, body_timeout=0.5, keep_alive=0.5, max_connections=32)
FIXTURES = Path(__file__).parent / "fixtures" / "searchqa" / "flashrag"


class Records(logging.Handler):
    """Everything the server logs (uvicorn's loggers), with any exception's traceback."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.traces: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage() + (logging.Formatter().formatException(record.exc_info)
                                                 if record.exc_info else ""))  # fmt: skip
        if record.exc_info or "Traceback" in record.getMessage():
            self.traces.append(self.lines[-1])


@pytest.fixture(scope="module", params=["site", "retriever"])
def server(request):
    """(server, a POST path that reads its body, a valid body for it, the log records)."""
    if request.param == "site":
        from gigpo_gym.envs.webshop.shop import load_shop
        from gigpo_gym.envs.webshop.site import create_app

        srv = ThreadedServer(create_app(load_shop(None, 1000, None)), LIMITS)
        head = _send(srv, b"GET /start?seed=3 HTTP/1.1\r\nHost: x\r\n\r\n", wait=5)
        post = re.search(rb"location: (\S+)", head, re.IGNORECASE).group(1).decode() + "/act"
        body = b"v=0&el=1&q=tea"
    else:
        from gigpo_gym.envs.searchqa.bm25 import BM25Retriever
        from gigpo_gym.envs.searchqa.corpus import load_corpus_jsonl
        from gigpo_gym.envs.searchqa.server import create_app

        srv = ThreadedServer(create_app(BM25Retriever.build(load_corpus_jsonl(FIXTURES / "corpus.jsonl"))), LIMITS)
        post, body = "/retrieve", b'{"queries": ["Lowmarsh capital"], "topk": 1}'
    records = Records()
    logging.getLogger("uvicorn").addHandler(records)
    yield srv, post, body, records
    srv.stop()
    logging.getLogger("uvicorn").removeHandler(records)
    # every hostile client of the module, answered and dropped: the server's log holds no traceback
    assert records.traces == [], "\n\n".join(records.traces)


def _send(srv, data: bytes, wait: float = 5.0, close_write: bool = False) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (or ``wait`` passes)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=wait) as s:
        s.sendall(data)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        return _read_all(s, wait)


def _read_all(s: socket.socket, wait: float) -> bytes:
    out, deadline = b"", time.monotonic() + wait
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        out += chunk
    return out


def _health(srv) -> bytes:
    return _send(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", wait=5)


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else -1


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",  # one 70 KB header line
        b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(65)) + b"\r\n",
        b"GET /health?" + b"q" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a 20 KB request line
    ],
    ids=["70KB-header-line", "65-header-fields", "20KB-request-line"],
)
def test_oversized_heads_get_431_and_the_server_stays_up(server, head):
    srv, *_ = server
    reply = _send(srv, head)
    assert _status(reply) == 431 and b"connection: close" in reply.lower(), reply[:200]
    assert _status(_health(srv)) == 200


def test_a_malformed_head_gets_400(server):
    srv, *_ = server
    assert _status(_send(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")) == 400


def test_a_slowloris_head_gets_408_and_is_closed_although_bytes_keep_coming(server):
    srv, *_ = server
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        start, reply = time.monotonic(), b""
        while time.monotonic() - start < 4 and not reply:
            try:
                s.sendall(b"X-Slow: 1\r\n")  # a header line every 0.2 s: never idle, never done
            except (BrokenPipeError, ConnectionResetError):
                break
            s.settimeout(0.2)
            try:
                reply = s.recv(4096)
            except TimeoutError:
                pass
        assert _status(reply) == 408 and 0.4 < time.monotonic() - start < 2, reply
        assert _read_all(s, 4) == b""  # closed by the server


def test_a_silent_connection_is_closed_after_the_head_timeout(server):
    srv, *_ = server
    start = time.monotonic()
    assert _status(_send(srv, b"")) == 408 and time.monotonic() - start < 2


def test_a_slow_body_gets_408(server):
    srv, post, body, _ = server
    start = time.monotonic()
    reply = _send(srv, f"POST {post} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body) + 50}\r\n\r\n".encode() + body)
    assert _status(reply) == 408 and b"body" in reply and time.monotonic() - start < 2, reply


def test_a_truncated_body_logs_no_traceback(server):
    srv, post, body, records = server
    records.lines.clear()
    head = f"POST {post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    assert _send(srv, f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body).startswith(b"HTTP/1.1")
    _send(srv, f"{head}Content-Length: {len(body) + 50}\r\n\r\n".encode() + body[:5], wait=0.5, close_write=True)
    time.sleep(0.3)
    assert _status(_health(srv)) == 200
    assert not [line for line in records.lines if "Traceback" in line or "Exception" in line], records.lines


def test_a_slow_client_flood_leaves_the_server_reachable(server):
    """100 half-sent heads (more than the 32-connection cap) and /health still answers at once."""
    srv, post, body, _ = server
    flood = []
    try:
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            flood.append(s)
        start = time.monotonic()
        assert _status(_health(srv)) == 200 and time.monotonic() - start < 0.9
        request = (b"GET /start?seed=5 HTTP/1.1\r\nHost: x\r\n\r\n" if post.endswith("/act") else  # a new session
                   f"POST {post} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert _status(_send(srv, request, wait=2)) in (200, 303)
        time.sleep(LIMITS.head_timeout + 0.5)
        for s in flood:  # every slow connection was dropped (to make room) or timed out (408)
            s.setblocking(False)
            try:
                data = s.recv(4096)
            except BlockingIOError:
                pytest.fail("a slow connection is still open after the head timeout")
            except ConnectionResetError:
                continue
            assert data == b"" or _status(data) == 408
    finally:
        for s in flood:
            s.close()


def test_a_flood_from_one_address_makes_room_with_its_own_connections():
    """Over the cap, the busiest client address loses its waiting connections, not a quieter client."""
    from fastapi import FastAPI

    srv = ThreadedServer(FastAPI(), ServerLimits(max_connections=8, head_timeout=5))
    quiet, flood = [], []
    try:
        for _ in range(3):  # the oldest connections, from another loopback address
            quiet.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5, source_address=("127.0.0.2", 0)))
            quiet[-1].sendall(b"GET / HTTP/1.1\r\n")
        time.sleep(0.1)
        for _ in range(20):
            flood.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
            flood[-1].sendall(b"GET / HTTP/1.1\r\n")
        time.sleep(0.5)
        for s in quiet:  # still open: nothing to read yet
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
        closed = 0
        for s in flood:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed == 15  # 3 + 20 connections, 8 kept: the flood's 5 newest and the quiet client's 3
    finally:
        for s in quiet + flood:
            s.close()
        srv.stop()


def test_when_no_connection_can_make_room_a_new_one_gets_503_with_retry_after():
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/hold")
    async def hold() -> dict:
        await asyncio.sleep(1)  # a request being served is not waiting on its client
        return {"held": True}

    srv = ThreadedServer(app, ServerLimits(max_connections=2))
    try:
        holders = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(2)]
        for s in holders:
            s.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        reply = _send(srv, b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(reply) == 503 and b"retry-after: 1\r\n" in reply.lower(), reply
        assert all(_status(s.recv(4096)) == 200 for s in holders)
        for s in holders:
            s.close()
    finally:
        srv.stop()


def test_limits_name_a_bad_value():
    with pytest.raises(ValueError, match="head_timeout must be > 0 seconds, got 0"):
        ServerLimits(head_timeout=0)
    with pytest.raises(ValueError, match="max_connections must be >= 1"):
        ServerLimits(max_connections=0)
