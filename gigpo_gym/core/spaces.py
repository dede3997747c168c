"""A string space for free LLM text.

gymnasium's ``Text`` only admits characters of its ``charset`` (alphanumerics by
default), so an LLM action such as ``"go to cabinet 1."`` is rejected, and its
shared-memory layout stores charset indices, so arbitrary Unicode cannot cross an
``AsyncVectorEnv``.  ``String`` admits any ``str`` up to ``max_length`` characters.
It subclasses ``Text`` so gymnasium's vector utilities batch it as a tuple of
strings; the grouped vector env never puts it in shared memory.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Text

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


class String(Text):
    """Any Unicode string of at most ``max_length`` characters.

    >>> space = String(40)
    >>> space.contains("take the mug 1 from cabinet 1, please!"), space.contains("café au lait")
    (True, True)
    >>> space.contains(3)
    False
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None):
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be a positive int, got {max_length!r}")
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"String(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, String) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("String", self.max_length))
