"""Where generated data is cached and where real datasets are looked up."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


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


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces ``path`` when the block succeeds.

    Readers see the old file or the complete new one, never half of it; concurrent
    writers never mix; on an exception the temporary file is removed.  The new file
    gets the permissions of any file created here (mkstemp's would be owner-only).
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through ``replacing`` (UTF-8)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
