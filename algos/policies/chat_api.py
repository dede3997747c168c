"""Any model behind an OpenAI-compatible Chat Completions endpoint, as a policy that generates.

vLLM, SGLang, llama.cpp, Ollama, ``transformers serve`` or a commercial API: each
step's prompt goes as the user message (after an optional system message:
``InputFormat.messages``, the prompt stack's) through the official ``openai`` client (the ``[api]`` extra; no torch).  Every prompt of a
``generate`` call is in flight at once, at most ``max_concurrency`` at a time, on an
event loop of the policy's own thread.  The key is read from the environment
variable ``api_key_env`` names and lives only in the client: nothing this module
writes or raises contains it.

Failures, request by request:

- 429, 408, 409, 5xx, a timeout, a dropped connection and a malformed body are
  retried ``max_retries`` times, after ``Retry-After`` when the server sends one,
  else after an exponential backoff with jitter;
- 401/403 (the key) and 404 (the model, or a wrong ``base_url``) raise
  ``ServedModelError``: the run stops at once, as it does when the server cannot
  be reached when the policy connects, or stops answering for good later on;
- a prompt longer than the model's context (a 4xx naming the context) comes back
  as a ``ChatGeneration`` with ``error_status="truncated"``; a request still
  failing after its retries, or refused with another 4xx, with
  ``error_status="crashed"``; the leaderboard ends that episode so, with the reason.

Decoding: ``temperature``, ``top_p``, ``max_new_tokens``, ``stop`` and the seed pass
through (each episode's request gets ``derive_seed(step seed, episode)``, so a
resumed run asks the same).  Replies are cut after their first stop string (a
server may return the rest of that token), a reply the server stopped at a stop
string it left out gets that closing tag back, and reasoning a server returned
apart (``reasoning_content``) goes back in ``<think> </think>`` before the reply, so
every server's reply reads as the in-process policy's would.  Token counts, the served model id and the system
fingerprint of each reply come back with it.

A chat (the ``tools`` prompt template's context: ``messages``, ``tools``) goes as those
messages and tools; the calls of the reply come back in its text as
``<tool_call>{...}</tool_call>``, as the in-process policy writes them.
"""

from __future__ import annotations

import asyncio
import difflib
import email.utils
import json
import logging
import os
import random
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams
from gigpo_gym.core.env import derive_seed
from gigpo_gym.wrappers.stack import InputFormat
from gigpo_gym.wrappers.tool_calls import render_calls

log = logging.getLogger(__name__)

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
#: Statuses worth another try (rate limit, request timeout, conflict, server errors).
RETRY_STATUSES = frozenset({408, 409, 429})
#: Longest ``Retry-After`` honoured as sent (seconds); longer waits are cut to this.
MAX_RETRY_AFTER = 300.0
_CONTEXT_ERROR = re.compile(r"context[ _-]?(length|window|size)|maximum context|prompt is too long|too many tokens",
                            re.IGNORECASE)


class ServedModelError(RuntimeError):
    """The server cannot serve this run (key, model, address): the message says which and what to do."""

    #: The leaderboard stops the run on it instead of ending one episode.
    fatal = True


