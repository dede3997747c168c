"""One round of a leaderboard spec: every episode played to its end by the episode player.

``play_round`` plays through ``training.rollout.collect``, the player training uses,
with crash isolation composed around it: ``CrashGuard`` (the outermost env wrapper)
turns an env that raises into a ``crashed`` episode, and ``IsolatedPolicy`` retries a
policy that raises row by row, the row that still raises ending its episode as
``crashed``; an exception marked ``fatal`` (a served model's key, name or server) stops
the run instead.  A served model's request that failed for good ends its episode as its
``error_status`` says (crashed, or truncated for a prompt over the context).  Episodes a
resumed run already finished are skipped: their envs are neither reset nor stepped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym

from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams, as_policy
from gigpo_gym.algos.training.rollout import Episode, collect
from gigpo_gym.core.env import derive_seed
from gigpo_gym.wrappers.stack import PromptConfig, wrap_for_llm


# -- crash isolation --------------------------------------------------------------------
class CrashGuard(gym.Wrapper):
    """Turn an exception inside the env into a terminated, ``crashed`` episode.

    The outermost wrapper of a leaderboard env: ``info["crashed"]`` carries the error
    text, and the runner records the episode as crashed instead of losing the round.
    """

    _skip: frozenset = frozenset()

    def skip_seeds(self, seeds: Any) -> None:
        """Episodes reset with these seeds are not played (a resumed run finished them)."""
        self._skip = frozenset(int(s) for s in seeds)

    def reset(self, **kwargs: Any):
        self._crashed = None
        if kwargs.get("seed") in self._skip:  # neither reset nor stepped: its first step ends it
            self._crashed, self._last = "skipped", ""
            return "", {"skipped": True, "admissible_actions": [], "anchor": "", "action_valid": False, "won": False,
                        "task_id": "", "task_type": ""}
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

    def guarded_call(self, name: str, **kwargs: Any) -> Any:
        """``env.<name>(**kwargs)`` or None when it raises (the expert of a crashed env)."""
        try:
            return self.env.get_wrapper_attr(name)(**kwargs)
        except Exception:
            return None

    def expert_action(self, **kwargs: Any) -> str | None:
        """The env's expert action, or None when it raises (what the episode player asks an expert policy's env)."""
        return self.guarded_call("expert_action", **kwargs)


class IsolatedPolicy(Policy):
    """A policy whose exceptions end only the episodes they hit (the leaderboard's side of crash isolation).

    Each step's prompts go to ``policy`` in batches of ``batch_size`` (all at once for a
    ``concurrent`` policy).  A batch that raises is retried row by row; a row that still
    raises gets a ``Generation`` with ``error``, which ends its episode as ``crashed``.
    An exception marked ``fatal`` is raised: the run cannot go on.
    """

    def __init__(self, policy: Policy, batch_size: int = 16):
        self.policy = as_policy(policy)
        self.batch_size = int(batch_size)
        self.needs_context = self.policy.needs_context
        self.concurrent = self.policy.concurrent

    def generate(self, prompts, sampling, contexts=None) -> list[Generation]:
        def call(lo: int, hi: int) -> list[Generation]:
            if contexts is None:
                return list(self.policy.generate(prompts[lo:hi], sampling))
            return list(self.policy.generate(prompts[lo:hi], sampling, contexts[lo:hi]))

        size = max(len(prompts), 1) if self.policy.concurrent else self.batch_size
        out: list[Generation] = []
        for lo in range(0, len(prompts), size):
            hi = min(lo + size, len(prompts))
            try:
                out.extend(call(lo, hi))
            except Exception as e:
                if getattr(e, "fatal", False):
                    raise
                for i in range(lo, hi):
                    try:
                        out.extend(call(i, i + 1))
                    except Exception as e:
                        if getattr(e, "fatal", False):
                            raise
                        out.append(Generation("", [], [], [], error=f"{type(e).__name__}: {e}"))
        return out

    def close(self) -> None:
        self.policy.close()


def guarded_stack(prompt: PromptConfig, env: gym.Env, anchor_mode: str = "state") -> gym.Env:
    """A leaderboard env: the prompt stack (``wrap_for_llm``) with ``CrashGuard`` outermost."""
    return CrashGuard(wrap_for_llm(env, prompt, anchor_mode))


# -- the run ----------------------------------------------------------------------------
@dataclass
class EpisodeRecord:
    """One episode of a leaderboard run, as the result and episode files keep it."""

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
    #: What a served model reported over the episode (tokens, requests, system fingerprints).
    usage: dict[str, Any] | None = None

    @classmethod
    def of(cls, episode: Episode, round_seed: int, reset_seed: int) -> "EpisodeRecord":
        """The record of an episode the player finished."""
        return cls(episode.index, round_seed, reset_seed, episode.task_id, episode.task_type, episode.status,
                   episode.won, episode.env_return, episode.length, episode.invalid_steps, dict(episode.final),
                   episode.error, episode.usage)

    def as_json(self) -> dict[str, Any]:
        out = {"index": self.index, "round_seed": self.round_seed, "reset_seed": self.reset_seed,
               "task_id": self.task_id, "task_type": self.task_type, "status": self.status, "won": self.won,
               "return": self.ret, "steps": self.steps, "invalid_steps": self.invalid_steps, "final": self.final,
               "error": self.error}
        return out if self.usage is None else {**out, "usage": self.usage}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EpisodeRecord":
        keys = ("index", "round_seed", "reset_seed", "task_id", "task_type", "status", "won", "steps",
                "invalid_steps", "final", "error", "usage")
        return cls(**{k: data[k] for k in keys if k in data}, ret=data["return"])


def play_round(policy: Any, envs: Any, sampling: SamplingParams, round_seed: int, *, final_keys: Sequence[str] = (),
               batch_size: int = 16, on_episode_end: Callable[[EpisodeRecord], None] | None = None,
               skip: Sequence[int] = ()) -> list[EpisodeRecord]:
    """Play every env of ``envs`` (reset with ``round_seed``) to the end; one record per episode played.

    ``envs`` wear ``CrashGuard`` outermost (``guarded_stack``).  ``skip`` lists episodes
    (indices in the round) not to play: their envs are neither reset nor stepped, and they
    get no record.  ``on_episode_end`` sees each record once it is final.
    """
    skip = {int(k) for k in skip}
    if skip:  # episode k of the round resets with derive_seed(round_seed, k) (one env per group)
        envs.call("skip_seeds", [derive_seed(round_seed, k) for k in skip])

    records: dict[int, EpisodeRecord] = {}

    def finished(episode: Episode) -> None:
        records[episode.index] = rec = EpisodeRecord.of(episode, round_seed, envs.task_seed(episode.index))
        if on_episode_end is not None:
            on_episode_end(rec)

    try:
        rollout = collect(IsolatedPolicy(policy, batch_size), envs, sampling, seed=round_seed, call_keys=(round_seed,),
                          final_keys=final_keys, rows=False, on_episode_end=finished)
    finally:
        if skip:
            envs.call("skip_seeds", [])
    return [records[ep.index] for ep in rollout.episodes]
