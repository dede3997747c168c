"""Where an env's tasks come from: the generator, or a downloaded ALFWorld data tree.

``GeneratedTasks`` builds task ``i`` on demand; ``GameFileTasks`` lists the
``json_2.1.1/<split>/.../trial_*/game.tw-pddl`` files with the reference env's skip
rules (no ``traj_data.json``, "movable" or "Sliced" in the path, a task type not
asked for, a missing game file, no ``solvable`` key or ``solvable: false``) and
loads each on first use.  Unlike the reference (``os.walk`` order, which depends on
the file system), the list is sorted, so task indices are the same on any machine.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from gigpo_gym.core.data import resolve_data_dir
from gigpo_gym.envs.alfworld import catalog
from gigpo_gym.envs.alfworld.generator import SPLIT_SIZES, canonical_split, generate_task
from gigpo_gym.envs.alfworld.pddl import load_game_file
from gigpo_gym.envs.alfworld.world import World

def normalize_task_types(task_types: object) -> tuple[str, ...]:
    """Short names (pick, look, clean, heat, cool, pick2), in a fixed order; full ALFWorld names accepted."""
    if task_types is None:
        return tuple(catalog.TASK_TYPES)
    if isinstance(task_types, str):
        task_types = [task_types]
    chosen = set()
    for t in task_types:  # type: ignore[union-attr]
        short = catalog.SHORT_TASK_TYPE.get(t, t)
        if short not in catalog.TASK_TYPES:
            names = list(catalog.TASK_TYPES) + list(catalog.SHORT_TASK_TYPE)
            close = difflib.get_close_matches(str(t), names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown task type {t!r}; expected some of {list(catalog.TASK_TYPES)}.{hint}")
        chosen.add(short)
    if not chosen:
        raise ValueError("task_types is empty; give at least one of " + str(list(catalog.TASK_TYPES)))
    return tuple(t for t in catalog.TASK_TYPES if t in chosen)


#: Worlds are immutable once built, so every env of a process shares them (the N
#: copies of a group, and groups that draw the same task, hold one world).
_generated = lru_cache(maxsize=2048)(generate_task)  # ~35 KiB each
_loaded = lru_cache(maxsize=512)(load_game_file)


class GeneratedTasks:
    """Task ``i`` of a generated split, built from ``derive_seed(seed, split, i)``."""

    def __init__(self, split: str, seed: int, task_types: tuple[str, ...], num_tasks: int | None = None):
        self.split, self.seed, self.task_types = canonical_split(split), int(seed), task_types
        self.size = SPLIT_SIZES[self.split] if num_tasks is None else int(num_tasks)
        if self.size < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")

    def __len__(self) -> int:
        return self.size

    def get(self, index: int) -> World:
        return _generated(self.seed, self.split, index, self.task_types)

    def index_of(self, task_id: str) -> int:
        """Index of ``<split>/<dir>/trial_<i>`` (a generated id) or ``<split>/<i>``."""
        m = re.fullmatch(r"(\w+)/(?:[^/]+/trial_)?(\d+)", task_id)
        if m and m.group(1) == self.split and int(m.group(2)) < self.size:
            index = int(m.group(2))
            if "/trial_" not in task_id or self.get(index).task_id == task_id:
                return index
        raise KeyError(
            f"unknown task_id {task_id!r} for split {self.split!r} ({self.size} tasks); ids look like "
            f"{self.get(0).task_id!r} or '{self.split}/<index>'"
        )


@lru_cache(maxsize=16)
def collect_game_files(root: str, split: str, task_types: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """(game file, task id, short task type) of every playable game of a split, sorted."""
    base = Path(root)
    if (base / "json_2.1.1").is_dir():
        base = base / "json_2.1.1"
    split_dir = base / split
    if not split_dir.is_dir():
        raise FileNotFoundError(
            f"{split_dir} does not exist; a data_dir holds json_2.1.1/{{train,valid_seen,valid_unseen}}"
        )
    wanted = {catalog.TASK_TYPES[t] for t in task_types}
    games = []
    for dirpath, dirnames, filenames in os.walk(split_dir):
        dirnames.sort()
        if "traj_data.json" not in filenames or "movable" in dirpath or "Sliced" in dirpath:
            continue
        traj_path = Path(dirpath) / "traj_data.json"
        try:
            traj = json.loads(traj_path.read_text(encoding="utf-8"))
            task_type = traj["task_type"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{traj_path}: cannot read field 'task_type' ({e})") from e
        if task_type not in wanted:
            continue
        game = Path(dirpath) / "game.tw-pddl"
        if not game.is_file():
            continue
        try:
            solvable = json.loads(game.read_text(encoding="utf-8")).get("solvable")
        except ValueError as e:
            raise ValueError(f"{game}: not valid JSON ({e})") from e
        if not solvable:
            continue
        task_id = Path(dirpath).relative_to(base).as_posix()
        games.append((str(game), task_id, catalog.SHORT_TASK_TYPE[task_type]))
    return tuple(sorted(games, key=lambda g: g[1]))


class GameFileTasks:
    """The playable games of one split of a downloaded ALFWorld data directory."""

    def __init__(self, root: Path, split: str, task_types: tuple[str, ...], num_tasks: int | None = None):
        self.split = canonical_split(split)
        self.games = collect_game_files(str(root), self.split, task_types)
        if num_tasks is not None:
            self.games = self.games[: int(num_tasks)]
        if not self.games:
            raise FileNotFoundError(
                f"no playable games of types {list(task_types)} under {root} (split {self.split!r})"
            )
        self._ids = {task_id: i for i, (_, task_id, _) in enumerate(self.games)}

    def __len__(self) -> int:
        return len(self.games)

    def get(self, index: int) -> World:
        path, task_id, task_type = self.games[index]
        return _loaded(path, task_id=task_id, task_type=task_type)

    def index_of(self, task_id: str) -> int:
        if task_id in self._ids:
            return self._ids[task_id]
        close = difflib.get_close_matches(task_id, list(self._ids), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"unknown task_id {task_id!r} in split {self.split!r}.{hint}")


def open_tasks(split: str, data_dir: str | None, task_types: object, seed: int, num_tasks: int | None) -> GeneratedTasks | GameFileTasks:
    """The task list both ALFWorld backends play: game files from ``data_dir`` /
    ``$ALFWORLD_DATA`` when given, else generated households."""
    if num_tasks is not None and (not isinstance(num_tasks, int) or num_tasks < 1):
        raise ValueError(f"num_tasks must be a positive int or None, got {num_tasks!r}")
    types = normalize_task_types(task_types)
    root = resolve_data_dir(data_dir, "ALFWORLD_DATA")
    if root is None:
        return GeneratedTasks(split, int(seed), types, num_tasks)
    return GameFileTasks(root, split, types, num_tasks)
