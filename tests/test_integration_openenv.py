"""Env ids served through the real openenv-core, played with openenv-core's own clients, on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("openenv", reason="needs the [openenv] extra")

import gymnasium as gym  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

import gigpo_gym  # noqa: E402, F401
from gigpo_gym.integrations.openenv import (  # noqa: E402
    MAX_MESSAGE_CHARS, SuiteAction, SuiteEnvClient, create_server, uvicorn_server,
)

SEARCHQA = "gigpo_gym/SearchQA-v0"


class Running:
    """``create_server(...)`` on an ephemeral loopback port, in a thread of this process."""

    def __init__(self, env_id: str = SEARCHQA, **kwargs):
        self.app = create_server(env_id, **kwargs)
        self.log = ServerLog()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn_server(self.app, self.sock.getsockname()[1])
        self.server.config.log_level = "warning"
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        logging.getLogger("uvicorn").addHandler(self.log)  # after uvicorn configured its loggers
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    def close(self):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        logging.getLogger("uvicorn").removeHandler(self.log)
        assert self.log.traces == [], "the server logged a traceback:\n" + "\n".join(self.log.traces)


class ServerLog(logging.Handler):
    """The tracebacks the server's log would show (an error with its exception)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.traces: list[str] = []

    def emit(self, record):
        if record.exc_info:
            self.traces.append(record.getMessage() + "\n" + logging.Formatter().formatException(record.exc_info))


@pytest.fixture
def server():
    running = Running(max_sessions=4)
    yield running
    running.close()


def expert_episode(seed: int) -> list[str]:
    """The expert's replies for the task of ``seed``, played on a local env."""
    env = gym.make(SEARCHQA)
    env.reset(seed=seed)
    replies, done = [], False
    while not done:
        replies.append(env.unwrapped.expert_action())
        *_, terminated, truncated, _ = env.step(replies[-1])
        done = terminated or truncated
    return replies


def play(url: str, seed: int) -> list[dict]:
    """An expert episode through openenv-core's GenericEnvClient: plain dicts, no gigpo-gym code."""
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=seed)
        transcript = [dict(result.observation, reward=result.reward, done=result.done)]
        for reply in expert_episode(seed):
            result = client.step({"message": f"<think>the expert says</think>{reply}"})
            transcript.append(dict(result.observation, reward=result.reward, done=result.done))
    return transcript


def test_openenvs_generic_client_plays_a_full_episode(server):
    transcript = play(server.url, seed=3)
    first, last = transcript[0], transcript[-1]
    assert first["observation"] and first["anchor"] and first["task_id"] and first["done"] is False
    assert set(first) >= {"anchor", "admissible_actions", "action_valid", "won", "truncated", "task_id", "task_type"}
    assert last["done"] is True and last["reward"] == 1.0 and last["won"] is True and last["truncated"] is False
    assert transcript[1]["anchor"] != first["anchor"]  # the search retrieved passages: a new state


def test_the_typed_client_and_a_reset_by_task_id_are_reproducible(server):
    async def episode(**reset):
        async with SuiteEnvClient(base_url=server.url) as client:
            first = await client.reset(**reset)
            step = await client.step(SuiteAction(message="<search>Voltiak</search>"))
            state = await client.state()
            return first.observation, step.observation, state

    first, step, state = asyncio.run(episode(seed=5))
    again = asyncio.run(episode(task_id=first.task_id))
    assert (again[0].observation, again[0].anchor, again[1].anchor) == (first.observation, first.anchor, step.anchor)
    assert state.task_id == first.task_id and state.step_count == 1 and state.done is False
    assert step.action_valid is True and step.observation.strip().startswith("<information>")


def test_concurrent_sessions_are_isolated(server):
    alone = {seed: play(server.url, seed) for seed in (1, 2, 3, 4)}
    with ThreadPoolExecutor(4) as pool:
        together = dict(zip((1, 2, 3, 4), pool.map(lambda s: play(server.url, s), (1, 2, 3, 4))))
    assert together == alone and len({t[0]["task_id"] for t in alone.values()}) == 4


def raw(url: str):
    return connect(url.replace("http", "ws") + "/ws", open_timeout=10)


def ask(ws, message) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=10))


