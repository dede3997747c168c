"""GiGPO's exact-grouping advantages as compiled loops (numba), an optional fast path.

The numpy path (``gigpo.gigpo_parts``) is the reference.  This one
(``numba_loops``) lays the rows out task group by task group and works on each group
in small hash tables.  It computes the same formulas with the same rules (a group of
equal values gives exactly 0), but its sums run over a group's rows in trajectory
order rather than row order, so it agrees with the reference to rounding (tested
to 1e-9).  It accepts batches whose step ids are 0..L-1 in each trajectory and whose
trajectories each stay in one task group; for the rest (gaps, duplicates, a
trajectory in two groups) it returns ``None`` and the numpy path handles or names
the problem.

Install with the ``[fast]`` extra (``pip install ".[fast]"`` in a clone); without numba ``AVAILABLE`` is False.
The loops are compiled on first use and cached on disk by numba.  They run on numba's
threads; calls from several Python threads take turns (numba's own "workqueue" thread
pool, its fallback where neither OpenMP nor TBB is present, aborts the process when two
threads enter it at once).  numba's OpenMP layer sets the calling thread's OpenMP
thread count, which torch shares; the count torch had is put back after each call, so
a process told to use one torch thread (``OMP_NUM_THREADS=1``) keeps to one.
"""

from __future__ import annotations

import importlib.util
import sys
import threading

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.registry import AdvantageParts

#: numba is installed (imported, and the loops compiled or read from its cache, on first use).
AVAILABLE = importlib.util.find_spec("numba") is not None

_ONE_CALLER = threading.Lock()


def gigpo_parts(
    batch: StepBatch,
    keys: np.ndarray,
    *,
    gamma: float,
    omega: float,
    norm_by_std: bool,
    episode_stats: str,
    penalties: np.ndarray | None,
    with_parts: bool = True,
) -> AdvantageParts | None:
    """``gigpo.gigpo_parts`` with the exact step groups of uint64 ``keys`` (``with_parts=False``: the advantages
    alone), or None (see above); ``penalties`` given means ``invalid_penalty="row"``."""
    if not 0 < len(batch) < 2**31:  # the loops number rows in int32
        return None
    from numba import get_num_threads

    from gigpo_gym.algos.estimators.numba_loops import gigpo_rows

    torch = sys.modules.get("torch")  # imported by whoever trains; never imported here
    torch_threads = torch.get_num_threads() if torch is not None else None
    with _ONE_CALLER:
        out, episode, step, returns, codes, ok = gigpo_rows(
            batch.traj_ids, batch.group_ids, batch.step_ids, batch.rewards,
            np.zeros(0) if penalties is None else penalties, keys.view(np.int64),
            float(gamma), float(omega), bool(norm_by_std), episode_stats == "step", penalties is not None, get_num_threads(),
            bool(with_parts),
        )  # fmt: skip
        if torch_threads is not None and torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
    if not ok:
        return None
    if not with_parts:
        return AdvantageParts(out)
    used = np.zeros(len(batch), dtype=bool)  # the loops' codes are unique across task groups, < rows: make them dense
    used[codes] = True
    dense = np.cumsum(used) - 1
    return AdvantageParts(out, episode, step, returns, dense[codes], int(used.sum()))
