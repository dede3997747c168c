"""The GiGPO paper's prompts, as a wrapper beside the env's own prompt (``HistoryPrompt``).

``PaperPrompt`` renders each step's prompt as the paper's code (verl-agent's
environment managers) fills its prompt texts: the task, the last ``history_length``
steps, the current observation and the admissible actions, reasoning in
``<think> </think>`` and the action in ``<action> </action>``.  The texts and how their
slots are filled are the env's: its ``metadata["paper_prompt"]``, an object with

- ``task(obs, info) -> str``: the task the prompt names, read from the first observation;
- ``shown(obs, task) -> str``: an observation as the prompt shows it;
- ``turn(shown, reply, parsed, obs) -> (str, str)``: what the history keeps of a step
  (the observation it answered, or the reply, and what it led to);
- ``render(task=, obs=, actions=, steps=, history_length=, turns=, history=) -> str``:
  the prompt, given the last ``history_length`` turns and those turns as verl-agent's
  memory writes them (``history``: ``[Observation k: '...', Action k: '...']`` lines).

ALFWorld and WebShop carry verl-agent's texts, SearchQA Search-R1's prompt and
transcript (``gigpo_gym.envs.<env>.prompts``).  Replies are parsed as the paper parses
them: the first ``<action>`` block (the wrapped ``ActionParser``; SearchQA: the first
``<search>``/``<answer>``); a reply without one is an invalid action and the episode
goes on.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym

from gigpo_gym.core.spaces import String

MAX_PROMPT_LENGTH = 1 << 20


class PaperPrompt(gym.Wrapper):
    """Observation -> the GiGPO paper's prompt for the env (see the module docstring).

    Wrap it around an ``ActionParser`` (``paper_stack`` does): it keeps each step's
    reply and the parsed action for the history.  ``info["observation"]`` keeps the
    env's own observation, as ``HistoryPrompt`` does.

    >>> import gymnasium as gym, gigpo_gym
    >>> env = paper_stack(gym.make("gigpo_gym/ALFWorld-v0"), history_length=2)
    >>> prompt, info = env.reset(seed=0)
    >>> prompt.startswith("\\nYou are an expert agent operating in the ALFRED Embodied Environment.")
    True
    >>> prompt, *_ = env.step("<think>the mug may be at the sink</think><action>go to sinkbasin 1</action>")
    >>> "[Observation 1: '-= Welcome to TextWorld" in prompt and "Action 1: 'go to sinkbasin 1']" in prompt
    True
    """

    def __init__(self, env: gym.Env, history_length: int = 2):
        if not isinstance(history_length, int) or history_length < 0:
            raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
        texts = env.unwrapped.metadata.get("paper_prompt")
        if texts is None:
            raise ValueError(f"the paper's prompts are the env's own (metadata['paper_prompt']: ALFWorld, WebShop and "
                             f"SearchQA have them); {type(env.unwrapped).__name__} has none")
        super().__init__(env)
        self.texts = texts
        self.history_length = history_length
        self.observation_space = String(MAX_PROMPT_LENGTH)
        self._memory: deque[tuple[str, str]] = deque(maxlen=max(history_length, 1))
        self._steps = 0
        self._task = ""
        self._obs = ""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._memory.clear()
        self._steps = 0
        self._task = self.texts.task(obs, info)
        self._obs = self.texts.shown(obs, self._task)
        info["observation"] = obs
        return self.render_prompt(info), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._memory.append(self.texts.turn(self._obs, action, info.get("parsed_action"), obs))
        self._steps += 1
        self._obs = self.texts.shown(obs, self._task)
        info["observation"] = obs
        return self.render_prompt(info), reward, terminated, truncated, info

    def render_prompt(self, info: dict[str, Any]) -> str:
        turns = list(self._memory)[-self.history_length:] if self._steps and self.history_length else []
        first = self._steps - len(turns) + 1
        history = "\n".join(f"[Observation {k}: '{o}', Action {k}: '{a}']" for k, (o, a) in enumerate(turns, start=first))
        return self.texts.render(task=self._task, obs=self._obs, actions=list(info.get("admissible_actions") or []),
                                 steps=self._steps, history_length=self.history_length, turns=turns, history=history)


def paper_stack(env: gym.Env, history_length: int = 2, anchor_mode: str = "state") -> gym.Env:
    """``PaperPrompt(ActionParser(AnchorKey(env)))``: the paper's prompts and parse rule."""
    from gigpo_gym.wrappers.action import ActionParser
    from gigpo_gym.wrappers.anchor import AnchorKey

    return PaperPrompt(ActionParser(AnchorKey(env, mode=anchor_mode)), history_length=history_length)
