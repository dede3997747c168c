"""The tool-call format: an env's actions as typed tools, and a reply's calls as text.

A tool call ``search(query="x")`` is the env action ``<search>x</search>`` (SearchQA) or
``search[x]`` (WebShop); ``act(command="go to desk 1")`` is the ALFWorld command itself.
Which tools an env has, how a call becomes its action and back (``tool_call``, for turning
the expert's actions into tool-call transcripts), and the instructions a conversation
opens with are the env's own: its ``metadata["tool_family"]`` (``Family.of``).  TRL's
environments (``tool_env``), the SFT data of the TRL recipe and the ``tools`` prompt
template all read them, so a model sees one conversation.  A reply writes its calls as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (``render_calls``,
``parse_calls``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class Family:
    """One benchmark's tools: name -> (argument name, env action format)."""

    name: str
    #: tool name -> (its one argument, the env action with ``{}`` for the argument)
    tools: dict[str, tuple[str, str]]
    #: what the first user message says before the env's first observation
    instructions: str

    @classmethod
    def of(cls, env: gym.Env | type) -> "Family":
        """The family an env (or env class) declares in ``metadata["tool_family"]``."""
        unwrapped = env if isinstance(env, type) else env.unwrapped
        declared = getattr(unwrapped, "metadata", {}).get("tool_family")
        if declared is None:
            name = unwrapped.__name__ if isinstance(unwrapped, type) else type(unwrapped).__name__
            raise ValueError(f"{name} declares no tools (metadata['tool_family']); the suite's ALFWorld, WebShop and "
                             "SearchQA envs do")
        return cls(declared["name"], {k: tuple(v) for k, v in declared["tools"].items()}, declared["instructions"])

    def first_message(self, observation: str) -> str:
        """The first user message of an episode: the instructions, then the env's first observation."""
        return self.instructions + "\n\n" + observation

    def action(self, tool: str, value: str) -> str:
        """The env action of ``tool(value)``."""
        return self.tools[tool][1].format(value)

    def tool_call(self, action: str) -> dict | None:
        """The tool call (``{"name", "arguments"}``) that is ``action``, or None when no tool makes it."""
        for name, (argument, form) in self.tools.items():
            head, _, tail = form.partition("{}")
            if action.startswith(head) and action.endswith(tail) and len(action) >= len(head) + len(tail):
                return {"name": name, "arguments": {argument: action[len(head): len(action) - len(tail)]}}
        return None


def family_of(env_id: str) -> Family:
    """The tool family of a registered id (``gigpo_gym/SearchQA-v0`` -> searchqa), without making the env."""
    from gymnasium.envs.registration import load_env_creator

    from gigpo_gym.registration import env_spec

    spec = env_spec(env_id)  # an unknown id is an error with a close match
    return Family.of(load_env_creator(spec.entry_point))


_WHITESPACE = re.compile(r"\s+")


def one_line(text: str) -> str:
    """Collapse white space, as the env parsers do, so an argument cannot break the action's format."""
    return _WHITESPACE.sub(" ", text).strip()


_CALL = re.compile(r"<tool_call>(.*?)</tool_call>\s*", re.DOTALL)


def render_calls(content: str, calls: list[dict[str, Any]]) -> str:
    """A reply as text: ``content``, then each call ``{"name", "arguments"}`` as ``<tool_call>{...}</tool_call>``.

    The form ``chat.TOOL_CHAT_TEMPLATE`` writes; ``parse_calls`` reads it back.
    """
    return content + "".join("<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]},
                                                        ensure_ascii=False) + "</tool_call>" for c in calls)


def parse_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """(content, calls) of a reply written as ``render_calls`` writes it.

    As TRL reads a reply whose calls do not parse: one block that is not a JSON object
    with a string ``name``, or a ``<tool_call>`` never closed, makes the whole reply plain
    text, without calls.  Missing ``arguments`` are ``{}`` (TRL's rule too); arguments of
    the wrong type are kept, so the call fails as it does in TRL.
    """
    if "<tool_call>" in _CALL.sub("", text):
        return text, []
    calls = []
    for block in _CALL.findall(text):
        try:
            call = json.loads(block)
        except ValueError:
            return text, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, []
        arguments = call.get("arguments")
        calls.append({"name": call["name"], "arguments": {} if arguments is None else arguments})
    return (_CALL.sub("", text) if calls else text), calls
