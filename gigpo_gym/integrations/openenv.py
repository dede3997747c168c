"""Any env id served over openenv-core's WebSocket protocol (extra ``[openenv]``).

``create_server(env_id, ...)`` is openenv-core's own ``create_app`` around
``SuiteEnvironment``: each WebSocket session gets its own env, so sessions are isolated
and run concurrently (up to ``max_sessions``).  The action is one string field,
``message`` (the model's reply, read as the env reads it: an ``<action>`` tag is taken
out where the env has no tags of its own), so openenv-core's ``GenericEnvClient``
plays with ``{"message": ...}`` and no gigpo-gym code.  Observations carry the suite's
``info`` keys as declared fields (openenv-core's serializer drops ``metadata``).
``SuiteEnvClient`` is the typed client.

openenv-core's stateless HTTP ``/reset`` and ``/step`` make a fresh env per request, so
an episode needs the WebSocket session (``EnvClient`` uses it).  Around openenv-core's
app, ``QuietSessions`` keeps the server's log free of a normal client disconnect (its
session loop closes a socket the client has closed already, which would log a
traceback) and makes a malformed message's error name the field (``Invalid message:
data.message: Field required``; openenv-core sends the details in ``errors`` only).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from gigpo_gym.integrations import require

OPENENV_VERSION = require("openenv-core")

import gymnasium as gym  # noqa: E402
from openenv.core import EnvClient  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, State, create_app  # noqa: E402
from pydantic import Field  # noqa: E402

from gigpo_gym.registration import env_spec  # noqa: E402
from gigpo_gym.wrappers import ANCHOR_MODES, ActionParser, AnchorKey  # noqa: E402

#: Characters of one ``message``; a longer one is refused as invalid input (the server stays up).
MAX_MESSAGE_CHARS = 65536


class SuiteAction(Action):
    """The model's reply, as text."""

    message: str = Field(..., max_length=MAX_MESSAGE_CHARS, description="The reply; the env reads its action from it.")


class SuiteObservation(Observation):
    """The env's observation text and the suite's ``info`` keys (``done`` and ``reward`` come from openenv-core)."""

    observation: str = Field(default="", description="What the env shows now.")
    anchor: str = Field(default="", description="Anchor key of the current state (what GiGPO groups steps on).")
    admissible_actions: list[str] = Field(default_factory=list, description="Valid actions where the env lists them.")
    action_valid: bool = Field(default=True, description="Whether the last reply held an action the env could do.")
    won: bool = Field(default=False, description="Whether the task was solved.")
    truncated: bool = Field(default=False, description="Whether the step limit ended the episode.")
    task_id: str = Field(default="", description="The task being played.")
    task_type: str = Field(default="", description="Its type (ALFWorld task type, SearchQA question kind, ...).")


class SuiteState(State):
    """The session's episode (``episode_id`` and ``step_count`` from openenv-core)."""

    env_id: str = ""
    task_id: str = ""
    episode_return: float = 0.0
    done: bool = True


