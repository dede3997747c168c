"""Every env id of the suite in ``skyrl_gym`` (extra ``[skyrl]``).

Importing this module registers each id with ``skyrl_gym`` under the same name::

    import gigpo_gym.integrations.skyrl
    env = skyrl_gym.make("gigpo_gym/SearchQA-v0", env_config={"split": "test"}, extras={"seed": 3})
    conversation, info = env.init([{"role": "user", "content": "Answer the question."}])
    out = env.step("<search>Voltiak</search>")   # a BaseTextEnvStepOutput

``env_config`` holds ``gym.make`` keywords (and ``anchor_mode``); ``extras`` names the
task: ``{"seed": s}`` or ``{"task_id": ...}``.  The model's whole reply is the action,
read as the env reads it (an ``<action>`` tag is taken out where the env has no tags of
its own).  The anchor, validity and truncation go in ``metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gigpo_gym.integrations import require

SKYRL_GYM_VERSION = require("skyrl-gym")

import gymnasium as gym  # noqa: E402
import skyrl_gym  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

from gigpo_gym.registration import ENV_SPECS  # noqa: E402
from gigpo_gym.wrappers import ANCHOR_MODES, ActionParser, AnchorKey  # noqa: E402


class SuiteTextEnv(BaseTextEnv):
    """One env of the suite as a ``skyrl_gym`` text env (``init(prompt)``, ``step(reply)``)."""

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None, *,
                 env_id: str):
        super().__init__()
        config = dict(env_config or {})
        anchor_mode = config.pop("anchor_mode", "state")
        if anchor_mode not in ANCHOR_MODES:
            raise ValueError(f"anchor_mode must be one of {ANCHOR_MODES}, got {anchor_mode!r}")
        extras = dict(extras or {})
        unknown = sorted(set(extras) - {"seed", "task_id"})
        if unknown or not ({"seed", "task_id"} & set(extras)):
            raise ValueError(f"{env_id} needs extras with 'seed' or 'task_id' (the task to play), got {sorted(extras)}")
        self.env_id, self.extras = env_id, extras
        self._env = ActionParser(AnchorKey(gym.make(env_id, **config), mode=anchor_mode), require_tags=False)
        self.max_turns = self._env.spec.max_episode_steps if self._env.spec else None
        self._done, self._info, self._return, self._invalid = True, {}, 0.0, 0

    def init(self, prompt: list[dict[str, str]] | None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset to the extras' task; the first observation ends the last user message (or is one)."""
        task_id = self.extras.get("task_id")
        seed = self.extras.get("seed")
        obs, info = self._env.reset(seed=None if seed is None else int(seed),
                                    options=None if task_id is None else {"task_id": str(task_id)})
        self._done, self._info, self._return, self._invalid, self.turns = False, info, 0.0, 0, 0
        conversation = [dict(message) for message in (prompt or [])]
        if conversation and conversation[-1].get("role") == "user":
            conversation[-1]["content"] = f"{conversation[-1]['content']}\n\n{obs}"
        else:
            conversation.append({"role": "user", "content": obs})
        return conversation, self._metadata(info, truncated=False)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self._done:
            raise RuntimeError(f"{self.env_id}: the episode is over; make a new env (or init again) to play another")
        obs, reward, terminated, truncated, info = self._env.step(action)
        self.turns += 1
        self._done, self._info = bool(terminated or truncated), info
        self._return += float(reward)
        self._invalid += not info["action_valid"]
        observations = [] if self._done and not obs.strip() else [{"role": "user", "content": obs}]
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=self._done,
                                     metadata=self._metadata(info, truncated=truncated and not terminated),
                                     postprocessed_action=info.get("parsed_action"))

    def get_metrics(self) -> dict[str, Any]:
        return {"won": float(bool(self._info.get("won"))), "turns": self.turns, "return": self._return,
                "invalid_turns": self._invalid}

    def close(self) -> None:
        self._env.close()

    @staticmethod
    def _metadata(info: dict[str, Any], truncated: bool) -> dict[str, Any]:
        return {"anchor": info["anchor"], "state_anchor": info["state_anchor"], "action_valid": info["action_valid"],
                "won": info["won"], "truncated": truncated, "task_id": info["task_id"], "task_type": info["task_type"],
                "admissible_actions": list(info["admissible_actions"])}


def register_all() -> list[str]:
    """Register every id of the suite with ``skyrl_gym`` (idempotent); the ids registered."""
    for spec in ENV_SPECS:
        if spec.id not in skyrl_gym.registry:
            skyrl_gym.register(id=spec.id, entry_point=f"{__name__}:SuiteTextEnv", kwargs={"env_id": spec.id})
    return [spec.id for spec in ENV_SPECS]


register_all()
