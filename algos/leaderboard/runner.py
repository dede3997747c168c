"""Leaderboard runs: a versioned spec, a policy, a result JSON anyone can reproduce.

A *spec* (``benchmarks/specs/<name>.json``) fixes the env id and version, its
kwargs and split, the round seeds, the episodes per round, the step limit and what
the metrics mean.  Round seed ``s`` plays ``episodes`` envs of
``make_grouped(env_id, episodes, 1, seed=s)``: episode ``k`` resets with
``derive_seed(s, k)``, so the first ``n`` episodes of a run are the same tasks
whatever ``n`` is (model rows use fewer episodes and stay comparable).

Each round is played by ``rounds.play_round`` (crashes recorded, never dropped: a
crashed episode counts as a failure; a ``fatal`` policy error, such as a served
model's wrong key, stops the run).  Same spec + deterministic policy -> the same
numbers.

An ``Evaluation`` is one policy on one spec: the prompts it sees (a run's own, else
the spec's), the env kwargs (the spec's, with the prompt's observation mode) and the
config hash, computed once.  ``run_to_file`` is the command's path: it refuses to
replace a result of another config, streams every finished episode to the run's
episode file (``journal``) and with ``resume=True`` plays only the episodes a killed
run did not finish.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

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
from gigpo_gym.algos.leaderboard.journal import EpisodeJournal, check_replace, journal_path
from gigpo_gym.algos.leaderboard.rounds import CrashGuard, EpisodeRecord, guarded_stack, play_round  # noqa: F401 (re-exported)
from gigpo_gym.core.anchor import digest


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


def _sampling_json(loaded: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in loaded.sampling.__dict__.items()}


def config_hash(spec: Spec, loaded: Any, episodes: int) -> str:
    """Digest of what decides the numbers: spec, policy (a served model's id, the prompts), decoding,
    episodes, package version.  Not where a server runs or how many requests it takes at once."""
    import gigpo_gym

    return digest({"spec": spec.data, "policy": loaded.describe(), "sampling": _sampling_json(loaded),
                   "episodes": int(episodes), "package_version": gigpo_gym.__version__})


@dataclass(frozen=True)
class Evaluation:
    """One policy on one spec: what is played, and the config hash that names it (computed once)."""

    spec: Spec
    #: The ``LoadedPolicy`` (``policies.resolve_policy``).
    loaded: Any
    #: Episodes per round seed (the spec's first ``episodes`` tasks).
    episodes: int
    config_hash: str = field(init=False)

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise LeaderboardError(f"episodes must be >= 1, got {self.episodes}")
        if self.episodes > self.spec.episodes:  # another protocol: the spec fixes its tasks
            raise LeaderboardError(f"--episodes {self.episodes} is more than the {self.spec.episodes} episodes per round "
                                   f"that {self.spec.name} plays; use at most {self.spec.episodes} (fewer plays its "
                                   "first tasks), or write a spec of your own")
        object.__setattr__(self, "config_hash", config_hash(self.spec, self.loaded, self.episodes))

    @classmethod
    def of(cls, spec: Spec, loaded: Any, episodes: int | None = None) -> "Evaluation":
        return cls(spec, loaded, spec.episodes if episodes is None else int(episodes))

    @property
    def prompt(self) -> Any:
        """The prompts the policy sees: its own (a trainer run's), else the spec's."""
        return self.loaded.prompt_for(self.spec)

    @property
    def anchor_mode(self) -> str:
        return self.loaded.anchor_mode

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """``gym.make`` kwargs: the spec's tasks and step limit, rendered as the prompt says (observation mode)."""
        return {**self.spec.env_kwargs, **self.prompt.env_kwargs(), "max_episode_steps": self.spec.max_steps}

    def make_envs(self, backend: str = "sync"):
        """One env per episode of a round, each through the policy's prompt stack with ``CrashGuard`` outermost."""
        import gigpo_gym

        return gigpo_gym.make_grouped(self.spec.env_id, self.episodes, 1, backend=backend, seed=self.spec.seeds[0],
                                      env_kwargs=self.env_kwargs,
                                      wrappers=(functools.partial(guarded_stack, self.prompt, anchor_mode=self.anchor_mode),))

    def result_path(self, results_dir: str | Path) -> Path:
        """Where the result goes (``<spec>__<policy name>.json``)."""
        return result_path(results_dir, self.spec, self.loaded)

    def journal_path(self, results_dir: str | Path) -> Path:
        """The episode file beside the result (``journal``)."""
        return journal_path(self.result_path(results_dir), self.config_hash)


class _Progress:
    """The bar: episodes done, success so far, tokens/s (served models) and tqdm's ETA."""

    def __init__(self, total: int, done: list[EpisodeRecord], desc: str, enabled: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=len(done), desc=desc, disable=not enabled, unit="ep")
        self.won, self.n = sum(r.won for r in done), len(done)
        self.tokens, self.started = 0, time.perf_counter()

    def update(self, rec: EpisodeRecord) -> None:
        self.won, self.n = self.won + rec.won, self.n + 1
        self.tokens += (rec.usage or {}).get("completion_tokens", 0)
        postfix = {"success": f"{100 * self.won / self.n:.1f}%"}
        if rec.usage is not None:
            postfix["tok/s"] = f"{self.tokens / max(time.perf_counter() - self.started, 1e-9):.1f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)


def run_spec(spec: Spec, loaded: Any, *, episodes: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Evaluate ``loaded`` (a ``LoadedPolicy``) on ``spec``; returns the result (schema-valid; ``evaluate`` takes ``kwargs``)."""
    return evaluate(Evaluation.of(spec, loaded, episodes), **kwargs)


def evaluate(evaluation: Evaluation, *, backend: str = "sync", batch_size: int = 16, progress: bool = True,
             notes: str = "", journal: str | Path | None = None, resume: bool = False,
             overwrite: bool = False) -> dict[str, Any]:
    """Play ``evaluation``; returns the result (schema-valid).

    ``journal`` (a file path) streams every finished episode there; with ``resume`` the
    episodes it already holds are not played again, and ``overwrite`` (without
    ``resume``) starts it over (see ``journal.EpisodeJournal``).
    """
    import gigpo_gym

    spec, loaded, n, chash = evaluation.spec, evaluation.loaded, evaluation.episodes, evaluation.config_hash
    book = None if journal is None else EpisodeJournal(  # with resume, overwrite is about the result file only
        journal, {"config_hash": chash, "spec": spec.name, "policy": loaded.name}, resume=resume,
        overwrite=overwrite and not resume)
    prior = book.prior_seconds if book is not None else 0.0
    done = {key: EpisodeRecord.from_json(line["episode"]) for key, line in (book.finished if book else {}).items()}
    env_kwargs = evaluation.env_kwargs
    started = time.perf_counter()
    bar = _Progress(n * len(spec.seeds), list(done.values()), f"{spec.name} | {loaded.name}", progress)
    records: list[EpisodeRecord] = []
    envs = None
    try:
        for r, round_seed in enumerate(spec.seeds):
            skip = [k for k in range(n) if (round_seed, k) in done]
            records += [done[(round_seed, k)] for k in skip]
            if len(skip) == n:
                continue
            if envs is None:
                envs = evaluation.make_envs(backend)

            def finished(rec: EpisodeRecord, r: int = r, round_seed: int = round_seed) -> None:
                k = rec.index
                rec.index = r * n + k
                if book is not None:
                    book.append(round_seed, k, rec.as_json(), prior + time.perf_counter() - started)
                bar.update(rec)

            records += play_round(loaded.policy, envs, loaded.sampling, round_seed, batch_size=batch_size,
                                  final_keys=spec.final_info_metrics, on_episode_end=finished, skip=skip)
        if book is not None:
            book.complete()
    finally:
        if envs is not None:
            envs.close()
        bar.bar.close()
        if book is not None:
            book.close()
    records.sort(key=lambda rec: rec.index)
    check_not_all_crashed(records, spec.seeds, n)
    metrics, per_type, counts = summarize(records, spec.final_info_metrics)
    result = {
        "result_version": RESULT_VERSION,
        "spec": spec.data,
        "spec_digest": spec.digest,
        "policy": loaded.describe(),
        "sampling": _sampling_json(loaded),
        "env": {"id": spec.env_id, "version": spec.env_version,
                "kwargs": {k: v for k, v in env_kwargs.items() if k != "max_episode_steps"}, "max_steps": spec.max_steps},
        "package_version": gigpo_gym.__version__,
        "versions": _versions(),
        "config_hash": chash,
        "seeds": list(spec.seeds),
        "episodes_requested": n,
        "counts": counts,
        "metrics": metrics,
        "per_task_type": per_type,
        "episodes": [r.as_json() for r in records],
        "wall_seconds": round(prior + time.perf_counter() - started, 3),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **({"notes": notes} if notes else {}),
    }
    usage = _usage(records)
    if usage is not None:
        result["usage"] = usage
    if loaded.runtime:
        result["runtime"] = loaded.runtime
    return result


def check_not_all_crashed(records: Sequence[EpisodeRecord], seeds: Sequence[int], episodes: int) -> None:
    """A round whose every episode crashed measured nothing: the run fails (no result), naming the first error."""
    for r, round_seed in enumerate(seeds):
        played = records[r * episodes:(r + 1) * episodes]
        if played and all(rec.status == "crashed" for rec in played):
            raise LeaderboardError(f"every episode of round {round_seed} crashed, so no result is written; the first: "
                                   f"{played[0].error}")


def _usage(records: Sequence[EpisodeRecord]) -> dict[str, Any] | None:
    """Token counts of a served model: per run and per episode (None for other policies)."""
    counted = [r.usage for r in records if r.usage is not None]
    if not counted:
        return None
    per = [r.usage or {"prompt_tokens": 0, "completion_tokens": 0} for r in records]
    fingerprints = sorted({f for u in counted for f in u.get("system_fingerprints", [])})
    return {"prompt_tokens": sum(u["prompt_tokens"] for u in counted),
            "completion_tokens": sum(u["completion_tokens"] for u in counted),
            "requests": sum(u["requests"] for u in counted),
            "per_episode": {"prompt_tokens": stat([u["prompt_tokens"] for u in per]),
                            "completion_tokens": stat([u["completion_tokens"] for u in per])},
            "system_fingerprints": fingerprints}


def result_path(results_dir: str | Path, spec: Spec, loaded: Any) -> Path:
    """Where the result of ``loaded`` on ``spec`` goes (``<spec>__<policy name>.json``)."""
    return Path(results_dir) / result_filename({"spec": {"name": spec.name}, "policy": {"name": loaded.name}})


def run_to_file(evaluation: Evaluation, results_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
                **kwargs: Any) -> tuple[dict[str, Any], Path]:
    """Run and write the result; its episode file streams beside it (``evaluate`` takes ``kwargs``).

    Before anything runs, an existing result of another config at the same path is an
    error naming ``--overwrite`` (checked again before writing).
    """
    path = evaluation.result_path(results_dir)
    episodes = evaluation.episodes * len(evaluation.spec.seeds)
    check_replace(path, evaluation.config_hash, episodes, overwrite)
    result = evaluate(evaluation, journal=evaluation.journal_path(results_dir), resume=resume, overwrite=overwrite,
                      **kwargs)
    check_replace(path, evaluation.config_hash, episodes, overwrite)
    return result, write_result(result, path)
