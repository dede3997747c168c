"""Hostile actions for checking the contract: any ``str`` is an observation, never an exception.

``fuzz_actions`` draws LLM-like garbage from a seeded generator: lone surrogates, NULs and
other control characters, bidi and zero-width marks, random code points, the env's own
command shapes with junk inside, admissible actions with junk spliced in, and strings at
and just past ``max_action_length``.  ``fuzz_env`` plays them and lists every broken
promise; the test suite and ``benchmarks/fuzz_envs.py`` both run it.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gigpo_gym.core.env import INFO_KEYS

#: Characters an LLM (or a broken tokenizer) may emit that break naive text handling.
HOSTILE_CHARS = (
    "\ud800", "\udbff", "\udc00", "\udfff",  # lone surrogates: UTF-8 cannot encode them
    "\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85",  # NUL, controls, NEL
    "\n", "\r", "\t", "\x0b", "\x0c", "\u2028", "\u2029",  # line and paragraph breaks
    "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2069",  # bidi
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u0301", "\u034f",  # zero-width, combining
    "\ufffd", "\ufffe", "\uffff", "\U0010ffff", "\U0001f600", "\u4e2d", "\u0640", "\u00e9", "e\u0301", "\u0130",
    "[", "]", "<", ">", "/", "\\", "{", "}", '"', "'", "%", "&", "#", ";", "=", "?", "*", " ", "  ",
)  # fmt: skip
_PRINTABLE = [chr(c) for c in range(32, 127)]
#: Command shapes of the suite's envs; junk goes where ``{}`` is.
SHAPES = (
    "search[{}]", "click[{}]", "search[", "click[]", "<search>{}</search>", "<answer>{}</answer>",
    "<action>{}</action>", "<search>{}", "{}</answer>", "go to {}", "take {} from {}", "put {} in/on {}",
    "open {}", "use {}", "examine {}", "look", "inventory", "{}\n{}", "search[{}]click[{}]",
)  # fmt: skip


def junk(rng: np.random.Generator, max_len: int = 48) -> str:
    """A short string mixing printable ASCII, hostile characters and random code points."""
    out = []
    for _ in range(int(rng.integers(0, max_len + 1))):
        pick = rng.random()
        if pick < 0.5:
            out.append(_PRINTABLE[rng.integers(len(_PRINTABLE))])
        elif pick < 0.85:
            out.append(HOSTILE_CHARS[rng.integers(len(HOSTILE_CHARS))])
        else:
            out.append(chr(int(rng.integers(0, 0x110000))))
    return "".join(out)


def fuzz_action(rng: np.random.Generator, bound: int, admissible: list[str]) -> str:
    """One hostile action for an env whose actions may hold ``bound`` characters."""
    pick = rng.random()
    if pick < 0.25 and admissible:
        action = admissible[rng.integers(len(admissible))]
        cut = int(rng.integers(0, len(action) + 1))
        return (action[:cut] + junk(rng, 4) + action[cut:])[:bound] if rng.random() < 0.7 else action
    if pick < 0.6:
        shape = SHAPES[rng.integers(len(SHAPES))]
        return shape.format(*(junk(rng) for _ in range(shape.count("{}"))))[:bound]
    if pick < 0.9:
        return junk(rng)[:bound]
    if pick < 0.95:  # at the bound exactly
        filler = junk(rng, 64) or "x"
        return (SHAPES[0].format("") + filler * (bound // len(filler) + 1))[:bound]
    return "x" * bound + junk(rng, 8) + "y"  # past the bound: a ValueError naming it


@dataclass
class Failure:
    """One broken promise: the action, what went wrong, and where."""

    step: int
    action: str
    problem: str

    def __str__(self) -> str:
        return f"step {self.step}: action {self.action!r:.120} -> {self.problem}"


def _check_step(env, result: Any) -> str | None:
    """What is wrong with one ``step`` result, or None."""
    if not (isinstance(result, tuple) and len(result) == 5):
        return f"step returned {type(result).__name__} {result!r:.80}, not a 5-tuple"
    obs, reward, terminated, truncated, info = result
    if not isinstance(obs, str) or not env.observation_space.contains(obs):
        return f"observation {obs!r:.80} is not in {env.observation_space}"
    try:
        obs.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"observation is not UTF-8 encodable ({e})"
    if not isinstance(reward, float) or not math.isfinite(reward):
        return f"reward {reward!r} is not a finite float"
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        return f"terminated/truncated are {terminated!r}/{truncated!r}, not bools"
    if not isinstance(info, dict) or not set(INFO_KEYS) <= set(info):
        return f"info lacks {sorted(set(INFO_KEYS) - set(info or {}))}"
    if not isinstance(info["action_valid"], bool) or not isinstance(info["anchor"], str):
        return "info['action_valid'] is not a bool or info['anchor'] is not a str"
    return None


def fuzz_env(env, num_actions: int, seed: int = 0, progress=None) -> Iterator[Failure]:
    """Play ``num_actions`` hostile actions on ``env`` (a ``gym.make`` result); yield each failure.

    Episodes that end are reset with the next seed.  An action past ``max_action_length``
    must raise ValueError naming the bound and leave the episode as it was.
    ``progress(n)`` is called after every action (a progress bar's ``update``).
    """
    rng = np.random.default_rng(seed)
    bound = env.unwrapped.max_action_length
    episode = 0
    _, info = env.reset(seed=seed)
    for step in range(num_actions):
        action = fuzz_action(rng, bound, list(info.get("admissible_actions") or []))
        problem, ended = None, True
        try:
            result = env.step(action)
        except ValueError as e:
            if len(action) > bound and f"max_action_length={bound}" in str(e):
                ended = False  # the refused action left the episode as it was
            else:
                problem = f"ValueError: {e}"
        except Exception as e:
            problem = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}"
        else:
            problem = _check_step(env, result)
            if problem is None and len(action) > bound:
                problem = f"an action of {len(action)} > {bound} characters did not raise"
            if problem is None:
                info, ended = result[4], result[2] or result[3]
        if problem is not None:
            yield Failure(step, action, problem)
        if progress is not None:
            progress(1)
        if ended:
            episode += 1
            _, info = env.reset(seed=seed + episode)
