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
