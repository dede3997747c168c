"""verl-agent's placements: invalid_penalty="row" and episode_stats="step", by hand."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from gigpo_gym.algos import StepBatch, get_algorithm

EPS = 1e-6
PENALTY = 0.1


def norm(x: float, xs: list[float]) -> float:
    return (x - statistics.mean(xs)) / (statistics.stdev(xs) + EPS)


def penalised_batch() -> StepBatch:
    """One task group of three trajectories; "!" marks an invalid step (reward -0.1, same state).

    tau0: s, s!, u -> clean rewards 0, 0, 1;  tau1: s!, s -> 0, 0;  tau2: s -> 0.
    """
    rows = []
    for traj_id, steps in ((0, [("s", 0.0, False), ("s", 0.0, True), ("u", 1.0, False)]), (1, [("s", 0.0, True), ("s", 0.0, False)]), (2, [("s", 0.0, False)])):
        for step_id, (anchor, clean, invalid) in enumerate(steps):
            penalty = PENALTY if invalid else 0.0
            rows.append(dict(group_id=0, traj_id=traj_id, step_id=step_id, reward=clean - penalty, anchor=anchor, penalty=penalty))
    return StepBatch.from_rows(rows)


# Row scores s_i = R'(tau) - p_i with clean returns R' = 1, 0, 0.
ROW_SCORES = [1.0, 0.9, 1.0, -0.1, 0.0, 0.0]
# R_t discounted (gamma 0.5) without penalties, then the row's own penalty off:
# tau0 (0.25, 0.5 - 0.1, 1), tau1 (0 - 0.1, 0), tau2 (0).
STEP_RETURNS = [0.25, 0.4, 1.0, -0.1, 0.0, 0.0]
IN_S = [0, 1, 3, 4, 5]  # rows in step group "s"; row 2 ("u") is a singleton


def step_advantages() -> list[float]:
    values = [STEP_RETURNS[i] for i in IN_S]
    return [norm(STEP_RETURNS[i], values) if i in IN_S else 0.0 for i in range(6)]


def test_row_penalty_with_step_statistics_is_verl_agent_default():
    batch = penalised_batch()
    episode = [norm(s, ROW_SCORES) for s in ROW_SCORES]
    out = get_algorithm("gigpo", gamma=0.5, episode_stats="step", invalid_penalty="row").advantages(batch)
    np.testing.assert_allclose(out, np.add(episode, step_advantages()), rtol=1e-12)
    grpo = get_algorithm("grpo", episode_stats="step", invalid_penalty="row").advantages(batch)
    np.testing.assert_allclose(grpo, episode, rtol=1e-12)


def test_row_penalty_with_trajectory_statistics_uses_each_first_row():
    batch = penalised_batch()
    first_rows = [ROW_SCORES[0], ROW_SCORES[3], ROW_SCORES[5]]  # 1.0, -0.1, 0.0
    episode = [norm(s, first_rows) for s in ROW_SCORES]
    out = get_algorithm("grpo", invalid_penalty="row").advantages(batch)
    np.testing.assert_allclose(out, episode, rtol=1e-12)
    rows_shuffled = np.random.default_rng(0).permutation(len(batch))
    np.testing.assert_allclose(get_algorithm("grpo", invalid_penalty="row").advantages(batch.take(rows_shuffled)), out[rows_shuffled], rtol=1e-12)


def test_reward_placement_discounts_the_penalty_with_the_rest():
    # The default: R(tau) = 0.9, -0.1, 0 for every row of the trajectory; R_t over penalised rewards.
    batch = penalised_batch()
    returns = [0.9, 0.9, 0.9, -0.1, -0.1, 0.0]
    episode = [norm(r, [0.9, -0.1, 0.0]) for r in returns]
    step = [0.25 - 0.05, 0.5 - 0.1, 1.0, -0.1, 0.0, 0.0]  # tau0: 0 + 0.5 * (-0.1 + 0.5 * 1)
    values = [step[i] for i in IN_S]
    expected = [e + (norm(step[i], values) if i in IN_S else 0.0) for i, e in enumerate(episode)]
    np.testing.assert_allclose(get_algorithm("gigpo", gamma=0.5).advantages(batch), expected, rtol=1e-12)
    step_stats = [norm(r, returns) for r in returns]
    np.testing.assert_allclose(get_algorithm("grpo", episode_stats="step").advantages(batch), step_stats, rtol=1e-12)


@pytest.mark.parametrize("stats", ["trajectory", "step"])
@pytest.mark.parametrize("name", ["grpo", "gigpo"])
def test_row_placement_without_penalties_equals_reward_placement(name, stats):
    rng = np.random.default_rng(1)
    n_traj = 24
    lengths = rng.integers(1, 6, n_traj)
    traj = np.repeat(np.arange(n_traj), lengths)
    batch = StepBatch(
        group_ids=traj // 4, traj_ids=traj, step_ids=np.concatenate([np.arange(n) for n in lengths]),
        rewards=rng.integers(0, 3, len(traj)).astype(float), anchors=rng.integers(0, 3, len(traj)),
        penalties=np.zeros(len(traj)),
    )  # fmt: skip
    reward = get_algorithm(name, episode_stats=stats).advantages(batch)
    row = get_algorithm(name, episode_stats=stats, invalid_penalty="row").advantages(batch)
    np.testing.assert_allclose(row, reward, rtol=1e-9, atol=1e-12)


def test_single_trajectory_group_gets_zero_with_row_penalties():
    batch = StepBatch(group_ids=[0, 0], traj_ids=[0, 0], step_ids=[0, 1], rewards=[-0.1, 1.0], anchors=["s1", "s2"], penalties=[0.1, 0.0])
    assert np.all(get_algorithm("grpo", episode_stats="step", invalid_penalty="row").advantages(batch) == 0.0)


def test_row_placement_without_penalties_column_is_a_clear_error():
    batch = StepBatch(group_ids=[0, 0], traj_ids=[0, 1], step_ids=[0, 0], rewards=[0.0, 1.0], anchors=["s1", "s1"])
    with pytest.raises(ValueError, match="StepBatch.penalties"):
        get_algorithm("gigpo", invalid_penalty="row").advantages(batch)
    with pytest.raises(ValueError, match="invalid_penalty"):
        get_algorithm("grpo", invalid_penalty="step")
