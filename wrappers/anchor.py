"""Choose what the anchor key means (what GiGPO groups steps on)."""

from __future__ import annotations

from typing import Any, Literal, get_args

import gymnasium as gym

from gigpo_gym.core.anchor import digest

#: What an anchor key digests: the env's true state, or the raw observation text (the GiGPO paper's choice).
AnchorMode = Literal["state", "observation"]
ANCHOR_MODES: tuple[str, ...] = get_args(AnchorMode)


class AnchorKey(gym.Wrapper):
    """Set ``info["anchor"]`` by ``mode`` and add ``info["anchor_text"]``.

    ``"state"`` keeps the env's digest of its true state (equal keys mean equal
    futures); ``"observation"`` digests the raw current observation text, the GiGPO
    paper's choice, which aliases states that read the same (kept for reproduction).
    Both are scoped by ``task_id``.  ``anchor_text`` is the raw observation, for
    similarity grouping; the env's own key stays in ``info["state_anchor"]``.

    >>> import gymnasium as gym, gigpo_gym
    >>> env = AnchorKey(gym.make("gigpo_gym/SearchQA-v0"), mode="observation")
    >>> obs, info = env.reset(seed=0)
    >>> info["anchor_text"] == obs, info["anchor"] != info["state_anchor"]
    (True, True)
    """

    def __init__(self, env: gym.Env, mode: str = "state"):
        if mode not in ANCHOR_MODES:
            raise ValueError(f"mode must be one of {ANCHOR_MODES}, got {mode!r}")
        super().__init__(env)
        self.mode = mode

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, self._annotate(obs, info)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._annotate(obs, info)

    def _annotate(self, obs: str, info: dict[str, Any]) -> dict[str, Any]:
        info["state_anchor"] = info["anchor"]
        info["anchor_text"] = obs
        if self.mode == "observation":
            info["anchor"] = digest(["observation", info["task_id"], obs])
        return info
