"""Algorithms, policies and the trainer (installed as ``gigpo_gym.algos``).

The advantage side needs only numpy and pyarrow::

    from gigpo_gym.algos import StepBatch, get_algorithm
    algo = get_algorithm("gigpo", omega=0.8)
    advantages = algo.advantages(batch)   # one float per row

The policy/trainer side (torch, transformers) is imported on first use, so the line
above never loads torch.
"""

from importlib import import_module
from typing import Any

from gigpo_gym.algos.batch import StepBatch
from gigpo_gym.algos.registry import ENTRY_POINT_GROUP, Algorithm, algorithm_class, available_algorithms, get_algorithm, register_algorithm

#: Names served lazily from the torch side: name -> module.
_LAZY = {
    "HFPolicy": "hf",
    "SamplingParams": "policy",
    "Generation": "policy",
    "TokenBatch": "policy",
    "collect": "rollout",
    "TrainConfig": "config",
    "load_config": "config",
    "Trainer": "trainer",
    "run_training": "trainer",
    "RandomAdmissiblePolicy": "reference",
    "ExpertPolicy": "reference",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"gigpo_gym.algos.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'gigpo_gym.algos' has no attribute {name!r}")


__all__ = [
    "ENTRY_POINT_GROUP", "Algorithm", "StepBatch", "algorithm_class", "available_algorithms", "get_algorithm",
    "register_algorithm", *_LAZY,
]
