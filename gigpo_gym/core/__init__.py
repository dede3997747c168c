"""The contract every env of the suite stands on."""

from gigpo_gym.core.anchor import canonical_json, digest
from gigpo_gym.core.env import INFO_KEYS, TextEnv, derive_seed
from gigpo_gym.core.spaces import String

__all__ = ["INFO_KEYS", "String", "TextEnv", "canonical_json", "derive_seed", "digest"]
