"""Same config and seed, same metrics: a short training run repeated in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers_fake import CORRIDOR_ID

TESTS = Path(__file__).resolve().parent

RUN = """
import sys
sys.path.insert(0, {tests!r})
import helpers_fake  # registers the corridor env
from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.training.trainer import run_training
cfg = load_config(None, {overrides!r})
run_training(cfg, echo=lambda *_: None)
"""

OVERRIDES = [
    f"env.id={CORRIDOR_ID}", "env.num_groups=2", "env.group_size=2", "env.eval_episodes=2", "prompt.history_length=1",
    "sampling.max_new_tokens=6", "model.device=cpu", "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300",
    "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "optim.lr=1e-3", "optim.micro_batch_size=4",
    "optim.mini_batch_size=8", "iterations=2", "eval_every=1", "progress=false", "sft.steps=3", "sft.episodes=2",
]


def timeless(record: dict) -> dict:
    """A metrics row without wall-clock figures (the only thing allowed to differ)."""
    return {k: v for k, v in record.items() if not (k.startswith("time/") or k.endswith(("seconds", "tokens_per_s")))}


def start_fresh_process(run_dir: Path, hash_seed: str) -> subprocess.Popen:
    code = RUN.format(tests=str(TESTS), overrides=[*OVERRIDES, f"run_dir={run_dir}"])
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def logged_metrics(process: subprocess.Popen, run_dir: Path) -> list[dict]:
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    return [timeless(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_with_the_same_seed_log_identical_metrics(tmp_path):
    # run side by side (different hash seeds): neither may lean on the other's files or timing
    runs = {tmp_path / name: start_fresh_process(tmp_path / name, seed) for name, seed in (("a", "1"), ("b", "2"))}
    try:
        first, second = (logged_metrics(process, run_dir) for run_dir, process in runs.items())
    finally:
        for process in runs.values():
            process.kill()  # a no-op once it has ended; stops the other run when one failed
    assert [r["iteration"] for r in first if "rollout/success" in r] == [1, 2]
    assert first == second  # exactly: losses, KL, advantages, success, per SFT step
