"""GiGPO's compiled fast path (``[fast]``, numba) gives the numpy reference's numbers, to rounding."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo_gym.algos import StepBatch, get_algorithm
from gigpo_gym.algos.estimators import compiled

needs_numba = pytest.mark.skipif(not compiled.AVAILABLE, reason='numba is not installed (pip install ".[fast]")')

CONFIGS = [
    {},
    {"gamma": 1.0, "norm_by_std": False},
    {"gamma": 0.0, "omega": 0.5},
    {"omega": 0.0},
    {"episode_stats": "step"},
    {"episode_stats": "step", "invalid_penalty": "row"},
    {"invalid_penalty": "row", "gamma": 0.9, "omega": 2.0},
]


def random_batch(seed: int, anchor_kind: str = "uint64", n_traj: int = 64, scoped: bool = False) -> StepBatch:
    """Groups of 4 trajectories of 1..12 steps, anchors from a few states per step, rows shuffled."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 13, n_traj)
    traj = np.repeat(rng.permutation(10 * n_traj)[:n_traj] - 5 * n_traj, lengths)  # arbitrary, some negative ids
    step = np.concatenate([np.arange(n) for n in lengths])
    group = np.repeat(np.arange(n_traj) // 4, lengths) * 7 + 3
    state = rng.integers(0, 3, len(step))
    anchor = (step * 3 + state + (group * 1000 if scoped else 0)).astype(np.uint64)  # unscoped: groups share keys
    penalties = 0.1 * (rng.random(len(step)) < 0.2)
    rewards = np.where(step == np.repeat(lengths - 1, lengths), rng.integers(0, 2, len(step)) * 10.0, 0.0) - penalties
    anchors = {"uint64": anchor, "hex": [f"{a:016x}" for a in anchor], "str": [f"s{a}" for a in anchor]}[anchor_kind]
    perm = rng.permutation(len(step))
    return StepBatch(
        group_ids=group, traj_ids=traj, step_ids=step, rewards=rewards, penalties=penalties, anchors=anchors,
    ).take(perm)  # fmt: skip


@needs_numba
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("anchor_kind", ["uint64", "hex", "str"])
@pytest.mark.parametrize("scoped", [False, True])
def test_compiled_equals_numpy(config, anchor_kind, scoped):
    for seed in range(3):
        batch = random_batch(seed, anchor_kind, scoped=scoped)
        fast = get_algorithm("gigpo", backend="numba", **config).advantages(batch)
        reference = get_algorithm("gigpo", backend="numpy", **config).advantages(batch)
        np.testing.assert_allclose(fast, reference, rtol=1e-9, atol=1e-9)


@needs_numba
def test_compiled_path_is_taken_and_leaves_odd_batches_to_numpy():
    batch = random_batch(0)
    algo = get_algorithm("gigpo", backend="numba")
    assert algo._compiled_parts(batch, with_parts=False) is not None
    gaps = StepBatch(group_ids=[0, 0, 0], traj_ids=[0, 0, 1], step_ids=[0, 5, 0], rewards=[0.0, 1.0, 0.0], anchors=["s1", "s2", "s1"])
    assert algo._compiled_parts(gaps, with_parts=False) is None
    np.testing.assert_array_equal(algo.advantages(gaps), get_algorithm("gigpo", backend="numpy").advantages(gaps))
    repeated = StepBatch(group_ids=[0, 0], traj_ids=[0, 0], step_ids=[0, 0], rewards=[0.0, 1.0], anchors=["s1", "s2"])
    with pytest.raises(ValueError, match="two rows with step_id 0"):
        algo.advantages(repeated)
    split = StepBatch(group_ids=[0, 1], traj_ids=[0, 0], step_ids=[0, 1], rewards=[0.0, 1.0], anchors=["s1", "s2"])
    with pytest.raises(ValueError, match="task groups"):
        algo.advantages(split)



@needs_numba
def test_compiled_result_does_not_depend_on_the_thread_count():
    import numba

    batch = random_batch(5, n_traj=4000)  # enough task groups for every thread to take some
    algo = get_algorithm("gigpo", backend="numba", invalid_penalty="row")
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = algo.advantages(batch)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(algo.advantages(batch), one)


@needs_numba
def test_compiled_path_finds_a_repeated_step_in_a_large_batch():
    batch = random_batch(6, n_traj=4000)
    step_ids = batch.step_ids.copy()
    row = int(np.flatnonzero(step_ids == 3)[-1])
    step_ids[row] = 2  # that trajectory now has two step 2 rows and no step 3
    repeated = StepBatch(group_ids=batch.group_ids, traj_ids=batch.traj_ids, step_ids=step_ids, rewards=batch.rewards, anchors=batch.anchors)
    algo = get_algorithm("gigpo", backend="numba")
    assert algo._compiled_parts(repeated, with_parts=False) is None
    with pytest.raises(ValueError, match="two rows with step_id 2"):
        algo.advantages(repeated)

@needs_numba
def test_compiled_gives_exactly_zero_where_every_return_is_equal():
    lengths = np.array([3, 3, 3, 3, 2])
    traj = np.repeat(np.arange(5), lengths)
    step = np.concatenate([np.arange(n) for n in lengths])
    batch = StepBatch(
        group_ids=[0] * 12 + [1] * 2, traj_ids=traj, step_ids=step, rewards=np.where(step == 2, 0.3, 0.1),
        anchors=[f"s{s}" for s in step],
    )  # fmt: skip
    assert np.all(get_algorithm("gigpo", backend="numba").advantages(batch) == 0.0)  # group 1 is one trajectory


def test_numba_backend_without_numba_names_the_extra(monkeypatch):
    monkeypatch.setattr(compiled, "AVAILABLE", False)
    with pytest.raises(ValueError, match=r"gigpo-gym\[fast\]"):
        get_algorithm("gigpo", backend="numba")
    batch = random_batch(1)
    np.testing.assert_array_equal(get_algorithm("gigpo").advantages(batch), get_algorithm("gigpo", backend="numpy").advantages(batch))


@needs_numba
def test_compiled_call_keeps_torch_s_thread_count():
    """numba's OpenMP threads share torch's OpenMP setting: a 1-thread training stays on 1 thread."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        get_algorithm("gigpo", backend="numba").advantages(random_batch(0))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
