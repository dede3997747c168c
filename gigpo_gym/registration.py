"""Every env id of the suite, in one place.

Entry points are strings, so importing this module imports no engine.  The ids are
registered with gymnasium when ``gigpo_gym`` is imported (also by
``gym.make("gigpo_gym:gigpo_gym/...")`` in code that never imported it).
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

NAMESPACE = "gigpo_gym"


@dataclass(frozen=True)
class EnvSpec:
    """What ``gigpo-gym list`` shows and what gymnasium registers."""

    id: str
    entry_point: str
    max_episode_steps: int
    backend: str
    #: Extra that must be installed (``install_command(extra)`` says how), or None.
    extra: str | None = None
    #: Module whose presence tells whether the extra is installed.
    requires: str | None = None
    #: Environment variable naming a real data directory (else the embedded default).
    data_env: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


ENV_SPECS: tuple[EnvSpec, ...] = (
    EnvSpec(
        id=f"{NAMESPACE}/SearchQA-v0",
        entry_point="gigpo_gym.envs.searchqa.env:SearchQAEnv",
        max_episode_steps=4,
        backend="native (BM25 / dense / HTTP retriever)",
        data_env="GIGPO_SEARCHQA_DATA",
    ),
    EnvSpec(
        id=f"{NAMESPACE}/ALFWorld-v0",
        entry_point="gigpo_gym.envs.alfworld.env:ALFWorldEnv",
        max_episode_steps=50,
        backend="native engine",
        data_env="ALFWORLD_DATA",
    ),
    EnvSpec(
        id=f"{NAMESPACE}/ALFWorld-TextWorld-v0",
        entry_point="gigpo_gym.envs.alfworld.textworld_env:ALFWorldTextWorldEnv",
        max_episode_steps=50,
        backend="reference TextWorld engine",
        extra="alfworld",
        requires="alfworld",
        data_env="ALFWORLD_DATA",
    ),
    EnvSpec(
        id=f"{NAMESPACE}/WebShop-v0",
        entry_point="gigpo_gym.envs.webshop.env:WebShopEnv",
        max_episode_steps=15,
        backend="native (BM25 search, text pages)",
        data_env="WEBSHOP_DATA",
    ),
    EnvSpec(
        id=f"{NAMESPACE}/WebShop-Browser-v0",
        entry_point="gigpo_gym.envs.webshop.browser_env:WebShopBrowserEnv",
        max_episode_steps=15,
        backend="headless Chromium via Selenium (WebShop site)",
        extra="browser",
        requires="selenium",
        data_env="WEBSHOP_DATA",
    ),
)


def register_envs() -> None:
    """Register every id with gymnasium (idempotent)."""
    for spec in ENV_SPECS:
        if spec.id not in gym.registry:
            gym.register(
                id=spec.id,
                entry_point=spec.entry_point,
                max_episode_steps=spec.max_episode_steps,
                # gymnasium's passive checker adds nothing to the suite's own contract tests, and
                # in gymnasium 1.4 a refused first reset leaves it raising TypeError on every step
                disable_env_checker=True,
                kwargs=dict(spec.kwargs),
            )


def env_spec(env_id: str) -> EnvSpec:
    """The suite's spec of ``env_id`` (with or without the ``gigpo_gym:`` module prefix)."""
    env_id = env_id.split(":", 1)[1] if env_id.startswith(f"{NAMESPACE}:") else env_id
    for spec in ENV_SPECS:
        if spec.id == env_id:
            return spec
    ids = [s.id for s in ENV_SPECS]
    close = difflib.get_close_matches(env_id, ids, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise gym.error.UnregisteredEnv(f"unknown env id {env_id!r}; the suite has {ids}.{hint}")
