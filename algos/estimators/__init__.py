"""Built-in advantage estimators; importing this package registers them.

Each estimator is one vectorised function of a ``StepBatch`` (formula in its
docstring) plus a dataclass ``Algorithm`` that holds its config.
"""

from gigpo_gym.algos.estimators.gigpo import GiGPO, exact_step_groups, gigpo_advantages, gigpo_parts, similarity_step_groups
from gigpo_gym.algos.estimators.group_relative import DAPO, GRPO, RLOO, episode_advantages, grpo_advantages, rloo_advantages, varied_groups_mask
from gigpo_gym.algos.estimators.kernels import EPS, Trajectories, group_normalize, reverse_scan, trajectories
from gigpo_gym.algos.estimators.registry import AdvantageParts
from gigpo_gym.algos.estimators.returns_based import PPO, ReinforcePP, gae, reinforce_pp_advantages

__all__ = [
    "AdvantageParts", "DAPO", "EPS", "GRPO", "PPO", "RLOO", "GiGPO", "ReinforcePP", "Trajectories", "episode_advantages",
    "exact_step_groups", "gae", "gigpo_advantages", "gigpo_parts", "group_normalize", "grpo_advantages",
    "reinforce_pp_advantages", "reverse_scan", "rloo_advantages", "similarity_step_groups",
    "trajectories", "varied_groups_mask",
]  # fmt: skip