@dataclass
class ChatGeneration(Generation):
    """A reply with what the server reported about it (or, with ``error``, why there is none: ``text`` is
    then "", and ``error_status`` is "crashed", or "truncated" for a prompt over the context)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The model id the server answered with, and its ``system_fingerprint``.
    model: str = ""
    system_fingerprint: str | None = None

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "system_fingerprint": self.system_fingerprint}


class ChatAPIPolicy(Policy):
    """Generation by a served model over ``/v1/chat/completions`` (see the module docstring).

    Not trainable: it returns text and token counts, no token ids or log-probs.
    Call ``connect()`` first to fail early (it asks for one token) and learn the
    served model id; ``close()`` ends the client and its thread.
    """

    #: The leaderboard sends every active episode of a step in one call.
    concurrent = True
    #: The row's episode index seeds its request (a resumed run asks the same); a chat (the tools prompt) goes as
    #: its messages and tools, and the reply's tool calls come back as ``<tool_call>`` text.
    needs_context = ("episode", "messages", "tools")

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = DEFAULT_KEY_ENV,
                 max_concurrency: int = 8, max_retries: int = 5, request_timeout: float = 120.0,
                 system_prompt: str | None = None, backoff: tuple[float, float] = (1.0, 60.0)):
        try:
            import openai
        except ImportError as e:
            from gigpo_gym.core.extras import missing_extra_error

            raise missing_extra_error("api", "evaluating a served model (openai:MODEL)") from e
        for name, value, low in (("max_concurrency", max_concurrency, 1), ("max_retries", max_retries, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
        self._openai = openai
        self.model = str(model)
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.api_key_env = api_key_env
        self.max_concurrency, self.max_retries = max_concurrency, max_retries
        self.request_timeout = float(request_timeout)
        self.system_prompt = system_prompt
        #: How a prompt text or a chat becomes the request's messages (a served model always reads a chat).
        self.input_format = InputFormat(chat_template=True, system_prompt=system_prompt)
        self.backoff = (float(backoff[0]), float(backoff[1]))
        self._key = os.environ.get(api_key_env, "")
        self._jitter = random.Random(0)  # spacing of retries only; never decides what a run does
        self.served_model: str | None = None
        self.system_fingerprints: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chat-api", daemon=True)
        self._thread.start()
        self._client = self._call(self._new_client())

    async def _new_client(self) -> Any:
        # the client's own retries are off: ours also cover malformed bodies and end as the leaderboard needs
        return self._openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key or "unset", max_retries=0,
                                        timeout=self.request_timeout)

    def _call(self, coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:  # Ctrl-C here: the requests in flight are cancelled, not left running
            future.cancel()
            raise

    def describe(self) -> dict[str, Any]:
        """The settings (never the key: only the name of the variable that holds it)."""
        return {"model": self.model, "served_model": self.served_model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "system_prompt": self.system_prompt,
                "max_concurrency": self.max_concurrency, "max_retries": self.max_retries,
                "request_timeout": self.request_timeout}

    # -- the Policy interface -----------------------------------------------------------
    def connect(self, sampling: SamplingParams | None = None) -> dict[str, Any]:
        """Ask for one token: the run stops here if the key, the model or the address is wrong.

        With the run's ``sampling`` the probe sends its settings (stop strings, seed), so a
        server that refuses one of them says so now, not in every episode.
        """
        probe = replace(sampling, max_new_tokens=1) if sampling is not None else SamplingParams(1, 0.0)
        seed = None if probe.seed is None else derive_seed(probe.seed, 0)
        [reply] = self._call(self._generate_all(["Reply with OK."], probe, [seed], starting=True))
        if reply.error is not None:
            raise ServedModelError(f"the server at {self.base_url} failed the first request: {reply.error}")
        return {"model": reply.model, "system_fingerprint": reply.system_fingerprint}

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[ChatGeneration]:
        """One reply per prompt, all requested at once (``max_concurrency`` at a time)."""
        if not prompts:
            return []
        seeds: list[int | None] = [None] * len(prompts)
        if sampling.seed is not None:
            keys = [c.get("episode", i) if c else i for i, c in enumerate(contexts or [None] * len(prompts))]
            seeds = [derive_seed(sampling.seed, int(k)) for k in keys]
        chats = [c if c and c.get("messages") else None for c in (contexts or [None] * len(prompts))]
        return self._call(self._generate_all(list(prompts), sampling, seeds, chats=chats))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    # -- requests ------------------------------------------------------------------------
    async def _generate_all(self, prompts: list[str], sampling: SamplingParams, seeds: list[int | None],
                            starting: bool = False, chats: list[dict[str, Any] | None] | None = None
                            ) -> list[ChatGeneration]:
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(prompt: str, seed: int | None, chat: dict[str, Any] | None) -> ChatGeneration:
            async with gate:
                return await self._request(prompt, sampling, seed, starting, chat)

        tasks = [asyncio.ensure_future(one(p, s, c)) for p, s, c in zip(prompts, seeds, chats or [None] * len(prompts))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:  # after a fatal error (or Ctrl-C) the other requests are cancelled, not left running
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()
        return [task.result() for task in tasks]

    async def _request(self, prompt: str, sampling: SamplingParams, seed: int | None, starting: bool,
                       chat: dict[str, Any] | None = None) -> ChatGeneration:
        fmt = self.input_format
        messages = fmt.messages(prompt) if chat is None else fmt.with_system(_api_messages(chat["messages"]))
        params: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens}
        if chat is not None and chat.get("tools"):
            params["tools"] = chat["tools"]
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        if seed is not None:
            params["seed"] = seed
        openai = self._openai
        last, unreachable = "", False
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                response = await self._client.chat.completions.create(**params)
                return self._reply(response, sampling)
            except openai.APIStatusError as e:
                status, text = e.status_code, self._scrub(_status_text(e))
                if status in (401, 403):
                    raise ServedModelError(self._key_refused(status)) from None
                if status == 404:
                    raise ServedModelError(await self._unknown_model(text)) from None
                if 400 <= status < 500 and _CONTEXT_ERROR.search(text):
                    return _failed(f"the prompt is longer than the model's context ({status}: {text})", "truncated")
                if status not in RETRY_STATUSES and status < 500:
                    if starting:
                        raise ServedModelError(f"the server at {self.base_url} refused the request ({status}: {text})") from None
                    return _failed(f"the server refused the request ({status}: {text})")
                last, unreachable, wait = f"{status}: {text}", False, _retry_after(e.response.headers)
            except openai.APITimeoutError:
                last, unreachable = f"no reply within {self.request_timeout:g} s", False
            except openai.APIConnectionError as e:
                last, unreachable = f"connection failed ({self._scrub(str(e.__cause__ or e))})", True
                if starting:
                    raise ServedModelError(f"cannot reach the server at {self.base_url}: {last}; start it or fix "
                                           "--base-url") from None
            except (_Malformed, json.JSONDecodeError, openai.APIResponseValidationError) as e:
                last, unreachable = f"malformed reply ({self._scrub(str(e))})", False
            if attempt < self.max_retries:
                cap = min(self.backoff[1], self.backoff[0] * 2 ** attempt)
                delay = wait if wait is not None else cap * (0.5 + 0.5 * self._jitter.random())
                log.info("request failed (%s); retry %d of %d in %.1f s", last, attempt + 1, self.max_retries, delay)
                await asyncio.sleep(delay)
        if unreachable:
            raise ServedModelError(f"the server at {self.base_url} stopped answering: {last} after "
                                   f"{self.max_retries + 1} attempts")
        return _failed(f"{last} after {self.max_retries + 1} attempts")

    def _reply(self, response: Any, sampling: SamplingParams) -> ChatGeneration:
        try:
            choice = response.choices[0]
            message, finish = choice.message, choice.finish_reason
            text = message.content
            # servers that parse reasoning out of the reply (vLLM's reasoning parsers, transformers serve
            # for Qwen models) return it apart: it goes back where the model wrote it
            reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
            if isinstance(reasoning, str) and reasoning and "<think>" not in (text or ""):
                text = f"<think>{reasoning}</think>{text or ''}"
            calls = [{"name": c.function.name, "arguments": _arguments(c.function.arguments)}
                     for c in getattr(message, "tool_calls", None) or []]
            if calls:  # a chat's reply: its calls as the text the tools prompt reads
                text = render_calls(text or "", calls)
            if not isinstance(text, str):
                raise TypeError(f"message content is {type(text).__name__}")
        except (AttributeError, IndexError, KeyError, TypeError) as e:
            raise _Malformed(f"{type(e).__name__}: {e}") from None
        usage = getattr(response, "usage", None)
        model = str(getattr(response, "model", "") or "")
        fingerprint = getattr(response, "system_fingerprint", None) or None
        self.served_model = self.served_model or model
        if fingerprint:
            self.system_fingerprints.add(str(fingerprint))
        return ChatGeneration(
            text=_apply_stop(text, sampling.stop, finish), prompt_ids=[], response_ids=[], log_probs=[],
            finished=finish != "length", prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0), model=model,
            system_fingerprint=fingerprint,
        )

    # -- error texts (no key in any of them) ----------------------------------------------
    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if len(self._key) >= 4 else text

    def _key_refused(self, status: int) -> str:
        if not self._key:
            return (f"the server at {self.base_url} refused the request ({status}): ${self.api_key_env} is not set "
                    f"(export {self.api_key_env}=..., or name the variable that holds the key with --api-key-env)")
        return (f"the server at {self.base_url} refused the key in ${self.api_key_env} ({status}): check it, or name "
                "the variable that holds the right one with --api-key-env")

    async def _unknown_model(self, text: str) -> str:
        hint = ""
        try:
            served = sorted([m.id async for m in self._client.models.list()])
            close = difflib.get_close_matches(self.model, served, n=1, cutoff=0.3)
            hint = f"; it serves {served}" + (f". Did you mean {close[0]!r}?" if close else "")
        except Exception:  # the list is a hint only; many servers do not have it
            hint = " (check --base-url: it usually ends in /v1)"
        return f"the server at {self.base_url} does not serve model {self.model!r} (404: {text}){hint}"


def _api_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat in the Chat Completions format: calls with ids and JSON-text arguments, each tool message answering
    the next call (TRL's chat answers a reply's calls in order)."""
    out: list[dict[str, Any]] = []
    waiting: list[str] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [f"call_{len(out)}_{k}" for k in range(len(m["tool_calls"]))]
            out.append({"role": "assistant", "content": m.get("content") or None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": c["function"]["name"],
                                                           "arguments": json.dumps(c["function"]["arguments"])}}
                for i, c in zip(ids, m["tool_calls"])]})
            waiting = ids
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": waiting.pop(0) if waiting else "call_none",
                        "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def _arguments(text: Any) -> Any:
    """A call's arguments as the server wrote them: JSON text read as JSON, else kept (the call then fails as in TRL)."""
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