def test_bad_messages_get_error_answers_and_the_session_goes_on(server):
    with raw(server.url) as ws:
        assert ask(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert ask(ws, {"type": "dance"})["data"]["code"] == "UNKNOWN_TYPE"
        assert "reset the session" in ask(ws, {"type": "step", "data": {"message": "hi"}})["data"]["message"]
        assert ask(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        missing = ask(ws, {"type": "step", "data": {"msg": "hi"}})["data"]
        assert missing["code"] == "VALIDATION_ERROR" and missing["message"] == (
            "Invalid message: data.message: Field required; data.msg: Extra inputs are not permitted")
        long = ask(ws, {"type": "step", "data": {"message": "x" * (MAX_MESSAGE_CHARS + 1)}})
        assert long["data"]["code"] == "VALIDATION_ERROR" and "data.message: String should have at most" in long["data"]["message"]
        invalid = ask(ws, {"type": "step", "data": {"message": "no tags at all"}})
        assert invalid["type"] == "observation" and invalid["data"]["observation"]["action_valid"] is False
        bad_reset = ask(ws, {"type": "reset", "data": {"task_id": "no-such-task"}})
        assert bad_reset["data"]["code"] == "EXECUTION_ERROR" and "no task_id" in bad_reset["data"]["message"]
        assert ask(ws, {"type": "reset", "data": {"seed": 1, "colour": "red"}})["data"]["code"] == "EXECUTION_ERROR"
        answered = ask(ws, {"type": "step", "data": {"message": "<answer>x</answer>"}})
        assert "reset the session" in answered["data"]["message"]  # the failed resets left no episode to step
    assert play(server.url, seed=1)[-1]["reward"] == 1.0  # the server is still up


def test_clients_that_close_normally_leave_no_traceback_in_the_server_log(server):
    """openenv-core's client says "close" and closes; the session's end must not log (the server fixture checks)."""
    for seed in (0, 1):
        assert play(server.url, seed=seed)[-1]["done"]
    with raw(server.url) as ws:
        ask(ws, {"type": "reset", "data": {"seed": 3}})
        ws.send(json.dumps({"type": "close", "data": {}}))
    time.sleep(0.3)  # the server's side of the session ends after the client's


def test_a_session_that_disconnects_mid_episode_is_cleaned_up():
    running = Running(max_sessions=1)
    try:
        for _ in range(3):  # with one slot, a leaked session would refuse the next connection
            with raw(running.url) as ws:
                assert ask(ws, {"type": "reset", "data": {"seed": 2}})["type"] == "observation"
                ask(ws, {"type": "step", "data": {"message": "<search>a</search>"}})
            # closed without "close": the server notices the disconnect
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                assert play(running.url, seed=2)[-1]["done"]
                break
            except RuntimeError as e:  # the slot is freed a moment after the disconnect
                assert "CAPACITY_REACHED" in str(e)
                time.sleep(0.1)
        else:
            pytest.fail("the disconnected session was never cleaned up")
        with raw(running.url) as first, raw(running.url) as second:
            assert ask(first, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
            refused = json.loads(second.recv(timeout=10))  # told at once, then closed
            assert refused["data"]["code"] == "CAPACITY_REACHED"
    finally:
        running.close()


def test_bad_server_arguments_are_refused_with_the_suites_messages():
    with pytest.raises(gym.error.Error, match="Did you mean"):
        create_server("gigpo_gym/SearchQ-v0")
    with pytest.raises(TypeError, match="did you mean 'split'"):
        create_server(SEARCHQA, splitt="test")
    with pytest.raises(ValueError, match="max_sessions must be an int >= 1"):
        create_server(SEARCHQA, max_sessions=0)


@pytest.mark.slow
def test_the_command_serves_an_id_that_generic_env_client_plays():
    process = subprocess.Popen([sys.executable, "-m", "gigpo_gym.cli", "serve", "openenv", SEARCHQA, "--port", "0",
                                "--max-sessions", "2"], stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "ws://" not in line and time.monotonic() < deadline:
            line = process.stderr.readline()
        port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
        while time.monotonic() < deadline:
            try:
                transcript = play(f"http://127.0.0.1:{port}", seed=4)
                break
            except ConnectionError:
                time.sleep(0.2)
        assert transcript[-1]["reward"] == 1.0
    finally:
        process.terminate()
        process.wait(10)
    bad = subprocess.run([sys.executable, "-m", "gigpo_gym.cli", "serve", "openenv", "gigpo_gym/Nope-v0", "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown env id 'gigpo_gym/Nope-v0'" in bad.stderr
