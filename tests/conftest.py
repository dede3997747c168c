"""Shared fixtures: the test session writes generated data to its own cache."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Generated corpora, catalogs and models go to a fresh folder, built once per session."""
    previous = os.environ.get("GIGPO_GYM_CACHE")
    os.environ["GIGPO_GYM_CACHE"] = str(tmp_path_factory.mktemp("gigpo_gym_cache"))
    yield
    if previous is None:
        os.environ.pop("GIGPO_GYM_CACHE", None)
    else:
        os.environ["GIGPO_GYM_CACHE"] = previous
