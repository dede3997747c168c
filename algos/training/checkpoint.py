"""A training run's folder (``RunFolder``) and its atomic, verifiable checkpoints.

``RunFolder`` owns every file a run writes: the resolved config, the metrics log,
the checkpoints, the KL reference and selected weights, the summary and the curve.
The trainer writes through it and the leaderboard reads a run back through it.

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

from gigpo_gym.algos.training.records import RECORDS_DIR, drop_after
from gigpo_gym.core.data import replacing, write_atomically

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


def _check(folder: Path, files: tuple[str, ...] = _REQUIRED) -> dict[str, Any]:
    """The trainer state of ``folder`` once each of ``files`` is there and matches the manifest."""
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        raise CheckpointError(f"{manifest} is missing: {folder} is not a complete checkpoint")
    try:
        digests = json.loads(manifest.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{manifest} is corrupted ({e})") from None
    for name in files:
        path = folder / name
        if name not in digests or not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing")
        if _sha256(path) != digests[name]:
            raise CheckpointError(f"checkpoint file {path} is corrupted (its sha256 does not match {manifest.name})")
    return json.loads((folder / STATE_FILE).read_text())


def verify_checkpoint(folder: str | Path, weights_only: bool = False) -> dict[str, Any]:
    """Check every file against the manifest; returns the trainer state.  Errors name the
    file and the previous intact checkpoint.  ``weights_only``: the optimiser state may be
    gone (a finished run can drop it), as for evaluating the weights."""
    folder = Path(folder)
    try:
        return _check(folder, (POLICY_FILE, STATE_FILE) if weights_only else _REQUIRED)
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
    """Verify (unless just done), then load weights (and optimiser state) in place; returns the trainer state.

    Without ``optimizer`` only the weights and the state must be intact: evaluating a
    finished run needs no optimiser state.
    """
    from safetensors.torch import load_model

    folder = Path(folder)
    state = verify_checkpoint(folder, weights_only=optimizer is None) if verify else json.loads((folder / STATE_FILE).read_text())
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


# -- the run folder --------------------------------------------------------------------
def last_reset(iteration: int, every: int) -> int:
    """The iteration after which the KL reference was last reset (0: the warm start's; ``every`` 0: never reset)."""
    return iteration - iteration % every if every else 0


class RunFolder:
    """Every file of one training run, in one folder:

    - ``config.yaml``: the resolved config (``load_config`` reads it back);
    - ``metrics.jsonl`` and ``tensorboard/``: one record per logged step;
    - ``prompts.jsonl``: a few prompts of each iteration's rollout, as the model met them (``metrics.sample_prompts``);
    - ``checkpoints/``: the checkpoints (see the module docstring);
    - ``reference.safetensors``: the KL reference of the warm start, and
      ``reference-NNNNNN.safetensors`` each reset's (``optim.kl_reset_every``);
    - ``selected.safetensors``: the weights ``select_every`` chose, with their iteration
      and selection score in the file's metadata;
    - ``summary.json`` and ``learning_curve.png``: the run's result;
    - ``records/``: a few task groups of each iteration, step by step, for ``gigpo-gym inspect``
      (``training.records``).

    The trainer writes through it (rank 0 only); the leaderboard finds a run's weights
    and config through it (``locate``).
    """

    CONFIG_FILE = "config.yaml"
    METRICS_FILE = "metrics.jsonl"
    PROMPTS_FILE = "prompts.jsonl"
    SUMMARY_FILE = "summary.json"
    CURVE_FILE = "learning_curve.png"
    SELECTED_FILE = "selected.safetensors"
    REFERENCE_FILE = "reference.safetensors"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.records = self.path / RECORDS_DIR
        self._writer = None

    # -- config, metrics, summary --------------------------------------------------
    def write_config(self, config: Any) -> None:
        from gigpo_gym.algos.training.config import save_config

        self.path.mkdir(parents=True, exist_ok=True)
        save_config(config, self.path / self.CONFIG_FILE)

    def config(self, overrides: list[str] | tuple[str, ...] = ()) -> Any:
        """The run's ``TrainConfig`` as it was trained (``overrides``: ``key=value``, e.g. the device)."""
        from gigpo_gym.algos.training.config import load_config

        path = self.path / self.CONFIG_FILE
        if not path.is_file():
            raise CheckpointError(f"the run's {path} is missing, so the model cannot be rebuilt")
        return load_config(path, list(overrides))

    def log(self, record: dict[str, Any], step: int | None = None) -> None:
        """Append ``record`` to ``metrics.jsonl`` and its numbers to TensorBoard at ``step`` (default: its iteration)."""
        from gigpo_gym.algos.training.metrics import append_jsonl

        append_jsonl(self.path / self.METRICS_FILE, record)
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.path / "tensorboard"))
        step = int(record["iteration"]) if step is None else step
        for k, v in record.items():
            if k != "iteration" and isinstance(v, (int, float)):
                self._writer.add_scalar(k, v, step)
        self._writer.flush()

    def log_prompts(self, samples: list[dict[str, Any]]) -> None:
        """Append an iteration's sample prompts to ``prompts.jsonl``."""
        from gigpo_gym.algos.training.metrics import append_jsonl

        for sample in samples:
            append_jsonl(self.path / self.PROMPTS_FILE, sample)

    def keep_iterations(self, last: int) -> None:
        """Drop the logged metrics, sample prompts and iteration records after iteration ``last`` (-1: all; a resumed run
        writes them again)."""
        from gigpo_gym.algos.training.metrics import keep_iterations

        keep_iterations(self.path / self.METRICS_FILE, last)
        keep_iterations(self.path / self.PROMPTS_FILE, last)
        drop_after(self.records, last)

    def metrics(self) -> list[dict[str, Any]]:
        from gigpo_gym.algos.training.metrics import read_jsonl

        return read_jsonl(self.path / self.METRICS_FILE)

    def plot_curve(self, title: str) -> Path | None:
        from gigpo_gym.algos.training.metrics import plot_curve

        return plot_curve(self.metrics(), self.path / self.CURVE_FILE, title=title)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomically(self.path / self.SUMMARY_FILE, json.dumps(summary, indent=2, sort_keys=True))

    def summary(self) -> dict[str, Any] | None:
        """The summary a finished (or earlier) session wrote; None when there is none or it is damaged."""
        path = self.path / self.SUMMARY_FILE
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except json.JSONDecodeError:
            return None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # -- checkpoints ---------------------------------------------------------------
    def save_checkpoint(self, iteration: int, policy: torch.nn.Module, optimizer: Any, state: dict[str, Any],
                        keep: int = 2) -> Path:
        return save_checkpoint(self.checkpoints, iteration, policy, optimizer, state, keep=keep)

    def resumable(self, echo: Callable[[str], Any] = print) -> Path:
        """The checkpoint a resume starts from (``find_resumable``)."""
        return find_resumable(self.checkpoints, echo)

    def final_checkpoint(self) -> Path | None:
        """The checkpoint the ``latest`` pointer names, None before the first."""
        return latest_checkpoint(self.checkpoints) if (self.checkpoints / LATEST_FILE).is_file() else None

    # -- the KL reference ----------------------------------------------------------
    def reference_file(self, iteration: int) -> Path:
        """The KL reference in force after ``iteration``: the warm start's file (0), or that reset's.

        Each reset (``optim.kl_reset_every``) writes its own file, so a run resumed from an
        earlier checkpoint finds the reference it had then.
        """
        return self.path / (self.REFERENCE_FILE if iteration == 0 else f"reference-{iteration:06d}.safetensors")

    def save_reference(self, reference: torch.nn.Module, iteration: int = 0) -> None:
        from safetensors.torch import save_model

        with replacing(self.reference_file(iteration)) as tmp:
            save_model(reference, str(tmp))

    def load_reference(self, reference: torch.nn.Module, iteration: int, every: int) -> None:
        """Load the reference in force after ``iteration`` (reset every ``every`` iterations) into ``reference``."""
        from safetensors.torch import load_model

        path = self.reference_file(last_reset(iteration, every))
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing: the KL reference of this run cannot be restored (this config "
                f"{f'resets it every {every} iterations' if every else 'never resets it'}: optim.kl_reset_every "
                f"{every}; was the run trained with another value?)")
        try:
            load_model(reference, str(path))
        except Exception as e:
            raise CheckpointError(f"cannot read {path}: {e}") from e

    def prune_references(self, every: int) -> None:
        """Delete the reset references no kept checkpoint resumes with (the warm start's file stays)."""
        kept = list_checkpoints(self.checkpoints)
        if not kept:
            return
        needed = last_reset(checkpoint_iteration(kept[0]), every)
        for iteration in range(every, needed, every or 1):
            self.reference_file(iteration).unlink(missing_ok=True)

    # -- the selected weights ------------------------------------------------------
    @property
    def selected_file(self) -> Path:
        return self.path / self.SELECTED_FILE

    def save_selected(self, module: torch.nn.Module, iteration: int, success: float, **extra: str) -> dict[str, Any]:
        """Keep ``module``'s weights as the run's choice, recording ``iteration``, ``success`` and any ``extra`` metadata."""
        from safetensors.torch import save_model

        with replacing(self.selected_file) as tmp:
            save_model(module, str(tmp), metadata={"iteration": str(iteration), "success": repr(success), **extra})
        return {"iteration": iteration, "success": success}

    def selected(self, before: int | None = None) -> dict[str, Any] | None:
        """The choice so far: its iteration and selection success (None: none, or one from after ``before``,
        an iteration a resumed run trains again)."""
        chosen = read_selected(self.selected_file) if self.selected_file.is_file() else None
        return chosen if chosen is not None and (before is None or chosen["iteration"] <= before) else None

    def load_selected(self, module: torch.nn.Module) -> None:
        from safetensors.torch import load_model

        load_model(module, str(self.selected_file))

    # -- finding a run's weights (the leaderboard) -----------------------------------
    @classmethod
    def locate(cls, path: str | Path) -> tuple["RunFolder", Path] | None:
        """(run folder, weights) when ``path`` is a run folder, its ``checkpoints``, one checkpoint, or its
        ``selected.safetensors``; None when it is none of them.  A run folder's weights are its latest checkpoint."""
        path = Path(path)
        if path.is_file() and path.name == cls.SELECTED_FILE:
            return cls(path.parent), path
        if (path / MANIFEST_FILE).is_file() or (path / POLICY_FILE).is_file():
            return cls(path.parent.parent), path
        if (path / LATEST_FILE).is_file():
            return cls(path.parent), latest_checkpoint(path)
        if (path / "checkpoints").is_dir():
            if not (path / "checkpoints" / LATEST_FILE).is_file():
                raise CheckpointError(f"run folder {path} has no complete checkpoint ({path / 'checkpoints' / LATEST_FILE} "
                                      "is missing)")
            return cls(path), latest_checkpoint(path / "checkpoints")
        return None

    def load_weights(self, weights: Path, policy: torch.nn.Module) -> dict[str, Any]:
        """Load ``weights`` (a checkpoint folder or ``selected.safetensors``) into ``policy``; returns the trainer
        state (iteration, config digest; a selected file records its iteration only)."""
        from safetensors.torch import load_model

        if not weights.is_file():
            return load_checkpoint(weights, policy)
        try:
            load_model(policy, str(weights))
        except Exception as e:  # safetensors raises several types on damaged or mismatched files
            raise CheckpointError(f"cannot load {weights} into the run's model: {e}") from e
        return {"iteration": (read_selected(weights) or {"iteration": 0})["iteration"]}


def read_selected(path: str | Path) -> dict[str, Any] | None:
    """The iteration and selection success a ``selected.safetensors`` records (None: it records none)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    if "iteration" not in meta:
        return None
    return {"iteration": int(meta["iteration"]), "success": float(meta["success"])}
