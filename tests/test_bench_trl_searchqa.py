"""benchmarks/bench_trl_searchqa.py across sittings: carried evaluations are not run again, the rest is."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_trl_searchqa", ROOT / "benchmarks" / "bench_trl_searchqa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def test_a_later_sitting_runs_only_the_points_whose_evaluation_is_not_carried(tmp_path, monkeypatch):
    bench = load_bench()
    carried, root = tmp_path / "carried", tmp_path / "root"
    write(carried / "sft" / "done.json", {"seconds": 60.0, "log": [{"loss": 1.0}, {"loss": 0.5}]})
    write(carried / "sft" / "eval.json", {"em": {"q1": 1.0}})
    write(carried / "grpo" / "done.json", {"seconds": 600.0, "log": []})
    write(carried / "grpo" / "eval.json", {"em": {"q1": 0.0}})
    calls = []

    def sft(args, run_root):  # the warm start's weights are gone: trained again, once
        calls.append("sft")
        assert not bench.trained(run_root / "sft")  # its carried done.json has no weights beside it
        return run_root / "sft"

    def rl(args, run_root, algo, warm):
        calls.append(f"rl {algo} from {warm.name}")
        write(run_root / algo / "done.json", {"seconds": 700.0, "log": []})
        return run_root / algo

    def evaluate(args, model_dir):
        calls.append(f"evaluate {model_dir.name}")
        write(model_dir / "eval.json", {"em": {"q1": 1.0}})
        return {"em": {"q1": 1.0}}

    monkeypatch.setattr(bench, "sft", sft)
    monkeypatch.setattr(bench, "rl", rl)
    monkeypatch.setattr(bench, "evaluate", evaluate)
    args = argparse.Namespace(run_root=root, carry=carried, algos="grpo,gigpo")
    points = bench.run(args)

    assert calls == ["sft", "rl gigpo from sft", "evaluate gigpo"]
    assert points == {"sft": {"em": {"q1": 1.0}}, "grpo": {"em": {"q1": 0.0}}, "gigpo": {"em": {"q1": 1.0}}}
    # the new point's files went to the carried folder, so the next sitting skips it too
    assert json.loads((carried / "gigpo" / "eval.json").read_text()) == {"em": {"q1": 1.0}}
    assert json.loads((carried / "gigpo" / "done.json").read_text())["seconds"] == 700.0

    calls.clear()
    assert bench.run(argparse.Namespace(run_root=tmp_path / "third", carry=carried, algos="grpo,gigpo")) == points
    assert calls == []  # everything carried: no warm start, no training, no evaluation


def test_a_stage_counts_as_trained_only_with_its_weights(tmp_path):
    bench = load_bench()
    write(tmp_path / "done.json", {"seconds": 1.0, "log": []})
    assert not bench.trained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert bench.trained(tmp_path)
    assert bench.losses([{"loss": 0.5, "step": 1}, {"train_runtime": 3.0}, {"loss": 0.25}]) == [0.5, 0.25]
    assert bench.loss_gap([0.5, 0.25], [0.5000003, 0.25]) < 1e-6 and bench.loss_gap([0.5], [0.5, 0.2]) == float("inf")


def test_carrying_in_keeps_a_newer_record_of_this_sitting(tmp_path):
    """A warm start trained again this sitting records it in its done.json; the older carried copy must not
    replace it, while a newer carried file does."""
    bench = load_bench()
    carried, root = tmp_path / "carried", tmp_path / "run"
    write(carried / "sft" / "done.json", {"seconds": 1.0, "log": []})
    write(root / "sft" / "done.json", {"seconds": 1.0, "log": [], "retrained": {"same_losses": True}})
    os.utime(carried / "sft" / "done.json", (1, 1))
    assert bench.carry(carried, root) == []
    assert "retrained" in json.loads((root / "sft" / "done.json").read_text())
    os.utime(root / "sft" / "done.json", (0, 0))
    assert bench.carry(carried, root) == [root / "sft" / "done.json"]
    assert "retrained" not in json.loads((root / "sft" / "done.json").read_text())


def test_a_stage_killed_while_saving_resumes_from_the_last_complete_checkpoint(tmp_path):
    bench = load_bench()
    trainer = tmp_path / "trainer"
    assert bench.last_checkpoint(trainer) is None
    for step in (2, 10):
        write(trainer / f"checkpoint-{step}" / "trainer_state.json", {"global_step": step})
    (trainer / "checkpoint-11").mkdir()  # killed before trainer_state.json: model written, state not
    (trainer / "checkpoint-11" / "model.safetensors").write_bytes(b"torn")
    assert bench.last_checkpoint(trainer) == str(trainer / "checkpoint-10")


def test_a_resumed_stage_reports_the_training_time_of_every_sitting():
    bench = load_bench()
    # a stage resumed at step 3: done.json's seconds time the last sitting, the log keeps every step's time
    resumed = {"seconds": 25.0, "log": [{"step": 1, "step_time": 40.0}, {"step": 2, "step_time": 30.0},
                                        {"step": 3, "step_time": 20.0}, {"train_runtime": 25.0, "step": 3}]}
    assert bench.train_seconds(resumed) == 90.0
    assert bench.train_seconds({"seconds": 928.5, "log": [{"loss": 1.09, "step": 1}]}) == 928.5  # SFT logs none


def test_every_rl_seed_starts_from_the_warm_start_of_sft_seed(tmp_path, monkeypatch):
    import transformers
    import trl

    import gigpo_gym.algos.policies.smollm as smollm
    import gigpo_gym.integrations.trl as trl_integration

    bench = load_bench()
    drawn = {}

    class Stop(Exception):
        pass

    def expert_conversations(*args, seed, **kwargs):
        drawn["transcripts"] = seed
        return None

    def sft_config(**kwargs):
        drawn["trainer"] = kwargs["seed"]
        raise Stop

    monkeypatch.setattr(smollm, "smollm2_path", lambda: tmp_path)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: None)
    monkeypatch.setattr(trl_integration, "with_tool_template", lambda tokenizer: tokenizer)
    monkeypatch.setattr(trl_integration, "expert_conversations", expert_conversations)
    monkeypatch.setattr(trl, "SFTConfig", sft_config)
    args = argparse.Namespace(seed=1, sft_seed=0, sft_episodes=4, sft_steps=1, lr=1e-5, max_observation_tokens=16)
    try:
        bench.sft(args, tmp_path)
    except Stop:
        pass
    assert drawn == {"transcripts": 0, "trainer": 0}  # the RL seed (1) leaves the warm start alone
