"""Wrappers usable on any env of the suite (installed as ``gigpo_gym.wrappers``).

``wrap_for_llm(env, PromptConfig(...))`` is the one builder of an LLM's stack
(``stack``); ``AnchorKey``, ``HistoryPrompt``, ``PaperPrompt`` and ``ActionParser`` are its parts.
"""

from __future__ import annotations

from gigpo_gym.wrappers.action import ActionParser
from gigpo_gym.wrappers.anchor import ANCHOR_MODES, AnchorKey
from gigpo_gym.wrappers.prompt import HistoryPrompt
from gigpo_gym.wrappers.stack import PROMPT_TEMPLATES, PromptConfig, llm_stack, register_template, wrap_for_llm
from gigpo_gym.wrappers.templates import PaperPrompt, paper_stack

__all__ = ["ANCHOR_MODES", "PROMPT_TEMPLATES", "ActionParser", "AnchorKey", "HistoryPrompt", "PaperPrompt", "PromptConfig",
           "llm_stack", "paper_stack", "register_template", "wrap_for_llm"]
