"""Algorithms, policies and the trainer (installed as ``gigpo_gym.algos``).

The advantage side needs only numpy and pyarrow::

    from gigpo_gym.algos import StepBatch, get_algorithm
    algo = get_algorithm("gigpo", omega=0.8)
    advantages = algo.advantages(batch)   # one float per row
"""

from gigpo_gym.algos.batch import StepBatch
from gigpo_gym.algos.registry import ENTRY_POINT_GROUP, Algorithm, algorithm_class, available_algorithms, get_algorithm, register_algorithm

__all__ = ["ENTRY_POINT_GROUP", "Algorithm", "StepBatch", "algorithm_class", "available_algorithms", "get_algorithm", "register_algorithm"]
