"""The files a training run writes survive a kill at any moment, and resume reads them back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_fake import CORRIDOR_ID

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.training.metrics import append_jsonl, keep_iterations, read_jsonl
from gigpo_gym.algos.training.trainer import run_training
from test_trainer import SMALL

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_run_files_survive_kill_9_at_random_moments(tmp_path):
    """20 SIGKILLs of a process saving checkpoints (with re-saves and pruning), metrics and
    summary.json in a loop; after each, every file reads back and resume finds a whole checkpoint."""
    out = subprocess.run([sys.executable, str(HERE / "crash_writer.py"), str(tmp_path), "0", "20"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["kills"] == 20
    assert counts["debris"] >= 5, counts  # most kills landed in the middle of a write


def _model() -> torch.nn.Module:
    return torch.nn.Linear(4, 3)


def test_a_replacement_killed_before_it_arrived_is_put_back_and_debris_is_cleared(tmp_path):
    root = tmp_path / "checkpoints"
    model = _model()
    for it in (1, 2):
        ckpt.save_checkpoint(root, it, model, None, {}, keep=2)
    # a kill between moving iter-000002 aside and renaming its replacement in, and a killed temp write
    os.replace(root / "iter-000002", root / ".old-iter-000002-abc")
    (root / ".tmp-iter-000003-xyz").mkdir()
    (root / ".tmp-iter-000003-xyz" / ckpt.POLICY_FILE).write_bytes(b"half")
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["iter-000001"]
    notes: list[str] = []
    assert ckpt.find_resumable(root, notes.append) == root / "iter-000002" and notes == []
    assert sorted(p.name for p in root.iterdir()) == ["iter-000001", "iter-000002", "latest"]


def test_resaving_an_iteration_keeps_it_even_when_older_than_the_kept_ones(tmp_path):
    root = tmp_path / "checkpoints"
    model = _model()
    for it in (1, 2, 3):
        ckpt.save_checkpoint(root, it, model, None, {}, keep=2)
    with torch.no_grad():
        model.weight.fill_(7.0)
    ckpt.save_checkpoint(root, 1, model, None, {}, keep=2)  # a resume from an early checkpoint re-saves 1
    assert ckpt.latest_checkpoint(root) == root / "iter-000001"
    fresh = _model()
    assert ckpt.load_checkpoint(ckpt.find_resumable(root), fresh)["iteration"] == 1
    assert bool((fresh.weight == 7.0).all())


def test_a_torn_metrics_line_is_skipped_and_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for it in range(4):
        append_jsonl(path, {"iteration": it, "x": it})
    with open(path, "a") as f:
        f.write('{"iteration": 4, "x"')  # an append killed half way
    assert [r["iteration"] for r in read_jsonl(path)] == [0, 1, 2, 3]
    keep_iterations(path, 1)
    assert path.read_text() == '{"iteration": 0, "x": 0}\n{"iteration": 1, "x": 1}\n'
    path.write_text('{"iteration": 0}\n{"iter\n{"iteration": 1}\n')
    with pytest.raises(ValueError, match="metrics.jsonl: line 2 is not JSON"):
        read_jsonl(path)


@pytest.mark.slow
def test_resume_skips_a_damaged_latest_checkpoint_and_never_duplicates_metric_rows(tmp_path):
    cfg = load_config(None, [*SMALL, f"run_dir={tmp_path / 'run'}", "optim.kl_coef=0", "keep_checkpoints=3"])
    run_training(cfg, echo=lambda *_: None)
    run = tmp_path / "run"
    weights = run / "checkpoints" / "iter-000002" / ckpt.POLICY_FILE
    weights.write_bytes(weights.read_bytes()[:-64] + b"\0" * 64)
    (run / "summary.json").write_text('{"evals": {"initial"')  # as an old non-atomic write left it
    logs: list[str] = []
    run_training(cfg, resume="latest", echo=logs.append)
    assert logs[0].startswith("note: skipped checkpoint file ") and "iter-000002/policy.safetensors is corrupted" in logs[0]
    assert logs[0].endswith(f"resuming from {run / 'checkpoints' / 'iter-000001'}")
    assert logs[1].startswith("resumed from iteration 1")
    rows = [r["iteration"] for r in read_jsonl(run / "metrics.jsonl") if "rollout/success" in r or r["iteration"] == 0]
    assert rows == [0, 1, 2]  # iteration 2 ran twice, logged once
    assert json.loads((run / "summary.json").read_text())["final_checkpoint"] == str(run / "checkpoints" / "iter-000002")
