"""Leaderboard runs: a versioned spec, a policy, a result JSON anyone can reproduce.

A *spec* (``benchmarks/specs/<name>.json``) fixes the env id and version, its
kwargs and split, the round seeds, the episodes per round, the step limit and what
the metrics mean.  Round seed ``s`` plays ``episodes`` envs of
``make_grouped(env_id, episodes, 1, seed=s)``: episode ``k`` resets with
``derive_seed(s, k)``, so the first ``n`` episodes of a run are the same tasks
whatever ``n`` is (model rows use fewer episodes and stay comparable).

The runner steps every episode of a round in one grouped vector env and asks the
policy only for the active ones.  A policy that raises is retried row by row, and
the row that still raises ends its episode as ``crashed``; an env that raises
(``CrashGuard``) does the same.  A crashed episode counts as a failure and is
listed, never dropped.  Same spec + deterministic policy -> the same numbers.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from gigpo_gym.algos.leaderboard.specs import (  # noqa: F401  (re-exported: the leaderboard's public API)
    BENCHMARKS_DIR,
    RESULT_VERSION,
    RESULTS_DIR,
    SCHEMA_FILE,
    SPECS_DIR,
    LeaderboardError,
    Spec,
    available_specs,
    check_spec,
    load_result,
    load_schema,
    load_spec,
    result_filename,
    validate_result,
    write_result,
)
from gigpo_gym.algos.policies.base import SamplingParams
from gigpo_gym.algos.training.rollout import info_at, llm_wrapper
from gigpo_gym.core.anchor import digest

# -- crash isolation --------------------------------------------------------------------
class CrashGuard(gym.Wrapper):
    """Turn an exception inside the env into a terminated, ``crashed`` episode.

    The outermost wrapper of a leaderboard env: ``info["crashed"]`` carries the error
    text, and the runner records the episode as crashed instead of losing the round.
    """

    def reset(self, **kwargs: Any):
        self._crashed = None
        try:
            obs, info = self.env.reset(**kwargs)
        except Exception as e:  # an env bug must not hide the other episodes
            self._crashed = f"reset: {type(e).__name__}: {e}"
            self._last = ""
            return "", {"crashed": self._crashed, "admissible_actions": [], "anchor": "", "action_valid": False,
                        "won": False, "task_id": "", "task_type": ""}
        self._last = obs
        return obs, info

    def step(self, action: Any):
        if self._crashed is not None:
            return self._last, 0.0, True, False, {"crashed": self._crashed, "admissible_actions": [], "won": False}
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:
            self._crashed = f"step: {type(e).__name__}: {e}"
            return self._last, 0.0, True, False, {"crashed": self._crashed, "admissible_actions": [], "won": False,
                                                  "action_valid": False}
        self._last = obs
        return obs, reward, terminated, truncated, info

    def guarded_call(self, name: str) -> Any:
        """``env.<name>()`` or None when it raises (the expert of a crashed env)."""
        try:
            return self.env.get_wrapper_attr(name)()
        except Exception:
            return None


def _guarded_stack(settings: dict[str, Any], env: gym.Env) -> gym.Env:
    return CrashGuard(llm_wrapper(**settings)(env))


# -- the run ----------------------------------------------------------------------------
@dataclass
class EpisodeRecord:
    index: int
    round_seed: int
    reset_seed: int
    task_id: str = ""
    task_type: str = ""
    status: str = "truncated"
    won: bool = False
    ret: float = 0.0
    steps: int = 0
    invalid_steps: int = 0
    final: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "round_seed": self.round_seed, "reset_seed": self.reset_seed,
                "task_id": self.task_id, "task_type": self.task_type, "status": self.status, "won": self.won,
                "return": self.ret, "steps": self.steps, "invalid_steps": self.invalid_steps, "final": self.final,
                "error": self.error}


def _generate_guarded(policy: Any, prompts: list[str], sampling: SamplingParams, contexts: list[dict] | None,
                      batch_size: int) -> list[Any]:
    """Texts per row; a row whose generation raises (alone) gets the exception instead."""

    def call(lo: int, hi: int) -> list[str]:
        args = (prompts[lo:hi], sampling) if contexts is None else (prompts[lo:hi], sampling, contexts[lo:hi])
        return [g.text for g in policy.generate(*args)]

    out: list[Any] = []
    for lo in range(0, len(prompts), batch_size):
        hi = min(lo + batch_size, len(prompts))
        try:
            out.extend(call(lo, hi))
        except Exception:
            for i in range(lo, hi):
                try:
                    out.extend(call(i, i + 1))
                except Exception as e:
                    out.append(e)
    return out


def play_round(policy: Any, envs: Any, sampling: SamplingParams, round_seed: int, *, final_keys: Sequence[str] = (),
               batch_size: int = 16, on_episode_end: Callable[[], None] | None = None) -> list[EpisodeRecord]:
    """Play every env of ``envs`` (reset with ``round_seed``) to the end; one record per episode."""
    obs, infos = envs.reset(seed=round_seed)
    n = len(obs)
    wanted = set(getattr(policy, "needs_context", ()))
    #: info keys a policy asks for beyond the standard context (e.g. WebShop's instruction)
    extra_keys = sorted(wanted - {"admissible_actions", "expert_action", "observation", "task"})
    records = [EpisodeRecord(i, round_seed, envs.task_seed(i), str(info_at(infos, "task_id", i, "")),
                             str(info_at(infos, "task_type", i, ""))) for i in range(n)]
    tasks = [str(info_at(infos, "observation", i, obs[i])) for i in range(n)]
    active = np.ones(n, dtype=bool)

    def end(i: int, status: str, error: str | None = None) -> None:
        records[i].status, records[i].error = status, error
        active[i] = False
        if on_episode_end is not None:
            on_episode_end()

    for i in range(n):
        crashed = info_at(infos, "crashed", i)
        if crashed:
            end(i, "crashed", str(crashed))
    step = 0
    while active.any():
        rows = [int(i) for i in np.flatnonzero(active)]
        contexts = None
        if wanted:
            experts = envs.call("guarded_call", "expert_action") if "expert_action" in wanted else None
            contexts = [{"admissible_actions": list(info_at(infos, "admissible_actions", i, []) or []),
                         "expert_action": experts[i] if experts is not None else None,
                         "observation": str(info_at(infos, "observation", i, "")), "task": tasks[i],
                         **{k: info_at(infos, k, i) for k in extra_keys}} for i in rows]
        step_sampling = sampling.for_call(round_seed, step)
        texts = _generate_guarded(policy, [obs[i] for i in rows], step_sampling, contexts, batch_size)
        actions = [""] * n
        for i, text in zip(rows, texts):
            if isinstance(text, Exception):
                end(i, "crashed", f"policy: {type(text).__name__}: {text}")
            else:
                actions[i] = text
        stepped = [i for i in rows if active[i]]
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        for i in stepped:
            rec = records[i]
            rec.steps += 1
            rec.ret += float(rewards[i])
            rec.invalid_steps += int(not bool(info_at(infos, "action_valid", i, True)))
            rec.won = rec.won or bool(info_at(infos, "won", i, False))
            for key in final_keys:
                value = info_at(infos, key, i)
                if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                    rec.final[key] = float(value)
            crashed = info_at(infos, "crashed", i)
            if not crashed and info_at(infos, "worker_failed", i):
                crashed = "the worker process holding this env died"
            if crashed:
                end(i, "crashed", str(crashed))
            elif terminated[i] or truncated[i]:
                end(i, "terminated" if terminated[i] else "truncated")
        step += 1
    for rec in records:
        for key in final_keys:
            rec.final.setdefault(key, 0.0)
        if rec.status == "crashed":  # a crash is a failure, whatever happened before
            rec.won = False
            rec.final = {k: 0.0 for k in rec.final}
    return records


def stat(values: Sequence[float]) -> dict[str, Any]:
    """Mean, standard error of the mean (unbiased std / sqrt(n); 0 for n < 2) and n."""
    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return {"mean": 0.0, "stderr": 0.0, "n": 0}
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {"mean": float(x.mean()), "stderr": se, "n": n}


def summarize(records: Sequence[EpisodeRecord], final_keys: Sequence[str]) -> tuple[dict, dict, dict]:
    """(metrics, per-task-type success, counts) over every episode, crashed ones included."""
    metrics = {
        "success": stat([float(r.won) for r in records]),
        "return": stat([r.ret for r in records]),
        "steps": stat([float(r.steps) for r in records]),
        "invalid_rate": stat([r.invalid_steps / r.steps if r.steps else 0.0 for r in records]),
    }
    for key in final_keys:
        metrics[key] = stat([r.final.get(key, 0.0) for r in records])
    per_type: dict[str, list[float]] = {}
    for r in records:
        per_type.setdefault(r.task_type or "unknown", []).append(float(r.won))
    counts = {"episodes": len(records)}
    for status in ("terminated", "truncated", "crashed"):
        counts[status] = sum(r.status == status for r in records)
    return metrics, {k: stat(v) for k, v in sorted(per_type.items())}, counts


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("gymnasium", "numpy", "torch", "transformers", "stable-baselines3"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def run_spec(spec: Spec, loaded: Any, *, episodes: int | None = None, backend: str = "sync", batch_size: int = 16,
             progress: bool = True, notes: str = "") -> dict[str, Any]:
    """Evaluate ``loaded`` (a ``LoadedPolicy``) on ``spec``; returns the result (schema-valid)."""
    import gigpo_gym
    from tqdm.auto import tqdm

    n = spec.episodes if episodes is None else int(episodes)
    if n < 1:
        raise LeaderboardError(f"episodes must be >= 1, got {n}")
    settings = {"history_length": spec.history_length, **loaded.prompt}
    env_kwargs = {**spec.env_kwargs, "max_episode_steps": spec.max_steps}
    started = time.perf_counter()
    records: list[EpisodeRecord] = []
    bar = tqdm(total=n * len(spec.seeds), desc=f"{spec.name} | {loaded.name}", disable=not progress, unit="ep")
    envs = gigpo_gym.make_grouped(spec.env_id, n, 1, backend=backend, seed=spec.seeds[0], env_kwargs=env_kwargs,
                                  wrappers=(functools.partial(_guarded_stack, settings),))
    try:
        for round_seed in spec.seeds:
            round_records = play_round(loaded.policy, envs, loaded.sampling, round_seed, batch_size=batch_size,
                                       final_keys=spec.final_info_metrics, on_episode_end=lambda: bar.update(1))
            for rec in round_records:
                rec.index = len(records)
                records.append(rec)
    finally:
        envs.close()
        bar.close()
    metrics, per_type, counts = summarize(records, spec.final_info_metrics)
    sampling = {k: (list(v) if isinstance(v, tuple) else v) for k, v in loaded.sampling.__dict__.items()}
    identity = {"spec": spec.data, "policy": loaded.describe(), "sampling": sampling, "episodes": n,
                "package_version": gigpo_gym.__version__}
    return {
        "result_version": RESULT_VERSION,
        "spec": spec.data,
        "spec_digest": spec.digest,
        "policy": loaded.describe(),
        "sampling": sampling,
        "env": {"id": spec.env_id, "version": spec.env_version, "kwargs": dict(spec.env_kwargs),
                "max_steps": spec.max_steps},
        "package_version": gigpo_gym.__version__,
        "versions": _versions(),
        "config_hash": digest(identity),
        "seeds": list(spec.seeds),
        "episodes_requested": n,
        "counts": counts,
        "metrics": metrics,
        "per_task_type": per_type,
        "episodes": [r.as_json() for r in records],
        "wall_seconds": round(time.perf_counter() - started, 3),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **({"notes": notes} if notes else {}),
    }
