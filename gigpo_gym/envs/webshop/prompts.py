"""WebShop's prompt texts: the GiGPO paper's (``prompt.template: paper``) and its tools (``tools``).

The env classes carry them in their metadata (``metadata["paper_prompt"]``,
``metadata["tool_family"]``), where the general wrappers read them
(``wrappers.PaperPrompt``, ``wrappers.ToolsPrompt``).  The paper's texts are verl-agent's
(``agent_system/environments/prompts/webshop.py``), typos and trailing spaces included.
"""

from __future__ import annotations

from typing import Any, Sequence

NO_HISTORY = """
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

WITH_HISTORY = """
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

#: verl-agent cuts a WebShop history longer than this many characters to its end.
HISTORY_CHARS = 5000
_SEP = " [SEP] "


class PaperTexts:
    """How verl-agent's WebShop manager fills its prompt (the interface: ``wrappers.templates``)."""

    def task(self, obs: str, info: dict[str, Any]) -> str:
        """The instruction of the first page."""
        parts = obs.split(_SEP)
        return parts[2] if len(parts) > 2 and parts[1] == "Instruction:" else str(info.get("instruction", obs))

    def shown(self, obs: str, task: str) -> str:
        """The page after the instruction, each part quoted."""
        parts = obs.split(_SEP)
        if task not in parts:
            return obs
        return _SEP.join(f"'{p}'" for p in parts[parts.index(task) + 1:])

    def turn(self, shown: str, reply: str, parsed: str | None, obs: str) -> tuple[str, str]:
        """The history keeps the page the action answered, and the parsed action."""
        return shown, parsed or ""

    def render(self, *, task: str, obs: str, actions: Sequence[str], steps: int, history_length: int,
               turns: Sequence[tuple[str, str]], history: str) -> str:
        listed = "\n".join(f"'{a.replace('search[<query>]', 'search[<your query>]')}'," for a in actions)
        if not turns:
            return NO_HISTORY.format(task_description=task, current_observation=obs, available_actions=listed)
        if len(history) > HISTORY_CHARS:
            history = "... " + history[-HISTORY_CHARS:]
        return WITH_HISTORY.format(task_description=task, step_count=steps, history_length=min(steps, history_length),
                                   action_history=history, current_step=steps + 1, current_observation=obs,
                                   available_actions=listed)


#: The env's actions as tools (``wrappers.tool_calls.Family``): tool -> (its argument, the action with ``{}``).
TOOL_FAMILY = {
    "name": "webshop",
    "tools": {"search": ("query", "search[{}]"), "click": ("target", "click[{}]")},
    "instructions": "Buy the product that the instruction below asks for. On the search page call search; then "
                    "call click to open a product (by its code), choose an option, or press a button such as "
                    "'buy now', 'next >' or 'back to search'.",
}

#: What WebShop's env classes add to their metadata.
METADATA = {"paper_prompt": PaperTexts(), "tool_family": TOOL_FAMILY}
