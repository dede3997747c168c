"""ALFWorld on a native engine: generated households, real game files, an expert.

``engine`` (pure logic) plays a ``World`` built by ``generator`` or read by ``pddl``;
``expert`` solves any of them; ``env.ALFWorldEnv`` is the gymnasium adapter
(``gigpo_gym/ALFWorld-v0``); ``demos`` exports expert trajectories.
"""

from gigpo_gym.envs.alfworld.engine import Engine
from gigpo_gym.envs.alfworld.expert import expert_action, expert_plan
from gigpo_gym.envs.alfworld.generator import generate_task
from gigpo_gym.envs.alfworld.pddl import load_game_file
from gigpo_gym.envs.alfworld.world import World

__all__ = ["Engine", "World", "expert_action", "expert_plan", "generate_task", "load_game_file"]
