"""Stable digests of canonical serialisations: the anchor keys GiGPO groups on.

Python's ``hash()`` of a string changes with ``PYTHONHASHSEED``; ``hashlib`` over a
canonical JSON text does not, so the same state gets the same key in every process
and on every machine.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

DIGEST_BYTES = 8  # 16 hex characters: collisions are ~2**-32 at 2**16 states per task.


def _canonical(value: Any) -> Any:
    """Turn sets/tuples/mappings into a JSON value with a fixed order."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot build an anchor from a {type(value).__name__}: {value!r}")


def canonical_json(value: Any) -> str:
    """The canonical text of ``value``: sorted keys, sorted sets, no white space."""
    return json.dumps(_canonical(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest(value: Any, nbytes: int = DIGEST_BYTES) -> str:
    """Short hex digest of ``value``'s canonical JSON (same in any process).

    >>> digest({"room": "kitchen", "held": None}) == digest({"held": None, "room": "kitchen"})
    True
    >>> digest({1, 2, 3}) == digest([3, 2, 1]), digest({1, 2, 3}) == digest([1, 2, 3])
    (False, True)
    """
    return hashlib.blake2b(canonical_json(value).encode("utf-8"), digest_size=nbytes).hexdigest()
