"""Optional dependencies: which extra to install, said the same way by every layer.

A missing optional dependency raises ``missing_extra_error(extra, what)``: a
``MissingExtra`` (an ``ImportError``) whose message carries the exact install command.

>>> missing_extra_error("sb3", "Stable-Baselines3 training").args[0].startswith(
...     "Stable-Baselines3 training needs the optional dependencies of the [sb3] extra: pip install")
True
"""

from __future__ import annotations


class MissingExtra(ImportError):
    """An optional dependency is absent; the message names the extra and how to install it."""


def install_command(extra: str) -> str:
    """How to install ``extra``: from a clone (the package is on no index yet), and the published form."""
    return f'pip install ".[{extra}]" in your gigpo-gym clone (pip install "gigpo-gym[{extra}]" once it is on PyPI)'


def missing_extra_error(extra: str, what: str) -> MissingExtra:
    """The error every optional dependency raises when it is absent."""
    return MissingExtra(f"{what} needs the optional dependencies of the [{extra}] extra: {install_command(extra)}")
