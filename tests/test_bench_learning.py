"""``benchmarks/bench_learning.py --iterations 0`` evaluates saved weights: its report reads such runs."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

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


def write_run(folder: Path, successes: dict[int, float]) -> None:
    """A finished run's held-out evaluations at the given iterations (no rollout rows)."""
    folder.mkdir(parents=True)
    evals = [{"iteration": it, "eval/success": v} for it, v in successes.items()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    last = max(successes)
    (folder / "summary.json").write_text(json.dumps({"evals": {"initial": {"eval/success": successes[0]},
                                                                "after RL": {"eval/success": successes[last]}}}))


def test_the_paired_difference_is_reported_at_every_evaluated_iteration_not_only_the_end(tmp_path):
    # GRPO peaks early and falls; GiGPO is behind at 10 and ahead at 20
    bench = load_bench()
    write_run(tmp_path / "seed0-gigpo", {0: 0.3, 10: 0.4, 20: 0.5})
    write_run(tmp_path / "seed0-grpo", {0: 0.3, 10: 0.5, 20: 0.4})
    write_run(tmp_path / "seed1-gigpo", {0: 0.4, 10: 0.4, 20: 0.6})
    write_run(tmp_path / "seed1-grpo", {0: 0.4, 10: 0.6, 20: 0.4})
    args = argparse.Namespace(run_root=str(tmp_path), seeds=[0, 1], algos=["gigpo", "grpo"], plot=None)
    result = bench.report(args)
    by_iteration = result["paired_difference_by_iteration"]
    assert sorted(by_iteration) == [10, 20]  # iteration 0 is the shared warm start
    assert by_iteration[10]["per_seed"] == pytest.approx([-0.1, -0.2])
    assert by_iteration[20]["mean"] == pytest.approx(0.15)
    assert result["paired_difference"]["mean"] == pytest.approx(by_iteration[20]["mean"])
    low, high = by_iteration[10]["ci95"]  # Student t with 1 degree of freedom over a s.e. of 0.05
    assert (low + high) / 2 == pytest.approx(-0.15) and (high - low) / 2 == pytest.approx(12.706 * 0.05)


def write_checkpoint(folder: Path, iteration: int) -> None:
    """A complete checkpoint as ``list_checkpoints`` sees one (its manifest written)."""
    from gigpo_gym.algos.training.checkpoint import MANIFEST_FILE

    checkpoint = folder / "checkpoints" / f"iter-{iteration:06d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / MANIFEST_FILE).write_text("{}")


def test_launch_skips_a_finished_run_resumes_a_shorter_one_and_refuses_a_longer_one(tmp_path, monkeypatch, capsys):
    bench = load_bench()
    started = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **k: started.append(cmd) or SimpleNamespace(returncode=0))
    folder = tmp_path / "seed0-gigpo"
    write_checkpoint(folder, 30)
    (folder / "summary.json").write_text("{}")
    args = argparse.Namespace(run_root=str(tmp_path), iterations=30, jobs=1)
    assert bench.trained_iterations(folder) == 30 and bench.trained_iterations(tmp_path / "none") == 0
    bench.launch(args, 0, "gigpo")  # finished at 30: nothing runs
    assert started == []
    with pytest.raises(SystemExit, match=r"seed0-gigpo has trained 30 iterations, more than --iterations 20"):
        bench.launch(argparse.Namespace(run_root=str(tmp_path), iterations=20, jobs=1), 0, "gigpo")
    assert started == []
    longer = argparse.Namespace(run_root=str(tmp_path), iterations=40, jobs=1, config="demo.yaml", eval_episodes=128,
                                eval_every=5, warm_start_seed=0, warm_start_file=None, set=[])
    bench.launch(longer, 0, "gigpo")  # stopped short of 40: its training runs (and resumes there)
    assert len(started) == 1 and started[0][2:5] == ["--one", "0", "gigpo"] and "40" in started[0]
    assert "finished seed 0 gigpo" in capsys.readouterr().out


def test_a_run_takes_the_protocols_settings_over_the_config_and_keeps_its_last_iteration_unless_asked():
    demo = str(ROOT / "configs" / "demo.yaml")
    args = argparse.Namespace(run_root="runs/x", iterations=30, config=demo, eval_episodes=128, eval_every=10, set=[])
    bench = load_bench()
    cfg = bench.run_config(args, 3, "grpo")
    assert (cfg.env.eval_episodes, cfg.eval_every, cfg.iterations, cfg.seed) == (128, 10, 30, 3)  # not the demo's 512
    assert cfg.select_every == 0 and cfg.algo.name == "grpo" and cfg.sft.steps == 0
    args.set = ["select_every=5", "env.select_kwargs={split: valid_unseen}"]
    assert bench.run_config(args, 3, "grpo").select_every == 5


def test_a_figure_redrawn_from_the_results_json_equals_the_one_the_report_drew_and_stars_the_chosen_iteration(tmp_path, monkeypatch):
    bench = load_bench()
    for seed, algo, chosen in [(0, "gigpo", 10), (0, "grpo", 20), (1, "gigpo", 20), (1, "grpo", 10)]:
        folder = tmp_path / "runs" / f"seed{seed}-{algo}"
        write_run(folder, {0: 0.3, 10: 0.4 + 0.1 * seed, 20: 0.5})
        rollouts = [{"iteration": it, "rollout/success": 0.3 + 0.01 * it, "rollout/rows": 64.0,
                     "rollout/step_rows_in_shared_groups": 0.5, "rollout/step_group_size_hist/1": 20.0,
                     "rollout/step_group_size_hist/2": 6.0} for it in range(1, 21)]
        with (folder / "metrics.jsonl").open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rollouts))
        summary = json.loads((folder / "summary.json").read_text())
        summary["evals"]["after RL"] = {"eval/success": 0.4 + 0.1 * seed if chosen == 10 else 0.5}
        (folder / "summary.json").write_text(json.dumps({**summary, "selected": {"iteration": chosen}}))
    drawn = tmp_path / "report.png"
    args = argparse.Namespace(run_root=str(tmp_path / "runs"), seeds=[0, 1], algos=["gigpo", "grpo"], plot=str(drawn))
    result = bench.report(args)
    assert [result["runs"][f"seed{s}-gigpo"]["selected_iteration"] for s in (0, 1)] == [10, 20]
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps({**result, "benchmark": "learning_gigpo_vs_grpo"}))

    import matplotlib.axes

    stars = []
    original = matplotlib.axes.Axes.scatter
    def recording_scatter(self, x, y, *a, **k):
        stars.append((list(x), list(y), k.get("marker")))
        return original(self, x, y, *a, **k)
    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", recording_scatter)
    bench.replot(argparse.Namespace(plot=str(tmp_path / "redrawn.png"), algos=None), saved)
    assert (tmp_path / "redrawn.png").read_bytes() == drawn.read_bytes()
    assert stars == [([10, 20], [0.4, 0.5], "*"), ([20, 10], [0.5, 0.5], "*")]  # gigpo's seeds, then grpo's
    with pytest.raises(SystemExit, match="--replot needs --plot"):
        bench.replot(argparse.Namespace(plot=None, algos=None), saved)
