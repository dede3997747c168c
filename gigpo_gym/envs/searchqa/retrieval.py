"""The retriever interface, a deterministic top-k, and the process-wide retriever cache.

A retriever maps a batch of queries to ranked passages.  Envs ask
``shared_retriever`` for one: 64 envs of a process share one built index instead of
building 64.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gigpo_gym.envs.searchqa.corpus import Document

#: Bounds every retriever enforces (and the server reports in its errors).
MAX_TOPK = 100
MAX_QUERY_CHARS = 4096
#: Default request bounds of the /retrieve server.
DEFAULT_MAX_QUERIES = 256
DEFAULT_MAX_SERVER_TOPK = 50
DEFAULT_MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class Hit:
    document: Document
    score: float


class Retriever(Protocol):
    """Ranked passages for each query: ``search(["q1", "q2"], topk=3) -> [[Hit, ...], [Hit, ...]]``."""

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]: ...


def check_request(queries: Sequence[str], topk: int) -> None:
    """Reject what no retriever should run: non-str queries, huge queries, bad topk."""
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be an int in [1, {MAX_TOPK}], got {topk!r}")
    for query in queries:
        if not isinstance(query, str):
            raise TypeError(f"queries must be strings, got {type(query).__name__}: {query!r:.60}")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"a query has {len(query)} characters; the bound is {MAX_QUERY_CHARS}")


def top_k(scores: np.ndarray, k: int, *, positive_only: bool = True) -> np.ndarray:
    """Indices of the ``k`` best scores, best first, ties broken by lower index.

    With ``positive_only`` (BM25), passages that share no term with the query
    (score 0) are never returned, so a search may show fewer than ``k``.

    Fully determined by the scores (``argpartition`` alone leaves ties to the
    implementation), so two processes show the same passages in the same order.

    >>> top_k(np.array([0.5, 2.0, 0.0, 2.0, 1.0]), 3).tolist()
    [1, 3, 4]
    """
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    pool = np.flatnonzero(scores > 0) if positive_only else np.arange(len(scores))
    if len(pool) > k:
        values = scores[pool]
        kth = np.partition(values, len(values) - k)[len(values) - k]
        pool = pool[values >= kth]
    order = np.lexsort((pool, -scores[pool]))
    return pool[order][:k]


_CACHE: dict[tuple, Retriever] = {}
_LOCK = threading.Lock()


def shared_retriever(key: tuple, build: Callable[[], Retriever]) -> Retriever:
    """The retriever cached under ``key`` in this process, built once by ``build()``."""
    with _LOCK:
        retriever = _CACHE.get(key)
        if retriever is None:
            retriever = _CACHE[key] = build()
        return retriever


def clear_shared_retrievers() -> None:
    """Drop every cached retriever (tests; freeing memory)."""
    with _LOCK:
        _CACHE.clear()
