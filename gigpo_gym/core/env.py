"""The text-environment contract every gigpo-gym env follows.

Engines (ALFWorld, WebShop, SearchQA) know nothing of gymnasium; ``TextEnv`` is the
thin adapter that checks the caller's input, fills the guaranteed ``info`` keys and
leaves the rules to the subclass's ``_reset`` / ``_step``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from typing import Any

import gymnasium as gym
import numpy as np

from gigpo_gym.core.spaces import String

#: Keys present in every ``info`` dict returned by ``reset`` and ``step``.
INFO_KEYS = ("admissible_actions", "anchor", "action_valid", "won", "task_id", "task_type")
#: Surrogate code points: a Python ``str`` may hold them alone, UTF-8 (and a browser) cannot.
_SURROGATE = re.compile("[\ud800-\udfff]")


def derive_seed(*parts: int) -> int:
    """A 32-bit seed derived from integers (no global RNG, same in every process)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFFFFFFFFFF for p in parts]).generate_state(1)[0])


class TextEnv(gym.Env[str, str]):
    """Base class of the suite: text in, text out.

    Observation
        ``obs`` is a ``str``: the current observation only (the history is the job of
        ``wrappers.HistoryPrompt``).
    Action
        A ``str``: free text as an LLM writes it, or an exact admissible command.
        Non-``str`` actions raise ``TypeError``; strings longer than
        ``max_action_length`` raise ``ValueError`` naming the bound.  Any other bad
        action is *not* an exception: the env answers as the original benchmark does
        and sets ``info["action_valid"] = False``.  The empty string is always invalid.
        Surrogate code points (no UTF-8 text holds them) are read as U+FFFD, so
        anchors, logs, servers and browsers only ever see encodable text.
    Reward
        The original benchmark's own (ALFWorld 1.0 on success, WebShop the purchase
        score, SearchQA exact match).  Shaping and penalties belong to the trainer.
    Termination
        ``terminated`` means the task ended by the rules (won, bought, answered);
        ``truncated`` comes from the registered ``max_episode_steps`` (``TimeLimit``).
        After either, call ``reset``; stepping a finished episode raises.
    Info
        Always ``admissible_actions: list[str]`` (may be empty where the action space
        is open), ``anchor: str`` (digest of the true state, see ``core.anchor``),
        ``action_valid: bool``, ``won: bool``, ``task_id: str``, ``task_type: str``;
        subclasses add their own extras.
    Seeding
        ``reset(seed=s)`` picks the task from ``s`` and the same ``s`` gives the same
        task and transcript in any process; ``options={"task_id": ...}`` picks a task
        by id instead.

    Subclasses implement ``_reset(seed, options) -> (obs, info)`` and
    ``_step(action) -> (obs, reward, terminated, info)``; the ``info`` they return
    needs ``anchor``, ``admissible_actions``, ``task_id`` and ``task_type`` (``won``
    and ``action_valid`` default to ``False`` and ``True``).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}
    #: Upper bound on the characters of one action (documented per env).
    max_action_length: int = 4096
    #: Upper bound on the characters of one observation.
    max_observation_length: int = 65536

    def __new__(cls, *args: Any, **kwargs: Any):
        """An unknown keyword (a typo in ``gym.make``) is a TypeError naming the accepted ones."""
        accepted = _keyword_names(cls)
        for key in kwargs:
            if accepted is not None and key not in accepted:
                close = difflib.get_close_matches(key, accepted, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(f"{cls.__name__} got an unexpected keyword argument {key!r}{hint}; "
                                f"accepted: {', '.join(accepted)}")
        return super().__new__(cls)

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = String(self.max_observation_length)
        self.action_space = String(self.max_action_length)
        self._obs: str | None = None
        self._done = True

    # -- the contract -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:  # a fresh task from the env's own seeded stream
            seed = int(self.np_random.integers(2**31))
        obs, info = self._reset(int(seed), dict(options or {}))
        self._obs, self._done = obs, False
        return obs, self._complete(info, valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}: {action!r:.80}")
        if len(action) > self.max_action_length:
            raise ValueError(
                f"action has {len(action)} characters; the bound is max_action_length={self.max_action_length}"
            )
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended; call reset() before step()")
        obs, reward, terminated, info = self._step(_SURROGATE.sub("\ufffd", action))
        self._obs, self._done = obs, bool(terminated)
        return obs, float(reward), bool(terminated), False, self._complete(info, valid=True)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._obs
        return None

    # -- for subclasses -----------------------------------------------------------
    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        raise NotImplementedError

    @staticmethod
    def _complete(info: dict[str, Any], valid: bool) -> dict[str, Any]:
        info.setdefault("action_valid", valid)
        info.setdefault("won", False)
        missing = [k for k in INFO_KEYS if k not in info]
        if missing:
            raise RuntimeError(f"env bug: info lacks the contract keys {missing}")
        return info


@functools.cache
def _keyword_names(cls: type) -> tuple[str, ...] | None:
    """The keywords ``cls(...)`` accepts; None when it takes ``**kwargs``."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
