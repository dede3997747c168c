"""Thin adapters that put the suite inside other RL stacks, one module per library.

- ``gigpo_gym.integrations.trl``: TRL environments (``environment_class``), a dataset of
  task seeds (``task_dataset``) and ``GiGPOTrainer`` (extra ``[trl]``).
- ``gigpo_gym.integrations.openenv``: any id served over openenv-core (extra ``[openenv]``).
- ``gigpo_gym.integrations.skyrl``: every id registered with ``skyrl_gym`` (extra ``[skyrl]``).

They wrap the envs and call the package's estimators; the env contract stays the one
source.  Each module imports its library when imported and checks its version against
the range its extra pins (``require``), so an untested version fails at once with the
range and the install command rather than deep inside a training run.
"""

from __future__ import annotations

import re
from importlib import metadata

from gigpo_gym.core.extras import MissingExtra, install_command

#: library distribution -> (extra, lowest supported version, first unsupported version).
SUPPORTED: dict[str, tuple[str, str, str]] = {
    "trl": ("trl", "1.16", "1.17"),
    "transformers": ("trl", "5.13", "5.26"),  # what TRL's adapter parses tool calls with
    "openenv-core": ("openenv", "0.3", "0.4"),
    "skyrl-gym": ("skyrl", "0.4", "0.5"),
}


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string ("1.16.0rc1" -> (1, 16, 0))."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0].split("rc")[0].split("dev")[0])[:3])


def require(distribution: str) -> str:
    """The installed version of ``distribution``; a clear ``ImportError`` when absent or outside the tested range."""
    extra, low, high = SUPPORTED[distribution]
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise MissingExtra(f"gigpo_gym.integrations needs {distribution} >={low},<{high} (the [{extra}] extra): "
                           f"{install_command(extra)}") from None
    if not _release(low) <= _release(version) < _release(high):
        raise MissingExtra(f"{distribution} {version} is installed; gigpo_gym.integrations is tested with "
                           f"{distribution} >={low},<{high}: {install_command(extra)}")
    return version
