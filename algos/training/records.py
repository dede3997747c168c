"""What a run records of each iteration for ``gigpo-gym inspect``: a few task groups, whole, step by step.

One gzipped JSON file per iteration, ``records/iter-NNNNNN.json.gz`` in the run folder
(a TRL output folder too), holding

- ``batch``: statistics of the whole batch (every row, every process): how many rows
  sit in step groups of two or more, the mean step-group size, the share of those
  groups whose rows differ in outcome, mean |A^E|, |A^S| and |A|, the share of steps
  taken in a state their own episode was in before, the number of step groups of each
  size (``size_counts``), success per task type;
- ``groups``: the sampled task groups, each with all its episodes, each episode with
  all its steps: the observation and the reply (indices into ``texts``), the parsed
  action and its validity, the env's reward and the trained reward, the anchor key,
  its step group and that group's size in the whole batch, the return-to-go, the
  episode advantage A^E, the step advantage A^S and the advantage A the estimator
  gave (``trained``: whether the loss used the row);
- ``texts``: each distinct text once, cut to ``text_chars`` characters.

An estimator fills the parts it has (``AdvantageParts``); the others are null.  Step
groups are the estimator's own when it builds them (GiGPO), else rows sharing
(task group, anchor): a GRPO run shows which steps GiGPO would have grouped.

The sampled groups are drawn from a stream of their own, ``derive_seed(seed,
iteration, RECORDS_STREAM)``, so recording draws nothing from the run's streams and
changes none of its numbers.  ``Recorder`` holds the iterations since the last
checkpoint and writes them as the checkpoint is written (``flush``); a resumed run
plays again exactly the iterations after its checkpoint, and ``drop_after`` (called
through ``RunFolder.keep_iterations``) removes their files first, so no iteration is
lost or written twice.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.gigpo import exact_step_groups
from gigpo_gym.algos.estimators.kernels import group_spread, reverse_scan, trajectories
from gigpo_gym.algos.estimators.registry import AdvantageParts
from gigpo_gym.core.data import replacing
from gigpo_gym.core.env import derive_seed

#: Format of the files (``gigpo-gym inspect`` reads this version).
RECORDS_VERSION = 1
#: The folder of the files, inside the run folder.
RECORDS_DIR = "records"
#: The last key of the sample's random stream (``derive_seed(seed, iteration, RECORDS_STREAM)``).
RECORDS_STREAM = 11
_FILE = re.compile(r"iter-(\d{6})\.json\.gz")


def record_file(folder: str | Path, iteration: int) -> Path:
    return Path(folder) / f"iter-{iteration:06d}.json.gz"


def recorded_iterations(folder: str | Path) -> list[int]:
    """The iterations with a record file in ``folder``, in order."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _FILE.fullmatch(p.name)))


def read_record(folder: str | Path, iteration: int) -> dict[str, Any]:
    with gzip.open(record_file(folder, iteration), "rt", encoding="utf-8") as f:
        return json.load(f)


def drop_after(folder: str | Path, last: int) -> None:
    """Delete the record files of the iterations after ``last`` (-1: all); a resumed run records them again."""
    for iteration in recorded_iterations(folder):
        if iteration > last:
            record_file(folder, iteration).unlink(missing_ok=True)


@dataclass(frozen=True)
class Updated:
    """One update's view of its batch, for the recorder: the rows (all processes'), the estimator's advantages
    and their parts, and the rows the loss trained on (the trainer's ``Advantages``, GiGPOTrainer's batch)."""

    batch: StepBatch
    advantages: np.ndarray
    trained: np.ndarray
    parts: AdvantageParts


@dataclass(frozen=True)
class StepView:
    """What the estimators never see of one row."""

    observation: str
    reply: str
    action: str | None
    valid: bool
    env_reward: float


@dataclass(frozen=True)
class EpisodeView:
    """One episode of a sampled task group."""

    traj_id: int
    task_id: str
    task_type: str
    won: bool
    status: str
    env_return: float


def anchor(key: Any) -> str:
    """An anchor as the env wrote it: uint64 codes of 16-hex-digit digests (``hex_digest_codes``) back in hex."""
    return f"{int(key):016x}" if isinstance(key, np.unsignedinteger) else str(key)


def _number(value: float | None, digits: int = 5) -> float | None:
    return None if value is None else round(float(value), digits)


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if values.size else None


