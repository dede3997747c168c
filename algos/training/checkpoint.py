"""Atomic, verifiable training checkpoints.

A checkpoint is a folder ``iter-000012/`` holding the policy weights
(``policy.safetensors``), the optimiser state (``optimizer.pt``), the trainer state
(``state.json``: iteration, config digest) and ``manifest.json`` (sha256 of each
file).  It is written into a temporary folder and renamed into place with
``os.replace``; then the ``latest`` pointer is replaced the same way; only then are
old checkpoints deleted.  A crash at any moment leaves the previous checkpoint
whole, and a damaged file is found by its digest before anything is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from gigpo_gym.core.data import write_atomically

POLICY_FILE = "policy.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or damaged."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(
    root: str | Path, iteration: int, policy: torch.nn.Module, optimizer: Any, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoint ``iteration`` under ``root`` atomically; returns its folder."""
    from safetensors.torch import save_model

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"iter-{iteration:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        save_model(policy, str(tmp / POLICY_FILE))
        torch.save(optimizer.state_dict() if optimizer is not None else {}, tmp / OPTIMIZER_FILE)
        (tmp / STATE_FILE).write_text(json.dumps({**state, "iteration": iteration}, indent=2))
        files = {name: _sha256(tmp / name) for name in (POLICY_FILE, OPTIMIZER_FILE, STATE_FILE)}
        (tmp / MANIFEST_FILE).write_text(json.dumps(files, indent=2))
        if target.exists():  # a re-run of the same iteration replaces it
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_atomically(root / LATEST_FILE, target.name + "\n")
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoint folders under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("iter-*") if p.is_dir() and (p / MANIFEST_FILE).is_file())


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


def verify_checkpoint(folder: str | Path) -> dict[str, Any]:
    """Check every file against the manifest; returns the trainer state."""
    folder = Path(folder)
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        raise CheckpointError(f"{manifest} is missing: {folder} is not a complete checkpoint{_previous_hint(folder)}")
    try:
        digests = json.loads(manifest.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{manifest} is corrupted ({e}){_previous_hint(folder)}") from e
    for name, expected in digests.items():
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing{_previous_hint(folder)}")
        if _sha256(path) != expected:
            raise CheckpointError(
                f"checkpoint file {path} is corrupted (its sha256 does not match {manifest.name}){_previous_hint(folder)}"
            )
    return json.loads((folder / STATE_FILE).read_text())


def load_checkpoint(folder: str | Path, policy: torch.nn.Module, optimizer: Any | None = None) -> dict[str, Any]:
    """Verify, then load weights (and optimiser state) in place; returns the trainer state."""
    from safetensors.torch import load_model

    folder = Path(folder)
    state = verify_checkpoint(folder)
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
