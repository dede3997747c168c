"""A Stable-Baselines3 model as a policy: its action slots read back as the admissible command they stand for.

The model was trained on ``HashedText(AdmissibleDiscrete(env))`` (``gigpo_gym.wrappers.sb3``,
``benchmarks/train_sb3.py``); the policy rebuilds the same features from each row's
context (task, observation, admissible actions, WebShop's instruction), so the
leaderboard plays it through the same episode player as any model (``--policy sb3:PATH.zip``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams
from gigpo_gym.wrappers.sb3 import TextHasher, concrete_actions, sb3_algorithms


class SB3Policy(Policy):
    """A trained SB3 model behind the leaderboard's ``generate`` call (acts greedily).

    Saved as ``model.zip`` plus ``model.json`` (algorithm, ``dim``, ``max_actions``,
    ``with_actions``) so the features are rebuilt exactly as in training.
    """

    needs_context = ("admissible_actions", "observation", "task", "instruction")

    def __init__(self, model: Any, settings: dict[str, Any]):
        self.model, self.settings = model, dict(settings)
        self.algo_name = settings["algo"]
        self.max_actions = int(settings["max_actions"])
        self.hasher = TextHasher(int(settings["dim"]), bool(settings.get("with_actions", True)))

    @staticmethod
    def settings_path(path: str | Path) -> Path:
        return Path(path).with_suffix(".json")

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.model.save(str(path))
        self.settings_path(path).write_text(json.dumps(self.settings, indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> "SB3Policy":
        path = Path(path)
        meta = cls.settings_path(path)
        if not meta.is_file():
            raise FileNotFoundError(f"{meta} is missing: it holds the feature settings of {path}")
        settings = json.loads(meta.read_text())
        algos = sb3_algorithms()
        if settings.get("algo") not in algos:
            raise ValueError(f"{meta}: algo {settings.get('algo')!r} is not available (installed: {sorted(algos)})")
        return cls(algos[settings["algo"]].load(str(path), device=device), settings)

    def describe(self) -> dict[str, Any]:
        return dict(self.settings)

    def close(self) -> None:
        """Nothing to release."""

    def act(self, task: str, observation: str, admissible: Sequence[str], query: str | None = None) -> str:
        slots = concrete_actions(admissible, query)[: self.max_actions]
        features = self.hasher(task, observation, slots)
        kwargs = {}
        if self.algo_name == "MaskablePPO":
            mask = np.zeros(self.max_actions, dtype=bool)
            mask[: len(slots)] = True
            kwargs["action_masks"] = mask if mask.any() else np.ones(self.max_actions, dtype=bool)
        action, _ = self.model.predict(features, deterministic=True, **kwargs)
        index = int(action)
        return slots[index] if index < len(slots) else ""

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        if contexts is None or len(contexts) != len(prompts):
            raise ValueError("SB3Policy needs one context (task, observation, admissible_actions) per prompt")
        out = []
        for ctx in contexts:
            action = self.act(ctx.get("task", ""), ctx.get("observation", ""), ctx.get("admissible_actions") or [],
                              ctx.get("instruction"))
            out.append(Generation(text=f"<action>{action}</action>", prompt_ids=[], response_ids=[], log_probs=[]))
        return out
