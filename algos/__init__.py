"""Algorithms, policies and the trainer (installed as ``gigpo_gym.algos``).

Sub-packages, from the bottom up: ``estimators`` (advantage rules on numpy arrays,
no torch), ``policies`` (the one policy interface, the Hugging Face backend, the
reference policies), ``training`` (rollout, loss, trainer), ``leaderboard``
(fixed evaluation protocol).  docs/architecture.md draws the layers.

The advantage side needs only numpy and pyarrow::

    from gigpo_gym.algos import StepBatch, get_algorithm
    algo = get_algorithm("gigpo", omega=0.8)
    advantages = algo.advantages(batch)   # one float per row

The policy/trainer side (torch, transformers) is imported on first use, so the line
above never loads torch.  ``Trainer(load_config("demo.yaml")).train()`` trains;
``Policy`` and ``TrainablePolicy`` are the whole contract a policy keeps.
"""

from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.registry import ENTRY_POINT_GROUP, AdvantageParts, Algorithm, algorithm_class, available_algorithms, get_algorithm, register_algorithm
from gigpo_gym.core.lazy import lazy_names

#: Names served lazily from the torch side: name -> module.
_LAZY = {
    "Policy": "policies.base",
    "TrainablePolicy": "policies.base",
    "HFPolicy": "policies.hf",
    "SamplingParams": "policies.base",
    "Generation": "policies.base",
    "TokenBatch": "policies.base",
    "RandomAdmissiblePolicy": "policies.reference",
    "ExpertPolicy": "policies.reference",
    "collect": "training.rollout",
    "TrainConfig": "training.config",
    "load_config": "training.config",
    "Trainer": "training.trainer",
    "run_training": "training.trainer",
}
__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "ENTRY_POINT_GROUP", "AdvantageParts", "Algorithm", "StepBatch", "algorithm_class", "available_algorithms", "get_algorithm",
    "register_algorithm", *_LAZY,
]
