"""Turn the current observation into an LLM prompt with a short history."""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym

from gigpo_gym.core.spaces import String

DEFAULT_INTRO = "You are an agent acting in a text environment."
COMMAND_FORMAT = "Think step by step, then give exactly one admissible action inside <action> </action> tags."
MAX_PROMPT_LENGTH = 1 << 20


class HistoryPrompt(gym.Wrapper):
    """Observation -> prompt: task, last ``history_length`` steps, admissible actions.

    The env's own observation stays in ``info["observation"]``.  The first
    observation is kept as the task context (ALFWorld's goal, WebShop's instruction,
    the SearchQA question).  ``intro`` and ``action_format`` default to the env's
    ``metadata["prompt_intro"]`` / ``metadata["action_format"]``, else generic texts.
    ``task_key`` names an info key to show as the task instead (ALFWorld's ``"goal"``:
    the goal sentence alone, as in the GiGPO paper's prompt, not the whole room).
    History is two steps by default, as in the GiGPO paper.  ``list_actions=False``
    leaves the admissible actions out of the prompt, for a policy that chooses among
    them itself (``HFPolicy(choose_admissible=True)``): the prompt is then about half
    as long in ALFWorld.

    >>> import gymnasium as gym, gigpo_gym
    >>> env = HistoryPrompt(gym.make("gigpo_gym/SearchQA-v0"), history_length=1)
    >>> prompt, info = env.reset(seed=0)
    >>> info["observation"] in prompt
    True
    """

    def __init__(
        self,
        env: gym.Env,
        history_length: int = 2,
        intro: str | None = None,
        action_format: str | None = None,
        task_key: str | None = None,
        list_actions: bool = True,
    ):
        if not isinstance(history_length, int) or history_length < 0:
            raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
        super().__init__(env)
        meta = env.unwrapped.metadata
        self.history_length = history_length
        self.intro = intro if intro is not None else meta.get("prompt_intro", DEFAULT_INTRO)
        self.action_format = action_format if action_format is not None else meta.get("action_format", COMMAND_FORMAT)
        self.task_key = task_key
        self.list_actions = bool(list_actions)
        self.observation_space = String(MAX_PROMPT_LENGTH)
        self._history: deque[tuple[str, str]] = deque(maxlen=max(history_length, 1))
        self._task = ""
        self._obs = ""
        self._steps = 0

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._history.clear()
        if self.task_key is not None and self.task_key not in info:
            raise KeyError(f"task_key {self.task_key!r} is not in the env's info (keys: {sorted(info)})")
        self._task = obs if self.task_key is None else str(info[self.task_key])
        self._obs, self._steps = obs, 0
        info["observation"] = obs
        return self.render_prompt(obs, info), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._history.append((self._obs, action or "(no valid action)"))
        self._obs = obs
        self._steps += 1
        info["observation"] = obs
        return self.render_prompt(obs, info), reward, terminated, truncated, info

    def render_prompt(self, obs: str, info: dict[str, Any]) -> str:
        parts = [self.intro]
        if self._steps == 0:
            parts.append(f"Current observation:\n{obs}")
        else:
            parts.append(f"Your task:\n{self._task}")
            shown = list(self._history)[-self.history_length :] if self.history_length else []
            if shown:
                lines = [f"You have taken {self._steps} step(s). The most recent ones:"]
                first = self._steps - len(shown) + 1
                for k, (past_obs, past_action) in enumerate(shown, start=first):
                    lines.append(f"[Step {k} observation] {past_obs}\n[Step {k} action] {past_action}")
                parts.append("\n".join(lines))
            parts.append(f"Current observation (step {self._steps + 1}):\n{obs}")
        admissible = (info.get("admissible_actions") or []) if self.list_actions else []
        if admissible:
            parts.append("Admissible actions: " + " | ".join(admissible))
        parts.append(self.action_format)
        return "\n\n".join(parts)
