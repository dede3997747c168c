"""Shared fixtures: the test session writes generated data to its own cache."""

from __future__ import annotations

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on CI's two cores: one OpenMP thread each (torch's default of one
    # per core oversubscribes them, and waiting OpenMP threads spin). A test that needs more sets its own.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Generated corpora, catalogs and models go to a fresh folder, built once per run: the xdist
    workers of one run share it (its writers are safe across processes), so each build happens once."""
    previous = os.environ.get("GIGPO_GYM_CACHE")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' base folders share this run's parent
        shared = tmp_path_factory.getbasetemp().parent / "gigpo_gym_cache"
        shared.mkdir(exist_ok=True)
        os.environ["GIGPO_GYM_CACHE"] = str(shared)
    else:
        os.environ["GIGPO_GYM_CACHE"] = str(tmp_path_factory.mktemp("gigpo_gym_cache"))
    yield
    if previous is None:
        os.environ.pop("GIGPO_GYM_CACHE", None)
    else:
        os.environ["GIGPO_GYM_CACHE"] = previous
