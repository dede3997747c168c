"""The episode player: grouped envs played to the end with a policy, one row per env step.

``collect`` is the one episode loop of the package: training rollouts and evaluations,
leaderboard rounds (``leaderboard.rounds``), SFT transcripts (``sft.expert_demonstrations``)
and the LLM benchmark all play through it.  Each round resets every env (the copies of a
group share a task), then, while any episode runs: the active envs' prompts (built by the
prompt stack, ``gigpo_gym.wrappers.wrap_for_llm``) go to the policy in one call, with the
per-step context it asks for (``step_contexts``); the generated texts are the actions; and
each active env's step becomes one row with its group id, trajectory id, step index,
shaped reward, anchor key (of the state the action was taken in), prompt, reply, tokens
and sampling log-probs.  Finished envs are frozen by the vector env and stop consuming
generation.  An episode ends when the env ends it, when its env crashed
(``info["crashed"]``, ``info["worker_failed"]``) or when the policy's generation for it
carries an ``error``; each ``Episode`` says which (``status``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Sequence

import numpy as np

from gigpo_gym.algos.policies.base import ChoiceBatch, Generation, Policy, SamplingParams, TokenBatch, as_policy
from gigpo_gym.core.typed import FieldError, check_fields


@dataclass(frozen=True)
class RewardShaping:
    """What the trainer pays for a step: the config's ``reward:`` section.

    The env returns its benchmark's own reward (ALFWorld 1.0 on success, WebShop the
    purchase score in [0, 1], SearchQA exact match 0/1; each env's page says so).  The
    trainer pays ``scale`` x the paid signal (the success signal ``won``, or the env's own
    reward), minus ``invalid_action_penalty`` on every invalid step and ``revisit_penalty``
    on every step back into a state the episode had already been in.  The default is the
    GiGPO paper's convention: 10 x success, 0.1 per invalid step.

    >>> RewardShaping()(env_reward=0.0, won=False, valid=False)
    -0.1
    >>> RewardShaping().describe()
    'pays 10 x success (1 on the winning step), - 0.1 per invalid action'
    """

    scale: float = 10.0
    """Multiplies the paid signal (the paper: 10)."""
    source: Literal["won", "env"] = "won"
    """What is paid: 'won' (the success signal, 1 on the winning step) or 'env' (the env's own reward, e.g. WebShop's score)."""
    invalid_action_penalty: float = 0.1
    """Subtracted on every step whose action was invalid (the paper: 0.1 ALFWorld/WebShop, 0.01 search)."""
    revisit_penalty: float = 0.0
    """Subtracted on every step, short of the winning one, that returns the episode to a state (anchor) it had already
    been in: no progress, such as walking back and forth (0: off; a shaping the paper does not use)."""

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("invalid_action_penalty", "revisit_penalty"):
            if getattr(self, name) < 0:
                raise FieldError(f"{name} must be >= 0 (a penalty is subtracted), got {getattr(self, name)}")

    def __call__(self, env_reward: float, won: bool, valid: bool, revisit: bool = False) -> float:
        base = float(won) if self.source == "won" else float(env_reward)
        return self.scale * base - self.penalty(valid, revisit)

    def penalty(self, valid: bool, revisit: bool = False) -> float:
        """The part of a step's reward that is penalties (invalid action, return to a state already seen)."""
        return (0.0 if valid else self.invalid_action_penalty) + (self.revisit_penalty if revisit else 0.0)

    def describe(self) -> str:
        """What this pays, in one line."""
        paid = "success (1 on the winning step)" if self.source == "won" else "the env's reward"
        parts = [f"pays {self.scale:g} x {paid}"]
        if self.invalid_action_penalty:
            parts.append(f"- {self.invalid_action_penalty:g} per invalid action")
        if self.revisit_penalty:
            parts.append(f"- {self.revisit_penalty:g} per step back into a state already seen")
        return ", ".join(parts)


@dataclass
class Episode:
    """Summary of one trajectory of the round."""

    group_id: int
    traj_id: int
    task_id: str
    task_type: str
    won: bool = False
    length: int = 0
    #: Sum of the shaped rewards (``RewardShaping``).
    reward: float = 0.0
    invalid_steps: int = 0
    truncated: bool = False  # cut off by the step limit, not ended by the env
    #: The env's index in the round.
    index: int = 0
    #: Sum of the env's own rewards.
    env_return: float = 0.0
    #: How it ended: "terminated", "truncated", "crashed" (an env or worker failure, a policy exception), or a
    #: generation's ``error_status``; "running" until then.
    status: str = "running"
    error: str | None = None
    #: The last numeric value of each ``final_keys`` info key (0.0 where none came).
    final: dict[str, float] = field(default_factory=dict)
    #: Replies cut at ``max_new_tokens``.
    cut_replies: int = 0
    #: A served model's token counts over the episode (``Generation.usage``), None for other policies.
    usage: dict[str, Any] | None = None

    def add_usage(self, gen: Generation) -> None:
        """Add one step's token counts (a served model's; other generations report none)."""
        step = gen.usage()
        if step is None:
            return
        u = self.usage or {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "system_fingerprints": []}
        u["prompt_tokens"] += int(step["prompt_tokens"])
        u["completion_tokens"] += int(step["completion_tokens"])
        u["requests"] += 1
        fingerprint = step.get("system_fingerprint")
        if fingerprint and fingerprint not in u["system_fingerprints"]:
            u["system_fingerprints"].append(fingerprint)
        self.usage = u


