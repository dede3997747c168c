"""Supervised warm start from expert demonstrations.

A model trained from scratch (the tiny one) cannot find a single success by chance
in a 50-step task, and a pretrained one does not yet keep to the env's answer format,
so RL needs a starting point: the env's expert plays episodes through the same
prompt stack and episode player as the rollout (same prompts, chat template applied by
the policy), and the policy is trained with cross-entropy on the expert's reply + end-of-sequence.
The reply is what a policy should write: ``<action>expert command</action>``, or the
expert's own text where the env reads tags of its own (SearchQA's
``<search>query</search>`` / ``<answer>text</answer>``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from gigpo_gym.algos.policies.base import SamplingParams, TokenBatch
from gigpo_gym.algos.training.config import scheduled_lr


def expert_demonstrations(
    env_id: str,
    episodes: int,
    *,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    wrapper: Callable[[gym.Env], gym.Env] | None = None,
    expert_kwargs: dict[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """(prompt, response) pairs of the expert's steps on ``episodes`` tasks (won episodes only), episode by episode.

    The expert (``ExpertPolicy``) plays through the episode player, as any policy does:
    episode ``k`` is the task of reset seed ``derive_seed(seed, k)``, seen through
    ``wrapper`` (the run's prompt stack).  ``expert_kwargs`` go to the env's
    ``expert_action`` (e.g. ALFWorld's ``style``).
    """
    from gymnasium.envs.registration import load_env_creator

    import gigpo_gym
    from gigpo_gym.algos.policies.reference import ExpertPolicy
    from gigpo_gym.algos.training.rollout import collect

    entry = gym.spec(env_id).entry_point
    if not hasattr(entry if callable(entry) else load_env_creator(entry), "expert_action"):
        raise ValueError(f"{env_id} has no expert (its env lacks expert_action()); set sft.steps: 0")
    if episodes < 1:
        return []
    envs = gigpo_gym.make_grouped(env_id, episodes, 1, seed=seed, env_kwargs=dict(env_kwargs or {}),
                                  wrappers=(wrapper,) if wrapper is not None else ())
    try:
        rollout = collect(ExpertPolicy(), envs, SamplingParams(max_new_tokens=1, temperature=0.0), seed=seed,
                          expert_kwargs=expert_kwargs)
    finally:
        envs.close()
    won = {ep.traj_id for ep in rollout.episodes if ep.won}
    order = sorted((t, step, row) for row, (t, step) in enumerate(zip(rollout.traj_ids, rollout.step_ids)) if t in won)
    return [(rollout.prompts[row], rollout.replies[row]) for _, _, row in order]


def oversample(demos: list[tuple[str, str]], copies: dict[str, int]) -> list[tuple[str, str]]:
    """Repeat the steps whose command starts with a listed verb (``{"take": 4}``: 4 copies each).

    Expert episodes are mostly moves between places; the steps that decide a task
    (take the object, put it, heat it) are rare, and a small model imitating the
    plain mix learns the moves long before them.  A reply in an env's own tags has
    the tag's name as its verb (``{"answer": 2}``).
    """
    if not copies:
        return list(demos)
    bad = {verb: n for verb, n in copies.items() if not isinstance(n, int) or n < 1}
    if bad:
        raise ValueError(f"oversample counts must be ints >= 1, got {bad}")
    out = []
    for prompt, response in demos:
        command = response.removeprefix("<action>").strip()
        own_tag = re.match(r"<(\w+)>", command)  # an env's own tag: <answer>x</answer> has the verb "answer"
        verb = own_tag.group(1) if own_tag else command.split(" ", 1)[0]
        out.extend([(prompt, response)] * copies.get(verb, 1))
    return out


def sft_train(
    policy: Any,
    demos: list[tuple[str, str]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    lr_schedule: str = "constant",
    seed: int = 0,
    on_step: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Minimise the token-mean negative log-likelihood of the demo responses; returns the losses.

    ``on_step(step, loss, lr)`` is called after each update.

    ``lr_schedule`` "linear" or "cosine" decays the rate towards 0 over the steps: at a
    constant rate the weights end wherever the last noisy steps left them.
    """
    if not demos:
        raise ValueError("no expert demonstrations to train on (did every expert episode fail?)")
    tok = policy.tokenizer
    eos = tok.eos_token_id
    prompt_ids = [policy.encode_prompt(p) for p, _ in demos]
    prefix = getattr(policy, "response_prefix", "")
    answers = [r[len(prefix):] if prefix and r.startswith(prefix) else r for _, r in demos]  # the prefix is prompt
    response_ids = [list(tok(r, add_special_tokens=False)["input_ids"]) + [eos] for r in answers]
    rng = np.random.default_rng(seed)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    policy.train()
    losses = []
    order = rng.permutation(len(demos))
    cursor = 0
    for step in range(steps):
        if cursor + batch_size > len(order):
            order, cursor = rng.permutation(len(demos)), 0
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(lr, lr_schedule, step + 1, steps)
        index = order[cursor : cursor + batch_size]
        cursor += batch_size
        scores = policy.log_probs(TokenBatch([prompt_ids[i] for i in index], [response_ids[i] for i in index]))
        loss = -(scores.log_probs * scores.mask).sum() / scores.mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1], optimizer.param_groups[0]["lr"])
    return losses
