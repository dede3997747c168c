"""Multi-process training (gloo on CPU, the tiny model): N processes take one process's update."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers_fake import CORRIDOR_ID

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training.config import ConfigError, load_config
from gigpo_gym.algos.training.distributed import LAUNCH_ENV
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.trainer import Trainer
from gigpo_gym.core.env import derive_seed

TESTS = Path(__file__).resolve().parent
SMALL = [
    f"env.id={CORRIDOR_ID}", "env.group_size=2", "env.eval_episodes=2", "prompt.history_length=1",
    "env.kwargs={max_episode_steps: 4}", "sampling.max_new_tokens=4", "model.device=cpu",
    "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300", "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64", "optim.lr=1e-3", "optim.micro_batch_size=2", "optim.mini_batch_size=5",
    "optim.epochs=2", "progress=false", "eval_before=false", "collective_timeout_s=60",
]


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*SMALL, f"run_dir={tmp_path / 'run'}", *extra]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason='DeepSpeed is not installed (pip install ".[deepspeed]")')


def torchrun(scenario: str, out: Path, args: list[str], processes: int = 2, kind: str = "ddp", timeout: float = 120):
    # CUDA hidden: these are CPU (gloo) runs, whatever GPUs the machine has
    # torch's C++ extension builds (DeepSpeed's JIT ops) go under ``out``, where a test can see them, and so do
    # torchrun's own temporary folders (torchelastic_*), which it leaves behind
    (out / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "TORCH_EXTENSIONS_DIR": str(out / "ext"),
           "TMPDIR": str(out / "tmp"), **LAUNCH_ENV[kind]}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               f"--master_port={free_port()}", "--max_restarts=0", "--monitor_interval=1",
               str(TESTS / "dist_worker.py"), scenario, str(out), json.dumps(args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def one_process_update(tmp_path: Path, args: list[str]):
    """The update one process makes of its rollout; the rollout is saved for the workers."""
    trainer = Trainer(load_config(None, args))
    try:
        trainer.prepare()
        trainer.freeze_reference()
        rollout = collect(trainer.actor, trainer.envs, trainer.sampling(1), seed=derive_seed(trainer.cfg.seed, 1),
                          shaping=trainer.shaping)
        (tmp_path / "rollout.pkl").write_bytes(pickle.dumps(rollout))
        episodes = [[e.group_id, e.traj_id, e.task_id] for e in rollout.episodes]
        metrics = trainer.update(rollout, 1)
        return {n: t.detach().clone() for n, t in trainer.policy.state_dict().items()}, metrics, episodes
    finally:
        trainer.close()


@pytest.mark.parametrize("kind,groups", [
    ("ddp", 2), ("fsdp", 3), pytest.param("zero2", 3, marks=needs_deepspeed), pytest.param("zero3", 3, marks=needs_deepspeed),
])
def test_two_processes_make_the_one_process_update_and_play_its_tasks(tmp_path, kind, groups):
    # Adam divides each step by the gradient's own scale, so summation-order noise in near-zero
    # gradients moves a weight by up to ~lr/1000 (1.3e-6 at lr 1e-3 under FSDP); at lr 1e-4 that
    # stays under 1e-6 while a gradient that is not synchronised still moves weights by ~1e-4.
    args = overrides(tmp_path, f"env.num_groups={groups}", "optim.lr=1e-4")
    weights, metrics, episodes = one_process_update(tmp_path, args)
    result = torchrun("update", tmp_path, args, kind=kind)
    assert result.returncode == 0, result.stderr[-4000:]
    got = torch.load(tmp_path / "weights.pt", weights_only=False)
    assert got["weights"].keys() == weights.keys()
    for name, value in weights.items():
        torch.testing.assert_close(got["weights"][name], value, rtol=0, atol=1e-6, msg=name)
    for key in ("train/pg_loss", "train/kl_ref", "train/entropy", "train/grad_norm", "train/rows_used"):
        assert got["metrics"][key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), key
    if kind == "fsdp":  # sharded over a CPU mesh the run names, not one FSDP2 would put on a visible GPU
        assert got["mesh"] == {"device_type": "cpu", "given": True}
    # the processes together play exactly the tasks one process plays (groups 3: 1 and 2 groups, uneven)
    played = [tuple(e) for r in range(2) for e in json.loads((tmp_path / f"episodes-{r}.json").read_text())]
    assert sorted(played) == sorted(tuple(e) for e in episodes)
    assert {e[0] for e in json.loads((tmp_path / "episodes-0.json").read_text())} == set(range(groups // 2))
    assert not (tmp_path / "ext").exists()  # no C++ op compiled at start-up (DeepSpeed's shared-memory all-reduce)


def test_a_finished_run_leaves_no_trainer_to_interpreter_shutdown(tmp_path):
    """A process's first Trainer sits in reference cycles that lazy imports leave; run_training
    collects it, so a multi-process run's sharded modules (holding the process group) are not
    freed during interpreter shutdown, where gloo's threads can abort the process."""
    code = (f"import gc, json, sys; sys.path.insert(0, {str(TESTS)!r}); import helpers_fake\n"
            "from gigpo_gym.algos.training.config import load_config\n"
            "from gigpo_gym.algos.training.trainer import Trainer, run_training\n"
            "gc.disable()\n"
            "run_training(load_config(None, json.loads(sys.argv[1])), echo=lambda *_: None)\n"
            "print(sum(isinstance(o, Trainer) for o in gc.get_objects()))\n")
    args = overrides(tmp_path, "env.num_groups=2", "iterations=1")
    result = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split()[-1] == "0"