@dataclass
class Rollout:
    """The rows of one round (parallel lists, one entry per env step) and its episodes."""

    #: The per-row columns besides the token data (``TOKEN_COLUMNS``).
    ROW_COLUMNS: ClassVar[tuple[str, ...]] = (
        "group_ids", "traj_ids", "step_ids", "rewards", "penalties", "anchors", "anchor_texts", "action_valid",
        "env_rewards",
    )  # fmt: skip
    TOKEN_COLUMNS: ClassVar[tuple[str, ...]] = (
        "prompt_ids", "response_ids", "old_log_probs", "options", "option_log_probs", "choices",
    )  # fmt: skip
    #: The rows' texts: the prompt the policy saw, its reply, the action parsed from it (None: none).
    TEXT_COLUMNS: ClassVar[tuple[str, ...]] = ("prompts", "replies", "actions")

    group_ids: list[int] = field(default_factory=list)
    traj_ids: list[int] = field(default_factory=list)
    step_ids: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    penalties: list[float] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    anchor_texts: list[str] = field(default_factory=list)
    action_valid: list[bool] = field(default_factory=list)
    #: The env's own reward of each step (``rewards`` holds the trained one, ``RewardShaping``).
    env_rewards: list[float] = field(default_factory=list)
    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    old_log_probs: list[list[float]] = field(default_factory=list)
    #: Policies that choose among candidate answers: each row's candidates, their log-probs, the index chosen.
    options: list[list[list[int]]] = field(default_factory=list)
    option_log_probs: list[list[float]] = field(default_factory=list)
    choices: list[int] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    actions: list[str | None] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    generated_tokens: int = 0
    #: Rows whose reply was cut at ``max_new_tokens`` (no eos, no stop string): an unclosed tag, most often.
    cut_replies: int = 0
    generate_seconds: float = 0.0
    seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def tokens(self) -> TokenBatch:
        return TokenBatch(self.prompt_ids, self.response_ids)

    @property
    def choice_batch(self) -> ChoiceBatch:
        """The rows as choices among their candidate answers (rollouts of a ``choose_admissible`` policy)."""
        if any(not options for options in self.options) or len(self.options) != len(self):
            raise ValueError("these rows carry no candidate answers: the policy did not choose among admissible actions")
        return ChoiceBatch(self.prompt_ids, self.response_ids, self.options, self.choices)

    def to_step_batch(self):
        """The rows as the advantage estimators' ``StepBatch`` (token data in ``extras``).

        Anchors that are all env digests (16 hex digits) go in as uint64, which GiGPO
        groups several times faster than strings; any other anchor keeps them all str.
        """
        from gigpo_gym.algos.estimators.batch import StepBatch, hex_digest_codes

        codes = hex_digest_codes(self.anchors)
        return StepBatch(
            group_ids=np.asarray(self.group_ids, dtype=np.int64),
            traj_ids=np.asarray(self.traj_ids, dtype=np.int64),
            step_ids=np.asarray(self.step_ids, dtype=np.int64),
            rewards=np.asarray(self.rewards, dtype=np.float64),
            penalties=np.asarray(self.penalties, dtype=np.float64),
            anchors=np.asarray(self.anchors, dtype=object) if codes is None else codes,
            anchor_texts=np.asarray(self.anchor_texts, dtype=object),
            extras={"action_valid": np.asarray(self.action_valid, dtype=bool)},
        )

    def without_tokens(self) -> "Rollout":
        """The same rows without their token ids, log-probs and texts (what other processes need to see)."""
        import dataclasses

        return dataclasses.replace(self, **{name: [] for name in self.TOKEN_COLUMNS + self.TEXT_COLUMNS})

    @classmethod
    def merge(cls, parts: Sequence["Rollout"]) -> tuple["Rollout", np.ndarray]:
        """The rollouts of several processes (token-less) as one process would have collected them.

        Rows go in one process's order (step, then trajectory id), episodes by trajectory
        id; the clock figures are the slowest part's (they ran side by side).  Also returns,
        for each merged row, its index in the parts' rows laid end to end.
        """
        steps = np.concatenate([np.asarray(p.step_ids, dtype=np.int64) for p in parts])
        trajs = np.concatenate([np.asarray(p.traj_ids, dtype=np.int64) for p in parts])
        source = np.lexsort((trajs, steps))
        out = cls()
        for name in cls.ROW_COLUMNS:
            column = [v for p in parts for v in getattr(p, name)]
            setattr(out, name, [column[i] for i in source])
        out.episodes = sorted((e for p in parts for e in p.episodes), key=lambda e: e.traj_id)
        out.generated_tokens = sum(p.generated_tokens for p in parts)
        out.cut_replies = sum(p.cut_replies for p in parts)
        out.generate_seconds = max(p.generate_seconds for p in parts)
        out.seconds = max(p.seconds for p in parts)
        return out, source

    def success_by_task_type(self) -> dict[str, float]:
        """Share of won episodes per task type (and ``"all"``)."""
        out: dict[str, list[bool]] = {}
        for ep in self.episodes:
            out.setdefault(ep.task_type, []).append(ep.won)
        result = {k: float(np.mean(v)) for k, v in sorted(out.items())}
        result["all"] = float(np.mean([ep.won for ep in self.episodes])) if self.episodes else 0.0
        return result


