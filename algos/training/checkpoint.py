"""Atomic, verifiable training checkpoints that survive a kill at any moment.

A checkpoint is a folder ``iter-000012/`` holding the policy weights
(``policy.safetensors``), the optimiser state (``optimizer.pt``), the trainer state
(``state.json``: iteration, config digest) and ``manifest.json`` (sha256 of each
file, written last).  Every change of the ``checkpoints/`` folder is a rename, so a
``kill -9`` at any moment leaves only whole checkpoints under their real names:

- a new checkpoint is written into a hidden ``.tmp-*`` folder and renamed into place;
- re-saving an iteration first renames the old folder aside (``.old-*``), renames the
  new one in, replaces the ``latest`` pointer, and only then deletes the old one;
- pruning renames a folder to ``.del-*`` before deleting it.

The next save or resume clears what a killed write left (and puts an ``.old-*``
folder back when its replacement never arrived).  Resume checks every file against
the manifest and falls back to the newest complete checkpoint, saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from gigpo_gym.core.data import write_atomically

POLICY_FILE = "policy.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "latest"
_NAME = re.compile(r"iter-\d{6}")
_REQUIRED = (POLICY_FILE, OPTIMIZER_FILE, STATE_FILE)


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or damaged."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _discard(folder: Path, root: Path) -> None:
    """Delete a folder after renaming it to a hidden name, so no listing sees it half deleted."""
    gone = Path(tempfile.mkdtemp(prefix=f".del-{folder.name}-", dir=root))
    os.replace(folder, gone / folder.name)
    shutil.rmtree(gone, ignore_errors=True)


def clean_interrupted(root: str | Path) -> None:
    """Clear what a killed save left under ``root``: temp folders, half-deleted folders,
    and a moved-aside checkpoint whose replacement never arrived (that one is put back)."""
    root = Path(root)
    if not root.is_dir():
        return
    for path in sorted(root.glob(".*-iter-*")):
        kind, _, rest = path.name[1:].partition("-")
        if kind == "old":
            target = root / rest[: len("iter-000000")]
            if not target.exists() and (path / MANIFEST_FILE).is_file():
                os.replace(path, target)
                continue
        if kind in ("tmp", "old", "del"):
            shutil.rmtree(path, ignore_errors=True)
    for path in root.glob(f".{LATEST_FILE}.*.tmp"):  # a killed write of the pointer
        path.unlink(missing_ok=True)


def save_checkpoint(
    root: str | Path, iteration: int, policy: torch.nn.Module, optimizer: Any, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoint ``iteration`` under ``root`` (see the module docstring); returns its folder.

    The ``keep`` newest checkpoints stay, and always the one just written.
    """
    from safetensors.torch import save_model

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    clean_interrupted(root)
    target = checkpoint_folder(root, iteration)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=root))
    old = None
    try:
        save_model(policy, str(tmp / POLICY_FILE))
        torch.save(optimizer.state_dict() if optimizer is not None else {}, tmp / OPTIMIZER_FILE)
        (tmp / STATE_FILE).write_text(json.dumps({**state, "iteration": iteration}, indent=2))
        files = {name: _sha256(tmp / name) for name in _REQUIRED}
        (tmp / MANIFEST_FILE).write_text(json.dumps(files, indent=2))
        if target.exists():  # a re-run of the same iteration replaces it
            old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=root))
            os.rmdir(old)
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_atomically(root / LATEST_FILE, target.name + "\n")
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for stale in list_checkpoints(root)[:-keep]:
        if stale != target:
            _discard(stale, root)
    return target


def checkpoint_folder(root: str | Path, iteration: int) -> Path:
    """Where checkpoint ``iteration`` lives under ``root``."""
    return Path(root) / f"iter-{iteration:06d}"


def checkpoint_iteration(folder: str | Path) -> int:
    """The iteration a checkpoint folder holds, read from its name."""
    name = Path(folder).name
    if not _NAME.fullmatch(name):
        raise CheckpointError(f"{folder} is not a checkpoint folder (iter-NNNNNN)")
    return int(name.removeprefix("iter-"))


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint folders under ``root`` whose manifest is written, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _NAME.fullmatch(p.name) and (p / MANIFEST_FILE).is_file())


def latest_checkpoint(root: str | Path) -> Path:
    """The folder the ``latest`` pointer names."""
    root = Path(root)
    pointer = root / LATEST_FILE
    if not pointer.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {pointer} does not exist")
    return root / pointer.read_text().strip()


def _previous_hint(folder: Path) -> str:
    older = [p for p in list_checkpoints(folder.parent) if p.name < folder.name]
    if older:
        return f"; the previous checkpoint {older[-1]} is intact (resume from it with --resume {older[-1]})"
    return ""


def _check(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        raise CheckpointError(f"{manifest} is missing: {folder} is not a complete checkpoint")
    try:
        digests = json.loads(manifest.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{manifest} is corrupted ({e})") from None
    for name in _REQUIRED:
        path = folder / name
        if name not in digests or not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing")
        if _sha256(path) != digests[name]:
            raise CheckpointError(f"checkpoint file {path} is corrupted (its sha256 does not match {manifest.name})")
    return json.loads((folder / STATE_FILE).read_text())


def verify_checkpoint(folder: str | Path) -> dict[str, Any]:
    """Check every file against the manifest; returns the trainer state.  Errors name the
    file and the previous intact checkpoint."""
    folder = Path(folder)
    try:
        return _check(folder)
    except CheckpointError as e:
        raise CheckpointError(f"{e}{_previous_hint(folder)}") from None


def find_resumable(root: str | Path, echo: Callable[[str], Any] = print) -> Path:
    """The checkpoint to resume a run from: ``latest`` when it verifies, else the newest
    complete one (``echo`` says which was skipped and why)."""
    root = Path(root)
    clean_interrupted(root)
    candidates = list_checkpoints(root)[::-1]
    pointer = root / LATEST_FILE
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        candidates = [named, *(c for c in candidates if c != named)]
    problems = []
    for folder in candidates:
        try:
            _check(folder)
        except CheckpointError as e:
            problems.append(str(e))
            continue
        if problems:
            echo(f"note: skipped {'; '.join(problems)}; resuming from {folder}")
        return folder
    found = "; ".join(problems) or f"{root} holds no checkpoint"
    raise CheckpointError(f"no complete checkpoint to resume from: {found}")


def load_checkpoint(
    folder: str | Path, policy: torch.nn.Module, optimizer: Any | None = None, verify: bool = True
) -> dict[str, Any]:
    """Verify (unless just done), then load weights (and optimiser state) in place; returns the trainer state."""
    from safetensors.torch import load_model

    folder = Path(folder)
    state = verify_checkpoint(folder) if verify else json.loads((folder / STATE_FILE).read_text())
    try:
        missing, unexpected = load_model(policy, str(folder / POLICY_FILE), strict=False)
    except Exception as e:  # safetensors raises several types on damaged files
        raise CheckpointError(f"cannot read checkpoint file {folder / POLICY_FILE}: {e}") from e
    if missing or unexpected:
        raise CheckpointError(
            f"{folder / POLICY_FILE} does not match this policy (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}): was it written with another model config?"
        )
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(folder / OPTIMIZER_FILE, map_location="cpu", weights_only=True))
    return state
