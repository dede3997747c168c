"""Any ``str`` action is an observation: 10,000 hostile actions per env id (``benchmarks/fuzz_envs.py`` runs more)."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import gigpo_gym  # noqa: F401
from gigpo_gym.core import TextEnv, digest
from gigpo_gym.core.fuzz import fuzz_action, fuzz_env
from gigpo_gym.registration import ENV_SPECS

#: The ids that run without an extra (the browser env is fuzzed in test_webshop_browser.py).
CORE_IDS = [spec.id for spec in ENV_SPECS if spec.extra is None]


@pytest.mark.parametrize("env_id", CORE_IDS)
def test_ten_thousand_hostile_actions_keep_the_contract(env_id):
    env = gym.make(env_id)
    failures = list(itertools.islice(fuzz_env(env, 10_000, seed=0), 5))
    env.close()
    assert not failures, "\n".join(map(str, failures))


def test_the_action_stream_is_hostile_and_the_same_for_a_seed():
    def stream(seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        return [fuzz_action(rng, 100, ["click[buy now]", "go to cabinet 1"]) for _ in range(3000)]

    actions = stream(0)
    assert actions == stream(0) and actions != stream(1)
    text = "".join(actions)
    for char in ("\ud800", "\udfff", "\x00", "\u202e", "\u200f", "\ufeff", "\U0010ffff", "\r"):
        assert char in text, repr(char)
    lengths = [len(a) for a in actions]
    assert 100 in lengths and any(n > 100 for n in lengths) and "" in actions
    assert any(a.startswith("search[") for a in actions) and any("buy" in a and a != "click[buy now]" for a in actions)


class _Fragile(TextEnv):
    """Breaks the contract on NUL (raises) and on "x" (a non-str observation)."""

    max_action_length = 64

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "start", self._info()

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if "\x00" in action:
            raise KeyError("NUL")
        return (None if action == "x" else "ok"), 0.0, False, self._info()

    @staticmethod
    def _info() -> dict[str, Any]:
        return {"admissible_actions": ["x"], "anchor": digest(0), "task_id": "0", "task_type": "t"}


def test_the_fuzzer_reports_broken_promises():
    problems = [f.problem for f in fuzz_env(_Fragile(), 2000, seed=0)]
    assert any(p.startswith("KeyError: 'NUL'") for p in problems)
    assert any(p.startswith("observation None is not in String(max_length=65536)") for p in problems)
