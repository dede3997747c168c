"""Vectorised building blocks shared by the estimators: no Python loop per row.

- ``factorize``: dense codes for ints or strings (Arrow's hash table, no sort);
  ``factorize_uint64``: the same for 64-bit keys with many distinct values.
- ``Trajectories``: which trajectory / task group each row is in, trajectory
  returns, and each row's place in a step-major layout of the trajectories.
- ``group_normalize``: (x - mean) / (std + eps) inside groups, with the project's
  rules (unbiased std, eps 1e-6, singleton group -> 0, all equal -> exactly 0).
- ``reverse_scan``: y_t = x_t + c * y_{t+1} along each trajectory, looping over
  the step index only (at most the longest episode's length) on contiguous
  slices, never over rows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gigpo_gym.algos.estimators.batch import StepBatch

#: Added to the standard deviation before dividing (the project's fixed epsilon).
EPS = 1e-6


def factorize(values: np.ndarray | pa.Array) -> tuple[np.ndarray, int]:
    """Codes 0..k-1 (in order of first appearance) and k, for an int or str array."""
    array = values if isinstance(values, pa.Array) else pa.array(values)
    encoded = pc.dictionary_encode(array)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return codes, len(encoded.dictionary)


# Odd 64-bit multipliers (golden ratio, splitmix64), one per hashing round in turn.
_MULTIPLIERS = tuple(np.uint64(m) for m in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93))


def factorize_uint64(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes 0..k-1 (in no particular order) and k, for a uint64 array.

    A vectorised hash table, several times faster than ``factorize`` when most keys
    are distinct (step groups: about half as many as rows).  Each round hashes the
    rows still without a code into a table of about one slot per row (multiplicative
    hashing, top bits), writes every key to its slot and reads the slot back.  All
    copies of a key share a slot, so either all of them find their key there and take
    the slot as code, or none does and they retry next round with another multiplier;
    each round settles at least one key per used slot.  The slots are then renumbered
    densely.
    """
    code = np.empty(len(keys), dtype=np.intp)
    rows: slice | np.ndarray = slice(None)  # the rows without a code: all, then an index array
    offset = 0
    for multiplier in itertools.cycle(_MULTIPLIERS):
        subset = keys[rows]
        if not len(subset):
            break
        bits = max(len(subset) - 1, 1).bit_length()
        slot = subset * multiplier
        slot >>= np.uint64(64 - bits)
        slot = slot.view(np.int64)  # < 2**bits, so the same number
        table = np.empty(1 << bits, dtype=np.uint64)
        table[slot] = subset
        missed = np.flatnonzero(table[slot] != subset)
        slot += offset
        code[rows] = slot
        rows = missed if isinstance(rows, slice) else rows[missed]
        offset += 1 << bits
    used = np.zeros(offset, dtype=bool)
    used[code] = True
    dense = np.cumsum(used, dtype=np.int32 if len(keys) < 2**31 else np.int64) - 1  # int32: half the bytes to read at random
    return dense[code].astype(np.intp), int(used.sum())


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
    deviation = values - reference[groups]  # centred on the reference, then on the mean (in place: fewer fresh pages)
    mean = np.bincount(groups, deviation if weights is None else deviation * weights, minlength=n_groups) / np.maximum(counts, 1.0)
    deviation -= mean[groups]
    if not norm_by_std:
        return deviation
    squares = deviation * deviation if weights is None else deviation * deviation * weights
    variance = np.bincount(groups, squares, minlength=n_groups) / np.maximum(counts - 1.0, 1.0)
    deviation /= (np.sqrt(variance) + EPS)[groups]
    return deviation


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

    Step order lives in a step-major layout: block k holds the k-th step (by step id)
    of every trajectory longer than k, longest trajectories first, so block k + 1
    lines up with the first ``block_sizes[k + 1]`` entries of block k (same
    trajectories, one step later).  Block k starts at ``block_starts[k]``; row i sits
    at ``position[i]`` (``None`` for ``trajectories(..., ordered=False)``).
    """

    row_traj: np.ndarray
    n_traj: int
    lengths: np.ndarray
    traj_group: np.ndarray
    n_groups: int
    returns: np.ndarray
    position: np.ndarray | None
    block_starts: np.ndarray
    block_sizes: np.ndarray

    @property
    def row_group(self) -> np.ndarray:
        return self.traj_group[self.row_traj]

    def group_sizes(self) -> np.ndarray:
        """Trajectories per task group."""
        return np.bincount(self.traj_group, minlength=self.n_groups)


def trajectories(batch: StepBatch, *, ordered: bool = True) -> Trajectories:
    """Index a batch by trajectory; ``ordered=False`` skips the step layout (GRPO needs none).

    Raises ``ValueError`` if a trajectory has rows in two task groups or two rows with
    the same step id (both make the result depend on row order).
    """
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
    returns = np.bincount(row_traj, batch.rewards, minlength=n_traj)
    block_sizes = np.cumsum(np.bincount(lengths)[::-1])[::-1][1:]  # block_sizes[k] = #trajectories longer than k
    block_starts = np.cumsum(block_sizes) - block_sizes
    position = _layout_positions(batch, row_traj, lengths, block_starts) if ordered else None
    return Trajectories(row_traj, n_traj, lengths, traj_group, n_groups, returns, position, block_starts, block_sizes)


def _layout_positions(batch: StepBatch, row_traj: np.ndarray, lengths: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
    """Each row's index in the step-major layout: block of its step, then its trajectory's rank."""
    n = len(batch)
    rank = np.empty(len(lengths), dtype=np.int64)
    rank[np.argsort(-lengths, kind="stable")] = np.arange(len(lengths))
    row_rank = rank[row_traj]
    steps = batch.step_ids
    if n and steps.min() >= 0 and np.all(steps < lengths[row_traj]):  # steps are 0..L-1, unless one repeats
        position = block_starts[steps] + row_rank
        seen = np.zeros(n, dtype=bool)
        seen[position] = True
        if seen.all():
            return position
    order = np.lexsort((steps, row_traj))
    same = (row_traj[order[1:]] == row_traj[order[:-1]]) & (steps[order[1:]] == steps[order[:-1]])
    if same.any():
        row = order[np.flatnonzero(same)[0]]
        raise ValueError(f"trajectory {batch.traj_ids[row]} has two rows with step_id {steps[row]}; step ids must be unique per trajectory")
    step_rank = np.empty(n, dtype=np.int64)
    step_rank[order] = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return block_starts[step_rank] + row_rank


def _in_layout(values: np.ndarray, traj: Trajectories) -> np.ndarray:
    if traj.position is None:
        raise ValueError("step order needs trajectories(batch, ordered=True)")
    out = np.empty(len(values), dtype=np.float64)
    out[traj.position] = values
    return out


def reverse_scan(values: np.ndarray, traj: Trajectories, decay: float) -> np.ndarray:
    """y_t = x_t + decay * y_{t+1} along each trajectory (y after the last step = 0).

    Works on the step-major layout: iteration k updates block k from block k + 1, two
    contiguous slices, so the loop runs max-length times and touches each row once.
    """
    y = _in_layout(values, traj)
    if decay != 0.0:
        starts, sizes = traj.block_starts, traj.block_sizes
        for k in range(len(sizes) - 2, -1, -1):
            here, after, size = starts[k], starts[k + 1], sizes[k + 1]
            y[here : here + size] += decay * y[after : after + size]
    return y[traj.position]


def next_in_trajectory(values: np.ndarray, traj: Trajectories) -> np.ndarray:
    """Each row's successor value along its trajectory (0 after the last step)."""
    y = _in_layout(values, traj)
    shifted = np.zeros_like(y)
    starts, sizes = traj.block_starts, traj.block_sizes
    for k in range(len(sizes) - 1):
        here, after, size = starts[k], starts[k + 1], sizes[k + 1]
        shifted[here : here + size] = y[after : after + size]
    return shifted[traj.position]
