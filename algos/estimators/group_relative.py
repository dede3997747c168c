"""Episode-level group-relative estimators: GRPO (and Dr.GRPO), DAPO, RLOO.

Each compares a trajectory's return R(tau) = sum of its rows' rewards with the other
trajectories of its task group (the N copies of one task), and gives every row of
the trajectory the same advantage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.kernels import Trajectories, group_normalize, group_spread, trajectories
from gigpo_gym.algos.estimators.registry import Algorithm, register_algorithm


def episode_advantages(traj: Trajectories, norm_by_std: bool, per_step: bool = False) -> np.ndarray:
    """Per-trajectory A^E = (R(tau) - mean_g) / (std_g + 1e-6)  (or R - mean without std).

    The mean and unbiased std run over the trajectories of the task group g; with
    ``per_step`` they run over its rows instead (each row counts its trajectory's
    return, so long trajectories weigh more: the GiGPO reference trainer's default).
    A group with one trajectory, or whose returns are all equal, gets exactly 0.
    """
    weights = traj.lengths.astype(np.float64) if per_step else None
    return group_normalize(traj.returns, traj.traj_group, traj.n_groups, norm_by_std, weights)


def grpo_advantages(batch: StepBatch, norm_by_std: bool = True) -> np.ndarray:
    """GRPO: A_i = (R_i - mean_j R_j) / (std_j R_j + 1e-6) over the group's trajectories.

    ``norm_by_std=False`` is Dr.GRPO: A_i = R_i - mean_j R_j.  Every row of trajectory
    i gets A_i.  Singleton groups and all-equal groups get 0.
    """
    traj = trajectories(batch, ordered=False)
    return episode_advantages(traj, norm_by_std)[traj.row_traj]


def rloo_advantages(batch: StepBatch) -> np.ndarray:
    """RLOO: A_i = R_i - mean_{j != i} R_j = N / (N - 1) * (R_i - mean_j R_j).

    The baseline of each trajectory is the mean return of the other N - 1 trajectories
    of its group.  A group of one trajectory has no baseline and gets 0 (verl keeps
    the raw return there; 0 keeps a lone trajectory from dominating the update).
    """
    traj = trajectories(batch, ordered=False)
    sizes = traj.group_sizes()[traj.traj_group].astype(np.float64)
    centered = group_normalize(traj.returns, traj.traj_group, traj.n_groups, norm_by_std=False)
    return (centered * sizes / np.maximum(sizes - 1.0, 1.0))[traj.row_traj]


def varied_groups_mask(batch: StepBatch) -> np.ndarray:
    """True for rows whose task group has at least two different trajectory returns.

    DAPO's dynamic sampling drops the other groups: all-equal returns (all solved,
    all failed, or a single trajectory) give zero advantage and only dilute the batch.
    """
    traj = trajectories(batch, ordered=False)
    spread = group_spread(traj.returns, traj.traj_group, traj.n_groups)
    return (spread > 0.0)[traj.traj_group][traj.row_traj]


@register_algorithm("grpo")
@dataclass
class GRPO(Algorithm):
    """Group Relative Policy Optimization: episode-level group-normalised returns."""

    norm_by_std: bool = True
    """Divide by the group's std ("w/ std"); False gives Dr.GRPO / "w/o std"."""

    def advantages(self, batch: StepBatch) -> np.ndarray:
        return grpo_advantages(batch, self.norm_by_std)


@register_algorithm("dapo")
@dataclass
class DAPO(GRPO):
    """DAPO: GRPO advantages, a higher upper clip, and zero-variance groups dropped.

    Dynamic sampling in the paper resamples until the batch is full; here the trainer
    gets ``row_mask`` (it may oversample groups to keep the batch size).  DAPO's
    token-level loss is the shared trainer's token-mean aggregation already.
    """

    clip_high: float = 0.28

    def row_mask(self, batch: StepBatch) -> np.ndarray:
        return varied_groups_mask(batch)


@register_algorithm("rloo")
@dataclass
class RLOO(Algorithm):
    """REINFORCE Leave-One-Out: the baseline is the mean return of the other trajectories."""

    def advantages(self, batch: StepBatch) -> np.ndarray:
        return rloo_advantages(batch)
