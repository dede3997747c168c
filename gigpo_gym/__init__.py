"""gigpo-gym: ALFWorld, WebShop and search-augmented QA as text Gymnasium envs.

Importing the package registers every env id (``gym.make("gigpo_gym/SearchQA-v0")``).
"""

from gigpo_gym.core import INFO_KEYS, String, TextEnv, digest
from gigpo_gym.core.grouped import make_grouped
from gigpo_gym.registration import ENV_SPECS, register_envs

__version__ = "0.1.0"

register_envs()

__all__ = ["ENV_SPECS", "INFO_KEYS", "String", "TextEnv", "__version__", "digest", "make_grouped"]
