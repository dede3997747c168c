"""The loops of ``compiled`` (imported only when numba is installed and used).

Rows are placed once into a group-major layout: task group after task group, each
group's trajectories one after another, each trajectory's steps in order.  The
discounted returns are then a backward scan over that layout, and a task group's
step groups are numbered in a small hash table that stays in the CPU cache, instead
of one table over the whole batch.  The layout costs one scatter of the rows in and
one scatter of the results out; everything else touches small tables.

Placing the rows and working on the task groups run on numba's threads (``prange``:
every row goes to its own place, every task group is worked by one thread), so the
result does not depend on the thread count.  ``numba.set_num_threads`` (or
``NUMBA_NUM_THREADS``) bounds them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gigpo_gym.algos.estimators.kernels import EPS

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True)
def _slot(key, bits):
    """Multiplicative hashing: the top ``bits`` bits of key * 2^64 / golden ratio."""
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(64 - bits))


@njit(cache=True, nogil=True)
def _probe(table, key, bits):
    """The slot holding ``key`` in an open-addressing table of [key, code] rows (code -1 =
    empty) of 2^bits slots, or the empty slot where it goes."""
    slot = _slot(key, bits)
    while table[slot, 1] != -1 and table[slot, 0] != key:
        slot = (slot + 1) & ((1 << bits) - 1)
    return slot


@njit(cache=True, nogil=True)
def _first_appearance_codes(ids):
    """Codes 0..k-1 in order of first appearance, and k.

    Ids within a span of 2 per row (the usual 0..n-1 numbering) index a table
    directly; others go through a hash table that grows with k, so a few distinct
    ids among many rows stay in the CPU cache.
    """
    n = ids.shape[0]
    if n:
        low, high = ids[0], ids[0]
        for i in range(n):
            low = min(low, ids[i])
            high = max(high, ids[i])
        if np.uint64(high) - np.uint64(low) < np.uint64(2 * n):
            direct = np.full(high - low + 1, -1, dtype=np.int32)
            codes = np.empty(n, dtype=np.int32)
            k = 0
            for i in range(n):
                code = direct[ids[i] - low]
                if code == -1:
                    code = k
                    direct[ids[i] - low] = code
                    k += 1
                codes[i] = code
            return codes, k
    bits = 4
    table = np.full((1 << bits, 2), -1, dtype=np.int64)  # [key, code], code -1 = empty
    codes = np.empty(ids.shape[0], dtype=np.int32)
    k = 0
    for i in range(ids.shape[0]):
        key = ids[i]
        slot = _probe(table, key, bits)
        code = table[slot, 1]
        if code == -1:
            code = k
            table[slot, 0] = key
            table[slot, 1] = code
            k += 1
            if 2 * k > (1 << bits):  # keep the load under one half
                bits += 1
                grown = np.full((1 << bits, 2), -1, dtype=np.int64)
                for old in range(table.shape[0]):
                    if table[old, 1] != -1:
                        new = _probe(grown, table[old, 0], bits)
                        grown[new, 0] = table[old, 0]
                        grown[new, 1] = table[old, 1]
                table = grown
        codes[i] = code
    return codes, k


@njit(cache=True, nogil=True)
def _normalize(values, codes, m, k, weights, weighted, norm_by_std, count, reference, sums, out):
    """``kernels.group_normalize`` of values[0..m-1] over codes 0..k-1 (same rules: a
    member's value is subtracted first, so an all-equal group gives exactly 0)."""
    count[:k] = 0.0
    for j in range(m):
        count[codes[j]] += weights[j] if weighted else 1.0
        reference[codes[j]] = values[j]
    sums[:k] = 0.0
    for j in range(m):
        out[j] = values[j] - reference[codes[j]]
        sums[codes[j]] += out[j] * weights[j] if weighted else out[j]
    for c in range(k):
        sums[c] = sums[c] / max(count[c], 1.0)
    if not norm_by_std:
        for j in range(m):
            out[j] -= sums[codes[j]]
        return
    reference[:k] = 0.0  # now the sums of squares
    for j in range(m):
        out[j] -= sums[codes[j]]
        reference[codes[j]] += out[j] * out[j] * weights[j] if weighted else out[j] * out[j]
    for c in range(k):
        reference[c] = np.sqrt(reference[c] / max(count[c] - 1.0, 1.0)) + EPS
    for j in range(m):
        out[j] /= reference[codes[j]]


@njit(cache=True, nogil=True)
def gigpo_rows(traj_ids, group_ids, step_ids, rewards, penalties, keys, gamma, omega, norm_by_std, step_stats, row_penalty, threads,
               parts):
    """A = A^E + omega * A^S per row, and False when the batch needs the reference's checks
    (steps not 0..L-1 in a trajectory, or a trajectory in two task groups).  ``threads``:
    numba's thread count (the task groups are cut into 4 chunks per thread).

    With ``parts`` also each row's A^E, A^S, R_t and step-group code (unique across task
    groups, not dense; A^S even at omega 0); without, those arrays are empty.
    Returns (A, A^E, A^S, R_t, codes, ok)."""
    n = traj_ids.shape[0]
    out = np.empty(n, dtype=np.float64)
    kept = n if parts else 0
    episode_out = np.empty(kept, dtype=np.float64)
    step_out = np.empty(kept, dtype=np.float64)
    returns_out = np.empty(kept, dtype=np.float64)
    codes_out = np.empty(kept, dtype=np.int64)

    # Trajectories: code per row, their task group, length, return (summed in row order).
    row_traj, n_traj = _first_appearance_codes(traj_ids)
    group_of = np.empty(n_traj, dtype=np.int64)
    lengths = np.zeros(n_traj, dtype=np.int64)
    returns = np.zeros(n_traj, dtype=np.float64)
    penalty_sums = np.zeros(n_traj, dtype=np.float64)
    for i in range(n):
        t = row_traj[i]
        if lengths[t] == 0:
            group_of[t] = group_ids[i]
        elif group_of[t] != group_ids[i]:
            return out, episode_out, step_out, returns_out, codes_out, False
        lengths[t] += 1
        returns[t] += rewards[i]
        if row_penalty:
            penalty_sums[t] += penalties[i]
    traj_group, n_groups = _first_appearance_codes(group_of)

    # The group-major layout: where each group's trajectories and each trajectory's steps start.
    group_trajs = np.zeros(n_groups + 1, dtype=np.int64)
    group_rows = np.zeros(n_groups + 1, dtype=np.int64)
    for t in range(n_traj):
        group_trajs[traj_group[t] + 1] += 1
        group_rows[traj_group[t] + 1] += lengths[t]
    for g in range(n_groups):
        group_trajs[g + 1] += group_trajs[g]
        group_rows[g + 1] += group_rows[g]
    traj_order = np.empty(n_traj, dtype=np.int64)  # trajectories by group, in code order inside one
    traj_first = np.empty(n_traj, dtype=np.int64)
    next_traj = group_trajs[:-1].copy()
    next_row = group_rows[:-1].copy()
    for t in range(n_traj):
        g = traj_group[t]
        traj_order[next_traj[g]] = t
        next_traj[g] += 1
        traj_first[t] = next_row[g]
        next_row[g] += lengths[t]

    laid = np.empty((n, 2), dtype=np.int64)
    laid_penalties = np.empty(n if row_penalty else 0, dtype=np.float64)
    source = np.full(n, -1, dtype=np.int32)
    if not _place_rows(step_ids, row_traj, lengths, traj_first, keys, rewards, penalties, row_penalty, laid, laid_penalties, source):
        return out, episode_out, step_out, returns_out, codes_out, False
    _group_advantages(
        group_trajs, group_rows, traj_order, traj_first, lengths, returns, penalty_sums, laid, laid_penalties, source,
        gamma, omega, norm_by_std, step_stats, row_penalty, threads, out, parts, episode_out, step_out, returns_out, codes_out,
    )  # fmt: skip
    return out, episode_out, step_out, returns_out, codes_out, True


@njit(cache=True, nogil=True, parallel=True)
def _place_rows(step_ids, row_traj, lengths, traj_first, keys, rewards, penalties, row_penalty, laid, laid_penalties, source):
    """Write each row's key and reward to its place as one 16-byte record (one scattered
    cache line per row), and the row's index to ``source``; False if a step id is out of
    range or used twice.  n rows go to n places, so a step id used twice leaves a place
    empty: the check needs no shared state and the rows are placed in parallel."""
    reward_bits = rewards.view(np.int64)
    bad = 0
    for i in prange(step_ids.shape[0]):
        s = step_ids[i]
        t = row_traj[i]
        if s < 0 or s >= lengths[t]:
            bad += 1
        else:
            at = traj_first[t] + s
            source[at] = i
            laid[at, 0] = keys[i]
            laid[at, 1] = reward_bits[i]
            if row_penalty:
                laid_penalties[at] = penalties[i]
    for k in prange(source.shape[0]):
        if source[k] == -1:
            bad += 1
    return bad == 0


@njit(cache=True, nogil=True, parallel=True)
def _group_advantages(
    group_trajs, group_rows, traj_order, traj_first, lengths, returns, penalty_sums, laid, laid_penalties, source,
    gamma, omega, norm_by_std, step_stats, row_penalty, threads, out, parts, episode_out, step_out, returns_out, codes_out,
):  # fmt: skip
    """``out[row]`` (and with ``parts`` the parts' arrays) for the rows of every task group, the groups shared
    among the threads."""
    laid_float = laid.view(np.float64)
    n_groups = group_rows.shape[0] - 1
    longest = 1
    for g in range(n_groups):
        longest = max(longest, group_rows[g + 1] - group_rows[g])
    size = 2
    while size < 2 * longest:
        size *= 2
    n_chunks = min(n_groups, 4 * threads)
    for chunk in prange(n_chunks):
        table = np.empty((size, 2), dtype=np.int64)  # [key, code]: one cache line per probe
        zeros = np.zeros(longest, dtype=np.int64)
        codes = np.empty(longest, dtype=np.int64)
        values = np.empty(longest, dtype=np.float64)
        weights = np.empty(longest, dtype=np.float64)
        episode = np.empty(longest, dtype=np.float64)
        step = np.empty(longest, dtype=np.float64)
        count = np.empty(longest, dtype=np.float64)
        reference = np.empty(longest, dtype=np.float64)
        sums = np.empty(longest, dtype=np.float64)
        for g in range(chunk * n_groups // n_chunks, (chunk + 1) * n_groups // n_chunks):
            begin, m = group_rows[g], group_rows[g + 1] - group_rows[g]
            trajs = traj_order[group_trajs[g] : group_trajs[g + 1]]

            # A^E: returns normalised over the group's trajectories (or, by row, its rows).
            if not row_penalty:
                for a in range(trajs.shape[0]):
                    values[a] = returns[trajs[a]]
                    weights[a] = lengths[trajs[a]]
                _normalize(values, zeros, trajs.shape[0], 1, weights, step_stats, norm_by_std, count, reference, sums, step)
                for a in range(trajs.shape[0]):
                    episode[traj_first[trajs[a]] - begin : traj_first[trajs[a]] - begin + lengths[trajs[a]]] = step[a]
            elif trajs.shape[0] < 2:
                episode[:m] = 0.0
            else:
                for a in range(trajs.shape[0]):
                    t = trajs[a]
                    for k in range(traj_first[t] - begin, traj_first[t] - begin + lengths[t]):
                        values[k] = (returns[t] + penalty_sums[t]) - laid_penalties[begin + k]
                        weights[k] = 1.0 if k == traj_first[t] - begin else 0.0
                _normalize(values, zeros, m, 1, weights, not step_stats, norm_by_std, count, reference, sums, episode)
            if omega == 0.0 and not parts:
                for k in range(m):
                    out[source[begin + k]] = episode[k]
                continue

            # A^S: discounted returns along each trajectory, normalised over the step groups.
            for a in range(trajs.shape[0]):
                t = trajs[a]
                after = 0.0
                for k in range(traj_first[t] + lengths[t] - 1, traj_first[t] - 1, -1):
                    after = (laid_float[k, 1] + laid_penalties[k] if row_penalty else laid_float[k, 1]) + gamma * after
                    values[k - begin] = after - laid_penalties[k] if row_penalty else after
            bits = 1
            while (1 << bits) < 2 * m:
                bits += 1
            table[: 1 << bits, 1] = -1
            n_steps = 0
            for k in range(m):
                key = laid[begin + k, 0]
                slot = _probe(table, key, bits)
                if table[slot, 1] == -1:
                    table[slot, 0] = key
                    table[slot, 1] = n_steps
                    n_steps += 1
                codes[k] = table[slot, 1]
            _normalize(values, codes, m, n_steps, weights, False, norm_by_std, count, reference, sums, step)
            for k in range(m):
                row = source[begin + k]
                out[row] = episode[k] if omega == 0.0 else episode[k] + omega * step[k]
                if parts:
                    episode_out[row] = episode[k]
                    step_out[row] = step[k]
                    returns_out[row] = values[k]
                    codes_out[row] = begin + codes[k]