def info_at(infos: dict[str, Any], key: str, index: int, default: Any = None) -> Any:
    """Env ``index``'s value of ``key`` in gymnasium's vector info format."""
    if key not in infos:
        return default
    present = infos.get(f"_{key}")
    if present is not None and not bool(present[index]):
        return default
    value = infos[key][index]
    return value.item() if isinstance(value, np.generic) else value


#: The context keys every row can have (any other key a policy asks for is read from the env's info).
CONTEXT_KEYS = ("admissible_actions", "expert_action", "observation", "task", "episode", "last_ids")


def step_contexts(wanted: Sequence[str], envs: Any, infos: dict[str, Any], rows: Sequence[int], tasks: Sequence[str],
                  expert_kwargs: dict[str, Any] | None = None,
                  last_ids: Sequence[list[int]] | None = None) -> list[dict[str, Any]]:
    """What a policy receives with each prompt (``Policy.needs_context``): one dict per row in ``rows``.

    ``admissible_actions``, ``observation`` (the env's own, before the prompt), ``task`` (the
    episode's first observation), ``episode`` (the env's index in the round),
    ``expert_action`` (``env.expert_action(**expert_kwargs)``, asked only when wanted),
    ``last_ids`` (env ``i``'s previous generation's prompt and response ids, ``last_ids[i]``;
    [] without) and any other wanted key read from the env's info (e.g. WebShop's
    ``instruction``, the ``tools`` template's ``messages`` and ``tools``).
    """
    experts = envs.call("expert_action", **dict(expert_kwargs or {})) if "expert_action" in wanted else None
    extra = sorted(set(wanted) - set(CONTEXT_KEYS))
    return [{"admissible_actions": list(info_at(infos, "admissible_actions", i, []) or []),
             "expert_action": experts[i] if experts is not None else None,
             "observation": str(info_at(infos, "observation", i, "")), "task": tasks[i], "episode": i,
             "last_ids": list(last_ids[i]) if last_ids is not None else [],
             **{k: info_at(infos, k, i) for k in extra}} for i in rows]


