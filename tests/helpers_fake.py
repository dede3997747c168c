"""A scripted fake text env for the algorithm tests (fast, no data files).

``Corridor``: rooms 0..L (L from the seed, 2-4); the agent starts in room 0 and wins
by walking east past room L ("go east" from room L).  "go west", "wait" are
admissible distractors; anything else is invalid.  The anchor is the room, scoped
by the task.  ``expert_action`` always says "go east".
"""

from __future__ import annotations

import gymnasium as gym

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.env import TextEnv

CORRIDOR_ID = "gigpo_gym_test/Corridor-v0"
ACTIONS = ("go east", "go west", "wait")


class Corridor(TextEnv):
    metadata = {"render_modes": ["ansi"], "prompt_intro": "Walk to the exit.", "action_format": "Reply <action>a</action>."}

    def __init__(self, split: str = "train", render_mode: str | None = None):
        super().__init__(render_mode)
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split = split
        self._length = 0
        self._room = 0
        self._task = ""

    def _reset(self, seed, options):
        self._length = 2 + seed % 3
        self._room = 0
        self._task = f"{self.split}-{self._length}"
        return self._observe(), self._info()

    def _step(self, action):
        valid = action in ACTIONS
        won = False
        if action == "go east":
            won = self._room == self._length
            self._room = min(self._room + 1, self._length)
        elif action == "go west":
            self._room = max(self._room - 1, 0)
        info = self._info()
        info["action_valid"] = valid
        info["won"] = won
        return ("You leave the corridor." if won else self._observe()), float(won), won, info

    def expert_action(self) -> str:
        return "go east"

    def _observe(self) -> str:
        return f"You are in room {self._room}. The exit is east of room {self._length}."

    def _info(self):
        return {
            "admissible_actions": list(ACTIONS),
            "anchor": digest([self._task, self._room]),
            "task_id": self._task,
            "task_type": f"len{self._length}",
        }


def register() -> str:
    if CORRIDOR_ID not in gym.registry:
        gym.register(CORRIDOR_ID, entry_point=Corridor, max_episode_steps=8)
    return CORRIDOR_ID


register()