class _Malformed(ValueError):
    """A 2xx reply without a usable message (not JSON, or not a chat completion)."""


def _failed(reason: str, status: str = "crashed") -> ChatGeneration:
    return ChatGeneration("", [], [], [], finished=False, error=reason, error_status=status)


def _status_text(e: Any) -> str:
    """The server's error message (``{"error": {"message": ...}}``), else its body, on one line."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message", body) if isinstance(body, dict) else body
    text = str(body if body is not None else getattr(e, "message", e))
    return " ".join(text.split())[:500]


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after``: seconds or an HTTP date)."""
    try:
        if headers.get("retry-after-ms"):
            return min(MAX_RETRY_AFTER, max(0.0, float(headers["retry-after-ms"]) / 1000))
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        return min(MAX_RETRY_AFTER, max(0.0, seconds))
    except (TypeError, ValueError, OverflowError):
        return None


def _apply_stop(text: str, stop: Sequence[str], finish_reason: str | None) -> str:
    """The reply as far as its first stop string, which it keeps (as ``HFPolicy`` decodes).

    A server that keeps the stop string may return the rest of its token; one that
    leaves it out (the OpenAI convention) says ``finish_reason="stop"``: when the
    reply then ends inside a tag whose closing tag is a stop string, that tag is closed.
    """
    ends = [text.find(s) + len(s) for s in stop if s and s in text]
    if ends:
        return text[: min(ends)]
    if finish_reason == "stop":
        open_at = {s: text.rfind("<" + s[2:]) for s in stop if s.startswith("</") and s.endswith(">")}
        last = max(open_at, key=open_at.get, default=None)
        if last is not None and open_at[last] >= 0:
            return text + last
    return text
