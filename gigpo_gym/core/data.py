"""Where generated data is cached and where real datasets are looked up."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The cache folder for generated data (``$GIGPO_GYM_CACHE`` or ``~/.cache/gigpo_gym``).

    Generated data is written under a versioned sub-folder by its owner, so a new
    generator version never reads an old cache.
    """
    root = Path(os.environ.get("GIGPO_GYM_CACHE") or Path.home() / ".cache" / "gigpo_gym")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_data_dir(data_dir: str | os.PathLike | None, env_var: str) -> Path | None:
    """The real dataset folder: the ``data_dir`` argument, else ``$env_var``, else None.

    None means "use the embedded default".  A named folder that does not exist is an
    error, not a silent fallback.
    """
    chosen = data_dir if data_dir is not None else os.environ.get(env_var) or None
    if chosen is None:
        return None
    path = Path(chosen).expanduser()
    if not path.is_dir():
        source = "data_dir" if data_dir is not None else f"${env_var}"
        raise FileNotFoundError(f"{source} names {str(path)!r}, which is not a directory")
    return path
