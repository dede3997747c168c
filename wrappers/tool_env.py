"""One env of the suite as a TRL environment: typed tools, a task per dataset row, a record of every step.

``environment_class(env_id, **env_kwargs)`` returns a class for
``GRPOTrainer(environment_factory=...)``.  TRL turns every public method of the class
except ``reset`` and ``get_reward`` into a tool the model may call, so the class has
exactly the env's own actions (its ``tool_calls.Family``) and nothing else public: no
``step``, ``close`` or expert.  The class's tools are also how the ``tools`` prompt template
plays an env (``tools_prompt``; ``run_call`` runs one call as TRL's loop does, and
``tool_schemas`` lists the tools as the chat template reads them).  This module imports
no TRL; ``integrations.trl`` re-exports it beside the trainer.

What TRL cannot know, the class records: each env step's anchor (the state it was taken
in), reward, validity and the generated turn it came from.  ``GiGPOTrainer`` attaches a
budget to each instance before TRL runs the tools (``budget``): the turn is then known,
and a tool result that could not fit in the completion ends the episode as truncated
before the env steps, instead of TRL dropping a result the model never sees.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import gymnasium as gym

from gigpo_gym.wrappers.anchor import AnchorKey
from gigpo_gym.wrappers.tool_calls import Family, family_of, one_line

#: Appended where an observation was cut to ``max_observation_tokens``.
CUT_MARK = " [... cut]"
#: What a tool answers once the episode is over (no env step).
OVER = "The episode is over: no more actions."


@dataclass(frozen=True)
class StepRecord:
    """One env step made by a tool call."""

    turn: int | None
    """Index of the generated turn (0 = the first reply) whose tool call made the step; None without a budget."""
    tool: str
    action: str
    """The env action the call became (``<search>x</search>``, ``click[buy now]``, a command)."""
    anchor: str
    """The env's state anchor before the step (equal anchors, equal futures)."""
    observation_anchor: str
    """Digest of the observation the step was taken from (the GiGPO paper's anchor)."""
    anchor_text: str
    """That observation's text (for similarity grouping)."""
    reward: float
    valid: bool
    done: bool


class Budget(Protocol):
    """What a trainer tells an environment during one rollout (``GiGPOTrainer`` supplies it)."""

    def completion_length(self) -> int:
        """Tokens generated so far in this rollout (grows every turn, so a change marks a new turn)."""

    def fits(self, messages: list[dict[str, str]], extra_tokens: int) -> bool:
        """Whether these tool messages, plus ``extra_tokens``, still fit in the completion."""


class CompletionBudget:
    """A ``Budget`` by TRL's rule: tool results fit while the completion stays within
    ``max_completion_length`` and prompt + completion below ``max_model_len``.

    ``completion_length`` reads the rollout's live completion (a trainer's token lists, an
    evaluation's); ``suffix_ids`` gives the tokens tool messages add after a reply
    (``GRPOTrainer._get_tool_suffix_ids``, or ``chat.tool_suffix_ids``).
    """

    def __init__(self, prompt_length: int, completion_length: Callable[[], int], max_completion_length: int,
                 max_model_len: int, suffix_ids: Callable[[list[dict[str, str]]], list[int]]) -> None:
        self.prompt_length, self.completion_length = prompt_length, completion_length
        self.max_completion_length, self.max_model_len, self.suffix_ids = max_completion_length, max_model_len, suffix_ids

    def fits(self, messages: list[dict[str, str]], extra_tokens: int) -> bool:
        completion = self.completion_length() + len(self.suffix_ids(messages)) + extra_tokens
        return completion <= self.max_completion_length and self.prompt_length + completion < self.max_model_len


