"""The Search-R1 text protocol: how an action is read and how results are shown.

The model writes free text (``<think>`` is free); the first ``<search>q</search>``
or ``<answer>a</answer>`` in it is the action.  Search results come back as
``<information>`` + one ``Doc {i}(Title: {title}) {text}`` line per passage +
``</information>``, with the same blank lines around the block as the reference
rollout, so a model trained on Search-R1 sees the text it knows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gigpo_gym.envs.searchqa.corpus import Document

ACTION_TAGS = ("search", "answer")
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)

#: What the env answers to an action without a well-formed tag (Search-R1's wording).
INVALID_MESSAGE = (
    "\nMy previous action is invalid. "
    "If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)

#: Short description of the protocol for prompt builders (``metadata["prompt_intro"]``).
PROMPT_INTRO = (
    "Answer the given question. You can call a search engine by writing <search> query </search>; "
    "it returns the top results between <information> and </information>. You can search as many "
    "times as you want. When you know the answer, write it inside <answer> and </answer>, without "
    "explanations, for example <answer> Beijing </answer>."
)

#: The closing line of a prompt (``metadata["action_format"]``): the reply is one tagged action.
ACTION_FORMAT = (
    "Think step by step inside <think> </think> if you need to, then write exactly one action: "
    "<search> query </search> or <answer> answer </answer>."
)


@dataclass(frozen=True)
class Action:
    """A parsed action: ``kind`` is "search" or "answer", ``content`` the stripped text."""

    kind: str
    content: str


def parse_action(text: str) -> Action | None:
    """The first well-formed, non-empty ``<search>`` / ``<answer>`` of ``text``, or None.

    >>> parse_action("<think>hmm</think> <search> Orlan Veskit </search>")
    Action(kind='search', content='Orlan Veskit')
    >>> parse_action("<answer></answer>") is None, parse_action("<search>x</answer>") is None
    (True, True)
    """
    match = _ACTION.search(text)
    if match is None:
        return None
    content = match.group(2).strip()
    if not content:
        return None
    return Action(match.group(1), content)


def format_passages(docs: Sequence[Document]) -> str:
    """``Doc {i}(Title: {title}) {text}`` lines, numbered from 1."""
    return "".join(f"Doc {i}(Title: {doc.title}) {doc.text}\n" for i, doc in enumerate(docs, start=1))


def format_information(docs: Sequence[Document]) -> str:
    """The observation after a search: the passages inside ``<information>`` tags."""
    return f"\n\n<information>{format_passages(docs).strip()}</information>\n\n"
