"""Episode-level group-relative estimators: GRPO (and Dr.GRPO), DAPO, RLOO.

Each compares a trajectory's return R(tau) = sum of its rows' rewards with the other
trajectories of its task group (the N copies of one task), and gives every row of
the trajectory the same advantage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.kernels import Trajectories, group_normalize, group_spread, trajectories
from gigpo_gym.algos.estimators.registry import AdvantageParts, Algorithm, register_algorithm


def episode_advantages(traj: Trajectories, norm_by_std: bool, per_step: bool = False) -> np.ndarray:
    """Per-trajectory A^E = (R(tau) - mean_g) / (std_g + 1e-6)  (or R - mean without std).

    The mean and unbiased std run over the trajectories of the task group g; with
    ``per_step`` they run over its rows instead (each row counts its trajectory's
    return, so long trajectories weigh more: the GiGPO reference trainer's default).
    A group with one trajectory, or whose returns are all equal, gets exactly 0.
    """
    weights = traj.lengths.astype(np.float64) if per_step else None
    return group_normalize(traj.returns, traj.traj_group, traj.n_groups, norm_by_std, weights)


def row_penalties(batch: StepBatch) -> np.ndarray:
    """``batch.penalties``, which ``invalid_penalty="row"`` cannot do without."""
    if batch.penalties is None:
        raise ValueError(
            'invalid_penalty="row" needs StepBatch.penalties (the invalid-action penalty inside each '
            "row's reward, 0 on valid steps); the trainer's rollouts carry it"
        )
    return batch.penalties


def episode_row_advantages(
    batch: StepBatch,
    traj: Trajectories,
    norm_by_std: bool,
    episode_stats: str = "trajectory",
    invalid_penalty: str = "reward",
) -> np.ndarray:
    """A^E of every row, with the statistics and penalty placement chosen.

    ``invalid_penalty="reward"``: the penalty is part of the rewards, so every row of
    a trajectory scores R(tau) (``episode_advantages``).  ``"row"`` (verl-agent): row i
    scores s_i = R'(tau) - p_i, R'(tau) the return without penalties and p_i the row's
    own penalty; A^E_i = (s_i - mean_g) / (std_g + 1e-6), the mean and std over the
    scores of all the group's rows (``episode_stats="step"``) or of each trajectory's
    first row (``"trajectory"``).  A group of one trajectory gets 0.
    """
    per_step = episode_stats == "step"
    if invalid_penalty == "reward":
        return episode_advantages(traj, norm_by_std, per_step)[traj.row_traj]
    penalties = row_penalties(batch)
    clean_returns = traj.returns + np.bincount(traj.row_traj, penalties, minlength=traj.n_traj)
    scores = clean_returns[traj.row_traj] - penalties
    row_group = traj.row_group
    first_rows = None if per_step else (traj.position < traj.n_traj).astype(np.float64)  # layout block 0: first steps
    out = group_normalize(scores, row_group, traj.n_groups, norm_by_std, first_rows)
    out[traj.group_sizes()[row_group] < 2] = 0.0
    return out


def grpo_advantages(
    batch: StepBatch, norm_by_std: bool = True, episode_stats: str = "trajectory", invalid_penalty: str = "reward"
) -> np.ndarray:
    """GRPO: A_i = (R_i - mean_j R_j) / (std_j R_j + 1e-6) over the group's trajectories.

    ``norm_by_std=False`` is Dr.GRPO: A_i = R_i - mean_j R_j.  Every row of trajectory
    i gets A_i.  Singleton groups and all-equal groups get 0.  ``episode_stats`` and
    ``invalid_penalty`` are verl-agent's variants (``episode_row_advantages``).
    """
    ordered = invalid_penalty == "row" and episode_stats == "trajectory"  # needs each trajectory's first row
    traj = trajectories(batch, ordered=ordered)
    return episode_row_advantages(batch, traj, norm_by_std, episode_stats, invalid_penalty)


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
    episode_stats: Literal["trajectory", "step"] = "trajectory"
    """Mean/std over the group's trajectories (the paper) or over its rows (verl-agent's default)."""
    invalid_penalty: Literal["reward", "row"] = "reward"
    """Invalid-action penalty inside the rewards, or on its own row after the sums (verl-agent)."""

    def advantages(self, batch: StepBatch) -> np.ndarray:
        return grpo_advantages(batch, self.norm_by_std, self.episode_stats, self.invalid_penalty)

    def advantage_parts(self, batch: StepBatch) -> AdvantageParts:
        """Episode level only: the advantages are the A^E part."""
        advantages = self.advantages(batch)
        return AdvantageParts(advantages, episode=advantages)


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

    def advantage_parts(self, batch: StepBatch) -> AdvantageParts:
        """Episode level only: the advantages are the A^E part (against the leave-one-out baseline)."""
        advantages = self.advantages(batch)
        return AdvantageParts(advantages, episode=advantages)