@pytest.mark.parametrize("trained,resumed", [
    ("fsdp", "fsdp"), pytest.param("zero3", "zero2", marks=needs_deepspeed), pytest.param("zero2", "zero3", marks=needs_deepspeed),
])
def test_training_logs_once_and_resumes_on_another_process_count(tmp_path, trained, resumed):
    args = overrides(tmp_path, "env.num_groups=3", "iterations=2", "eval_every=1", "select_every=1",
                     "env.select_kwargs={split: test}", "env.select_episodes=2")
    result = torchrun("train", tmp_path, args, kind=trained)
    assert result.returncode == 0, result.stderr[-4000:]
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2]  # one record per iteration, from rank 0
    assert records[-1]["rollout/rows"] > 0 and "eval/success" in records[-1] and "select/success" in records[-1]
    assert len(list((run / "tensorboard").iterdir())) == 1
    from gigpo_gym.algos.training.records import read_record, recorded_iterations

    assert recorded_iterations(run / "records") == [1, 2]  # rank 0 records its own task groups, with their texts
    record = read_record(run / "records", 2)
    assert record["batch"]["task_groups"] == 3 and record["groups"]
    assert all(len(g["episodes"]) == 2 and all(record["texts"][s["obs"]] for e in g["episodes"] for s in e["steps"])
               for g in record["groups"])
    engine = {"fsdp": "fsdp", "zero2": "deepspeed_zero2", "zero3": "deepspeed_zero3"}[trained]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == engine
    # the chosen weights are the whole model, written from rank 0's full copy
    assert summary["selected"]["iteration"] in (1, 2) and "after RL" in summary["evals"]
    chosen = Trainer(load_config(None, args))
    try:
        from safetensors.torch import load_model

        load_model(chosen.policy, str(run / "selected.safetensors"))
    finally:
        chosen.close()
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == ["iter-000001", "iter-000002"]
    saved = ckpt.latest_checkpoint(run / "checkpoints")
    ckpt.verify_checkpoint(saved)
    from safetensors.torch import load_file

    weights = load_file(str(saved / ckpt.POLICY_FILE))
    optimizer = torch.load(saved / ckpt.OPTIMIZER_FILE, weights_only=True)

    def same(got):
        for name, value in weights.items():
            assert torch.equal(got["weights"][name], value), name
        for k, state in optimizer["state"].items():
            for n, v in state.items():
                assert torch.equal(torch.as_tensor(got["optimizer"]["state"][k][n]), torch.as_tensor(v)), (k, n)

    # written by 2 sharded processes: one process resumes the same weights and optimiser state
    one = Trainer(load_config(None, args))
    try:
        one.resume("latest", echo=lambda *_: None)
        same({"weights": {n: t for n, t in one.policy.state_dict().items()},
              "optimizer": one.optimizer.state_dict()})
    finally:
        one.close()
    # and 2 sharded processes (the same engine, or the other ZeRO stage) load it and gather it back whole
    result = torchrun("resume", tmp_path, args, kind=resumed)
    assert result.returncode == 0, result.stderr[-4000:]
    same(torch.load(tmp_path / "resumed.pt", weights_only=False))


def test_a_process_that_dies_ends_the_run_and_the_last_checkpoint_stays_valid(tmp_path):
    args = overrides(tmp_path, "env.num_groups=2", "iterations=3", "eval_every=0", "env.eval_episodes=0")
    started = time.monotonic()
    result = torchrun("die", tmp_path, args)
    took = time.monotonic() - started
    assert result.returncode != 0
    assert took < 90
    # the launcher names the process that died, and stopped the other one
    assert re.search(r"Root Cause.*?rank\s*:\s*1 .*?SIGKILL", result.stderr, re.S), result.stderr[-3000:]
    root = tmp_path / "run" / "checkpoints"
    assert ckpt.verify_checkpoint(ckpt.latest_checkpoint(root))["iteration"] == 1
    trainer = Trainer(load_config(None, args))
    try:
        assert trainer.resume("latest", echo=lambda *_: None) == 1
    finally:
        trainer.close()


