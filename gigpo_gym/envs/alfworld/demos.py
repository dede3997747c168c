"""Expert demonstrations as JSONL (the ``gigpo-gym alfworld demos`` command is in ``cli.py``).

One row per step, prompt-free: ``task_id``, ``task_type``, ``step``, ``obs`` (the
observation the action answers), ``admissible_actions``, ``action``, ``reward``,
``done``, ``won``.  Rows are written to a temporary file and moved into place, so
an interrupted export leaves no half file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from gigpo_gym.core.data import replacing
from gigpo_gym.envs.alfworld.env import ALFWorldEnv

MAX_STEPS = 50


def expert_episode(env: ALFWorldEnv, index: int, max_steps: int = MAX_STEPS) -> Iterator[dict[str, Any]]:
    """Play the expert on task ``index`` of ``env``; yield one row per step."""
    obs, info = env.reset(seed=index)
    for step in range(max_steps):
        action = env.expert_action()
        row = {
            "task_id": info["task_id"],
            "task_type": info["task_type"],
            "step": step,
            "obs": obs,
            "admissible_actions": info["admissible_actions"],
            "action": action,
        }
        obs, reward, terminated, _, info = env.step(action)
        row.update(reward=reward, done=terminated or step == max_steps - 1, won=info["won"])
        yield row
        if terminated:
            return


def export_expert_demos(
    path: str | os.PathLike,
    split: str = "train",
    n: int | None = None,
    seed: int = 0,
    *,
    task_types: Any = None,
    data_dir: str | None = None,
    progress: bool = False,
) -> int:
    """Write the expert's trajectories on the first ``n`` tasks of ``split``; returns the row count."""
    env = ALFWorldEnv(split=split, data_dir=data_dir, task_types=task_types, seed=seed)
    n = env.num_tasks if n is None else int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    indices = range(min(n, env.num_tasks))
    if progress:
        from tqdm import tqdm

        indices = tqdm(indices, desc=f"alfworld {env.split} demos", unit="task")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for index in indices:
            for row in expert_episode(env, index):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                rows += 1
    return rows
