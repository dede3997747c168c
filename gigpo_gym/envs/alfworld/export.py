"""Write tasks as a real ALFWorld data tree, so the original ALFWorld code can play them.

``export_split(out, split, n)`` writes ``out/json_2.1.1/<split>/<task-dir>/trial_*/``
with two files per task, as ``alfworld-download`` lays the real data out:

* ``game.tw-pddl``: the PDDL problem (ALFRED's mangled names), ALFWorld's own
  domain and grammar from the installed ``alfworld`` package with the goal
  sentence in place of "UNKNOWN GOAL", ``solvable: true`` and the native
  expert's plan as ``walkthrough``;
* ``traj_data.json``: the fields ALFWorld's text env and hand-coded expert read
  (``task_type``, ``pddl_params``) plus the goal sentence as the one annotation.

``ALFWORLD_DATA=out`` then serves both ``gigpo_gym/ALFWorld-v0`` (``data_dir``) and
ALFWorld's ``AlfredTWEnv`` (``$ALFWORLD_DATA/json_2.1.1/train``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from gigpo_gym.envs.alfworld.engine import Engine
from gigpo_gym.envs.alfworld.expert import expert_plan
from gigpo_gym.core.data import write_atomically
from gigpo_gym.envs.alfworld.gamefile_writer import alfworld_logic_files, write_game_file
from gigpo_gym.envs.alfworld.tasks import GeneratedTasks, normalize_task_types
from gigpo_gym.envs.alfworld.world import World

#: Bump when the files written change (the TextWorld backend caches exports by it).
EXPORT_VERSION = 1
DATA_FOLDER = "json_2.1.1"


def traj_data(world: World) -> dict[str, Any]:
    """The minimal ``traj_data.json`` of a task: what ALFWorld's text env and expert read."""
    target = world.target
    task_dir = world.task_id.split("/")[-2] if world.task_id.count("/") >= 2 else world.task_id
    scene = task_dir.rsplit("-", 1)[-1]
    data: dict[str, Any] = {
        "task_id": world.task_id.rsplit("/", 1)[-1],
        "task_type": _full_task_type(world.task_type),
        "pddl_params": {
            "object_target": target["otype"] or "",
            "parent_target": target["rtype"] or "",
            "toggle_target": target["toggle"] or "",
            "mrecep_target": "",
            "object_sliced": False,
        },
        "turk_annotations": {"anns": [{"task_desc": world.goal_text}]},
    }
    if scene.isdigit():
        data["scene"] = {"scene_num": int(scene)}
    return data


def _full_task_type(short: str) -> str:
    from gigpo_gym.envs.alfworld.catalog import TASK_TYPES

    return TASK_TYPES.get(short, short)


def export_task(world: World, root: str | os.PathLike, logic: tuple[str, str] | None = None) -> Path:
    """Write one task under ``root/<task_id>/``; returns the ``game.tw-pddl`` path.

    ``logic`` is ALFWorld's (domain, grammar); by default read from the installed
    ``alfworld`` package (the ``[alfworld]`` extra).
    """
    domain, grammar = logic if logic is not None else alfworld_logic_files()
    folder = Path(root) / world.task_id
    plan = expert_plan(Engine(world))
    game = write_game_file(world, folder / "game.tw-pddl", domain, grammar, walkthrough=plan)
    write_atomically(folder / "traj_data.json", json.dumps(traj_data(world), indent=1))
    return game


def export_split(
    out: str | os.PathLike,
    split: str = "train",
    n: int | None = None,
    seed: int = 0,
    *,
    task_types: Any = None,
    progress: bool = False,
) -> list[Path]:
    """Write the first ``n`` generated tasks of ``split`` under ``out/json_2.1.1``; returns the game files."""
    tasks = GeneratedTasks(split, seed, normalize_task_types(task_types))
    n = len(tasks) if n is None else int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    logic = alfworld_logic_files()
    indices: Iterable[int] = range(min(n, len(tasks)))
    if progress:
        from tqdm import tqdm

        indices = tqdm(indices, desc=f"alfworld export {tasks.split}", unit="task")
    root = Path(out) / DATA_FOLDER
    return [export_task(tasks.get(i), root, logic) for i in indices]