def collect(
    policy: Policy,
    envs: Any,
    sampling: SamplingParams,
    *,
    seed: int,
    shaping: RewardShaping = RewardShaping(),
    options: dict[str, Any] | None = None,
    call_keys: Sequence[int] = (),
    expert_kwargs: dict[str, Any] | None = None,
    final_keys: Sequence[str] = (),
    rows: bool = True,
    on_episode_end: Callable[[Episode], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> Rollout:
    """Play one round of every env of ``envs`` (a ``make_grouped`` vector env) to the end; its rows and episodes.

    ``envs`` resets with ``seed`` and ``options`` (``{"env_options": [...]}``: each env's own
    reset options, e.g. a task id).  Step ``t``'s generate call samples with
    ``sampling.for_call(*call_keys, t)``.  ``expert_kwargs`` go to the env's
    ``expert_action`` when the policy asks for it.  ``final_keys`` are info keys whose last
    numeric value each episode keeps (``Episode.final``).  ``rows=False`` keeps the
    episodes only.  An env whose reset info says ``skipped`` is not played and gets no
    episode.  ``on_episode_end`` sees each episode once it is final.
    """
    policy = as_policy(policy)
    start = time.perf_counter()
    obs, infos = envs.reset(seed=seed, options=options)
    n = len(obs)
    out = Rollout()
    for i in range(n):
        out.episodes.append(Episode(
            group_id=int(info_at(infos, "group_id", i, i)), traj_id=int(info_at(infos, "traj_id", i, i)),
            task_id=str(info_at(infos, "task_id", i, "")), task_type=str(info_at(infos, "task_type", i, "")), index=i,
        ))
    tasks = [str(info_at(infos, "observation", i, obs[i])) for i in range(n)]
    skipped = {i for i in range(n) if info_at(infos, "skipped", i, False)}
    active = np.array([i not in skipped for i in range(n)], dtype=bool)
    visited = [{str(info_at(infos, "anchor", i, ""))} for i in range(n)]  # states each episode has been in
    last_ids: list[list[int]] = [[] for _ in range(n)]  # each episode's previous prompt + reply tokens

    def end(i: int, status: str, error: str | None = None) -> None:
        ep = out.episodes[i]
        ep.status, ep.error = status, error
        active[i] = False
        for key in final_keys:
            ep.final.setdefault(key, 0.0)
        if status == "crashed":  # a crash is a failure, whatever happened before
            ep.won = False
            ep.final = {k: 0.0 for k in ep.final}
        if on_episode_end is not None:
            on_episode_end(ep)

    for i in np.flatnonzero(active):
        if info_at(infos, "crashed", i):
            end(int(i), "crashed", str(info_at(infos, "crashed", i)))
    step = 0
    while active.any():
        playing = [int(i) for i in np.flatnonzero(active)]
        prompts = [obs[i] for i in playing]
        wanted = policy.needs_context
        t0 = time.perf_counter()
        step_sampling = sampling.for_call(*call_keys, step)
        gens: Sequence[Generation] = (
            policy.generate(prompts, step_sampling) if not wanted
            else policy.generate(prompts, step_sampling,
                                 step_contexts(wanted, envs, infos, playing, tasks, expert_kwargs, last_ids))
        )
        out.generate_seconds += time.perf_counter() - t0
        actions = [""] * n
        for i, g in zip(playing, gens):
            out.episodes[i].add_usage(g)
            if "last_ids" in wanted:
                last_ids[i] = list(g.prompt_ids) + list(g.response_ids)
            if g.error:  # a served model's request that failed for good, or a policy exception (leaderboard)
                end(i, g.error_status, f"policy: {g.error}")
            else:
                actions[i] = g.text
        stepped = [(i, g) for i, g in zip(playing, gens) if active[i]]
        next_obs, rewards, terminated, truncated, next_infos = envs.step(actions)
        for i, g in stepped:
            ep = out.episodes[i]
            valid = bool(info_at(next_infos, "action_valid", i, True))
            won = bool(info_at(next_infos, "won", i, False))
            reached = str(info_at(next_infos, "anchor", i, ""))
            revisit = not won and bool(reached) and reached in visited[i]
            visited[i].add(reached)
            reward = shaping(float(rewards[i]), won, valid, revisit)
            if rows:
                out.group_ids.append(ep.group_id)
                out.traj_ids.append(ep.traj_id)
                out.step_ids.append(step)
                out.rewards.append(reward)
                out.penalties.append(shaping.penalty(valid, revisit))
                out.anchors.append(str(info_at(infos, "anchor", i, "")))
                out.anchor_texts.append(str(info_at(infos, "anchor_text", i, "")))
                out.action_valid.append(valid)
                out.env_rewards.append(float(rewards[i]))
                out.prompt_ids.append(list(g.prompt_ids))
                out.response_ids.append(list(g.response_ids))
                out.old_log_probs.append(list(g.log_probs))
                out.options.append(g.options or [])
                out.option_log_probs.append(g.option_log_probs or [])
                out.choices.append(g.choice)
                out.prompts.append(obs[i])
                out.replies.append(g.text)
                out.actions.append(info_at(next_infos, "parsed_action", i))
            out.generated_tokens += len(g.response_ids)
            out.cut_replies += int(not g.finished)
            ep.length += 1
            ep.reward += reward
            ep.env_return += float(rewards[i])
            ep.invalid_steps += int(not valid)
            ep.cut_replies += int(not g.finished)
            ep.won = ep.won or won
            ep.truncated = bool(truncated[i]) and not bool(terminated[i])
            for key in final_keys:
                value = info_at(next_infos, key, i)
                if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                    ep.final[key] = float(value)
            crashed = info_at(next_infos, "crashed", i)
            if not crashed and info_at(next_infos, "worker_failed", i):
                crashed = "the worker process holding this env died"
            if crashed:
                end(i, "crashed", str(crashed))
            elif terminated[i] or truncated[i]:
                end(i, "terminated" if terminated[i] else "truncated")
        obs, infos = next_obs, next_infos
        step += 1
        if on_step is not None:
            on_step(int(active.sum()))
    if skipped:
        out.episodes = [ep for ep in out.episodes if ep.index not in skipped]
    out.seconds = time.perf_counter() - start
    return out
