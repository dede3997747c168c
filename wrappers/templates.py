"""The GiGPO paper's prompts, as a wrapper beside the env's own prompt (``HistoryPrompt``).

``PaperPrompt`` renders each step's prompt with the texts the paper's code
(verl-agent, ``agent_system/environments/prompts/alfworld.py`` and ``webshop.py``)
sends to the model, filled the way its environment managers fill them: the task,
the last ``history_length`` observation/action pairs as
``[Observation k: '...', Action k: '...']`` lines, the current observation and the
admissible actions, reasoning in ``<think> </think>`` and the action in
``<action> </action>``.  SearchQA gets Search-R1's prompt (its
``scripts/data_process/nq_search.py``, template ``base``) followed by the last
``history_length`` turns of the transcript as Search-R1's rollout writes it: each
reply cut after its first ``</search>`` (else ``</answer>``, ``protocol.cut_reply``),
then the observation.

Replies are parsed as the paper parses them: the first ``<action>`` block (the
wrapped ``ActionParser``; SearchQA: the first ``<search>``/``<answer>``); a reply
without one is an invalid action and the episode goes on.  The texts below are the
originals, typos and trailing spaces included, reproduced as data.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym

from gigpo_gym.core.spaces import String
from gigpo_gym.envs.searchqa.protocol import cut_reply
from gigpo_gym.wrappers.stack import PROMPT_TEMPLATES  # noqa: F401  (the registry of template names; its old home)

FAMILIES = ("alfworld", "webshop", "searchqa")
MAX_PROMPT_LENGTH = 1 << 20

# -- the texts (verl-agent agent_system/environments/prompts/*.py; Search-R1) ----------------
ALFWORLD_TEMPLATE_NO_HIS = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

ALFWORLD_TEMPLATE = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WEBSHOP_TEMPLATE_NO_HIS = """
You are an expert autonomous agent operating in the WebShop e‑commerce environment. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WEBSHOP_TEMPLATE = """
You are an expert autonomous agent operating in the WebShop e‑commerce environment.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

SEARCH_R1_TEMPLATE = (
    "Answer the given question. "
    "You must conduct reasoning inside <think> and </think> first every time you get new information. "
    "After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> "
    "and it will return the top searched results between <information> and </information>. "
    "You can search as many times as your want. "
    "If you find no further external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: verl-agent cuts a WebShop history longer than this many characters to its end.
WEBSHOP_HISTORY_CHARS = 5000
_ALFWORLD_TASK = "Your task is to: "
_SEP = " [SEP] "


def env_family(env: gym.Env) -> str:
    """"alfworld", "webshop" or "searchqa": which of the paper's prompts fits ``env``."""
    module = type(env.unwrapped).__module__
    for family in FAMILIES:
        if f".envs.{family}." in f"{module}.":
            return family
    raise ValueError(f"the paper's prompts cover the suite's {list(FAMILIES)} envs; "
                     f"{type(env.unwrapped).__name__} ({module}) is none of them")


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

    def __init__(self, env: gym.Env, history_length: int = 2, family: str | None = None):
        if not isinstance(history_length, int) or history_length < 0:
            raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
        super().__init__(env)
        self.family = env_family(env) if family is None else family
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {list(FAMILIES)}, got {self.family!r}")
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
        self._task = self._find_task(obs, info)
        self._obs = self._shown(obs)
        info["observation"] = obs
        return self.render_prompt(info), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.family == "searchqa":  # Search-R1's transcript keeps the (cut) reply itself
            self._memory.append((cut_reply(str(action)), obs))
        else:  # the paper's history keeps the observation the action answered, and the parsed action
            self._memory.append((self._obs, info.get("parsed_action") or ""))
        self._steps += 1
        self._obs = self._shown(obs)
        info["observation"] = obs
        return self.render_prompt(info), reward, terminated, truncated, info

    # -- what the paper's env managers put into the slots --------------------------------
    def _find_task(self, obs: str, info: dict[str, Any]) -> str:
        if self.family == "alfworld":
            start = obs.find(_ALFWORLD_TASK)
            return obs[start + len(_ALFWORLD_TASK):].strip() if start >= 0 else str(info.get("goal", ""))
        if self.family == "webshop":
            parts = obs.split(_SEP)
            return parts[2] if len(parts) > 2 and parts[1] == "Instruction:" else str(info.get("instruction", obs))
        return obs  # SearchQA: the question

    def _shown(self, obs: str) -> str:
        """WebShop shows the page after the instruction, each part quoted; the others the raw text."""
        if self.family != "webshop":
            return obs
        parts = obs.split(_SEP)
        if self._task not in parts:
            return obs
        return _SEP.join(f"'{p}'" for p in parts[parts.index(self._task) + 1:])

    def _history(self) -> str:
        shown = list(self._memory)[-self.history_length:]
        first = self._steps - len(shown) + 1
        return "\n".join(f"[Observation {k}: '{o}', Action {k}: '{a}']" for k, (o, a) in enumerate(shown, start=first))

    def render_prompt(self, info: dict[str, Any]) -> str:
        if self.family == "searchqa":
            turns = list(self._memory)[-self.history_length:] if self.history_length else []
            return SEARCH_R1_TEMPLATE.format(question=self._task) + "".join(reply + obs for reply, obs in turns)
        actions = list(info.get("admissible_actions") or [])
        with_history = self._steps > 0 and self.history_length > 0
        history = self._history() if with_history else ""
        if self.family == "alfworld":
            listed = "\n ".join(f"'{a}'" for a in actions if a != "help")
            if not with_history:
                return ALFWORLD_TEMPLATE_NO_HIS.format(current_observation=self._obs, admissible_actions=listed)
            return ALFWORLD_TEMPLATE.format(task_description=self._task, step_count=self._steps,
                                            history_length=min(self._steps, self.history_length),
                                            action_history=history, current_step=self._steps + 1,
                                            current_observation=self._obs, admissible_actions=listed)
        listed = "\n".join(f"'{a.replace('search[<query>]', 'search[<your query>]')}'," for a in actions)
        if not with_history:
            return WEBSHOP_TEMPLATE_NO_HIS.format(task_description=self._task, current_observation=self._obs,
                                                  available_actions=listed)
        if len(history) > WEBSHOP_HISTORY_CHARS:
            history = "... " + history[-WEBSHOP_HISTORY_CHARS:]
        return WEBSHOP_TEMPLATE.format(task_description=self._task, step_count=self._steps,
                                       history_length=min(self._steps, self.history_length), action_history=history,
                                       current_step=self._steps + 1, current_observation=self._obs,
                                       available_actions=listed)


def paper_stack(env: gym.Env, history_length: int = 2, anchor_mode: str = "state") -> gym.Env:
    """``PaperPrompt(ActionParser(AnchorKey(env)))``: the paper's prompts and parse rule."""
    from gigpo_gym.wrappers.action import ActionParser
    from gigpo_gym.wrappers.anchor import AnchorKey

    return PaperPrompt(ActionParser(AnchorKey(env, mode=anchor_mode)), history_length=history_length)
