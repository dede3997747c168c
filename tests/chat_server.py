"""A small OpenAI-compatible Chat Completions server on 127.0.0.1 that injects faults on cue.

``FakeChatServer(reply)`` answers ``POST /v1/chat/completions`` with ``reply(prompt)``
(the last user message; with ``split_reasoning`` its ``<think>`` part goes in
``reasoning_content``, as servers with a reasoning parser answer; a dict is the whole
message, tool calls included) and
``GET /v1/models`` with its one model.  ``faults`` is a
list of fault names served to the next requests, one each, in order; ``fault_for``
(a function of the prompt) picks a fault for every request it matches.  Faults:

- ``"429"`` rate limit with ``Retry-After: 1``; ``"500"`` a server error;
- ``"hang"`` no answer for ``hang_seconds``; ``"drop"`` the connection closed with no reply;
- ``"malformed"`` a 200 whose body is not JSON; ``"context"`` a 400 naming the context length;
  ``"400"`` a 400 refusing a parameter;
- ``"401"`` and ``"echo500"`` (their messages echo the Authorization header, as some
  servers and proxies do), ``"403"`` (a key without access to the model) and ``"404"``
  (unknown model).

Every request is recorded (headers, body, arrival time), and so is the most
requests it ever had in flight at once.  ``go_away()`` is a server that died: it
takes no new connection and drops every request on the open ones.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MODEL = "fake/chat-1"
FINGERPRINT = "fp_fake_1"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a fault is expected here


class FakeChatServer:
    def __init__(self, reply: Callable[[str], str], *, model: str = MODEL, faults: list[str] | None = None,
                 fault_for: Callable[[str], str | None] | None = None, hang_seconds: float = 3.0,
                 delay: float = 0.0, split_reasoning: bool = False, answer_as: str | None = None):
        self.reply, self.model, self.faults, self.fault_for = reply, model, list(faults or []), fault_for
        self.answer_as = answer_as or model  # the model id in replies (a hosted API answers with a dated snapshot)
        self.split_reasoning = split_reasoning
        self.hang_seconds, self.delay = hang_seconds, delay
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.most_in_flight = 0
        self.gone = False
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.gone:
            self._httpd.shutdown()
        self._httpd.server_close()

    def go_away(self) -> None:
        self.gone = True
        threading.Thread(target=self._httpd.shutdown, daemon=True).start()
        self._httpd.socket.close()

    def _next_fault(self, prompt: str) -> str | None:
        with self._lock:
            if self.faults:
                return self.faults.pop(0)
        return self.fault_for(prompt) if self.fault_for else None

    def _completion(self, prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        text = self.reply(prompt)
        if isinstance(text, dict):  # a whole message (tool calls): sent as it is
            return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                    "model": self.answer_as, "system_fingerprint": FINGERPRINT,
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": text}],
                    "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1,
                              "total_tokens": len(prompt.split()) + 1}}
        reasoning = None
        if self.split_reasoning and "</think>" in text:  # as servers with a reasoning parser answer
            reasoning, text = text.split("</think>", 1)
            reasoning = reasoning.replace("<think>", "")
        finish = "stop"
        if len(text.split()) > int(body.get("max_tokens") or 10**9):
            text, finish = " ".join(text.split()[: int(body["max_tokens"])]), "length"
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": self.answer_as, "system_fingerprint": FINGERPRINT,
                "choices": [{"index": 0, "finish_reason": finish,
                             "message": {"role": "assistant", "content": text, "reasoning_content": reasoning}}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()),
                          "total_tokens": len(prompt.split()) + len(text.split())}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if server.gone:
                    self.close_connection = True
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                prompt = next((m["content"] for m in reversed(body.get("messages", [])) if m["role"] == "user"), "")
                with server._lock:
                    server.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                                            "time": time.monotonic()})
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    self._answer(prompt, body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up on a hang
                    pass
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, prompt: str, body: dict[str, Any]) -> None:
                fault = server._next_fault(prompt)
                time.sleep(server.delay)
                if fault == "429":
                    self._send(429, {"error": {"message": "Rate limit reached", "type": "rate_limit"}},
                               {"retry-after": "1"})
                elif fault == "500":
                    self._send(500, {"error": {"message": "The server had an error"}})
                elif fault == "echo500":
                    echoed = self.headers.get("authorization", "")
                    self._send(500, {"error": {"message": f"upstream failed for {echoed}"}})
                elif fault == "hang":
                    time.sleep(server.hang_seconds)
                    self._send(200, server._completion(prompt, body))
                elif fault == "drop":
                    self.close_connection = True  # nothing sent: the client sees the connection end
                elif fault == "malformed":
                    self._send(200, b'{"id": "x", "choices": [{"message": ')
                elif fault == "400":
                    self._send(400, {"error": {"message": "Unrecognized request argument supplied: seed"}})
                elif fault == "context":
                    self._send(400, {"error": {"message": "This model's maximum context length is 2048 tokens. "
                                               "However, your messages resulted in 5000 tokens.",
                                               "code": "context_length_exceeded"}})
                elif fault == "401":
                    echoed = self.headers.get("authorization", "")
                    self._send(401, {"error": {"message": f"Incorrect API key provided: {echoed}"}})
                elif fault == "403":
                    self._send(403, {"error": {"message": "Your key has no access to this model",
                                               "code": "model_access_denied"}})
                elif fault == "404":
                    self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist",
                                               "code": "model_not_found"}})
                elif body.get("model") != server.model:
                    self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist"}})
                else:
                    self._send(200, server._completion(prompt, body))

        return Handler