def step_groups(batch: StepBatch, parts: AdvantageParts) -> tuple[np.ndarray, int, str]:
    """The step group of every row: the estimator's, else rows sharing (task group, anchor); and which."""
    if parts.step_groups is not None:
        return parts.step_groups, parts.n_step_groups, "estimator"
    codes, n_codes = exact_step_groups(batch, trajectories(batch, ordered=False))
    return codes, n_codes, "anchors"


def batch_statistics(updated: Updated, codes: np.ndarray, n_codes: int, row_traj: np.ndarray, to_go: np.ndarray,
                     success: dict[str, float]) -> dict[str, Any]:
    """The whole batch's step groups and advantages (see the module docstring).

    An outcome is the return-to-go R_t with no discount (the trained reward from the step
    on): a shared step group "differs in outcome" when its rows' R_t are not all equal.
    ``row_traj``: each row's trajectory code.
    """
    batch, parts = updated.batch, updated.parts
    sizes = np.bincount(codes, minlength=n_codes)
    shared = sizes >= 2
    differ = group_spread(to_go, codes, n_codes) > 1e-9 if n_codes else np.zeros(0, dtype=bool)
    revisits = None
    if len(batch):  # steps in a state their own episode was in before: all but the first of each (group, episode)
        pair = codes.astype(np.int64) * (int(row_traj.max()) + 1) + row_traj
        revisits = float(len(batch) - len(np.unique(pair))) / len(batch)
    out: dict[str, Any] = {
        "rows": len(batch),
        "trajectories": int(len(np.unique(batch.traj_ids))),
        "task_groups": int(len(np.unique(batch.group_ids))),
        "rows_trained": int(np.sum(updated.trained)),
        "step_groups": int(n_codes),
        "step_group_size_mean": _number(sizes.mean()) if n_codes else None,
        "rows_in_shared_groups": _number(_mean(shared[codes])),
        "rows_revisiting": _number(revisits),
        "shared_groups": int(shared.sum()),
        "shared_groups_differing_outcome": _number(_mean(differ[shared])),
        "shared_groups_nonzero_step_advantage": None,
        "rows_nonzero_episode_advantage": None if parts.episode is None else _number(_mean(np.abs(parts.episode) > 1e-9)),
        "rows_nonzero_step_advantage": None if parts.step is None else _number(_mean(np.abs(parts.step) > 1e-9)),
        "mean_abs_advantage": _number(_mean(np.abs(parts.advantages))),
        "mean_abs_episode_advantage": None if parts.episode is None else _number(_mean(np.abs(parts.episode))),
        "mean_abs_step_advantage": None if parts.step is None else _number(_mean(np.abs(parts.step))),
        "size_counts": {str(size): int(count) for size, count in enumerate(np.bincount(sizes)) if count},
        "success": {k: _number(v, 4) for k, v in success.items()},
    }
    if parts.step is not None and n_codes:
        moved = np.zeros(n_codes, dtype=bool)
        np.logical_or.at(moved, codes, np.abs(parts.step) > 1e-9)
        out["shared_groups_nonzero_step_advantage"] = _number(_mean(moved[shared]))
    return out


