"""The README's quickstart, run as a newcomer runs it, with its phases shortened for CI time."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What CI shortens: fewer expert episodes and warm-start steps, two iterations, fewer held-out tasks.
SHORTER = ["--iterations", "2", "--sft-steps", "30", "--set", "sft.episodes=30", "--set", "model.tiny.corpus_episodes=20",
           "--set", "env.eval_episodes=8", "--set", "env.num_groups=2", "--set", "env.kwargs.max_episode_steps=8"]


def readme_quickstart() -> list[str]:
    """The README's first training command (the quickstart's)."""
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("gigpo-gym train"))
    return shlex.split(line.split("#")[0])


def test_the_readme_trains_the_quickstart_and_so_does_train_without_a_config():
    from gigpo_gym.algos.training.config import DEFAULT_CONFIG, load_config

    assert readme_quickstart() == ["gigpo-gym", "train", "--config", "quickstart"] and DEFAULT_CONFIG == "quickstart"
    cfg = load_config("quickstart")  # the names the command line takes
    assert cfg.eval_before and cfg.sft.steps and cfg.iterations and cfg.env.eval_episodes


@pytest.mark.slow
def test_the_readme_quickstart_prints_a_line_per_iteration_and_the_gains(tmp_path):
    command = readme_quickstart()
    run = [sys.executable, "-m", "gigpo_gym.cli", *command[1:], *SHORTER, "--no-progress", "--run-dir",
           str(tmp_path / "run")]
    out = subprocess.run(run, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    iterations = [ln for ln in lines if ln.startswith("iteration ")]
    assert len(iterations) == 2 and all(
        re.fullmatch(r"iteration +\d/2  success +[\d.]+%  reward +[+-][\d.]+  invalid +[\d.]+%  +[\d.]+ s"
                     r"(  \| held-out +[\d.]+%)?", ln)
        for ln in iterations), iterations
    for start in ("initial ", "SFT warm start: 30 steps", "after SFT ", "after gigpo (2 it)", "RL gain (points)",
                  "gain over the untrained model", "run folder: "):
        assert any(ln.startswith(start) for ln in lines), (start, out.stdout)
    assert "Setting accelerator" not in out.stdout + out.stderr and "Writing model shards" not in out.stderr
    assert (tmp_path / "run" / "prompts.jsonl").is_file()
