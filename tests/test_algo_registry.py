"""The plugin interface: StepBatch checks, algorithm registry, config checks, entry points."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import numpy as np
import pytest

import gigpo_gym.algos.estimators  # noqa: F401  (built-ins registered before any test patches the registry)
from gigpo_gym.algos import Algorithm, StepBatch, available_algorithms, get_algorithm, register_algorithm
from gigpo_gym.algos.estimators import registry

BUILT_INS = ["dapo", "gigpo", "grpo", "ppo", "reinforce_pp", "rloo"]


def tiny_batch(**changes):
    fields = dict(group_ids=[0, 0], traj_ids=[1, 2], step_ids=[0, 0], rewards=[1.0, 0.0], anchors=["a", "a"])
    fields.update(changes)
    return StepBatch(**fields)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


# -- StepBatch contract -------------------------------------------------------------------

def test_batch_coerces_and_freezes_arrays():
    batch = tiny_batch(group_ids=np.array([0, 0], dtype=np.int32), rewards=[1, 0])
    assert batch.group_ids.dtype == np.int64 and batch.rewards.dtype == np.float64 and batch.anchors.dtype == object
    with pytest.raises(ValueError, match="read-only"):
        batch.rewards[0] = 5.0
    source = np.array([1.0, 0.0])
    batch = tiny_batch(rewards=source)
    source[0] = 9.0
    assert batch.rewards[0] == 1.0


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"traj_ids": [1, 2, 3]}, ValueError, r"StepBatch.traj_ids has 3 rows but group_ids has 2"),
        ({"group_ids": [0.0, 1.0]}, TypeError, r"StepBatch.group_ids must hold integers \(int64\), got dtype float64"),
        ({"rewards": [1.0, float("nan")]}, ValueError, r"StepBatch.rewards\[1\] is nan; rewards must be finite"),
        ({"rewards": ["1", "0"]}, TypeError, r"StepBatch.rewards must hold real numbers"),
        ({"anchors": ["a", 3]}, TypeError, r"StepBatch.anchors\[1\] is 3 \(int\); anchors must be str"),
        ({"anchors": ["a", None]}, TypeError, r"StepBatch.anchors\[1\] is None"),
        ({"anchors": None}, ValueError, r"StepBatch.anchors is required"),
        ({"step_ids": [[0], [0]]}, ValueError, r"StepBatch.step_ids must be one-dimensional"),
        ({"values": [0.5]}, ValueError, r"StepBatch.values has 1 rows but group_ids has 2"),
        ({"extras": {"token_ids": [[1, 2]]}}, ValueError, r"StepBatch.extras\['token_ids'\] must hold one entry per row \(2\), got 1"),
    ],
)
def test_batch_rejects_bad_arrays_naming_the_field(changes, error, message):
    with pytest.raises(error, match=message):
        tiny_batch(**changes)


def test_assigning_a_field_later_is_checked():
    batch = tiny_batch()
    batch.values = np.array([0.5, 0.25], dtype=np.float32)  # what a critic returns
    assert batch.values.dtype == np.float64 and not batch.values.flags.writeable
    with pytest.raises(ValueError, match=r"StepBatch.values has 3 rows but the batch has 2"):
        batch.values = [0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match=r"StepBatch.rewards is required"):
        batch.rewards = None


def test_batch_rejects_ambiguous_trajectories():
    with pytest.raises(ValueError, match=r"trajectory 1 has rows in task groups (0 and 1|1 and 0); traj_ids must be unique across the batch"):
        get_algorithm("grpo").advantages(tiny_batch(traj_ids=[1, 1], step_ids=[0, 1], group_ids=[0, 1]))
    with pytest.raises(ValueError, match=r"trajectory 1 has two rows with step_id 3"):
        get_algorithm("gigpo").advantages(tiny_batch(traj_ids=[1, 1], step_ids=[3, 3]))


def test_from_rows_puts_unknown_keys_in_extras_and_names_missing_keys():
    rows = [dict(group_id=0, traj_id=5, step_id=0, reward=1.0, anchor="a", value=0.1, response_ids=[1, 2])]
    batch = StepBatch.from_rows(rows)
    assert batch.values.tolist() == [0.1] and batch.extras == {"response_ids": [[1, 2]]}
    with pytest.raises(ValueError, match=r"row 0 lacks required key\(s\) \['anchor'\]"):
        StepBatch.from_rows([dict(group_id=0, traj_id=5, step_id=0, reward=1.0)])
    with pytest.raises(ValueError, match=r"row 1 lacks key 'value', which other rows have"):
        StepBatch.from_rows([rows[0], {k: v for k, v in rows[0].items() if k != "value"}])


def test_take_subsets_rows_and_extras():
    batch = tiny_batch(extras={"ids": [[1], [2, 3]], "valid": np.array([True, False])})
    taken = batch.take([1])
    assert taken.traj_ids.tolist() == [2] and taken.extras["ids"] == [[2, 3]] and taken.extras["valid"].tolist() == [False]
    assert batch.take(np.array([False, True])).anchors.tolist() == ["a"]


# -- registry -----------------------------------------------------------------------------

def test_built_ins_are_available_and_named():
    assert set(BUILT_INS) <= set(available_algorithms())
    for name in BUILT_INS:
        algo = get_algorithm(name)
        assert isinstance(algo, Algorithm) and algo.name == name and algo.config()["name"] == name


def test_unknown_name_lists_registered_and_suggests():
    with pytest.raises(ValueError, match=r"unknown algorithm 'gigp'; registered: dapo, gigpo, grpo, ppo, reinforce_pp, rloo.*Did you mean 'gigpo'\?"):
        get_algorithm("gigp")


def test_unknown_config_key_is_named_with_valid_keys():
    with pytest.raises(TypeError, match=r"gigpo: unknown config key 'gama'; valid keys: clip_low, clip_high, gamma, omega.*Did you mean 'gamma'\?"):
        get_algorithm("gigpo", gama=0.9)
    with pytest.raises(TypeError, match=r"ppo: unknown config key 'needs_critic'"):
        get_algorithm("ppo", needs_critic=False)


@pytest.mark.parametrize(
    ("name", "cfg", "error", "message"),
    [
        ("gigpo", {"gamma": 1.5}, ValueError, r"gigpo: gamma must be in \[0, 1\], got 1.5"),
        ("gigpo", {"omega": -1}, ValueError, r"gigpo: omega must be >= 0"),
        ("gigpo", {"grouping": "simlarity"}, ValueError, r"gigpo: grouping must be one of \['exact', 'similarity'\], got 'simlarity' \(did you mean 'similarity'\?\)"),
        ("gigpo", {"similarity_threshold": 0.0}, ValueError, r"similarity_threshold must be in \(0, 1\]"),
        ("gigpo", {"norm_by_std": "yes"}, TypeError, r"gigpo: norm_by_std must be a bool, got 'yes'"),
        ("grpo", {"clip_low": float("nan")}, ValueError, r"grpo: clip_low must be finite"),
        ("grpo", {"clip_low": 1.2}, ValueError, r"grpo: clip_low must be in \(0, 1\)"),
        ("ppo", {"lam": "0.9"}, TypeError, r"ppo: lam must be a number, got '0.9'"),
    ],
)
def test_bad_config_values_name_the_field(name, cfg, error, message):
    with pytest.raises(error, match=message):
        get_algorithm(name, **cfg)


def test_config_values_are_normalised_and_defaults_match_the_paper():
    gigpo = get_algorithm("gigpo", gamma=1, omega=np.float32(0.5))
    assert type(gigpo.gamma) is float and gigpo.omega == 0.5
    default = get_algorithm("gigpo")
    assert (default.gamma, default.omega, default.similarity_threshold, default.episode_stats) == (0.95, 1.0, 0.9, "trajectory")
    assert get_algorithm("dapo").clip_high == 0.28 and get_algorithm("dapo", clip_high=0.3).clip_high == 0.3


def test_register_algorithm_as_decorator_and_direct(scratch_registry):
    @register_algorithm("zero_adv")
    @dataclasses.dataclass
    class ZeroAdvantage(Algorithm):
        scale: float = 1.0

        def advantages(self, batch):
            return np.zeros(len(batch))

    assert "zero_adv" in available_algorithms()
    algo = get_algorithm("zero_adv", scale=2)
    assert algo.name == "zero_adv" and algo.scale == 2.0 and algo.advantages(tiny_batch()).tolist() == [0.0, 0.0]
    assert register_algorithm("zero_adv", ZeroAdvantage) is ZeroAdvantage  # same class again: fine
    with pytest.raises(ValueError, match=r"algorithm name 'grpo' is already registered to .*GRPO"):
        register_algorithm("grpo", ZeroAdvantage)
    with pytest.raises(TypeError, match=r"needs a subclass of gigpo_gym.algos.Algorithm"):
        register_algorithm("not_algo", dict)
    with pytest.raises(ValueError, match=r"algorithm names are identifiers"):
        register_algorithm("bad name", ZeroAdvantage)

    class Undecorated(Algorithm):
        pass

    with pytest.raises(TypeError, match=r"Undecorated must be decorated with @dataclass"):
        register_algorithm("undecorated", Undecorated)


# -- entry points -------------------------------------------------------------------------

def install_fake_distribution(root, module_source: str, entry_points: str) -> None:
    """A real installed distribution: a package plus its .dist-info on sys.path."""
    (root / "toy_algo_pkg").mkdir()
    (root / "toy_algo_pkg" / "__init__.py").write_text(textwrap.dedent(module_source))
    info = root / "toy_algo_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-algo-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[gigpo_gym.algos]\n{entry_points}\n")


@pytest.fixture
def fake_site(tmp_path, monkeypatch, scratch_registry):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("toy_algo_pkg", None)


def test_entry_point_algorithm_is_found_by_name(fake_site):
    install_fake_distribution(
        fake_site,
        """
        import dataclasses
        import numpy as np
        from gigpo_gym.algos import Algorithm

        @dataclasses.dataclass
        class Sign(Algorithm):
            flip: bool = False

            def advantages(self, batch):
                return np.sign(batch.rewards) * (-1.0 if self.flip else 1.0)
        """,
        "sign_algo = toy_algo_pkg:Sign\nbroken_algo = toy_algo_pkg.missing:Nope\nnot_an_algo = toy_algo_pkg:np",
    )
    assert {"sign_algo", "broken_algo"} <= set(available_algorithms())
    algo = get_algorithm("sign_algo", flip=True)
    assert algo.name == "sign_algo" and algo.advantages(tiny_batch()).tolist() == [-1.0, -0.0]
    with pytest.raises(TypeError, match=r"sign_algo: unknown config key 'flop'.*Did you mean 'flip'"):
        get_algorithm("sign_algo", flop=True)
    with pytest.raises(ImportError, match=r"algorithm 'broken_algo' from entry point 'toy_algo_pkg.missing:Nope' failed to load"):
        get_algorithm("broken_algo")
    with pytest.raises(TypeError, match=r"register_algorithm\('not_an_algo', ...\) needs a subclass"):
        get_algorithm("not_an_algo")


def test_built_in_name_wins_over_an_entry_point(fake_site):
    install_fake_distribution(fake_site, "from gigpo_gym.algos.estimators import RLOO as Impostor\n", "grpo = toy_algo_pkg:Impostor")
    assert type(get_algorithm("grpo")).__name__ == "GRPO"


def test_advantage_side_imports_no_torch():
    import subprocess

    code = (
        "import sys; from gigpo_gym.algos import get_algorithm, available_algorithms\n"
        "[get_algorithm(n) for n in available_algorithms()]\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