def iteration_record(iteration: int, updated: Updated, groups: Sequence[int], episodes: Sequence[EpisodeView],
                     step_of: Callable[[int], StepView], success: dict[str, float], *, algo: dict[str, Any],
                     source: str, text_chars: int = 1000) -> dict[str, Any]:
    """The record of one iteration: the whole batch's statistics and the task groups ``groups`` (their ids) whole.

    ``episodes`` covers (at least) the sampled groups' trajectories; ``step_of(row)``
    gives a sampled row's texts (row: an index into ``updated.batch``).
    """
    started = time.perf_counter()
    batch, parts = updated.batch, updated.parts
    codes, n_codes, grouping = step_groups(batch, parts)
    layout = trajectories(batch)
    to_go = reverse_scan(batch.rewards, layout, 1.0)
    sizes = np.bincount(codes, minlength=n_codes)
    texts: dict[str, int] = {}

    def text(value: str | None) -> int | None:
        if value is None:
            return None
        value = value if len(value) <= text_chars else value[:text_chars] + " [...]"
        return texts.setdefault(value, len(texts))

    by_traj = {int(e.traj_id): e for e in episodes}
    sampled = []
    for group in groups:
        rows = np.flatnonzero(batch.group_ids == group)
        rows = rows[np.lexsort((batch.step_ids[rows], batch.traj_ids[rows]))]
        lanes: dict[int, list[dict[str, Any]]] = {}
        for row in rows.tolist():
            step = step_of(row)
            lanes.setdefault(int(batch.traj_ids[row]), []).append({
                "t": int(batch.step_ids[row]), "obs": text(step.observation), "reply": text(step.reply),
                "action": text(step.action), "valid": bool(step.valid), "env_r": _number(step.env_reward),
                "r": _number(batch.rewards[row]), "to_go": _number(to_go[row]), "anchor": anchor(batch.anchors[row]),
                "g": int(codes[row]), "size": int(sizes[codes[row]]),
                "adv_e": None if parts.episode is None else _number(parts.episode[row]),
                "adv_s": None if parts.step is None else _number(parts.step[row]),
                "adv": _number(updated.advantages[row]), "trained": bool(updated.trained[row]),
            })
        lanes_out = []
        for traj, steps in sorted(lanes.items()):
            e = by_traj[traj]
            lanes_out.append({"traj": traj, "won": bool(e.won), "status": e.status, "env_return": _number(e.env_return),
                              "return": _number(sum(s["r"] for s in steps)), "length": len(steps), "steps": steps})
        first = by_traj[lanes_out[0]["traj"]] if lanes_out else None
        sampled.append({"group": int(group), "task_id": first.task_id if first else "",
                        "task_type": first.task_type if first else "", "episodes": lanes_out})
    return {
        "records": RECORDS_VERSION, "iteration": int(iteration), "source": source, "algo": algo,
        "grouping": grouping, "batch": batch_statistics(updated, codes, n_codes, layout.row_traj, to_go, success),
        "groups": sampled, "texts": list(texts), "seconds": round(time.perf_counter() - started, 4),
    }


def choose_groups(group_ids: Sequence[int], k: int, seed: int, iteration: int) -> list[int]:
    """``k`` of the distinct ``group_ids``, drawn on the records' own stream (see the module docstring)."""
    distinct = sorted({int(g) for g in group_ids})
    if k >= len(distinct):
        return distinct
    rng = np.random.default_rng(derive_seed(seed, iteration, RECORDS_STREAM))
    return sorted(int(g) for g in rng.choice(distinct, size=k, replace=False))


class Recorder:
    """Holds the records of the iterations since the last checkpoint; ``flush`` writes them (with the checkpoint)."""

    def __init__(self, folder: str | Path, groups: int, seed: int, text_chars: int = 1000):
        self.folder = Path(folder)
        self.groups, self.seed, self.text_chars = groups, seed, text_chars
        self.pending: dict[int, dict[str, Any]] = {}

    def add(self, record: dict[str, Any]) -> None:
        self.pending[int(record["iteration"])] = record

    def flush(self) -> list[Path]:
        """Write every held record (each file replaced whole, never half written); returns the files."""
        written = []
        if self.pending:
            self.folder.mkdir(parents=True, exist_ok=True)
        for iteration, record in sorted(self.pending.items()):
            path = record_file(self.folder, iteration)
            with replacing(path) as tmp, open(tmp, "wb") as raw:
                # no name and mtime 0 in the gzip header: the same record, the same bytes
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
                    f.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
            written.append(path)
        self.pending.clear()
        return written

    def record_rollout(self, iteration: int, rollout: Any, whole: Any, updated: Updated, algo: dict[str, Any]) -> None:
        """Record a trainer iteration: ``rollout`` is this process's (it has the texts), ``whole`` every process's
        rows (``Trainer.gather``), ``updated`` the update's view of them."""
        mine = np.flatnonzero(whole.owner == 0)  # rank 0 records: the groups whose texts it holds
        groups = choose_groups(updated.batch.group_ids[mine], self.groups, self.seed, iteration)
        episodes = [EpisodeView(e.traj_id, e.task_id, e.task_type, e.won, e.status, e.env_return)
                    for e in rollout.episodes]

        def step_of(row: int) -> StepView:
            i = int(whole.local[row])
            return StepView(rollout.prompts[i] if rollout.anchor_texts[i] == "" else rollout.anchor_texts[i],
                            rollout.replies[i], rollout.actions[i], bool(rollout.action_valid[i]),
                            float(rollout.env_rewards[i]))

        self.add(iteration_record(iteration, updated, groups, episodes, step_of, whole.rollout.success_by_task_type(),
                                  algo=algo, source="trainer", text_chars=self.text_chars))
