"""``benchmarks/bench_learning.py --iterations 0`` evaluates saved weights: its report reads such runs."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_eval_only_run(folder: Path, success: float) -> None:
    """What ``run_training`` writes for a run of 0 iterations: one evaluation, no rollouts."""
    folder.mkdir(parents=True)
    evaluation = {"eval/success": success, "eval/success/look": success + 0.1, "eval/success/pick": success - 0.1,
                  "eval/episodes": 256.0}
    (folder / "metrics.jsonl").write_text(json.dumps({"iteration": 0, **evaluation}) + "\n")
    (folder / "summary.json").write_text(json.dumps({"evals": {"initial": evaluation}, "seconds": 30.0}))


def test_report_of_evaluation_only_runs_gives_the_initial_success_and_no_step_group_figures(tmp_path, capsys):
    bench = load_bench()
    write_eval_only_run(tmp_path / "seed1-gigpo", 0.34375)
    write_eval_only_run(tmp_path / "seed2-gigpo", 0.36328125)
    args = argparse.Namespace(run_root=str(tmp_path), seeds=[1, 2], algos=["gigpo"], plot=None)
    result = bench.report(args)
    table = result["summary"]["gigpo"]
    assert table["before_mean"] == table["after_mean"] == pytest.approx((0.34375 + 0.36328125) / 2)
    assert table["per_type_after"] == {"look": pytest.approx(0.453515625), "pick": pytest.approx(0.253515625)}
    assert "gigpo_step_groups" not in result  # no rollouts: nothing to say about step groups
    assert "step groups" not in capsys.readouterr().out
