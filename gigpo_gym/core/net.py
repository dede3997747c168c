"""What both servers of the suite (the WebShop site, the retriever) share.

The loopback warning, the connection limits, and the uvicorn settings that enforce
them.  uvicorn alone bounds neither the time a client may take to send its request
head (a slowloris client holds a connection forever) nor the number of header
fields, and its ``limit_concurrency`` counts idle and half-sent connections, so a
few dozen slow clients make it answer 503 to everyone.  ``GuardedH11Protocol`` (a
small subclass of uvicorn's h11 protocol) adds those bounds instead.
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

#: Seconds a refused client is told to wait (``Retry-After``).
RETRY_AFTER_SECONDS = 1
#: Seconds a refused connection is read (and its bytes dropped) before it is closed, so
#: that the client gets the reply rather than a reset for the bytes it was still sending.
LINGER_SECONDS = 2.0


def warn_if_public(host: str, what: str) -> None:
    """Warn on stderr when ``host`` is not a loopback address (servers default to 127.0.0.1)."""
    try:
        if not ipaddress.ip_address(host).is_loopback:
            print(f"warning: binding {host} exposes the {what} beyond this machine", file=sys.stderr)
    except ValueError:  # a host name
        print(f"warning: binding {host!r}; use 127.0.0.1 to keep the {what} private", file=sys.stderr)


@dataclass(frozen=True)
class ServerLimits:
    """Per-connection bounds, the same for both servers (documented in docs/envs/*.md)."""

    #: Request line plus header fields, in bytes; more is refused with 431.
    max_head_bytes: int = 16384
    #: Header fields of one request; more is refused with 431.
    max_header_fields: int = 64
    #: Seconds from connecting (or from the end of the previous reply) to a complete request head: 408, closed.
    head_timeout: float = 10.0
    #: Seconds from the head to the end of the body; then the connection is closed.
    body_timeout: float = 10.0
    #: Seconds an idle keep-alive connection stays open.
    keep_alive: float = 5.0
    #: Open connections.  Beyond it, the oldest connection that is waiting for its client
    #: (head or body), of the client address holding the most connections, is closed to
    #: make room; if no connection is waiting, the new one gets 503 + Retry-After.
    max_connections: int = 512

    def __post_init__(self) -> None:
        for name in ("max_head_bytes", "max_header_fields", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("head_timeout", "body_timeout", "keep_alive"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")


def head_problem(buffer: bytes, limits: ServerLimits) -> str | None:
    """Why the request head at the start of ``buffer`` (complete or not) is refused, or None."""
    end = buffer.find(b"\r\n\r\n")
    head = buffer if end < 0 else buffer[: end + 2]
    if len(head) > limits.max_head_bytes:
        return f"the request head is larger than {limits.max_head_bytes} bytes"
    if head.count(b"\n") - 1 > limits.max_header_fields:
        return f"the request has more than {limits.max_header_fields} header fields"
    return None


def _raw_reply(status: int, reason: str, message: str, extra: str = "") -> bytes:
    body = message.encode("utf-8") + b"\n"
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            f"{extra}content-length: {len(body)}\r\n\r\n").encode("latin-1") + body  # fmt: skip


def guarded_protocol(limits: ServerLimits) -> type:
    """uvicorn's h11 protocol with ``limits`` on every connection."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """Header bounds, head/body deadlines and the connection cap on top of uvicorn's h11 protocol."""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._since = time.monotonic()
            self._waiting: str | None = None  # "head" or "body" while the client owes us bytes
            self._timer = None
            self._refused = False
            self._watch()
            # the server's other connections include WebSocket ones, which have no _refused flag
            open_ = [c for c in self.connections if not c.transport.is_closing() and not getattr(c, "_refused", False)]
            if len(open_) > limits.max_connections:
                self._make_room()

        def connection_lost(self, exc) -> None:
            self._cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._refused:  # a refused client's bytes are dropped unread
                super().data_received(data)

        def handle_events(self) -> None:
            if self._refused or self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE:
                problem = head_problem(self.conn.trailing_data[0], limits)
                if problem is not None:
                    self._refuse(431, "Request Header Fields Too Large", problem)
                    return
            super().handle_events()
            self._watch()

        # -- deadlines ----------------------------------------------------------------
        def _watch(self) -> None:
            """Arm the deadline of what the client owes: a head, a body, or nothing."""
            state = self.conn.their_state
            waiting = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
            if waiting == self._waiting:
                return
            self._cancel()
            self._waiting = waiting
            if waiting is not None:
                seconds = limits.head_timeout if waiting == "head" else limits.body_timeout
                self._timer = self.loop.call_later(seconds, self._expired)

        def _cancel(self) -> None:
            if getattr(self, "_timer", None) is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if self._refused or self.transport.is_closing():
                return
            if self._waiting == "head":
                self._refuse(408, "Request Timeout", f"no complete request head within {limits.head_timeout} s")
            elif self.cycle is not None and not self.cycle.response_started:
                # the app, reading the body, sees a disconnect; its own reply goes nowhere
                self._refuse(408, "Request Timeout", f"no complete request body within {limits.body_timeout} s")
            else:
                self.transport.close()

        # -- refusals -------------------------------------------------------------------
        def _refuse(self, status: int, reason: str, message: str, extra: str = "") -> None:
            """Reply, then half-close and drop what the client still sends, for LINGER_SECONDS at most."""
            self._cancel()
            self._waiting, self._refused = None, True
            if self.cycle is not None:  # the app's request ends here: what it reads or sends later goes nowhere
                self.cycle.disconnected = True
                self.cycle.message_event.set()
            self.transport.write(_raw_reply(status, reason, message, extra))
            if self.transport.can_write_eof():
                self.transport.write_eof()
                self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)
            else:
                self.transport.close()

        def _make_room(self) -> None:
            """Close a waiting connection of the busiest client address, or refuse this one."""
            open_ = [c for c in self.connections if not c.transport.is_closing() and not getattr(c, "_refused", False)]
            per_client = collections.Counter(_host(c) for c in open_)
            waiting = [c for c in open_ if c is not self and getattr(c, "_waiting", None) is not None]
            if not waiting:
                self._refuse(503, "Service Unavailable", f"more than {limits.max_connections} open connections",
                             f"retry-after: {RETRY_AFTER_SECONDS}\r\n")  # fmt: skip
                return
            victim = min(waiting, key=lambda c: (-per_client[_host(c)], c._since))
            victim._cancel()
            victim.transport.close()

    return GuardedH11Protocol


def _host(protocol: Any) -> str | None:
    return protocol.client[0] if getattr(protocol, "client", None) else None


def uvicorn_options(limits: ServerLimits) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` that enforce ``limits``."""
    return {
        "http": guarded_protocol(limits),
        "ws": "none",
        "h11_max_incomplete_event_size": 2 * limits.max_head_bytes,  # the guard refuses first, with 431
        "timeout_keep_alive": limits.keep_alive,
        "limit_concurrency": None,  # it would count slow clients and refuse everyone
    }


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` for a server the command line starts.

    Bound before anything is built or printed, so a port in use is one line that names
    ``--port`` (uvicorn would log its trace after the caller's "serving on" line).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise OSError(f"cannot listen on {host!r}: {e.strerror}; check --host") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a stopped server's port is free at once
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        why = "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be used ({e.strerror})"
        raise OSError(f"port {port} on {host} {why}: choose another with --port") from None
    return sock


def serve_on(app, sock: socket.socket, host: str, limits: ServerLimits) -> None:
    """Run ``app`` with uvicorn on the bound ``sock`` until interrupted."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=sock.getsockname()[1], log_level="info", **uvicorn_options(limits))
    uvicorn.Server(config).run(sockets=[sock])


class ThreadedServer:
    """An ASGI app on an ephemeral 127.0.0.1 port, served by uvicorn in a daemon thread of this process."""

    def __init__(self, app, limits: ServerLimits = ServerLimits(), *, name: str = "server",
                 start_timeout: float = 20.0, log_level: str = "warning"):  # fmt: skip
        import uvicorn

        self._socket = socket.socket()
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay on keep-alive replies
        self._socket.bind(("127.0.0.1", 0))
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, **uvicorn_options(limits)))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, name=name,
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + start_timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"the {name} did not start within {start_timeout} s")

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._socket.close()


class BodyError(Exception):
    """A request body that is refused: too large (413) or cut short by the client (400)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


async def read_body(request, limit: int) -> bytes:
    """The body of a Starlette ``request``; BodyError past ``limit`` bytes (declared or streamed) or when cut short."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BodyError(413, f"request body larger than {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyError(413, f"request body larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # the client left (or was cut off): nobody reads the reply
        raise BodyError(400, "the client closed the connection before the end of the body") from None
    return b"".join(chunks)
