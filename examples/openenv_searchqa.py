"""Serve SearchQA through openenv-core and play it with openenv-core's own client.

With no arguments it starts the server in this process on a free loopback port (what
``gigpo-gym serve openenv gigpo_gym/SearchQA-v0`` does in its own process), then plays
three episodes over the WebSocket with ``GenericEnvClient``, sending the replies an LLM
would write (here the env's expert wrote them), and prints each transcript.
``--url`` plays against a server that is already running instead.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

import gymnasium as gym
from openenv.core import GenericEnvClient

import gigpo_gym  # noqa: F401
from gigpo_gym.integrations.openenv import create_server, uvicorn_server

ENV_ID = "gigpo_gym/SearchQA-v0"


def start_server() -> tuple[str, object]:
    """``create_server`` on a free 127.0.0.1 port, served by uvicorn in a daemon thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn_server(create_server(ENV_ID, max_sessions=4), sock.getsockname()[1])
    server.config.log_level = "warning"
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def play(url: str, seed: int) -> float:
    """One episode: reset to the task of ``seed``, then the expert's replies, as plain JSON dicts."""
    local = gym.make(ENV_ID)  # only to ask the expert what to write
    local.reset(seed=seed)
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=seed)
        print(f"task {result.observation['task_id']}: {result.observation['observation']}")
        while not result.done:
            reply = f"<think>I should look this up.</think>{local.unwrapped.expert_action()}"
            local.step(reply.split("</think>")[1])
            result = client.step({"message": reply})
            seen = result.observation["observation"].strip().replace("\n", " ")[:90]
            print(f"  > {reply}\n    {seen or '(episode over)'} [anchor {result.observation['anchor']}, "
                  f"reward {result.reward}]")
    return float(result.reward or 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="a running server (default: start one here)")
    args = parser.parse_args()
    url, server = (args.url, None) if args.url else start_server()
    rewards = [play(url, seed) for seed in (0, 1, 2)]
    print(f"exact match over {len(rewards)} episodes: {sum(rewards) / len(rewards):.2f}")
    if server is not None:
        server.should_exit = True


if __name__ == "__main__":
    main()
