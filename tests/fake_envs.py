"""A scripted text env for testing the core without any benchmark engine."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from gigpo_gym.core import TextEnv, digest

TARGET = 3


class CounterEnv(TextEnv):
    """Count up to a per-task target: ``inc`` adds one, ``stop`` ends the episode.

    The task (start value) comes from the reset seed, so equal seeds give equal tasks.
    Winning means stopping exactly at ``TARGET``.
    """

    max_action_length = 64

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.start = int(options.get("task_id", seed % 3))
        self.value = self.start
        return self._observe(), self._info()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action == "inc":
            self.value += 1
            return self._observe(), 0.0, False, self._info()
        if action == "stop":
            won = self.value == TARGET
            return f"stopped at {self.value}", float(won), True, self._info(won=won)
        return "Nothing happens.", 0.0, False, self._info(action_valid=False)

    def _observe(self) -> str:
        return f"value {self.value}"

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {
            "admissible_actions": ["inc", "stop"],
            "anchor": digest([self.start, self.value]),
            "task_id": str(self.start),
            "task_type": "count",
            **extra,
        }


COUNTER_ID = "tests/Counter-v0"
if COUNTER_ID not in gym.registry:
    gym.register(COUNTER_ID, entry_point=CounterEnv, max_episode_steps=6)
#: The id to pass to ``gym.make``/``make_grouped``: importing this module registers it (also in workers).
COUNTER = f"fake_envs:{COUNTER_ID}"
