"""SearchQA's prompt texts: Search-R1's (``prompt.template: paper``) and its tools (``tools``).

The env class carries them in its metadata (``metadata["paper_prompt"]``,
``metadata["tool_family"]``), where the general wrappers read them
(``wrappers.PaperPrompt``, ``wrappers.ToolsPrompt``).  The prompt is Search-R1's
(``scripts/data_process/nq_search.py``, template ``base``), followed by the last turns of
the transcript as its rollout writes it: each reply cut as ``protocol.cut_reply`` cuts
it, then the observation.
"""

from __future__ import annotations

from typing import Any, Sequence

from gigpo_gym.envs.searchqa.protocol import cut_reply

SEARCH_R1_TEMPLATE = (
    "Answer the given question. "
    "You must conduct reasoning inside <think> and </think> first every time you get new information. "
    "After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> "
    "and it will return the top searched results between <information> and </information>. "
    "You can search as many times as your want. "
    "If you find no further external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)


class PaperTexts:
    """Search-R1's prompt and transcript (the interface: ``wrappers.templates``)."""

    def task(self, obs: str, info: dict[str, Any]) -> str:
        """The question (the first observation)."""
        return obs

    def shown(self, obs: str, task: str) -> str:
        return obs

    def turn(self, shown: str, reply: str, parsed: str | None, obs: str) -> tuple[str, str]:
        """The transcript keeps the reply itself, cut as Search-R1 cuts it, and the observation it got."""
        return cut_reply(str(reply)), obs

    def render(self, *, task: str, obs: str, actions: Sequence[str], steps: int, history_length: int,
               turns: Sequence[tuple[str, str]], history: str) -> str:
        return SEARCH_R1_TEMPLATE.format(question=task) + "".join(reply + shown for reply, shown in turns)


#: The env's actions as tools (``wrappers.tool_calls.Family``): tool -> (its argument, the action with ``{}``).
TOOL_FAMILY = {
    "name": "searchqa",
    "tools": {"search": ("query", "<search>{}</search>"), "answer": ("answer", "<answer>{}</answer>")},
    "instructions": "Answer the question below. Call search to look things up in the encyclopedia (each call "
                    "returns a few passages), then call answer with a short answer: a name, a place or a few words.",
}

#: What SearchQA's env class adds to its metadata.
METADATA = {"paper_prompt": PaperTexts(), "tool_family": TOOL_FAMILY}
