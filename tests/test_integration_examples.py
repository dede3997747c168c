"""The examples/ scripts run offline with no arguments and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


#: Third-party noise the package silences (DeepSpeed's accelerator notice, progress bars, deprecations and tracebacks).
NOISE = ("Setting accelerator to CPU", "Writing model shards", "Loading weights", "FutureWarning", "Traceback")


def run(name: str, timeout: float) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    noise = [line for line in (result.stdout + result.stderr).splitlines() if any(n in line for n in NOISE)]
    assert noise == [], noise
    return result.stdout


def test_the_skyrl_example_plays_each_benchmark():
    pytest.importorskip("skyrl_gym", reason="needs the [skyrl] extra")
    out = run("skyrl_searchqa.py", 120)
    assert out.count("return 1.00") == 3 and "gigpo_gym/ALFWorld-v0 task" in out


def test_the_openenv_example_serves_and_plays_over_the_websocket():
    pytest.importorskip("openenv", reason="needs the [openenv] extra")
    out = run("openenv_searchqa.py", 120)
    assert "exact match over 3 episodes: 1.00" in out and out.count("> <think>") >= 3


@pytest.mark.slow
def test_the_trl_example_trains_two_gigpo_steps():
    pytest.importorskip("trl", reason="needs the [trl] extra")
    out = run("trl_searchqa.py", 600)
    steps = [line for line in out.splitlines() if line.startswith("{") and "'step'" in line]
    assert len(steps) == 2 and "adv/step_groups" in steps[0], out
    assert "one episode of the last batch: task " in out
