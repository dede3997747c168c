"""Policies over concrete admissible actions: templated ones (WebShop's ``search[<query>]``) filled first.

A templated admissible action is no command a policy can pick as it is; filled with the
task's ``instruction`` (``wrappers.sb3.concrete_actions``, as the SB3 adapter fills it)
it is one.  ``RandomConcretePolicy`` is the random baseline that can reach a product at
all (``--policy random-search``); ``ConcreteChoice`` lets an HF policy that chooses among
the admissible actions (``--choose-admissible``) choose among these.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams
from gigpo_gym.wrappers.sb3 import concrete_actions


def concrete_options(prompts: Sequence[str], contexts: Sequence[dict[str, Any]] | None, who: str) -> list[list[str]]:
    """Each row's admissible actions with ``<query>`` filled by its ``instruction`` (if any)."""
    if contexts is None or len(contexts) != len(prompts):
        raise ValueError(f"{who} needs one context (admissible_actions, instruction) per prompt")
    return [concrete_actions(c.get("admissible_actions") or [], c.get("instruction")) for c in contexts]


class RandomConcretePolicy(Policy):
    """Random admissible action, with templated ones (WebShop's ``search[<query>]``) filled
    with the task's instruction: a random baseline that can reach a product at all."""

    needs_context = ("admissible_actions", "instruction")

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        out = []
        for options in concrete_options(prompts, contexts, "RandomConcretePolicy"):
            action = options[int(self._rng.integers(len(options)))] if options else ""
            out.append(Generation(text=f"<action>{action}</action>", prompt_ids=[], response_ids=[], log_probs=[]))
        return out


class ConcreteChoice(Policy):
    """An HF policy choosing among the admissible actions, templated ones filled first.

    ``policy`` is built to choose (``HFPolicy(choose_admissible=True)``); this wrapper
    fills WebShop's ``search[<query>]`` with the instruction (as ``random-search`` does),
    so every candidate is one concrete command; ALFWorld's actions pass unchanged.
    """

    needs_context = ("admissible_actions", "instruction")

    def __init__(self, policy: Any):
        if not policy.choose_admissible:
            raise ValueError("ConcreteChoice needs a policy built with choose_admissible=True")
        self.policy = policy

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        options = concrete_options(prompts, contexts, "admissible choice")
        return self.policy.generate(prompts, sampling, [{**c, "admissible_actions": o} for c, o in zip(contexts, options)])

    def close(self) -> None:
        self.policy.close()
