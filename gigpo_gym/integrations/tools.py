"""The suite's actions as typed tools: one family per benchmark, no library imported.

A tool call ``search(query="x")`` is the env action ``<search>x</search>`` (SearchQA) or
``search[x]`` (WebShop); ``act(command="go to desk 1")`` is the ALFWorld command itself.
``FAMILIES`` holds, per benchmark, the tools, how a call becomes an env action and back
(``tool_call``, for turning the expert's actions into tool-call transcripts), and the
instruction a prompt opens with.  TRL's environments, the SFT data of the TRL recipe and
the leaderboard's ``tools`` prompt all read these, so a model sees one conversation.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from gigpo_gym.registration import NAMESPACE, env_spec


@dataclass(frozen=True)
class Family:
    """One benchmark's tools: name -> (argument name, env action format)."""

    name: str
    #: tool name -> (its one argument, the env action with ``{}`` for the argument)
    tools: dict[str, tuple[str, str]]
    #: what the first user message says before the env's first observation
    instructions: str

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


FAMILIES: dict[str, Family] = {
    "searchqa": Family(
        "searchqa",
        {"search": ("query", "<search>{}</search>"), "answer": ("answer", "<answer>{}</answer>")},
        "Answer the question below. Call search to look things up in the encyclopedia (each call "
        "returns a few passages), then call answer with a short answer: a name, a place or a few words.",
    ),
    "webshop": Family(
        "webshop",
        {"search": ("query", "search[{}]"), "click": ("target", "click[{}]")},
        "Buy the product that the instruction below asks for. On the search page call search; then "
        "call click to open a product (by its code), choose an option, or press a button such as "
        "'buy now', 'next >' or 'back to search'.",
    ),
    "alfworld": Family(
        "alfworld",
        {"act": ("command", "{}")},
        "Do the household task below. Call act with one command at a time (for example 'go to "
        "desk 1', 'take mug 1 from desk 1', 'open drawer 2'); each call returns what you see next.",
    ),
}

_FAMILY_OF_PREFIX = (("SearchQA", "searchqa"), ("WebShop", "webshop"), ("ALFWorld", "alfworld"))


def family_of(env_id: str) -> Family:
    """The tool family of a registered id (``gigpo_gym/SearchQA-v0`` -> searchqa)."""
    spec = env_spec(env_id)  # an unknown id is gymnasium's error, with a close match
    name = spec.id.removeprefix(f"{NAMESPACE}/")
    for prefix, family in _FAMILY_OF_PREFIX:
        if name.startswith(prefix):
            return FAMILIES[family]
    raise ValueError(f"no tool family for {spec.id!r}; known: {sorted(FAMILIES)}")


def tool_of(family: str | Family, tool: str) -> tuple[str, str]:
    """(argument name, action format) of ``tool``, or a ValueError naming the family's tools."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    if tool not in fam.tools:
        close = difflib.get_close_matches(tool, list(fam.tools), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{fam.name} has the tools {sorted(fam.tools)}, not {tool!r}.{hint}")
    return fam.tools[tool]


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
