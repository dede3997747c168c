"""``StepBatch``: one training row per env step, the input of every advantage estimator.

A rollout of G task groups x N trajectories becomes rows that carry which group,
which trajectory and which step they are, the step's reward (invalid-action penalty
already applied) and the step's anchor key.  Estimators read only these arrays; the
trainer's token data rides along in ``extras`` untouched.

The arrays are copied and made read-only on construction (and checked again when a
field is assigned later), so an estimator can trust that the batch it validated is
the batch it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

_ID_FIELDS = ("group_ids", "traj_ids", "step_ids")
_REQUIRED_FIELDS = (*_ID_FIELDS, "rewards", "anchors")
_ARRAY_FIELDS = (*_REQUIRED_FIELDS, "anchor_texts", "values", "penalties")
_ROW_KEYS = {"group_id": "group_ids", "traj_id": "traj_ids", "step_id": "step_ids", "reward": "rewards", "anchor": "anchors"}
_OPTIONAL_ROW_KEYS = {"anchor_text": "anchor_texts", "value": "values", "penalty": "penalties"}


@dataclass(eq=False)
class StepBatch:
    """Per-row arrays of one rollout batch (row order never matters).

    Required
        ``group_ids`` (int64): the task group (N copies of one task) the row belongs to.
        ``traj_ids`` (int64): the trajectory, unique across the whole batch.
        ``step_ids`` (int64): the step's index in its trajectory; rows of a trajectory
        are ordered by it (gaps allowed, duplicates rejected).
        ``rewards`` (float64): the env reward of the step, penalties included.
        ``anchors``: the anchor key GiGPO groups on, either str (a list or an object /
        str array; kept as an object array) or a numpy integer array (kept as uint64,
        negative values wrapping modulo 2**64, so distinct integers stay distinct).
        Integers group several times faster; ``hex_digest_codes`` turns the envs'
        16-hex-digit digests into uint64 one-to-one (``Rollout.to_step_batch`` does).
    Optional
        ``anchor_texts`` (object array of str): raw observation texts for similarity
        grouping.  ``values`` (float64): critic values V(s_t) for PPO.
        ``penalties`` (float64): the invalid-action penalty already subtracted from
        each row's reward (0 on valid steps); the estimators' ``invalid_penalty="row"``
        reads it to move the penalty where verl-agent puts it.
        ``extras``: per-row data the estimators never read (token ids, log-probs...);
        each value is a sequence of length ``len(batch)`` so ``take`` can subset it.

    A trajectory ends at its last row: the value after it is 0 (episodes cut by the
    step limit count as failures, as in the paper), so there is no ``dones`` array.
    """

    group_ids: np.ndarray
    traj_ids: np.ndarray
    step_ids: np.ndarray
    rewards: np.ndarray
    anchors: np.ndarray
    anchor_texts: np.ndarray | None = None
    values: np.ndarray | None = None
    penalties: np.ndarray | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    _arrow: dict[str, pa.Array] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in _ARRAY_FIELDS:
            value = getattr(self, name)
            if value is None:
                if name in _REQUIRED_FIELDS:
                    raise ValueError(f"StepBatch.{name} is required")
                continue
            array = self._checked(name, value)
            object.__setattr__(self, name, array)
            if len(array) != len(self.group_ids):
                raise ValueError(f"StepBatch.{name} has {len(array)} rows but group_ids has {len(self.group_ids)}; every array needs one entry per row")
        self._check_extras(self.extras)
        object.__setattr__(self, "_ready", True)

    def __setattr__(self, name: str, value: Any) -> None:
        """Assigning a field later (``batch.values = critic(...)``) checks it like the constructor."""
        if getattr(self, "_ready", False) and name in _ARRAY_FIELDS:
            if value is None and name in _REQUIRED_FIELDS:
                raise ValueError(f"StepBatch.{name} is required")
            if value is not None:
                value = self._checked(name, value)
                if len(value) != len(self):
                    raise ValueError(f"StepBatch.{name} has {len(value)} rows but the batch has {len(self)}")
            elif name in self._arrow:
                del self._arrow[name]
        elif getattr(self, "_ready", False) and name == "extras":
            self._check_extras(value)
        object.__setattr__(self, name, value)

    def _checked(self, name: str, value: Any) -> np.ndarray:
        if name in _ID_FIELDS:
            return _int_array(name, value)
        if name in ("rewards", "values", "penalties"):
            return _float_array(name, value)
        if name == "anchors" and isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            self._arrow.pop(name, None)
            return _readonly(_as_1d(name, value).astype(np.uint64))
        array, self._arrow[name] = _str_array(name, value)
        return array

    def _check_extras(self, extras: Any) -> None:
        if not isinstance(extras, dict):
            raise TypeError(f"StepBatch.extras must be a dict of per-row sequences, got {type(extras).__name__}")
        for key, value in extras.items():
            if not hasattr(value, "__len__") or len(value) != len(self):
                size = len(value) if hasattr(value, "__len__") else "no length"
                raise ValueError(f"StepBatch.extras[{key!r}] must hold one entry per row ({len(self)}), got {size}")

    def __len__(self) -> int:
        return len(self.group_ids)

    def arrow(self, name: str) -> pa.Array:
        """The validated Arrow string array of ``anchors`` or ``anchor_texts`` (for hashing)."""
        if name not in self._arrow:
            raise ValueError(f"StepBatch.{name} is not set" if getattr(self, name, None) is None else f"StepBatch.{name} does not hold str")
        return self._arrow[name]

    def take(self, index: np.ndarray | Sequence[int]) -> StepBatch:
        """A new batch with the rows at ``index`` (a permutation, subset or boolean mask)."""
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)

        def pick(value: Any) -> Any:
            if isinstance(value, np.ndarray):
                return value[index]
            return type(value)(value[i] for i in index) if isinstance(value, (list, tuple)) else [value[i] for i in index]

        return StepBatch(
            group_ids=self.group_ids[index],
            traj_ids=self.traj_ids[index],
            step_ids=self.step_ids[index],
            rewards=self.rewards[index],
            anchors=self.anchors[index],
            anchor_texts=None if self.anchor_texts is None else self.anchor_texts[index],
            values=None if self.values is None else self.values[index],
            penalties=None if self.penalties is None else self.penalties[index],
            extras={key: pick(value) for key, value in self.extras.items()},
        )

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]]) -> StepBatch:
        """Build a batch from one dict per step.

        Keys ``group_id``, ``traj_id``, ``step_id``, ``reward``, ``anchor`` are required;
        ``anchor_text``, ``value`` and ``penalty`` are optional but then needed on every row; any
        other key goes to ``extras`` as a per-row list.
        """
        columns: dict[str, list[Any]] = {}
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise TypeError(f"row {i} must be a dict, got {type(row).__name__}")
            missing = [key for key in _ROW_KEYS if key not in row]
            if missing:
                raise ValueError(f"row {i} lacks required key(s) {missing}; each row needs {sorted(_ROW_KEYS)}")
            for key, value in row.items():
                columns.setdefault(key, []).append(value)
        n = len(rows)
        for key, column in columns.items():
            if len(column) != n:
                first = next(i for i, row in enumerate(rows) if key not in row)
                raise ValueError(f"row {first} lacks key {key!r}, which other rows have; optional keys must be on every row or none")
        fields = {_ROW_KEYS[key]: columns.pop(key, []) for key in _ROW_KEYS}
        fields.update({attr: columns.pop(key) for key, attr in _OPTIONAL_ROW_KEYS.items() if key in columns})
        return cls(**fields, extras=columns)


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _as_1d(name: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"StepBatch.{name} must be one-dimensional (one entry per row), got shape {array.shape}")
    return array


def _int_array(name: str, values: Any) -> np.ndarray:
    array = _as_1d(name, values)
    if array.size == 0:
        return _readonly(np.zeros(0, dtype=np.int64))
    if array.dtype.kind not in "iu" or array.dtype == np.uint64 and array.max() > np.iinfo(np.int64).max:
        raise TypeError(f"StepBatch.{name} must hold integers (int64), got dtype {array.dtype}")
    return _readonly(array.astype(np.int64, copy=True))


def _float_array(name: str, values: Any) -> np.ndarray:
    array = _as_1d(name, values)
    if array.size and array.dtype.kind not in "iuf":
        raise TypeError(f"StepBatch.{name} must hold real numbers (float64), got dtype {array.dtype}")
    array = array.astype(np.float64, copy=True)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"StepBatch.{name}[{bad[0]}] is {array[bad[0]]}; {name} must be finite")
    return _readonly(array)


def _str_array(name: str, values: Any) -> tuple[np.ndarray, pa.Array]:
    """An object array of ``str`` plus its Arrow copy; Arrow checks the types in C."""
    array = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if array.ndim != 1:
        raise ValueError(f"StepBatch.{name} must be one-dimensional (one entry per row), got shape {array.shape}")
    if array.dtype.kind == "U":
        array = array.astype(object)
    elif array.dtype != object:
        raise TypeError(f"StepBatch.{name} must hold str, got dtype {array.dtype}")
    try:
        arrow = pa.array(array, type=pa.string(), from_pandas=False)
        ok = arrow.null_count == 0
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        ok = False
    if not ok:
        first = next(i for i, v in enumerate(array) if not isinstance(v, str))
        raise TypeError(f"StepBatch.{name}[{first}] is {array[first]!r} ({type(array[first]).__name__}); {name} must be str")
    return _readonly(array.copy()), arrow


_HEX_DIGIT = np.full(256, 16, dtype=np.uint8)  # byte -> its value as a lowercase hex digit, 16 if none
_HEX_DIGIT[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)


def hex_digest_codes(anchors: Sequence[str] | np.ndarray | pa.Array) -> np.ndarray | None:
    """The anchors as uint64 if every one is 16 lowercase hex digits (``core.anchor.digest``), else None.

    Each digest is read as a big-endian 64-bit number, a one-to-one map, so grouping
    on the codes gives exactly the groups of the strings.  One vectorised pass over
    Arrow's string buffer, no Python loop per row.
    """
    try:
        array = anchors if isinstance(anchors, pa.Array) else pa.array(anchors, type=pa.string(), from_pandas=False)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return None
    n = len(array)
    if not n or array.null_count or array.type != pa.string():
        return None
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * array.offset)
    if not np.all(np.diff(offsets) == 16):
        return None
    digits = _HEX_DIGIT[np.frombuffer(array.buffers()[2], dtype=np.uint8, count=16 * n, offset=int(offsets[0]))]
    if digits.max() > 15:
        return None
    pairs = digits.reshape(n, 8, 2)
    return (pairs[:, :, 0] << 4 | pairs[:, :, 1]).view(">u8").ravel().astype(np.uint64)
