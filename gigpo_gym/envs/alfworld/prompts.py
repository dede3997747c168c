"""ALFWorld's prompt texts: the GiGPO paper's (``prompt.template: paper``) and its tools (``tools``).

The env class carries them in its metadata (``metadata["paper_prompt"]``,
``metadata["tool_family"]``), where the general wrappers read them
(``wrappers.PaperPrompt``, ``wrappers.ToolsPrompt``): no wrapper knows which env it wraps.
The paper's texts are verl-agent's (``agent_system/environments/prompts/alfworld.py``),
typos and trailing spaces included, reproduced as data.
"""

from __future__ import annotations

from typing import Any, Sequence

NO_HISTORY = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WITH_HISTORY = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

_TASK = "Your task is to: "


class PaperTexts:
    """How verl-agent's ALFWorld manager fills its prompt (the interface: ``wrappers.templates``)."""

    def task(self, obs: str, info: dict[str, Any]) -> str:
        """The goal sentence after ``Your task is to:`` in the first observation."""
        start = obs.find(_TASK)
        return obs[start + len(_TASK):].strip() if start >= 0 else str(info.get("goal", ""))

    def shown(self, obs: str, task: str) -> str:
        return obs

    def turn(self, shown: str, reply: str, parsed: str | None, obs: str) -> tuple[str, str]:
        """The history keeps the observation the action answered, and the parsed action."""
        return shown, parsed or ""

    def render(self, *, task: str, obs: str, actions: Sequence[str], steps: int, history_length: int,
               turns: Sequence[tuple[str, str]], history: str) -> str:
        listed = "\n ".join(f"'{a}'" for a in actions if a != "help")
        if not turns:
            return NO_HISTORY.format(current_observation=obs, admissible_actions=listed)
        return WITH_HISTORY.format(task_description=task, step_count=steps, history_length=min(steps, history_length),
                                   action_history=history, current_step=steps + 1, current_observation=obs,
                                   admissible_actions=listed)


#: The env's actions as one tool (``wrappers.tool_calls.Family``): a command is the call's argument.
TOOL_FAMILY = {
    "name": "alfworld",
    "tools": {"act": ("command", "{}")},
    "instructions": "Do the household task below. Call act with one command at a time (for example 'go to "
                    "desk 1', 'take mug 1 from desk 1', 'open drawer 2'); each call returns what you see next.",
}

#: What ALFWorld's env classes add to their metadata.
METADATA = {"paper_prompt": PaperTexts(), "tool_family": TOOL_FAMILY}
