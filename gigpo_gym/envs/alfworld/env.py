"""``gigpo_gym/ALFWorld-v0``: household tasks in ALFWorld's text language.

Description
    The agent is told a household goal ("put a clean mug in coffeemachine") and acts
    with ALFWorld's commands (go to, open, close, take X from Y, move X to Y,
    examine, use, heat/clean/cool X with Y, slice X with Y, inventory, look, help).
    A native engine speaks exactly ALFWorld's grammar; six task types: pick, look,
    clean, heat, cool, pick2.
Observation
    The text ALFWorld shows: after ``reset`` the full intro, starting with the
    ``-= Welcome to TextWorld, ALFRED! =-`` banner, then the room and
    ``Your task is to: ...`` (as TextWorld returns it; the GiGPO reference keeps it);
    after a step the command's feedback.
Actions
    A command string; the admissible ones are in ``info["admissible_actions"]``
    (sorted, as TextWorld sorts them, ``help`` included).  Anything else answers
    ``Nothing happens.`` with ``action_valid=False``; a non-``str`` raises
    ``TypeError`` and more than 1,024 characters ``ValueError``.
Rewards
    1.0 on the step that completes the goal, else 0.0.
Termination
    ``terminated`` when the goal holds; ``truncated`` after 50 steps (registry).
Registered ids and kwargs
    ``gigpo_gym/ALFWorld-v0``: ``split`` ("train", "valid_seen", "valid_unseen";
    aliases "eval_in_distribution", "eval_out_of_distribution"), ``data_dir`` (a
    downloaded ALFWorld data folder with ``json_2.1.1``; default ``$ALFWORLD_DATA``,
    else generated tasks), ``task_types`` (subset of the six), ``seed`` (generator
    seed), ``num_tasks`` (split size override).
Info
    The contract keys plus ``gamefile``, ``goal``, ``anchor_text`` (the raw
    observation).  ``anchor`` digests the full world state and the goal.
Data
    Generated households (``generator.py``) need no files; real game files are read
    by ``pddl.py`` with the reference env's skip rules (``tasks.py``).
"""

from __future__ import annotations

from typing import Any

from gigpo_gym.core.env import TextEnv
from gigpo_gym.envs.alfworld.engine import Engine
from gigpo_gym.envs.alfworld.expert import expert_action, search_expert_action
from gigpo_gym.envs.alfworld.prompts import METADATA as PROMPTS
from gigpo_gym.envs.alfworld.tasks import GameFileTasks, GeneratedTasks, open_tasks


class ALFWorldEnv(TextEnv):
    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4, **PROMPTS}
    max_action_length = 1024

    def __init__(
        self,
        split: str = "train",
        data_dir: str | None = None,
        task_types: Any = None,
        seed: int = 0,
        num_tasks: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        self.tasks: GeneratedTasks | GameFileTasks = open_tasks(split, data_dir, task_types, seed, num_tasks)
        self.split = self.tasks.split
        self.engine: Engine | None = None

    def _info(self, obs: str, valid: bool) -> dict[str, Any]:
        engine = self.engine
        world = engine.world
        return {
            "admissible_actions": list(engine.admissible_commands()),
            "anchor": engine.anchor(),
            "action_valid": valid,
            "won": engine.won,
            "task_id": world.task_id,
            "task_type": world.task_type,
            "gamefile": world.gamefile,
            "goal": world.goal_text,
            "anchor_text": obs,
        }

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task_id" in options:
            index = self.tasks.index_of(str(options["task_id"]))
        else:
            index = seed % len(self.tasks)
        self.engine = Engine(self.tasks.get(index))
        obs = self.engine.reset()
        return obs, self._info(obs, True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self.engine is not None  # the base class checks reset() came first
        obs, valid = self.engine.step(action)
        won = self.engine.won
        return obs, 1.0 if won else 0.0, won, self._info(obs, valid)

    def expert_action(self, style: str = "plan") -> str:
        """The next expert command: ``"plan"`` knows where everything is, ``"search"`` looks first.

        ``"search"`` sweeps the receptacles in the order the room lists them until the
        object is in view (``expert.search_expert_action``): the demonstrator to imitate.
        """
        if self.engine is None:
            raise RuntimeError("call reset() before expert_action()")
        if style not in ("plan", "search"):
            raise ValueError(f"expert style must be 'plan' or 'search', got {style!r}")
        return (search_expert_action if style == "search" else expert_action)(self.engine)

    @property
    def num_tasks(self) -> int:
        """How many tasks the split holds (``reset(seed=s)`` plays task ``s % num_tasks``)."""
        return len(self.tasks)
