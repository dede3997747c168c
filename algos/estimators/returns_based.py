"""Estimators built on per-step returns along a trajectory: PPO (GAE) and REINFORCE++."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.kernels import batch_normalize, next_in_trajectory, reverse_scan, trajectories
from gigpo_gym.algos.estimators.registry import Algorithm, register_algorithm


def gae(batch: StepBatch, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over the rows of each trajectory, in step order.

    delta_t = r_t + gamma * V_{t+1} - V_t  (V after the last row = 0: the episode ended)
    A_t = delta_t + gamma * lam * A_{t+1};  value target = A_t + V_t.

    With gamma = lam = 1 the target is the return-to-go sum_{k>=t} r_k.  Returns
    ``(advantages, value_targets)``, both raw (not normalised).
    """
    if batch.values is None:
        raise ValueError("ppo needs critic values: fill StepBatch.values with V(s_t) for every row (needs_critic=True)")
    traj = trajectories(batch)
    deltas = batch.rewards + gamma * next_in_trajectory(batch.values, traj) - batch.values
    advantages = reverse_scan(deltas, traj, gamma * lam)
    return advantages, advantages + batch.values


def reinforce_pp_advantages(batch: StepBatch, gamma: float = 1.0) -> np.ndarray:
    """REINFORCE++: discounted returns normalised over the whole batch.

    G_t = r_t + gamma * G_{t+1} along each trajectory, then
    A_t = (G_t - mean_batch G) / (std_batch G + 1e-6), every row weighing the same.
    No critic and no group baseline (arXiv 2501.03262; verl whitens over tokens, here
    over rows; the KL term lives in the shared loss, not in the reward).
    """
    return batch_normalize(reverse_scan(batch.rewards, trajectories(batch), gamma))


@register_algorithm("ppo")
@dataclass
class PPO(Algorithm):
    """PPO with a critic: GAE advantages, value targets for the value head."""

    needs_critic: ClassVar[bool] = True

    gamma: float = 1.0
    """Discount between steps (1.0: each step's target is the return-to-go)."""
    lam: float = 1.0
    """GAE lambda (1.0: Monte-Carlo advantages)."""
    normalize_advantages: bool = True
    """Whiten the advantages over the batch (mean 0, std 1), as verl does."""

    def validate(self) -> None:
        super().validate()
        for key in ("gamma", "lam"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"ppo: {key} must be in [0, 1], got {getattr(self, key)}")

    def advantages(self, batch: StepBatch) -> np.ndarray:
        advantages, _ = gae(batch, self.gamma, self.lam)
        return batch_normalize(advantages) if self.normalize_advantages else advantages

    def value_targets(self, batch: StepBatch) -> np.ndarray:
        return gae(batch, self.gamma, self.lam)[1]


@register_algorithm("reinforce_pp")
@dataclass
class ReinforcePP(Algorithm):
    """REINFORCE++: batch-normalised discounted returns, no critic."""

    gamma: float = 1.0
    """Discount of the per-step return."""

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"reinforce_pp: gamma must be in [0, 1], got {self.gamma}")

    def advantages(self, batch: StepBatch) -> np.ndarray:
        return reinforce_pp_advantages(batch, self.gamma)
