"""Extract the env action from an LLM's free text."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

_WHITESPACE = re.compile(r"\s+")


class ActionParser(gym.Wrapper):
    """Pass the env only the action inside ``<action>...</action>``.

    Envs whose protocol has tags of their own (``metadata["action_tags"]``, e.g.
    SearchQA's ``search``/``answer``) get the first well-formed own-tag segment,
    tags included, since they parse it themselves.  Text with no well-formed tag is
    invalid: the env is stepped with ``""`` (always invalid, so nothing changes and
    the env answers as the original does), ``info["action_valid"]`` is False and
    ``info["parsed_action"]`` is None.  The first tag wins; white space inside is
    collapsed.  ``require_tags=False`` passes untagged text through unchanged (for
    humans and scripted policies).

    >>> import gymnasium as gym, gigpo_gym
    >>> env = ActionParser(gym.make("gigpo_gym/SearchQA-v0"))
    >>> env.parse("<think>hmm</think> <search> who   founded it </search>")
    '<search> who   founded it </search>'
    >>> env.parse("no tags here") is None
    True
    """

    def __init__(self, env: gym.Env, tag: str = "action", require_tags: bool = True):
        super().__init__(env)
        own = tuple(env.unwrapped.metadata.get("action_tags", ()))
        names = "|".join(re.escape(t) for t in (own or (tag,)))
        self._pattern = re.compile(rf"<({names})>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
        self._keep_tags = bool(own)
        self.require_tags = require_tags

    def parse(self, text: str) -> str | None:
        """The action in ``text``, or None when it has no well-formed tag."""
        match = self._pattern.search(text)
        if match is None:
            return None if self.require_tags else text
        if self._keep_tags:
            return match.group(0)
        action = _WHITESPACE.sub(" ", match.group(2)).strip()
        return action or None

    def step(self, action: Any):
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}: {action!r:.80}")
        parsed = self.parse(action)
        obs, reward, terminated, truncated, info = self.env.step("" if parsed is None else parsed)
        info["parsed_action"] = parsed
        if parsed is None:
            info["action_valid"] = False
        return obs, reward, terminated, truncated, info
