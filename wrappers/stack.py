"""The prompt stack: one ``PromptConfig`` and the one function that wraps an env for an LLM.

Training, evaluation, the SFT transcripts, the leaderboard and the benchmarks all build
an LLM's view of an env here, so a model is evaluated on exactly the prompts it was
trained on.  ``wrap_for_llm(env, prompt)`` returns the stack the prompt's template
builds: for ``"default"``, ``ActionParser(HistoryPrompt(AnchorKey(env)))``; for
``"paper"``, ``PaperPrompt(ActionParser(AnchorKey(env)))`` (``templates``); for
``"tools"``, ``ToolsPrompt(env)``, TRL's tool-calling conversation (``tools_prompt``).
The registry is open: ``register_template("mine", build)`` adds a template by name.

The stack's observations are the prompt texts; ``InputFormat`` (``PromptConfig.input_format``)
says how a text reaches a model: as one user message of its chat template after an
optional system message (``messages``), or as plain text, and which text its answer
starts with.  A policy only tokenises what these build and truncates it.

>>> import gymnasium as gym, gigpo_gym
>>> prompt = PromptConfig(history_length=1, intro="You are a researcher.")
>>> env = wrap_for_llm(gym.make("gigpo_gym/SearchQA-v0"), prompt)
>>> text, info = env.reset(seed=0)
>>> text.startswith("You are a researcher.")
True
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import gymnasium as gym

from gigpo_gym.core.typed import check_fields
from gigpo_gym.wrappers.action import ActionParser
from gigpo_gym.wrappers.anchor import ANCHOR_MODES, AnchorKey
from gigpo_gym.wrappers.prompt import HistoryPrompt


@dataclass(frozen=True)
class Template:
    """A registered prompt template: how it builds the stack, and which ``PromptConfig`` fields it reads."""

    build: Callable[[gym.Env, "PromptConfig", str], gym.Env]
    reads: frozenset[str]


#: Template name -> ``Template`` (``register_template`` adds one).
PROMPT_TEMPLATES: dict[str, Template] = {}


@dataclass(frozen=True)
class PromptConfig:
    """What an LLM sees of an env each step; a config section of training (``prompt:``) and of a leaderboard run.

    A field a template does not read must keep its default (the error says which template
    reads what), so no setting is silently ignored.
    """

    template: str = "default"
    """The prompt: 'default' (the env's own history prompt, ``HistoryPrompt``), 'paper' (the GiGPO paper's, ``PaperPrompt``) or 'tools' (TRL's tool-calling conversation, ``ToolsPrompt``); ``register_template`` adds more."""
    history_length: int = 2
    """Past steps shown in each prompt (the paper uses 2)."""
    intro: str | None = None
    """First line of every prompt (None: the env's own)."""
    action_format: str | None = None
    """Last line of every prompt, the answer format (None: the env's own)."""
    task_key: str | None = None
    """Info key shown as the task on every step (ALFWorld 'goal', WebShop 'instruction'); None: the first observation."""
    list_actions: bool = True
    """List the admissible actions in every prompt (False: leave them out, for a policy that chooses among them itself)."""
    observation_mode: str | None = None
    """How the env renders its observations, its ``observation_mode`` kwarg (WebShop: 'text', 'text_rich', ...); None: the env's default."""
    max_observation_tokens: int = 512
    """The 'tools' template: tool results are cut to this many tokens, as TRL's ``environment_class`` cuts them in training."""
    observation_tokenizer: str | None = None
    """The 'tools' template: the tokenizer (a local folder) whose tokens ``max_observation_tokens`` counts, the policy's as in training; None: the model folder's (trainer, leaderboard), else UTF-8 bytes."""
    system_prompt: str | None = None
    """A system message before each prompt (with the chat template; the 'tools' template's chats too)."""
    response_prefix: str = ""
    """Text the answer starts with, given as part of the prompt (e.g. '<action>' keeps small models on format)."""
    chat_template: bool | None = None
    """Give each prompt as a user message through the model's chat template (None: when its tokenizer has one)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.template not in PROMPT_TEMPLATES:
            close = difflib.get_close_matches(str(self.template), list(PROMPT_TEMPLATES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"template must be one of {list(PROMPT_TEMPLATES)}, got {self.template!r}{hint}")
        if self.history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {self.history_length}")
        if self.max_observation_tokens < 16:
            raise ValueError(f"max_observation_tokens must be >= 16, got {self.max_observation_tokens}")
        reads = PROMPT_TEMPLATES[self.template].reads
        for f in dataclasses.fields(self):
            if f.name not in reads and f.name != "template" and getattr(self, f.name) != f.default:
                readers = [name for name, t in PROMPT_TEMPLATES.items() if f.name in t.reads]
                raise ValueError(f"{f.name} is not read by the {self.template!r} template (it reads "
                                 f"{', '.join(sorted(reads - {'template'}))}): leave {f.name} unset or use a template "
                                 f"that reads it ({', '.join(repr(r) for r in readers)})")

    def env_kwargs(self) -> dict[str, Any]:
        """The env constructor kwargs this prompt needs (the observation mode, when set)."""
        return {} if self.observation_mode is None else {"observation_mode": self.observation_mode}

    def record(self) -> dict[str, Any]:
        """The fields that differ from the defaults: how a leaderboard result names these prompts."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def input_format(self) -> "InputFormat":
        """How each prompt text reaches the model (chat template, system message, start of the answer)."""
        return InputFormat(self.chat_template, self.system_prompt, self.response_prefix)


@dataclass(frozen=True)
class InputFormat:
    """How a prompt text reaches a model: a chat (a system message, then the text as the user's) or plain text,
    and the text its answer starts with.  The policy applies its tokenizer's chat template to ``messages``,
    appends ``response_prefix`` and tokenises; nothing else.

    >>> InputFormat(system_prompt="Be brief.").messages("Where is the mug?")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Where is the mug?'}]
    """

    chat_template: bool | None = None
    """Use the chat template (None: when the tokenizer has one)."""
    system_prompt: str | None = None
    response_prefix: str = ""

    def uses_chat(self, has_chat_template: bool) -> bool:
        """Whether prompts go through the chat template, for a tokenizer that has one or not."""
        if self.chat_template and not has_chat_template:
            raise ValueError("chat_template is true but the tokenizer has no chat template: set it to false or null")
        return has_chat_template if self.chat_template is None else bool(self.chat_template)

    def model_text(self, text: str, tokenizer: Any = None) -> str:
        """The whole text a model reads for one prompt text: the chat ``messages`` rendered by ``tokenizer``'s chat
        template with the assistant's turn opened (when the chat template is used), then ``response_prefix``."""
        if self.uses_chat(bool(getattr(tokenizer, "chat_template", None))):
            return tokenizer.apply_chat_template(self.messages(text), tokenize=False,
                                                 add_generation_prompt=True) + self.response_prefix
        return text + self.response_prefix

    def messages(self, text: str) -> list[dict[str, str]]:
        """The chat of one prompt text: the system message (if any), then the text as the user's message."""
        return self.with_system([{"role": "user", "content": text}])

    def with_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A chat (the 'tools' template's) with the system message first, unless it opens with one already."""
        if self.system_prompt and (not messages or messages[0].get("role") != "system"):
            return [{"role": "system", "content": self.system_prompt}, *messages]
        return list(messages)


def register_template(name: str, build: Callable[[gym.Env, PromptConfig, str], gym.Env],
                      reads: Iterable[str] | None = None) -> None:
    """Add a prompt template: ``build(env, prompt, anchor_mode)`` returns the whole stack around ``env``.

    ``reads``: the ``PromptConfig`` fields it uses (default: all); setting another is an error.
    """
    fields = {f.name for f in dataclasses.fields(PromptConfig)}
    reads = fields if reads is None else set(reads) | {"template"}
    unknown = sorted(reads - fields)
    if unknown:
        raise ValueError(f"template {name!r} reads {unknown}, which are not PromptConfig fields ({sorted(fields)})")
    PROMPT_TEMPLATES[name] = Template(build, frozenset(reads))


def wrap_for_llm(env: gym.Env, prompt: PromptConfig | None = None, anchor_mode: str = "state",
                 **fields: Any) -> gym.Env:
    """The stack an LLM agent plays ``env`` through: the ``prompt`` template's, with ``AnchorKey(mode=anchor_mode)``.

    ``fields`` build the ``PromptConfig`` in place of ``prompt`` (``wrap_for_llm(env,
    history_length=1)``).  ``prompt.observation_mode`` is an env kwarg: make the env with
    ``prompt.env_kwargs()`` (``llm_stack`` and the trainer do).
    """
    if prompt is None:
        prompt = PromptConfig(**fields)
    elif fields:
        raise TypeError("give wrap_for_llm either a PromptConfig or its fields, not both")
    if anchor_mode not in ANCHOR_MODES:
        raise ValueError(f"anchor_mode must be one of {ANCHOR_MODES}, got {anchor_mode!r}")
    return PROMPT_TEMPLATES[prompt.template].build(env, prompt, anchor_mode)


def llm_stack(prompt: PromptConfig, anchor_mode: str = "state") -> Callable[[gym.Env], gym.Env]:
    """``wrap_for_llm`` as a picklable ``env -> wrapped env``, for ``make_grouped(wrappers=...)``."""
    return functools.partial(wrap_for_llm, prompt=prompt, anchor_mode=anchor_mode)


def _default_stack(env: gym.Env, prompt: PromptConfig, anchor_mode: str) -> gym.Env:
    return ActionParser(HistoryPrompt(AnchorKey(env, mode=anchor_mode), prompt.history_length, intro=prompt.intro,
                                      action_format=prompt.action_format, task_key=prompt.task_key,
                                      list_actions=prompt.list_actions))


def _paper_stack(env: gym.Env, prompt: PromptConfig, anchor_mode: str) -> gym.Env:
    from gigpo_gym.wrappers.templates import paper_stack

    return paper_stack(env, history_length=prompt.history_length, anchor_mode=anchor_mode)


def _tools_stack(env: gym.Env, prompt: PromptConfig, anchor_mode: str) -> gym.Env:
    from gigpo_gym.wrappers.tools_prompt import tools_stack

    return tools_stack(env, prompt, anchor_mode)


#: What every template of prompt texts reads: how a text reaches the model.
_INPUT = ("system_prompt", "response_prefix", "chat_template")
register_template("default", _default_stack, reads=("history_length", "intro", "action_format", "task_key",
                                                   "list_actions", "observation_mode", *_INPUT))
register_template("paper", _paper_stack, reads=("history_length", "observation_mode", *_INPUT))
register_template("tools", _tools_stack, reads=("list_actions", "observation_mode", "max_observation_tokens",
                                               "observation_tokenizer", "system_prompt"))
