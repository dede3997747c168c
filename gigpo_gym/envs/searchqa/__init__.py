"""Search-augmented QA (Search-R1 protocol): corpora, retrievers, the /retrieve server and the env."""

from gigpo_gym.envs.searchqa.env import SearchQAEnv

__all__ = ["SearchQAEnv"]