def test_a_process_that_fails_reports_its_error_and_leaves_the_process_group_to_the_launcher(tmp_path):
    """Ending the group waits for the other processes, which may be inside a collective (NCCL deadlocks)."""
    args = overrides(tmp_path, "env.num_groups=2", "iterations=3", "eval_every=0", "env.eval_episodes=0")
    started = time.monotonic()
    result = torchrun("fail", tmp_path, args)
    assert result.returncode != 0
    assert time.monotonic() - started < 90
    assert "injected failure on rank 1" in result.stderr, result.stderr[-3000:]
    assert json.loads((tmp_path / "group-after-failure.json").read_text()) is True


def test_bad_process_counts_and_accelerate_configs_are_one_clear_error(tmp_path, capsys, monkeypatch):
    import argparse

    from gigpo_gym.algos.cli import add_cli
    from gigpo_gym.algos.training.distributed import shard_groups

    with pytest.raises(ValueError, match=r"env.num_groups=2 cannot be split among 4 processes.*at most 2 processes"):
        shard_groups(2, 0, 4)
    assert [shard_groups(5, r, 2) for r in range(2)] == [(0, 2), (2, 3)]
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    base = ["train", "--run-dir", str(tmp_path / "run"), "--set", "env.num_groups=2"]
    args = parser.parse_args([*base, "--accelerate", "fsdpp"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "--accelerate 'fsdpp' is neither a file nor a shipped accelerate config (did you mean 'fsdp'?)" in err
    args = parser.parse_args([*base, "--accelerate", "fsdp", "--num-processes", "4"])
    assert args.func(args) == 2
    assert "env.num_groups=2 cannot be split among 4 processes" in capsys.readouterr().err
    real_find_spec = importlib.util.find_spec
    with monkeypatch.context() as m:  # DeepSpeed not installed: one line before any process starts
        m.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real_find_spec(name, *a))
        args = parser.parse_args([*base, "--accelerate", "deepspeed_zero3"])
        assert args.func(args) == 2
    assert ('--accelerate deepspeed_zero3.yaml: DeepSpeed ZeRO training needs the optional dependencies of the '
            '[deepspeed] extra: pip install ".[deepspeed]" in your gigpo-gym clone') in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match=r"model.generation: vllm needs .*use model.generation: hf"):
        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is present: the error needs a machine without one")
        Trainer(load_config(None, overrides(tmp_path, "model.generation=vllm")))
    with pytest.raises(ConfigError, match=r"model.generation must be one of \['hf', 'vllm'\], got 'vlm' \(did you mean 'vllm'\?\)"):
        load_config(None, ["model.generation=vlm"])


def test_shipped_accelerate_configs_load_in_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    from gigpo_gym.algos.cli import shipped_accelerate_configs

    shipped = shipped_accelerate_configs()
    assert {"single_gpu", "multi_gpu", "fsdp"} <= set(shipped)
    for name, path in shipped.items():
        config = load_config_from_file(str(path))
        assert config.distributed_type is not None, name


@needs_deepspeed
def test_deepspeed_stage_one_and_half_precision_masters_are_one_clear_error():
    from types import SimpleNamespace

    from accelerate.utils import DeepSpeedPlugin, DistributedType

    from gigpo_gym.algos.training.distributed import Parallel

    accelerator = SimpleNamespace(process_index=0, num_processes=2, distributed_type=DistributedType.MULTI_CPU)
    with pytest.raises(RuntimeError, match=r"zero_stage: 1; gigpo-gym train runs ZeRO-2 and ZeRO-3"):
        Parallel(accelerator, deepspeed=DeepSpeedPlugin(zero_stage=1))
    parallel = Parallel(accelerator, deepspeed=DeepSpeedPlugin(zero_stage=3))
    assert parallel.kind == "deepspeed" and parallel.needs_inference_copy
    config = parallel._deepspeed_config(0.5)
    assert config["gradient_clipping"] == 0.5 and config["zero_optimization"]["stage"] == 3
    assert "auto" not in json.dumps(config)
    parallel.deepspeed_plugin.deepspeed_config["bf16"] = {"enabled": True}
    with pytest.raises(RuntimeError, match=r"enables bf16: .*model.compute_dtype: bfloat16"):
        parallel._deepspeed_config(1.0)
