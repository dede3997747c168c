"""Algorithms as plugins: the ``Algorithm`` base class and the name -> class registry.

An algorithm is a dataclass config plus ``advantages(batch)``; the shared trainer
reads its loss knobs (``clip_low``, ``clip_high``, ``needs_critic``) and its
``row_mask``, and asks ``advantage_parts(batch)`` for the advantages together with
the parts they were made of (``AdvantageParts``), computed once.  Built-ins
register themselves; third-party packages declare an entry point in the group
``gigpo_gym.algos``::

    [options.entry_points]
    gigpo_gym.algos =
        my_algo = my_pkg.mod:MyAlgo

and ``get_algorithm("my_algo")`` finds it without the user importing anything.
Entry points are read only when a name is not a built-in, and a built-in name
always wins over an entry point of the same name.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar

import numpy as np

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.core.typed import check_fields

ENTRY_POINT_GROUP = "gigpo_gym.algos"

_REGISTRY: dict[str, type[Algorithm]] = {}


@dataclass(frozen=True)
class AdvantageParts:
    """An estimator's advantage of every row and, where it has them, the parts it combined.

    ``advantages`` is exactly what ``Algorithm.advantages`` returns.  The others are None
    where the estimator has no such part (GRPO has no step level; PPO neither level):

    - ``episode``: the episode-level advantage A^E of the row's trajectory;
    - ``step``: the step-level advantage A^S (GiGPO: unweighted, so A = A^E + omega * A^S);
    - ``step_returns``: the discounted return R_t that the step groups compare;
    - ``step_groups``: the step group of every row, codes 0..``n_step_groups``-1 (rows of
      one task group sharing an anchor, or a similar text).

    All arrays have one entry per row of the batch, in its row order.
    """

    advantages: np.ndarray
    episode: np.ndarray | None = None
    step: np.ndarray | None = None
    step_returns: np.ndarray | None = None
    step_groups: np.ndarray | None = None
    n_step_groups: int = 0


@dataclass
class Algorithm:
    """Base of every advantage estimator; subclasses are dataclasses of their config.

    Subclasses implement ``advantages``; they may override ``advantage_parts`` (the
    advantages with their parts, computed once), ``row_mask`` (rows to train on),
    ``value_targets`` (critic targets, with ``needs_critic = True``), ``diagnostics``
    and ``validate`` (cross-field rules, called after the type checks).
    """

    name: ClassVar[str] = ""
    #: The trainer must fill ``StepBatch.values`` and train a value head.
    needs_critic: ClassVar[bool] = False

    clip_low: float = 0.2
    """Lower clip of the token ratio in the PPO surrogate: ratio >= 1 - clip_low."""
    clip_high: float = 0.2
    """Upper clip: ratio <= 1 + clip_high (DAPO's clip-higher raises it)."""

    def __post_init__(self) -> None:
        _check_types(self)
        self.validate()

    def validate(self) -> None:
        """Cross-field rules; raise ``ValueError`` naming the field(s) and the rule."""
        if not 0.0 < self.clip_low < 1.0:
            raise ValueError(f"{self.name}: clip_low must be in (0, 1), got {self.clip_low}")
        if not self.clip_high > 0.0:
            raise ValueError(f"{self.name}: clip_high must be > 0, got {self.clip_high}")

    @classmethod
    def from_config(cls, **cfg: Any) -> Algorithm:
        """Build from keyword config; an unknown key is a ``TypeError`` naming it."""
        valid = [f.name for f in dataclasses.fields(cls) if f.init]
        for key in cfg:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{cls.name or cls.__name__}: unknown config key {key!r}; valid keys: {', '.join(valid)}.{hint}")
        return cls(**cfg)

    def config(self) -> dict[str, Any]:
        """The resolved config (for the run's written config)."""
        return {"name": self.name, **dataclasses.asdict(self)}

    def advantages(self, batch: StepBatch) -> np.ndarray:
        """One float64 advantage per row of ``batch``, in the batch's row order."""
        raise NotImplementedError

    def advantage_parts(self, batch: StepBatch) -> AdvantageParts:
        """``advantages(batch)`` with the parts it was made of (what the trainer calls; see ``AdvantageParts``).

        This default knows no parts; an estimator that combines levels overrides it and
        builds each part once (GiGPO: its step groups serve ``diagnostics`` too).
        """
        return AdvantageParts(np.asarray(self.advantages(batch), dtype=np.float64))

    def row_mask(self, batch: StepBatch) -> np.ndarray:
        """Rows to train on (bool per row); all of them unless the algorithm filters."""
        return np.ones(len(batch), dtype=bool)

    def value_targets(self, batch: StepBatch) -> np.ndarray | None:
        """Critic regression targets per row, for algorithms that need a critic."""
        return None

    def diagnostics(self, batch: StepBatch, parts: AdvantageParts | None = None) -> dict[str, float]:
        """Advantage-side metrics to log (share of groups whose returns are all equal).

        ``parts``: ``advantage_parts(batch)``, when the caller has it, so that nothing it
        holds is computed again.
        """
        from gigpo_gym.algos.estimators.kernels import group_spread, trajectories

        traj = trajectories(batch, ordered=False)
        if traj.n_groups == 0:
            return {}
        spread = group_spread(traj.returns, traj.traj_group, traj.n_groups)
        return {
            "adv/groups": float(traj.n_groups),
            "adv/groups_all_equal_share": float(np.mean(spread == 0.0)),
            "adv/trajectories_per_group_mean": float(traj.n_traj / traj.n_groups),
        }


def _check_types(algo: Algorithm) -> None:
    """Check each config field against its annotation (``core.typed``, the package's one type checker)."""
    check_fields(algo, prefix=f"{algo.name or type(algo).__name__}: ")


def register_algorithm(name: str, cls: type[Algorithm] | None = None) -> Any:
    """Register ``cls`` under ``name``; without ``cls``, a class decorator.

    Re-registering the same class is a no-op; another class under a taken name is a
    ``ValueError`` (pick a new name).
    """

    def register(target: type[Algorithm]) -> type[Algorithm]:
        if not (isinstance(target, type) and issubclass(target, Algorithm)):
            raise TypeError(f"register_algorithm({name!r}, ...) needs a subclass of gigpo_gym.algos.Algorithm, got {target!r}")
        if not dataclasses.is_dataclass(target) or "__dataclass_fields__" not in target.__dict__:
            raise TypeError(f"{target.__name__} must be decorated with @dataclass so its config can be checked")
        known = _REGISTRY.get(name)
        if known is not None and known is not target:
            raise ValueError(f"algorithm name {name!r} is already registered to {known.__module__}.{known.__qualname__}")
        if "name" not in target.__dict__ or not target.__dict__["name"]:
            target.name = name
        _REGISTRY[name] = target
        return target

    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"algorithm names are identifiers such as 'my_algo', got {name!r}")
    return register if cls is None else register(cls)


def _builtins() -> dict[str, type[Algorithm]]:
    importlib.import_module("gigpo_gym.algos.estimators")  # registers the built-ins
    return _REGISTRY


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_algorithms() -> list[str]:
    """Names accepted by ``get_algorithm``: built-ins plus installed entry points."""
    return sorted(set(_builtins()) | set(_entry_points()))


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered under ``name`` (loading its entry point if needed)."""
    registry = _builtins()
    if name in registry:
        return registry[name]
    entry_point = _entry_points().get(name)
    if entry_point is None:
        names = available_algorithms()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}; registered: {', '.join(names)}.{hint}")
    try:
        cls = entry_point.load()
    except Exception as error:
        raise ImportError(f"algorithm {name!r} from entry point {entry_point.value!r} failed to load: {error}") from error
    return register_algorithm(name, cls)


def get_algorithm(name: str, **cfg: Any) -> Algorithm:
    """An algorithm instance by name, its config checked (``get_algorithm("gigpo", omega=0.8)``)."""
    return algorithm_class(name).from_config(**cfg)

