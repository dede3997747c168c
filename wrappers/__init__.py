"""Wrappers usable on any env of the suite (installed as ``gigpo_gym.wrappers``).

``wrap_for_llm(env, PromptConfig(...))`` is the one builder of an LLM's stack
(``stack``); ``AnchorKey``, ``HistoryPrompt``, ``PaperPrompt``, ``ToolsPrompt`` and
``ActionParser`` are its parts, ``InputFormat`` how its prompt texts reach a model.  The
tool-calling pieces (``tool_calls``: the tool-call format; ``tool_env``: an env as TRL's
tools; ``chat``: a tool-calling chat template) serve the ``tools`` template, the policies
and the TRL integration alike.
"""

from __future__ import annotations

from gigpo_gym.wrappers.action import ActionParser
from gigpo_gym.wrappers.anchor import ANCHOR_MODES, AnchorKey
from gigpo_gym.wrappers.prompt import HistoryPrompt
from gigpo_gym.wrappers.stack import PROMPT_TEMPLATES, InputFormat, PromptConfig, llm_stack, register_template, wrap_for_llm
from gigpo_gym.wrappers.templates import PaperPrompt, paper_stack

__all__ = ["ANCHOR_MODES", "PROMPT_TEMPLATES", "ActionParser", "AnchorKey", "HistoryPrompt", "InputFormat", "PaperPrompt",
           "PromptConfig", "llm_stack", "paper_stack", "register_template", "wrap_for_llm"]
