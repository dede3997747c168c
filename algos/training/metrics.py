"""Training diagnostics: rollout statistics, the metrics log, the learning curve, the printed evaluations."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from gigpo_gym.algos.training.rollout import Rollout
from gigpo_gym.core.data import write_atomically

#: Step-group size buckets of the histogram (GiGPO gets a signal only from groups > 1).
SIZE_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 10**9))


def step_group_sizes(group_ids: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Size of each step group: the rows sharing (task group, anchor)."""
    if len(group_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.array([f"{g}\x00{a}" for g, a in zip(group_ids, anchors)], dtype=object)
    _, counts = np.unique(keys, return_counts=True)
    return counts


def rollout_metrics(rollout: Rollout, prefix: str = "rollout") -> dict[str, float]:
    """Success (overall, per task type), invalid-action rate, tokens/s, group statistics."""
    m: dict[str, float] = {}
    for task_type, rate in rollout.success_by_task_type().items():
        m[f"{prefix}/success" if task_type == "all" else f"{prefix}/success/{task_type}"] = rate
    m[f"{prefix}/episodes"] = float(len(rollout.episodes))
    for task_type, count in Counter(ep.task_type for ep in rollout.episodes).items():
        m[f"{prefix}/episodes/{task_type}"] = float(count)
    rows = max(len(rollout), 1)
    m[f"{prefix}/invalid_action_rate"] = 1.0 - float(np.sum(rollout.action_valid)) / rows
    m[f"{prefix}/cut_replies"] = rollout.cut_replies / rows
    m[f"{prefix}/episode_length"] = float(np.mean([e.length for e in rollout.episodes])) if rollout.episodes else 0.0
    m[f"{prefix}/return"] = float(np.mean([e.reward for e in rollout.episodes])) if rollout.episodes else 0.0
    if rollout.episodes:
        m[f"{prefix}/truncated"] = float(np.mean([e.truncated for e in rollout.episodes]))
    if any(rollout.anchors):
        m[f"{prefix}/revisited_states"] = revisited_state_share(rollout)
    m[f"{prefix}/rows"] = float(len(rollout))
    m[f"{prefix}/seconds"] = rollout.seconds
    if rollout.generate_seconds > 0:
        m[f"{prefix}/tokens_per_s"] = rollout.generated_tokens / rollout.generate_seconds
    returns: dict[int, list[float]] = {}
    for e in rollout.episodes:
        returns.setdefault(e.group_id, []).append(round(e.reward, 9))
    if returns:
        m[f"{prefix}/all_equal_groups"] = float(np.mean([len(set(r)) == 1 for r in returns.values()]))
    sizes = step_group_sizes(np.asarray(rollout.group_ids), np.asarray(rollout.anchors, dtype=object))
    if sizes.size:
        m[f"{prefix}/step_group_size_mean"] = float(sizes.mean())
        m[f"{prefix}/step_rows_in_shared_groups"] = float(sizes[sizes > 1].sum()) / rows
        for low, high in SIZE_BUCKETS:
            label = str(low) if low == high else (f"{low}+" if high > 10**8 else f"{low}-{high}")
            m[f"{prefix}/step_group_size_hist/{label}"] = float(((sizes >= low) & (sizes <= high)).sum())
    return m


#: Rows of each iteration's rollout whose prompt the run keeps (``prompts.jsonl``).
SAMPLE_PROMPTS = 3


def sample_prompts(rollout: Rollout, iteration: int, count: int = SAMPLE_PROMPTS) -> list[dict[str, Any]]:
    """A few rows of a rollout as the model met them: evenly spaced over its rows (the first and the last
    included), each with its prompt text, the tokens the model read, its reply, the parsed action and the reward paid."""
    if not rollout.prompts:
        return []
    rows = sorted({int(round(i)) for i in np.linspace(0, len(rollout.prompts) - 1, min(count, len(rollout.prompts)))})
    return [{"iteration": iteration, "group": rollout.group_ids[i], "trajectory": rollout.traj_ids[i],
             "step": rollout.step_ids[i], "prompt": rollout.prompts[i], "prompt_tokens": len(rollout.prompt_ids[i]),
             "reply": rollout.replies[i], "action": rollout.actions[i], "valid": rollout.action_valid[i],
             "reward": rollout.rewards[i]} for i in rows]


def revisited_state_share(rollout: Rollout) -> float:
    """Share of steps taken in a state (anchor) the same episode had already been in.

    An agent that walks in circles (its history too short to show where it has been)
    scores high; rows without an anchor count as new states.
    """
    seen: set[tuple[int, int, str]] = set()
    repeats = 0
    for key in zip(rollout.group_ids, rollout.traj_ids, rollout.anchors):
        repeats += bool(key[2]) and key in seen
        seen.add(key)
    return repeats / max(len(rollout), 1)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one row with a single write: a kill leaves at most a torn last line,
    which ``read_jsonl`` skips and ``keep_iterations`` removes."""
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics log; a torn last line (a killed append) is skipped."""
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines) or text.endswith("\n"):
                raise ValueError(f"{path}: line {number} is not JSON") from None
    return rows


