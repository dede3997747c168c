"""Stable-Baselines3 adapters: admissible actions -> ``Discrete(k)``, text -> a hashed vector.

``HashedText(AdmissibleDiscrete(env, max_actions=k), dim=d)`` turns a text env that
lists its admissible actions (ALFWorld, WebShop) into a ``Box(d)`` / ``Discrete(k)``
env that SB3's PPO trains on.  Slot ``i`` is the ``i``-th admissible action of the
current state; slots past the list are *unused*: ``action_masks()`` marks them
False (sb3-contrib's ``MaskablePPO`` reads it), and plain PPO choosing one steps the
env with ``""``, an invalid action (no state change, ``action_valid=False``).

Templated admissible actions (WebShop's ``search[<query>]``) get the text of
``info[query_key]`` in place of ``<query>`` (WebShop's ``instruction``: search for
what the instruction says), since a slot must be one concrete command.

The vector is feature hashing (signed, l2-normalised token counts) of the episode's
task text, the current observation and each slot's action words tagged with the slot
number, so a linear layer can tie slot ``i`` to what it does.  Token indices come
from blake2b, never Python's ``hash()``: the same text gives the same vector in every
process.

>>> import gymnasium as gym, gigpo_gym
>>> env = HashedText(AdmissibleDiscrete(gym.make("gigpo_gym/ALFWorld-v0"), max_actions=48), dim=256)
>>> obs, info = env.reset(seed=0)
>>> obs.shape, int(env.action_space.n), int(env.action_masks().sum()) == len(info["slots"])
((256,), 48, True)
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=1 << 18)
def _bucket(token: str, dim: int) -> tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
    return (h >> 1) % dim, 1.0 if h & 1 else -1.0


class TextHasher:
    """Text -> fixed-size float32 vector by signed feature hashing (stable across processes)."""

    def __init__(self, dim: int = 1024, with_actions: bool = True):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise ValueError(f"dim must be an int >= 8, got {dim!r}")
        self.dim, self.with_actions = dim, bool(with_actions)

    def __call__(self, task: str, observation: str, actions: Sequence[str] = ()) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        parts = [("t:", task), ("o:", observation)]
        if self.with_actions:
            parts += [(f"a{i}:", a) for i, a in enumerate(actions)]
        for prefix, text in parts:
            for word in _WORD.findall(text.lower()):
                index, sign = _bucket(prefix + word, self.dim)
                vec[index] += sign
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec


QUERY_PLACEHOLDER = "<query>"


def concrete_actions(admissible: Sequence[str], query: str | None) -> list[str]:
    """Admissible actions with ``<query>`` replaced by ``query`` (kept as is when there is none)."""
    if not query:
        return list(admissible)
    return [a.replace(QUERY_PLACEHOLDER, query) for a in admissible]


class AdmissibleDiscrete(gym.Wrapper):
    """Action ``i`` plays the ``i``-th admissible action; unused slots are masked / invalid.

    ``info["slots"]`` is the list slot ``i`` indexes (the first ``max_actions``
    admissible actions, ``<query>`` filled from ``info[query_key]``);
    ``info["slots_dropped"]`` counts those cut off.
    """

    def __init__(self, env: gym.Env, max_actions: int = 48, query_key: str = "instruction"):
        if isinstance(max_actions, bool) or not isinstance(max_actions, int) or max_actions < 1:
            raise ValueError(f"max_actions must be a positive int, got {max_actions!r}")
        super().__init__(env)
        self.max_actions = max_actions
        self.query_key = query_key
        self._query: str | None = None
        self.action_space = gym.spaces.Discrete(max_actions)
        self._slots: list[str] = []

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._query = info.get(self.query_key)
        if not info.get("admissible_actions"):
            env_id = self.env.spec.id if self.env.spec is not None else type(self.env.unwrapped).__name__
            raise ValueError(
                f"AdmissibleDiscrete needs an env that lists admissible actions; {env_id} gives none at reset "
                "(an open action space, e.g. SearchQA)"
            )
        return obs, self._slot_info(info)

    def step(self, action: Any):
        index = int(action)
        command = self._slots[index] if 0 <= index < len(self._slots) else ""
        obs, reward, terminated, truncated, info = self.env.step(command)
        info["slot_used"] = bool(command)
        return obs, reward, terminated, truncated, self._slot_info(info)

    def action_masks(self) -> np.ndarray:
        """True for the slots that hold an admissible action (all True if there are none)."""
        mask = np.zeros(self.max_actions, dtype=bool)
        mask[: len(self._slots)] = True
        return mask if mask.any() else np.ones(self.max_actions, dtype=bool)

    def _slot_info(self, info: dict[str, Any]) -> dict[str, Any]:
        admissible = concrete_actions(info.get("admissible_actions") or [], info.get(self.query_key, self._query))
        self._slots = admissible[: self.max_actions]
        info["slots"] = list(self._slots)
        info["slots_dropped"] = max(0, len(admissible) - self.max_actions)
        return info


class HashedText(gym.ObservationWrapper):
    """Observation -> ``Box(dim)``: hashed task text + current text (+ slot actions)."""

    def __init__(self, env: gym.Env, dim: int = 1024, with_actions: bool = True):
        super().__init__(env)
        self.hasher = TextHasher(dim, with_actions)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)
        self._task = ""
        self._info: dict[str, Any] = {}

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._task = obs
        info["text"] = obs
        self._info = info
        return self.observation(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["text"] = obs
        self._info = info
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: str) -> np.ndarray:
        slots = self._info.get("slots", self._info.get("admissible_actions", []))
        return self.hasher(self._task, observation, slots)

    def action_masks(self) -> np.ndarray:
        return self.env.get_wrapper_attr("action_masks")()


def make_sb3_env(env_id: str, *, max_actions: int = 48, dim: int = 1024, with_actions: bool = True,
                 env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``HashedText(AdmissibleDiscrete(gym.make(env_id, **env_kwargs)))``."""
    import gigpo_gym  # noqa: F401  (registers the suite)

    env = gym.make(env_id, **dict(env_kwargs or {}))
    return HashedText(AdmissibleDiscrete(env, max_actions=max_actions), dim=dim, with_actions=with_actions)


def sb3_algorithms() -> dict[str, Any]:
    """Name -> class of the SB3 algorithms installed: PPO, and MaskablePPO where sb3-contrib is."""
    try:
        from stable_baselines3 import PPO
    except ImportError as e:
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("sb3", "Stable-Baselines3 training") from e
    algos: dict[str, Any] = {"PPO": PPO}
    try:
        from sb3_contrib import MaskablePPO

        algos["MaskablePPO"] = MaskablePPO
    except ImportError:
        pass
    return algos
