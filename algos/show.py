"""``gigpo-gym prompt``: exactly what a model reads at step K of a task, and what the run pays for it.

A config (``--config NAME|FILE``, with ``--set`` overrides) or a leaderboard spec
(``--spec NAME``, in its ``--prompt`` template) fixes the env, the prompt stack and the
reward; ``--env-seed S`` the task (the env's ``reset(seed=S)``); ``--step K`` the step.
The env's expert plays the task through the episode player (``rollout.collect``), the
stack the run trains or is evaluated with, and the run's reward; the command shows step
K: the prompt text or chat messages (``InputFormat``: system message, chat template,
the start of the answer), its token count with ``--tokenizer``, the admissible
actions, the expert's reply and what the env returned and the trainer paid for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

#: The templates a spec's prompts can be shown in (``gigpo-gym leaderboard --prompt``).
TEMPLATES = ("default", "paper", "tools")


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "prompt",
        help="show exactly what a model reads at a step of a task, and the reward the run pays",
        description="Plays the env's expert on one task through the prompt stack of a training config (or of a "
        "leaderboard spec) and prints step K as the model reads it: the prompt text or chat messages, its token "
        "count (with --tokenizer), the admissible actions, and what the env returns and the trainer pays. "
        "Example: gigpo-gym prompt --config demo --step 2",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="a training config: a YAML file or the name of a shipped one (e.g. demo)")
    source.add_argument("--spec", help="a leaderboard spec by name or file (e.g. alfworld-valid_seen)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (with --config), e.g. --set prompt.template=paper (repeatable)")
    p.add_argument("--prompt", dest="template", choices=TEMPLATES, default="default",
                   help="with --spec: the prompt template, as gigpo-gym leaderboard --prompt (default: default)")
    p.add_argument("--env-seed", type=int, default=0, help="the task: the env's reset seed (default: 0)")
    p.add_argument("--step", type=int, default=1, help="the step to show, 1 = the first prompt (default: 1)")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="a model folder (or 'smollm2'): render the chat template and count the tokens with its tokenizer")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run_prompt_command)


@dataclass
class Shown:
    """One step of one task as a run presents it to its model (what ``gigpo-gym prompt`` prints)."""

    source: str
    env_id: str
    template: str
    task_id: str
    task_type: str
    env_seed: int
    step: int
    steps: int
    #: The prompt text the stack built (the chat's text for the tools template).
    text: str
    #: The chat messages the model reads (None: plain text).
    messages: list[dict[str, Any]] | None
    response_prefix: str
    admissible_actions: list[str]
    reply: str
    action_valid: bool
    paid: float
    #: What the env returns (its docstring's Rewards section) and what the run pays.
    env_rewards: str
    pays: str
    episode: dict[str, Any]
    tools: list[dict[str, Any]] | None = None
    #: The whole text the model reads (the chat template rendered), with a tokenizer.
    model_text: str | None = None
    tokens: int | None = None
    max_prompt_tokens: int | None = None
    max_new_tokens: int | None = None
    notes: list[str] = field(default_factory=list)


def run_prompt_command(args: argparse.Namespace) -> int:
    from gigpo_gym.algos.leaderboard.specs import LeaderboardError
    from gigpo_gym.algos.training.config import ConfigError

    try:
        shown = show(config=args.config, spec=args.spec, overrides=args.overrides, template=args.template,
                     env_seed=args.env_seed, step=args.step, tokenizer=args.tokenizer)
    except (ConfigError, LeaderboardError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(shown.__dict__, indent=1) if args.json else render(shown))
    return 0


def show(*, config: str | None = None, spec: str | None = None, overrides: Sequence[str] = (), template: str = "default",
         env_seed: int = 0, step: int = 1, tokenizer: str | None = None) -> Shown:
    """Step ``step`` of the task of reset seed ``env_seed`` under a config or a spec (see the module docstring)."""
    import gymnasium as gym

    import gigpo_gym
    from gigpo_gym.algos.policies.base import SamplingParams
    from gigpo_gym.algos.training.rollout import RewardShaping, collect
    from gigpo_gym.wrappers.stack import llm_stack

    if step < 1:
        raise ValueError(f"--step counts from 1 (the first prompt), got {step}")
    if config is not None:
        if template != "default":
            raise ValueError("--prompt picks a spec's template; with --config set prompt.template "
                             "(--set prompt.template=paper)")
        setup = _from_config(config, overrides)
    else:
        if overrides:
            raise ValueError("--set overrides a config's keys; a spec's prompts are its own (use --prompt for its template)")
        setup = _from_spec(spec, template)
    env_id, env_kwargs, prompt, anchor_mode, shaping, expert_kwargs = setup[:6]
    probe = gym.make(env_id, **env_kwargs)  # the task of this reset seed, which the player then resets by id
    try:
        task_id = str(probe.reset(seed=env_seed)[1]["task_id"])
    finally:
        probe.close()
    recorder = _Recorder()
    envs = gigpo_gym.make_grouped(env_id, 1, 1, env_kwargs=env_kwargs, wrappers=(llm_stack(prompt, anchor_mode),))
    try:
        # a spec's run pays nothing: its "paid" column is then the env's own reward
        paid_as = shaping or RewardShaping(scale=1.0, source="env", invalid_action_penalty=0.0)
        played = collect(recorder, envs, SamplingParams(max_new_tokens=1), seed=env_seed, shaping=paid_as,
                         options={"env_options": [{"task_id": task_id}]}, expert_kwargs=expert_kwargs)
    finally:
        envs.close()
    if step > len(played):
        raise ValueError(f"the expert's episode of this task ends after {len(played)} steps; --step must be <= {len(played)}")
    text, context = recorder.seen[step - 1]
    episode = played.episodes[0]
    fmt = prompt.input_format()
    chat = context.get("messages")
    shown = Shown(
        source=setup[6], env_id=env_id, template=prompt.template, task_id=episode.task_id, task_type=episode.task_type,
        env_seed=env_seed, step=step, steps=len(played), text=text, messages=None, response_prefix=fmt.response_prefix,
        admissible_actions=list(context.get("admissible_actions") or []), reply=played.replies[step - 1],
        action_valid=played.action_valid[step - 1], paid=played.rewards[step - 1], env_rewards=env_rewards(env_id),
        pays=f"the trainer {shaping.describe()}" if shaping is not None else "a leaderboard run pays nothing: it "
        "records success, the env's return and the spec's metrics",
        episode={"won": episode.won, "env_return": episode.env_return, "paid": episode.reward, "steps": episode.length},
        max_prompt_tokens=setup[7], max_new_tokens=setup[8],
    )
    if chat:  # the tools template: the chat and its tools, as TRL renders them
        shown.messages, shown.tools = fmt.with_system(chat), context.get("tools")
        shown.response_prefix = ""
    elif fmt.chat_template or (fmt.chat_template is None and tokenizer is not None):
        shown.messages = fmt.messages(text)
    if tokenizer is not None:
        _count(shown, fmt, _tokenizer(tokenizer))
    elif fmt.chat_template is None and not chat:
        shown.notes.append("the chat template is used when the model's tokenizer has one: give --tokenizer to see it")
    return shown


def _from_config(config: str, overrides: Sequence[str]) -> tuple:
    from gigpo_gym.algos.cli import resolve_config
    from gigpo_gym.algos.training.config import load_config

    path = resolve_config(config)
    cfg = load_config(path, list(overrides))
    return (cfg.env.id, cfg.env_kwargs("train"), cfg.prompt, cfg.env.anchor_mode, cfg.reward, cfg.sft.expert_kwargs,
            f"config {path}", cfg.model.max_prompt_tokens, cfg.sampling.max_new_tokens)


def _from_spec(name: str, template: str) -> tuple:
    from gigpo_gym.algos.leaderboard.specs import load_spec
    from gigpo_gym.wrappers.stack import PromptConfig

    spec = load_spec(name)
    prompt = spec.prompt if template == "default" else PromptConfig(
        template=template, **({} if template == "tools" else {"history_length": spec.history_length}))
    env_kwargs = {**spec.env_kwargs, **prompt.env_kwargs(), "max_episode_steps": spec.max_steps}
    return spec.env_id, env_kwargs, prompt, "state", None, {}, f"spec {spec.name}", None, None


class _Recorder:
    """The env's expert, keeping each step's prompt and context (admissible actions, a chat's messages and tools)."""

    needs_context = ("expert_action", "admissible_actions", "messages", "tools")
    concurrent = False

    def __init__(self) -> None:
        from gigpo_gym.algos.policies.reference import ExpertPolicy

        self.expert = ExpertPolicy()
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def generate(self, prompts, sampling, contexts=None):
        self.seen.append((prompts[0], contexts[0]))
        return self.expert.generate(prompts, sampling, contexts)

    def close(self) -> None:
        """Nothing to release."""


def env_rewards(env_id: str) -> str:
    """The Rewards section of the env's docstring (one docstring template per env): what the env returns."""
    import inspect

    from gymnasium.envs.registration import load_env_creator

    from gigpo_gym.registration import env_spec

    doc = inspect.getmodule(load_env_creator(env_spec(env_id).entry_point)).__doc__ or ""
    lines, inside = [], False
    for line in doc.splitlines():
        if line.strip() == "Rewards":
            inside = True
        elif inside and line and not line.startswith(" "):
            break
        elif inside:
            lines.append(line.strip())
    return " ".join(lines).strip() or "(the env's docstring has no Rewards section)"


def _tokenizer(path: str) -> Any:
    """The tokenizer as the policy loads it (``hf.load_tokenizer``); ``smollm2``: SmolLM2's, offline."""
    from gigpo_gym.algos.policies.hf import load_tokenizer

    if path == "smollm2":
        from gigpo_gym.algos.policies.smollm import smollm2_path

        path = str(smollm2_path())
    return load_tokenizer(path)


def _count(shown: Shown, fmt: Any, tokenizer: Any) -> None:
    """The whole text the model reads and its token count, rendered by ``tokenizer`` as the policy renders it."""
    if shown.tools is not None:  # the tools template: TRL's tool-calling chat (HFPolicy.encode_chat)
        from gigpo_gym.wrappers.chat import tool_chat

        template, _ = tool_chat(tokenizer)
        shown.model_text = tokenizer.apply_chat_template(shown.messages, tools=shown.tools or None, tokenize=False,
                                                         add_generation_prompt=True, chat_template=template)
        chat = True
    else:
        chat = fmt.uses_chat(bool(getattr(tokenizer, "chat_template", None)))
        shown.messages = fmt.messages(shown.text) if chat else None
        shown.model_text = fmt.model_text(shown.text, tokenizer)
    shown.tokens = len(tokenizer(shown.model_text, add_special_tokens=not chat)["input_ids"])
    if shown.max_prompt_tokens is not None and shown.tokens > shown.max_prompt_tokens:
        shown.notes.append(f"the prompt has {shown.tokens} tokens: the model reads its last {shown.max_prompt_tokens} "
                           "(model.max_prompt_tokens)")


def render(s: Shown) -> str:
    """The text ``gigpo-gym prompt`` prints."""
    rule = "-" * 78
    lines = [f"{s.source}: {s.env_id}, task {s.task_id} ({s.task_type}), env seed {s.env_seed}, "
             f"step {s.step} of the expert's {s.steps}, template {s.template!r}", rule]
    if s.model_text is not None:
        lines += ["what the model reads (the chat template rendered):", s.model_text]
    elif s.messages is not None:
        lines.append("what the model reads: a chat")
        for m in s.messages:
            lines += [f"[{m['role']}{' ' + m['name'] if m.get('name') else ''}]", _message_text(m)]
        if s.response_prefix:
            lines.append(f"[assistant, begun] {s.response_prefix}")
    else:
        lines += ["what the model reads:", s.text + s.response_prefix]
    lines.append(rule)
    if s.tools:
        lines.append("tools: " + ", ".join(t["function"]["name"] for t in s.tools))
    if s.tokens is not None:
        budget = f" (model.max_prompt_tokens {s.max_prompt_tokens})" if s.max_prompt_tokens else ""
        lines.append(f"tokens: {s.tokens}{budget}")
    if s.max_new_tokens is not None:
        lines.append(f"reply budget: {s.max_new_tokens} tokens (sampling.max_new_tokens)")
    shown = ", ".join(s.admissible_actions[:20]) + (f", ... ({len(s.admissible_actions)} in all)"
                                                     if len(s.admissible_actions) > 20 else "")
    lines.append(f"admissible actions: {shown or '(open: any text)'}")
    lines.append(f"the expert replies: {s.reply}")
    lines.append(f"the env returns: {s.env_rewards}")
    lines.append(f"what is paid: {s.pays}")
    paid = "the env returned" if s.source.startswith("spec") else "the trainer pays"
    lines.append(f"this step: {'valid' if s.action_valid else 'invalid'}, {paid} {s.paid:g}; the expert's episode: "
                 f"{s.episode['steps']} steps, {'won' if s.episode['won'] else 'not won'}, env return "
                 f"{s.episode['env_return']:g}" + ("" if s.source.startswith("spec") else f", paid {s.episode['paid']:g}"))
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)


def _message_text(m: dict[str, Any]) -> str:
    calls = [c["function"] for c in m.get("tool_calls") or []]
    if not calls:
        return str(m.get("content") or "")
    from gigpo_gym.wrappers.tool_calls import render_calls

    return render_calls(str(m.get("content") or ""), calls)
