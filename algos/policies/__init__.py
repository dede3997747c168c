"""Policies: the one interface every algorithm trains through, and its backends.

``base`` holds the protocol and its data types (no torch at import), ``hf`` the
Hugging Face backend, ``tiny`` and ``smollm`` the offline model builders, and
``reference`` the non-trainable baselines (random, expert).
"""