def keep_iterations(path: Path, last: int) -> None:
    """Atomically drop the rows of iterations after ``last`` (and a torn last line).

    A resume from checkpoint ``last`` re-runs the later iterations, so their old rows
    would otherwise appear twice; a fresh run (``last=-1``) starts an empty log.
    """
    rows = [r for r in read_jsonl(path) if int(r.get("iteration", 0)) <= last]
    if rows or path.exists():
        write_atomically(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def plot_curve(records: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Success vs iteration (rollout, eval and selection) as a PNG; None when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["iteration"], r["rollout/success"]) for r in records if "rollout/success" in r]
    evals = [(r["iteration"], r["eval/success"]) for r in records if "eval/success" in r]
    chosen = [(r["iteration"], r["select/success"]) for r in records if "select/success" in r]
    if not train and not evals and not chosen:
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    if train:
        ax.plot(*zip(*train), label="rollout success", marker=".")
    if evals:
        ax.plot(*zip(*evals), label="eval success (held-out)", marker="o")
    if chosen:
        ax.plot(*zip(*chosen), label="selection success", marker="s")
    ax.set_xlabel("iteration")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def success_sem(rate: float, episodes: float) -> float:
    """Standard error of a success rate measured on ``episodes`` independent episodes."""
    return math.sqrt(rate * (1.0 - rate) / episodes) if episodes > 0 else 0.0


def format_success(title: str, m: dict[str, float], prefix: str = "eval") -> str:
    """One line: overall success with its standard error and episode count, then per task type."""
    per_type = {k.split("/")[-1]: v for k, v in m.items() if k.startswith(f"{prefix}/success/")}
    cells = "  ".join(f"{k} {100 * v:5.1f}" for k, v in sorted(per_type.items()))
    invalid = 100 * m.get(f"{prefix}/invalid_action_rate", 0.0)
    rate, n = m.get(f"{prefix}/success", 0.0), m.get(f"{prefix}/episodes", 0.0)
    overall = f"{100 * rate:5.1f} +- {100 * success_sem(rate, n):4.1f} (n={n:.0f})"
    line = f"{title:<22} success % all {overall}  {cells}  | invalid actions {invalid:5.1f}%"
    if f"{prefix}/truncated" in m:  # where the losses go: out of steps, or ended by the env
        line += f"  | out of steps {100 * m[f'{prefix}/truncated']:5.1f}%"
    return line


def format_iteration(record: dict[str, Any], iterations: int) -> str:
    """The one line an RL iteration prints: its rollout's success, mean paid return, invalid share and time (and the
    selection's or the held-out evaluation's success when it ran them)."""
    line = (f"iteration {record['iteration']:>3}/{iterations}  success {100 * record['rollout/success']:5.1f}%  "
            f"reward {record['rollout/return']:+7.2f}  invalid {100 * record['rollout/invalid_action_rate']:5.1f}%  "
            f"{record['time/iteration_seconds']:6.1f} s")
    for key, name in (("select/success", "selection"), ("eval/success", "held-out")):
        if key in record:
            line += f"  | {name} {100 * record[key]:5.1f}%"
    return line


def format_gain(before: dict[str, float], after: dict[str, float], prefix: str = "eval",
                title: str = "RL gain (points)") -> str:
    """A change in held-out success (the RL phase's, by default), overall with its standard error and per task type.

    The error treats the two evaluations as independent; they replay the same tasks, so it
    is conservative.
    """
    (a, n_a), (b, n_b) = ((m.get(f"{prefix}/success", 0.0), m.get(f"{prefix}/episodes", 0.0)) for m in (before, after))
    sem = math.hypot(success_sem(a, n_a), success_sem(b, n_b))
    types = sorted(k.split("/")[-1] for k in after if k.startswith(f"{prefix}/success/"))
    cells = "  ".join(f"{k} {100 * (after[f'{prefix}/success/{k}'] - before.get(f'{prefix}/success/{k}', 0.0)):+5.1f}"
                      for k in types)
    return f"{title:<22} all {100 * (b - a):+5.1f} +- {100 * sem:4.1f}  {cells}"