class ToolEnvironment:
    """Base of the classes ``environment_class`` makes; see the module docstring.

    Subclasses set ``env_id``, ``env_kwargs``, ``family``, ``tokenizer``,
    ``max_observation_tokens`` and ``list_actions`` and carry one method per tool.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    family: Family
    tokenizer: Any = None
    max_observation_tokens: int = 512
    list_actions: bool = True

    def __init__(self, env: gym.Env | None = None) -> None:
        """``env``: play this env instead of making one from ``env_id`` (the ``tools`` prompt template's case)."""
        # the observation-mode wrapper keeps the env's state anchor in info["state_anchor"]
        self._env = AnchorKey(gym.make(self.env_id, **self.env_kwargs) if env is None else env, mode="observation")
        self._budget: Budget | None = None
        self._info: dict[str, Any] | None = None
        self._steps: list[StepRecord] = []
        self._done = True
        self._truncation: str | None = None
        self._turn, self._length, self._round = -1, -1, []

    # -- what TRL calls ----------------------------------------------------------------
    def reset(self, seed: int | None = None, task_id: str | None = None, **columns: Any) -> str:
        """Start the task the dataset row names (its ``task_id``, else its ``seed``); return its first observation."""
        if seed is None and task_id is None:
            raise ValueError(
                f"{type(self).__name__}.reset needs the row's seed or task_id, so that the copies of one group "
                "play one task: pass train_dataset=task_dataset(env_id, split, n, seed)")
        options = {"task_id": str(task_id)} if task_id is not None else None
        obs, info = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._info = info
        self._steps, self._done, self._truncation = [], False, None
        self._budget, self._turn, self._length, self._round = None, -1, -1, []
        return self._render(obs, info, whole=True)  # the task: part of the prompt, never cut

    def get_reward(self) -> float:
        """The episode's return: the sum of the env's rewards so far."""
        return float(sum(step.reward for step in self._steps))

    # -- read by the trainer and by users (properties: TRL makes tools of functions only)
    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """Every env step of the episode, in order."""
        return tuple(self._steps)

    @property
    def anchor(self) -> dict[str, str]:
        """The current state's anchors (``state``, ``observation``) and observation text (``text``)."""
        info = self._require_info()
        return {"state": info["state_anchor"], "observation": info["anchor"], "text": info["anchor_text"]}

    @property
    def info(self) -> dict[str, Any]:
        """The env's info of the current state (of the last env step, else of the reset)."""
        return self._require_info()

    @property
    def task_id(self) -> str:
        return str(self._require_info()["task_id"])

    @property
    def done(self) -> bool:
        return self._done

    @property
    def budget(self) -> Budget | None:
        """What the rollout may still take; set by a trainer (or an evaluation) after ``reset``, before the tools run."""
        return self._budget

    @budget.setter
    def budget(self, budget: Budget | None) -> None:
        self._budget = budget

    @property
    def truncation(self) -> str | None:
        """Why the episode was cut short: ``"step limit"``, ``"completion budget"``, or None."""
        return self._truncation

    # -- the tools' one path -----------------------------------------------------------
    def _act(self, tool: str, value: Any) -> str:
        """Play ``tool(value)``; its answer joins the round's tool messages (what TRL appends after the turn)."""
        text = self._play(tool, value, self._current_turn())
        self._round.append({"role": "tool", "name": tool, "content": text})
        return text

    def _play(self, tool: str, value: Any, turn: int | None) -> str:
        """A tool error (no step) for a bad argument or a finished episode, else one env step."""
        argument = self.family.tools[tool][0]
        if self._info is None:
            return f"Error: {tool} was called before reset."
        if not isinstance(value, str):
            return f"Error: {tool}() takes {argument} as a string, got {type(value).__name__}."
        if self._done:
            return OVER
        action = self.family.action(tool, one_line(value))
        bound = self._env.unwrapped.max_action_length
        if len(action) > bound:
            return f"Error: {argument} is too long ({len(action)} characters; the limit is {bound}). Nothing was done."
        if self._budget is not None and not self._budget.fits(
                self._round + [{"role": "tool", "name": tool, "content": ""}], self._result_bound()):
            self._done, self._truncation = True, "completion budget"
            return "The episode ends here: the reply is too long for another observation."
        before = self.anchor
        obs, reward, terminated, truncated, info = self._env.step(action)
        self._info = info
        self._done = bool(terminated or truncated)
        if truncated and not terminated:
            self._truncation = "step limit"
        self._steps.append(StepRecord(turn, tool, action, before["state"], before["observation"], before["text"],
                                      float(reward), bool(info["action_valid"]), self._done))
        return self._render(obs, info)

    def _current_turn(self) -> int | None:
        """The generated turn of this call: a new turn whenever the completion has grown since the last call."""
        if self._budget is None:
            return None
        length = self._budget.completion_length()
        if length != self._length:
            self._turn, self._length, self._round = self._turn + 1, length, []
        return self._turn


    def _render(self, obs: str, info: dict[str, Any], whole: bool = False) -> str:
        """The observation (and the admissible actions) as the model reads it, cut to ``max_observation_tokens``."""
        text = obs.strip() or ("The episode is over." if self._done else "(nothing)")
        admissible = info.get("admissible_actions") or []
        if self.list_actions and admissible:
            text += "\nAdmissible actions: " + " | ".join(admissible)
        return text if whole else cut(text, self.max_observation_tokens, self.tokenizer)

    def _result_bound(self) -> int:
        """Tokens a tool result can take at most, with room for re-tokenisation at the cut."""
        return self.max_observation_tokens + _length(CUT_MARK, self.tokenizer) + 8

    def _require_info(self) -> dict[str, Any]:
        if self._info is None:
            raise RuntimeError("call reset() first")
        return self._info


def _length(text: str, tokenizer: Any) -> int:
    if tokenizer is None:
        return len(text.encode("utf-8"))
    return len(tokenizer.encode(text, add_special_tokens=False))


def cut(text: str, max_tokens: int, tokenizer: Any = None) -> str:
    """``text`` cut to ``max_tokens`` tokens of ``tokenizer`` (UTF-8 bytes without one), the cut marked.

    Bytes bound tokens from above for byte-level tokenizers, so the bound holds either way.
    """
    if _length(text, tokenizer) <= max_tokens:
        return text
    if tokenizer is None:
        kept = text.encode("utf-8")[:max_tokens].decode("utf-8", errors="ignore")
    else:
        kept = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:max_tokens])
    return kept + CUT_MARK