class SuiteEnvironment(Environment):
    """One env of the suite behind openenv-core's ``Environment`` API (one instance per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, anchor_mode: str = "state"):
        super().__init__()
        if anchor_mode not in ANCHOR_MODES:
            raise ValueError(f"anchor_mode must be one of {ANCHOR_MODES}, got {anchor_mode!r}")
        self._env = ActionParser(AnchorKey(gym.make(env_id, **(env_kwargs or {})), mode=anchor_mode),
                                 require_tags=False)
        self._state = SuiteState(env_id=env_id)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **kwargs: Any) -> SuiteObservation:
        """A new episode: the task ``task_id``, else the task of ``seed`` (the same seed, the same task)."""
        if kwargs:
            raise ValueError(f"unknown reset argument(s) {sorted(kwargs)}; reset takes seed, episode_id and task_id")
        options = {"task_id": str(task_id)} if task_id is not None else None
        self._state = SuiteState(env_id=self._state.env_id)  # a reset that fails leaves no episode to step
        obs, info = self._env.reset(seed=seed, options=options)
        self._state = SuiteState(env_id=self._state.env_id, episode_id=episode_id, task_id=str(info["task_id"]),
                                 done=False)
        return self._observation(obs, 0.0, False, False, info)

    def step(self, action: SuiteAction, timeout_s: float | None = None, **kwargs: Any) -> SuiteObservation:
        if not self._state.task_id:
            raise RuntimeError("reset the session before stepping it")
        if self._state.done:
            raise RuntimeError("the episode is over: reset the session to play another")
        obs, reward, terminated, truncated, info = self._env.step(action.message)
        self._state.step_count += 1
        self._state.episode_return += float(reward)
        self._state.done = bool(terminated or truncated)
        return self._observation(obs, float(reward), terminated, truncated, info)

    @property
    def state(self) -> SuiteState:
        return self._state

    def close(self) -> None:
        self._env.close()

    @staticmethod
    def _observation(obs: str, reward: float, terminated: bool, truncated: bool, info: dict) -> SuiteObservation:
        return SuiteObservation(
            observation=obs, reward=reward, done=bool(terminated or truncated), anchor=info["anchor"],
            admissible_actions=list(info["admissible_actions"]), action_valid=bool(info["action_valid"]),
            won=bool(info["won"]), truncated=bool(truncated and not terminated), task_id=str(info["task_id"]),
            task_type=str(info["task_type"]),
        )  # fmt: skip


class QuietSessions:
    """ASGI middleware around openenv-core's app for its WebSocket sessions (see the module docstring)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        async def precise(message: dict) -> None:
            if message.get("type") == "websocket.send" and message.get("text"):
                message = {**message, "text": named_fields(message["text"])}
            await send(message)

        try:
            await self.app(scope, receive, precise)
        except WebSocketDisconnect:  # the client left first: the normal end of its session, nothing to log
            pass


def named_fields(text: str) -> str:
    """A WebSocket error answer whose ``errors`` list validation problems, with each field named in its message."""
    try:
        answer = json.loads(text)
        data = answer["data"]
        if answer.get("type") != "error" or data.get("code") != "VALIDATION_ERROR" or not data.get("errors"):
            return text
        problems = "; ".join(f"data.{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
                             for e in data["errors"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return text
    data["message"] = f"{data.get('message', 'Invalid message')}: {problems}"
    return json.dumps(answer)


def create_server(env_id: str, *, max_sessions: int = 8, session_timeout: float | None = 600.0,
                  anchor_mode: str = "state", **env_kwargs: Any):
    """openenv-core's FastAPI app serving ``env_id`` (run it with uvicorn; ``gigpo-gym serve openenv`` does).

    ``max_sessions`` WebSocket sessions at once (a further one is told the server is
    full); a session idle for ``session_timeout`` seconds is closed (None: never).
    """
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an int >= 1, got {max_sessions!r}")
    env_spec(env_id)  # an unknown id: the suite's message, with the closest id
    gym.make(env_id, **env_kwargs).close()  # a bad keyword fails here, not in the first session
    factory = functools.partial(SuiteEnvironment, env_id, env_kwargs, anchor_mode)
    concurrency = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout)
    app = create_app(factory, SuiteAction, SuiteObservation, env_name=env_id, concurrency_config=concurrency)
    app.add_middleware(QuietSessions)
    return app


class SuiteEnvClient(EnvClient[SuiteAction, SuiteObservation, SuiteState]):
    """openenv-core's WebSocket client, typed for the suite (``await client.step(SuiteAction(message=...))``)."""

    def _step_payload(self, action: SuiteAction) -> dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SuiteObservation]:
        observation = SuiteObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                       done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> SuiteState:
        return SuiteState(**payload)


def uvicorn_server(app, port: int, host: str = "127.0.0.1"):
    """A ``uvicorn.Server`` for ``app`` with the suite's HTTP guards (request-head size and time, connection
    count) on, and WebSocket messages bounded by ``4 * MAX_MESSAGE_CHARS`` bytes plus the envelope."""
    import uvicorn

    from gigpo_gym.core.net import ServerLimits, uvicorn_options

    options = {**uvicorn_options(ServerLimits()), "ws": "websockets-sansio", "ws_max_size": 4 * MAX_MESSAGE_CHARS + 4096}
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", **options))


def serve(app, sock, host: str = "127.0.0.1") -> None:
    """Run ``app`` on the bound ``sock`` until interrupted."""
    uvicorn_server(app, sock.getsockname()[1], host).run(sockets=[sock])
