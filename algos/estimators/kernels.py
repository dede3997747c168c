"""Vectorised building blocks shared by the estimators: no Python loop per row.

- ``factorize``: dense codes for ints or strings (Arrow's hash table, no sort).
- ``Trajectories``: which trajectory / task group each row is in, trajectory
  returns, and the rows ordered by step inside each trajectory.
- ``group_normalize``: (x - mean) / (std + eps) inside groups, with the project's
  rules (unbiased std, eps 1e-6, singleton group -> 0, all equal -> exactly 0).
- ``reverse_scan``: y_t = x_t + c * y_{t+1} along each trajectory, looping over
  the step index only (at most the longest episode's length), never over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gigpo_gym.algos.batch import StepBatch

#: Added to the standard deviation before dividing (the project's fixed epsilon).
EPS = 1e-6


def factorize(values: np.ndarray | pa.Array) -> tuple[np.ndarray, int]:
    """Codes 0..k-1 (in order of first appearance) and k, for an int or str array."""
    array = values if isinstance(values, pa.Array) else pa.array(values)
    encoded = pc.dictionary_encode(array)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return codes, len(encoded.dictionary)


def group_normalize(values: np.ndarray, groups: np.ndarray, n_groups: int, norm_by_std: bool, weights: np.ndarray | None = None) -> np.ndarray:
    """x - mean_g, divided by (std_g + EPS) when ``norm_by_std``.

    ``weights`` are frequency weights (a value standing for several rows).  The std
    is the unbiased one: sqrt(sum w (x - mean)^2 / (sum w - 1)).  Every value is first
    shifted by one member of its group, so a group whose values are all equal (a
    singleton included) gives exactly 0, never a rounding residue over EPS.
    """
    counts = np.bincount(groups, weights, minlength=n_groups).astype(np.float64)
    reference = np.empty(n_groups)
    reference[groups] = values
    centered = values - reference[groups]
    mean = np.bincount(groups, centered if weights is None else centered * weights, minlength=n_groups) / np.maximum(counts, 1.0)
    deviation = centered - mean[groups]
    if not norm_by_std:
        return deviation
    squares = deviation * deviation if weights is None else deviation * deviation * weights
    variance = np.bincount(groups, squares, minlength=n_groups) / np.maximum(counts - 1.0, 1.0)
    return deviation / (np.sqrt(variance) + EPS)[groups]


def group_spread(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """max - min of ``values`` inside each group (0 where all values are equal)."""
    high = np.full(n_groups, -np.inf)
    low = np.full(n_groups, np.inf)
    np.maximum.at(high, groups, values)
    np.minimum.at(low, groups, values)
    return high - low


def batch_normalize(values: np.ndarray) -> np.ndarray:
    """(x - mean) / (std + EPS) over the whole batch (unbiased std; one row -> 0)."""
    if values.size == 0:
        return values.astype(np.float64)
    return group_normalize(values, np.zeros(values.size, dtype=np.int64), 1, True)


@dataclass(frozen=True)
class Trajectories:
    """Row -> trajectory -> task group, and the rows of each trajectory in step order.

    ``order`` lists the rows sorted by (trajectory, step); trajectory ``t`` occupies
    ``order[starts[t] : starts[t] + lengths[t]]``.
    """

    row_traj: np.ndarray
    n_traj: int
    lengths: np.ndarray
    starts: np.ndarray
    traj_group: np.ndarray
    n_groups: int
    returns: np.ndarray
    order: np.ndarray

    @property
    def row_group(self) -> np.ndarray:
        return self.traj_group[self.row_traj]

    def group_sizes(self) -> np.ndarray:
        """Trajectories per task group."""
        return np.bincount(self.traj_group, minlength=self.n_groups)


def trajectories(batch: StepBatch, *, ordered: bool = True) -> Trajectories:
    """Index a batch by trajectory; ``ordered=False`` skips the step ordering (GRPO needs none).

    Raises ``ValueError`` if a trajectory has rows in two task groups or two rows with
    the same step id (both make the result depend on row order).
    """
    n = len(batch)
    row_traj, n_traj = factorize(batch.traj_ids)
    lengths = np.bincount(row_traj, minlength=n_traj)
    group_of_traj = np.empty(n_traj, dtype=np.int64)
    group_of_traj[row_traj] = batch.group_ids
    clash = np.flatnonzero(group_of_traj[row_traj] != batch.group_ids)
    if clash.size:
        row = clash[0]
        raise ValueError(
            f"trajectory {batch.traj_ids[row]} has rows in task groups {batch.group_ids[row]} and "
            f"{group_of_traj[row_traj[row]]}; traj_ids must be unique across the batch"
        )
    traj_group, n_groups = factorize(group_of_traj)
    starts = np.zeros(n_traj, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    order = _step_order(batch, row_traj, lengths, starts) if ordered else np.arange(n)
    returns = np.bincount(row_traj, batch.rewards, minlength=n_traj)
    return Trajectories(row_traj, n_traj, lengths, starts, traj_group, n_groups, returns, order)


def _step_order(batch: StepBatch, row_traj: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Rows sorted by (trajectory, step): a scatter when steps are 0..L-1, else a lexsort."""
    n = len(batch)
    steps = batch.step_ids
    slot = starts[row_traj] + steps
    if n and steps.min() >= 0 and np.all(steps < lengths[row_traj]) and np.bincount(slot, minlength=n).max() == 1:
        order = np.empty(n, dtype=np.int64)
        order[slot] = np.arange(n)
        return order
    order = np.lexsort((steps, row_traj))
    same = (row_traj[order[1:]] == row_traj[order[:-1]]) & (steps[order[1:]] == steps[order[:-1]])
    if same.any():
        row = order[np.flatnonzero(same)[0]]
        raise ValueError(f"trajectory {batch.traj_ids[row]} has two rows with step_id {steps[row]}; step ids must be unique per trajectory")
    return order


def reverse_scan(values: np.ndarray, traj: Trajectories, decay: float) -> np.ndarray:
    """y_t = x_t + decay * y_{t+1} along each trajectory (y after the last step = 0).

    Works on the step-ordered layout; iteration k updates position k of every
    trajectory longer than k + 1, so the loop runs max-length times and touches each
    row once.
    """
    out = np.empty_like(values, dtype=np.float64)
    if values.size == 0:
        return out
    y = values[traj.order].astype(np.float64)
    if decay != 0.0:
        longest_first = np.argsort(-traj.lengths, kind="stable")
        first_row = traj.starts[longest_first]
        histogram = np.bincount(traj.lengths)
        longer_than = np.cumsum(histogram[::-1])[::-1][1:]  # longer_than[k] = #trajectories with length > k
        for k in range(len(longer_than) - 2, -1, -1):
            rows = first_row[: longer_than[k + 1]] + k
            y[rows] += decay * y[rows + 1]
    out[traj.order] = y
    return out


def next_in_trajectory(values: np.ndarray, traj: Trajectories) -> np.ndarray:
    """Each row's successor value along its trajectory (0 after the last step)."""
    ordered = values[traj.order]
    shifted = np.zeros_like(ordered, dtype=np.float64)
    shifted[:-1] = ordered[1:]
    shifted[traj.starts + traj.lengths - 1] = 0.0
    out = np.empty_like(shifted)
    out[traj.order] = shifted
    return out