class SearchQATools(ToolEnvironment):
    def search(self, query: str) -> str:
        """Search the encyclopedia and read the top passages.

        Args:
            query: What to look up, e.g. a name or a title.
        """
        return self._act("search", query)

    def answer(self, answer: str) -> str:
        """Give the final answer; this ends the episode.

        Args:
            answer: The answer, a name, a place or a few words.
        """
        return self._act("answer", answer)


class WebShopTools(ToolEnvironment):
    def search(self, query: str) -> str:
        """Search the shop from the search page.

        Args:
            query: Keywords describing the product.
        """
        return self._act("search", query)

    def click(self, target: str) -> str:
        """Click a button, a product code or an option of the current page.

        Args:
            target: The text of what to click, e.g. 'buy now', 'next >' or a product code.
        """
        return self._act("click", target)


class ALFWorldTools(ToolEnvironment):
    def act(self, command: str) -> str:
        """Do one ALFWorld command.

        Args:
            command: The command, e.g. 'go to desk 1' or 'take mug 1 from desk 1'.
        """
        return self._act("act", command)


#: family name -> the class whose methods are its tools
TOOL_CLASSES: dict[str, type[ToolEnvironment]] = {"searchqa": SearchQATools, "webshop": WebShopTools,
                                                  "alfworld": ALFWorldTools}


def environment_class(
    env_id: str,
    *,
    tokenizer: Any = None,
    max_observation_tokens: int = 512,
    list_actions: bool = True,
    **env_kwargs: Any,
) -> type[ToolEnvironment]:
    """A TRL environment class for ``env_id`` (``GRPOTrainer(environment_factory=environment_class(...))``).

    ``env_kwargs`` go to ``gym.make`` (``split="train"``, ``max_episode_steps=...``).
    Observations are cut to ``max_observation_tokens`` tokens of ``tokenizer`` (pass the
    policy's; without one, UTF-8 bytes, which bound the tokens of any byte-level
    tokenizer) and the cut is marked.  ``list_actions`` appends the admissible actions
    to each observation (ALFWorld, WebShop).
    """
    family = family_of(env_id)
    cls = tool_class(family, tokenizer=tokenizer, max_observation_tokens=max_observation_tokens,
                     list_actions=list_actions, env_id=env_id, env_kwargs=env_kwargs)
    gym.make(env_id, **env_kwargs).close()  # a bad id or keyword fails here, not in the first rollout
    return cls


def tool_class(family: Family, *, tokenizer: Any = None, max_observation_tokens: int = 512,
               list_actions: bool = True, env_id: str = "", env_kwargs: dict[str, Any] | None = None
               ) -> type[ToolEnvironment]:
    """The ``ToolEnvironment`` class of ``family`` with these settings (``environment_class`` without the env check).

    Without ``env_id`` its instances play the env they are given (``cls(env)``).
    """
    if isinstance(max_observation_tokens, bool) or not isinstance(max_observation_tokens, int) or max_observation_tokens < 16:
        raise ValueError(f"max_observation_tokens must be an int >= 16, got {max_observation_tokens!r}")
    if tokenizer is not None and not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        raise TypeError(f"tokenizer must have encode() and decode() (a transformers tokenizer), got {type(tokenizer).__name__}")
    base = TOOL_CLASSES[family.name]
    name = (env_id.split("/")[-1].split("-v")[0].replace("-", "") + "Environment") if env_id else base.__name__
    attributes = {"env_id": env_id, "env_kwargs": dict(env_kwargs or {}), "family": family, "tokenizer": tokenizer,
                  "max_observation_tokens": max_observation_tokens, "list_actions": bool(list_actions),
                  "__doc__": f"{env_id or family.name} as a TRL environment: tools {', '.join(family.tools)}."}
    return type(name, (base,), attributes)


def tool_methods(env: ToolEnvironment) -> list[Callable[..., str]]:
    """The env's tools as TRL's ``GRPOTrainer`` lists them: its public methods but ``reset`` and
    ``get_reward``, by name (so the prompt's tool list is in that order too)."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def tool_schemas(env: ToolEnvironment) -> list[dict[str, Any]]:
    """The JSON schemas of ``tool_methods(env)``, as transformers renders them into the chat template."""
    try:
        from transformers.utils import get_json_schema
    except ImportError as e:  # pragma: no cover - depends on the install
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("train", "the tool schemas of the tools prompt") from e
    return [get_json_schema(method) for method in tool_methods(env)]


def run_call(env: ToolEnvironment, name: str, arguments: Any) -> str:
    """One tool call as TRL's multi-turn loop runs it: the tool's answer, or TRL's error text (an unknown
    tool, arguments the tool does not take) as the tool message's content."""
    tools = {method.__name__: method for method in tool_methods(env)}
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result: Any = tools[name](**arguments)
    except Exception as error:  # what TRL does: the error goes back to the model
        result = {"error": str(error)}
    return str(result)
