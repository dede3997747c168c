"""Package names imported on first use (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``names`` (name -> submodule of ``package``) when first asked for."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def moved_names(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that moved: ``name -> "new.module:new_name"`` (``Class.attr`` too).

    The old import keeps working and warns (``DeprecationWarning``) with the new place,
    so no name a user imports disappears without saying where it went.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        import warnings

        target, _, attr = names[name].partition(":")
        warnings.warn(f"{module}.{name} is deprecated: use {target}.{attr or name}", DeprecationWarning, stacklevel=2)
        value = import_module(target)
        for part in (attr or name).split("."):
            value = getattr(value, part)
        return value

    return __getattr__
