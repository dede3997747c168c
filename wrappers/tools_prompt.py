"""The ``tools`` prompt template: an episode as TRL's tool-calling conversation.

A model trained with TRL (``integrations.trl``: ``environment_class``, ``task_dataset``,
``GRPOTrainer``) saw a chat: the user message (the env's tool instructions, then its
first observation), its replies, and after each reply one ``tool`` message per tool call
it made.  ``ToolsPrompt`` keeps that chat for one episode and plays the env through the
same ``ToolEnvironment`` TRL plays (rendering, cuts, tool errors), so the model is
evaluated in the conversation it trained in.

One reply is one step: its ``<tool_call>`` calls (``tool_calls.parse_calls``) run in order as
TRL runs them (``tool_env.run_call``: an unknown tool or arguments the tool does not
take answer TRL's error text); a reply without a call ends the episode, as it ends
TRL's conversation.  The step's reward is the sum of its calls' env rewards; it is
valid when it made calls and each stepped the env with a valid action.  The info
carries the anchor keys of the state after the step (``AnchorKey``'s, so the episode
player's anchor of a step is the state the reply was written in) and the
conversation: ``messages`` and ``tools`` (the tools' JSON schemas), which a policy
asks for to render the chat itself (``Policy.needs_context``); the observation is the
same chat as plain text, for policies that read text.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from gigpo_gym.core.spaces import String
from gigpo_gym.wrappers.anchor import ANCHOR_MODES
from gigpo_gym.wrappers.tool_calls import Family, parse_calls, render_calls
from gigpo_gym.wrappers.tool_env import run_call, tool_class, tool_schemas

MAX_PROMPT_LENGTH = 1 << 22


class ToolsPrompt(gym.Wrapper):
    """``env`` as TRL's tool-calling conversation (see the module docstring).

    ``max_observation_tokens``, ``tokenizer`` and ``list_actions`` are
    ``environment_class``'s: tool results are cut to that many tokens of ``tokenizer``
    (UTF-8 bytes without one), and the admissible actions follow each observation.

    >>> import gymnasium as gym, gigpo_gym
    >>> env = ToolsPrompt(gym.make("gigpo_gym/SearchQA-v0"))
    >>> text, info = env.reset(seed=0)
    >>> [m["role"] for m in info["messages"]], [t["function"]["name"] for t in info["tools"]]
    (['user'], ['answer', 'search'])
    >>> text, reward, terminated, truncated, info = env.step('<tool_call>{"name": "answer", "arguments": {"answer": "x"}}</tool_call>')
    >>> [m["role"] for m in info["messages"]], terminated
    (['user', 'assistant', 'tool'], True)
    """

    def __init__(self, env: gym.Env, *, anchor_mode: str = "state", max_observation_tokens: int = 512,
                 tokenizer: Any = None, list_actions: bool = True):
        if anchor_mode not in ANCHOR_MODES:
            raise ValueError(f"anchor_mode must be one of {ANCHOR_MODES}, got {anchor_mode!r}")
        super().__init__(env)
        self.family = Family.of(env)
        cls = tool_class(self.family, tokenizer=tokenizer, max_observation_tokens=max_observation_tokens,
                         list_actions=list_actions)
        self.tool_env = cls(env)  # TRL's environment, playing this env
        self.anchor_mode = anchor_mode
        self.schemas = tool_schemas(self.tool_env)
        self.observation_space = String(MAX_PROMPT_LENGTH)
        self.messages: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise ValueError(f"the tools template resets by seed or task_id only, got the options {sorted(options)}")
        first = self.tool_env.reset(seed=seed, task_id=task_id)
        self.messages = [{"role": "user", "content": self.family.first_message(first)}]
        return self.render(), self._info()

    def step(self, action: Any):
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}: {action!r:.80}")
        content, calls = parse_calls(action)
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = [{"type": "function", "function": call} for call in calls]
        self.messages.append(reply)
        env, start, failed = self.tool_env, len(self.tool_env.steps), 0
        for call in calls:
            over, made = env.done, len(env.steps)
            self.messages.append({"role": "tool", "name": call["name"],
                                  "content": run_call(env, call["name"], call["arguments"])})
            failed += not over and len(env.steps) == made  # a tool error: no env step
        steps = env.steps[start:]
        ended = env.done or not calls
        truncated = bool(calls) and env.truncation is not None
        info = self._info()
        info["action_valid"] = bool(calls) and not failed and all(s.valid for s in steps)
        info["parsed_action"] = "\n".join(s.action for s in steps) or None
        return self.render(), float(sum(s.reward for s in steps)), ended and not truncated, truncated, info

    def expert_action(self) -> str:
        """The env's expert action as the tool call that makes it (an expert plays the conversation too)."""
        action = self.env.get_wrapper_attr("expert_action")()
        call = self.family.tool_call(action)
        return render_calls("", [call]) if call is not None else action

    def _info(self) -> dict[str, Any]:
        """The env's info of the current state, its anchor as ``anchor_mode`` says, and the conversation."""
        info = dict(self.tool_env.info)
        if self.anchor_mode == "state":  # ToolEnvironment's AnchorKey keeps the observation anchor in "anchor"
            info["anchor"] = info["state_anchor"]
        info["observation"] = info["anchor_text"]
        info["messages"] = [dict(m) for m in self.messages]
        info["tools"] = self.schemas
        return info

    def render(self) -> str:
        """The conversation as plain text: the tools and how to call them, then each message."""
        tools = "; ".join(f"{t['function']['name']}({', '.join(t['function']['parameters']['properties'])}): "
                          f"{t['function']['description']}" for t in self.schemas)
        parts = [f"Tools: {tools}\nTo call one, write <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>."]
        for m in self.messages:
            if m["role"] == "assistant":
                calls = [c["function"] for c in m.get("tool_calls") or []]
                parts.append("[assistant]\n" + render_calls(m["content"], calls))
            else:
                parts.append(f"[{m['role']}{' ' + m['name'] if m['role'] == 'tool' else ''}]\n{m['content']}")
        return "\n\n".join(parts + ["[assistant]\n"])


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    """The tokenizer of a local model folder, loaded once per process (as TRL's recipe loads it: ``AutoTokenizer``)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:  # pragma: no cover - depends on the install
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("train", "observation_tokenizer of the tools prompt") from e
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def tools_stack(env: gym.Env, prompt: Any, anchor_mode: str = "state") -> gym.Env:
    """The ``tools`` template's stack: ``ToolsPrompt(env)`` with the ``PromptConfig``'s cut and action list, its
    replies capped at the env's step limit.

    A tool error steps nothing, so the env's own limit alone would let a model that only errs
    talk on until its prompt limit (TRL caps a conversation's tool rounds too).
    """
    tokenizer = None if prompt.observation_tokenizer is None else load_tokenizer(prompt.observation_tokenizer)
    chat = ToolsPrompt(env, anchor_mode=anchor_mode, max_observation_tokens=prompt.max_observation_tokens,
                       tokenizer=tokenizer, list_actions=prompt.list_actions)
    limit = env.spec.max_episode_steps if env.spec is not None else None
    return gym.wrappers.TimeLimit(chat, limit) if limit else chat
