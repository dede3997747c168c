"""``Algorithm.advantage_parts``: the advantages the estimator gives, with the parts it combined, built once."""

from __future__ import annotations

import numpy as np
import pytest
from test_compiled import CONFIGS, random_batch

from gigpo_gym.algos import AdvantageParts, StepBatch, available_algorithms, get_algorithm
from gigpo_gym.algos.estimators import compiled
from gigpo_gym.algos.estimators.registry import Algorithm

BACKENDS = ["numpy"] + (["numba"] if compiled.AVAILABLE else [])


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Two labelings put the same rows together."""
    pairs = np.unique(np.stack([a, b]), axis=1)
    return len(np.unique(pairs[0])) == len(np.unique(pairs[1])) == pairs.shape[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_gigpo_parts_make_its_advantages_exactly(backend, config):
    batch = random_batch(1, "hex")
    algo = get_algorithm("gigpo", backend=backend, **config)
    parts = algo.advantage_parts(batch)
    np.testing.assert_array_equal(parts.advantages, algo.advantages(batch))  # bit for bit: the run's numbers
    omega = config.get("omega", 1.0)
    np.testing.assert_array_equal(parts.advantages, parts.episode if omega == 0.0 else parts.episode + omega * parts.step)
    reference = get_algorithm("gigpo", backend="numpy", **config).advantage_parts(batch)
    for name in ("episode", "step", "step_returns"):
        np.testing.assert_allclose(getattr(parts, name), getattr(reference, name), rtol=1e-9, atol=1e-9, err_msg=name)
    assert parts.n_step_groups == reference.n_step_groups and same_partition(parts.step_groups, reference.step_groups)
    assert parts.step_groups.min() == 0 and parts.step_groups.max() == parts.n_step_groups - 1


def test_gigpo_parts_by_hand():
    """Two trajectories through state s: A^S compares their discounted returns, A^E their episode returns."""
    batch = StepBatch(group_ids=[0, 0, 0, 0], traj_ids=[0, 0, 1, 1], step_ids=[0, 1, 0, 1],
                      rewards=[0.0, 10.0, 0.0, 0.0], anchors=["s", "a", "s", "b"])
    parts = get_algorithm("gigpo", gamma=0.5, norm_by_std=False, backend="numpy").advantage_parts(batch)
    np.testing.assert_allclose(parts.step_returns, [5.0, 10.0, 0.0, 0.0])
    np.testing.assert_allclose(parts.episode, [5.0, 5.0, -5.0, -5.0])
    np.testing.assert_allclose(parts.step, [2.5, 0.0, -2.5, 0.0])  # "a" and "b" are groups of one
    assert parts.n_step_groups == 3 and parts.step_groups[0] == parts.step_groups[2]


def test_gigpo_diagnostics_read_the_step_groups_of_the_parts(monkeypatch):
    batch = random_batch(2, "hex")
    algo = get_algorithm("gigpo", backend="numpy")
    expected = algo.diagnostics(batch)
    parts = algo.advantage_parts(batch)

    def built_again(*args, **kwargs):
        raise AssertionError("step groups built a second time")

    monkeypatch.setattr(type(algo), "step_groups", built_again)
    assert algo.diagnostics(batch, parts) == expected


@pytest.mark.parametrize("name", ["grpo", "dapo", "rloo"])
def test_episode_level_estimators_give_their_advantages_as_the_episode_part(name):
    batch = random_batch(3)
    algo = get_algorithm(name)
    parts = algo.advantage_parts(batch)
    np.testing.assert_array_equal(parts.advantages, algo.advantages(batch))
    assert parts.episode is parts.advantages and parts.step is None and parts.step_groups is None


def test_every_estimator_gives_its_advantages_through_the_parts():
    batch = random_batch(4)
    batch.values = np.zeros(len(batch))
    for name in available_algorithms():
        algo = get_algorithm(name)
        parts = algo.advantage_parts(batch)
        assert isinstance(parts, AdvantageParts), name
        np.testing.assert_array_equal(parts.advantages, algo.advantages(batch), err_msg=name)


def test_a_plugin_without_parts_gets_the_default():
    class Constant(Algorithm):
        def advantages(self, batch):
            return np.ones(len(batch))

    parts = Constant().advantage_parts(random_batch(0))
    assert parts.episode is None and parts.step is None and parts.n_step_groups == 0
    np.testing.assert_array_equal(parts.advantages, 1.0)
