"""``benchmarks/gpu_check.py``: its dry run on a CPU, and the pieces a GPU run relies on."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # gpu_check imports bench_train_scale as its workers do
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.slow
def test_the_dry_run_takes_every_step_on_a_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--budget-s", "400",
                          "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=500, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = result["steps"]
    assert list(steps) == ["model", "iteration-hf", "iteration-vllm", "same-seed", "tests-cuda"]
    hf = steps["iteration-hf"]
    assert hf["status"] == "passed" and hf["left_out"] == []
    for key, steps_per_episode in (("warm_up", 1), ("warm", 2)):  # the warm-up's 1-step episodes, apart
        r = hf[key]
        assert r["rows"] == 2 * 4 * steps_per_episode  # 2 groups x 4: random answers never end an episode early
        assert len(r["generate_step_s"]) == steps_per_episode and 0 < r["generated_tokens"] <= r["rows"] * 8
        assert min(r["generate_s"], r["scoring_s"], r["forward_backward_s"]) > 0 and r["optimizer_s"] >= 0
        assert r["iteration_s"] >= r["generate_s"] + r["update_s"] and 0 <= r["padding_share"] < 1
        assert r["scoring_models"] == 1 and not r["old_recomputed"]  # the reference; temperature 1, no rollout copy
    phases = hf["phases"]
    assert list(phases) == list(gpu_check_module().PHASES)
    for name in ("generation", "old + reference log-probs", "forward + backward", "optimiser step"):
        assert phases[name]["floor_s"] > 0 and phases[name]["times_floor"] > 0, name
    assert phases["forward + backward"]["flop"] == pytest.approx(3 * phases["old + reference log-probs"]["flop"])
    more = hf["extrapolated"]
    assert more["steps"] == 50 and more["from_steps"] == 2 and more["iteration_s"] > hf["warm"]["iteration_s"]
    assert hf["beside_verl_agent"]["verl_agent_gpu_s"] == 726 and hf["beside_verl_agent"]["differences"]
    assert hf["rollout_dtype"] is None and hf["micro_batch_tokens"] is None and hf["decoder"] == "loop"  # a CPU's
    assert hf["reference_dtype"] == "float32"  # a CPU keeps the exact copy; CUDA: bfloat16 (tests/test_gpu_choices.py)
    profiles = json.loads((tmp_path / "gpu_check_profile.json").read_text())
    update = profiles["update"]
    assert update["top_operators"] and update["rows"] == 2 * 4 * 2 and update["host_waits"] == 0
    assert update["micro_batches"] >= 1 and update["scoring_passes"] >= 1
    # the scoring pass's operators apart: a part of the update's own time
    assert update["scoring_top_operators"] and 0 < update["scoring_s"] < update["device_busy_s"]
    assert hf["decoding"]["prefill_subtracted"] and "steps after it" in (tmp_path / "SPEED.md").read_text()
    assert profiles["decoding"]["top_host_operators"] and hf["decoding"]["step_s"] >= 0 and 1 <= hf["decoding"]["steps"] <= 24
    compared = gpu_check_module().COMPARED
    assert set(compared) <= set(hf["decoders"]) and hf["decoders"]["faster"] in compared
    assert all("tokens_per_s" in hf["decoders"][name] for name in compared if name != "continuous"), hf["decoders"]
    assert all(isinstance(v, dict) for v in hf["variants"].values()), hf["variants"]
    assert steps["same-seed"]["status"] == "passed" and steps["same-seed"]["rows"] == 2  # iterations 0 and 1
    assert steps["tests-cuda"]["collected"] >= 2
    assert steps["iteration-vllm"]["status"] == "skipped" and "vllm" in steps["iteration-vllm"]["reason"]
    section = (tmp_path / "SPEED.md").read_text()
    assert section.count("## GPU check") == 1 and "| forward + backward |" in section
    assert "of them in the old + reference log-probs" in section
    assert "[gpu_check] iteration-hf: passed" in out.stdout


def gpu_check_module():
    return load("gpu_check")


def test_the_iteration_takes_what_the_budget_leaves_the_steps_after_it():
    import argparse

    gpu_check = load("gpu_check")
    run = argparse.Namespace(dry_run=False, skip=["iteration-vllm", "tests-cuda"])
    # a budget of 420 s, the model built in 20: the iteration may run until the same-seed step's 120 s are left
    assert gpu_check.step_end("iteration-hf", run, started=20.0, deadline=420.0) == 300.0
    # the default budget leaves no room beyond the step's own limit, and never more than the budget
    assert gpu_check.step_end("iteration-hf", argparse.Namespace(dry_run=False, skip=[]), 20.0, 300.0) == 260.0
    assert gpu_check.step_end("same-seed", run, started=300.0, deadline=420.0) == 420.0
    assert gpu_check.step_end("model", run, started=0.0, deadline=420.0) == 60.0  # other steps keep their limit
    assert gpu_check.step_end("iteration-hf", argparse.Namespace(dry_run=True, skip=[]), 20.0, 900.0) == 900.0


def test_the_floors_count_each_phase_s_work():
    gpu_check = load("gpu_check")
    shape = {"layer_params": 1e9, "params": 1.2e9, "hidden": 1000, "vocab": 100_000, "layers": 10, "q_dim": 1000,
             "kv_dim": 200}
    card = {"matmul_flops_per_s": 1e15, "copy_bytes_per_s": 1e12}
    record = {"prompt_lengths": [100, 100], "response_lengths": [10, 0], "step_ids": [0, 0], "generate_s": 1.0,
              "env_s": 0.1, "advantage_s": 0.0, "scoring_s": 0.5, "scoring_models": 2, "old_recomputed": True,
              "forward_backward_s": 1.5, "optimizer_s": 0.2, "optimizer_steps": 1}
    p = gpu_check.phases(record, shape, card, checkpointing=True, compute_bytes=2)
    fwd = 2e9 * 110 + 4 * 10 * 1000 * 110 * 111 / 2 + 2 * 1000 * 100_000 * 10  # the row without a reply is not trained
    scoring = p["old + reference log-probs"]  # the trained weights and the reference, one forward each
    assert scoring["flop"] == pytest.approx(2 * fwd) and scoring["floor_s"] == pytest.approx(2 * fwd / 1e15)
    assert "forward of the policy" in scoring["work"] and "reference" in scoring["work"]
    assert p["forward + backward"]["floor_s"] == pytest.approx(3 * fwd / 1e15)
    assert p["optimiser step"]["bytes"] == 40 * 1.2e9 and p["optimiser step"]["times_floor"] == pytest.approx(0.2 / 0.048)
    # ten decoding steps, each reading the 16-bit weights (and a KV cache) once: memory-bound at these sizes
    weights = 2 * (1e9 + 1000 * 100_000)
    assert 10 * weights / 1e12 < p["generation"]["floor_s"] < 10 * weights / 1e12 + 0.01
    assert p["env steps"]["floor_s"] is None and p["advantages"]["tokens_per_s"] is None


def test_the_recipe_s_iteration_is_extrapolated_from_the_later_steps_costs():
    gpu_check = load("gpu_check")
    rows = 4  # per step; prompts grow over the first two steps, then stay
    record = {"generate_step_s": [1.0, 2.0, 3.0, 3.0], "env_s": 0.4, "update_s": 8.0,
              "step_ids": [k for k in range(4) for _ in range(rows)],
              "prompt_lengths": [p for p in (10, 20, 30, 30) for _ in range(rows)], "response_lengths": [10] * 16}
    more = gpu_check.extrapolate(record, steps=10)
    assert more["generation_s"] == pytest.approx(9.0 + 6 * 3.0) and more["env_s"] == pytest.approx(1.0)
    tokens = rows * (20 + 30 + 40 + 40)  # the update's time per token, times 6 more steps of 160 tokens
    assert more["update_s"] == pytest.approx(8.0 * (tokens + 6 * 160) / tokens)
    assert more["iteration_s"] == pytest.approx(more["generation_s"] + more["env_s"] + more["update_s"])
    assert "from the third on" in more["how"]
    verl = gpu_check.beside_verl_agent({"iteration_s": 363.0})
    assert verl["ratio"] == pytest.approx(0.5) and any("vLLM" in d for d in verl["differences"])


def test_the_committed_starting_point_renders():
    gpu_check = load("gpu_check")
    result = json.loads((ROOT / "benchmarks" / "results" / "gpu_check-2026-11-28.json").read_text())
    section = gpu_check.render_section(result)
    assert "NVIDIA H200" in section and "| forward + backward | 19.96 s |" in section
    assert "old + reference log-probs 3.0" in section  # its reference pass, then timed apart
    later = gpu_check.render_section(json.loads((ROOT / "benchmarks" / "results" / "gpu_check-2026-12-04.json")
                                                .read_text()))
    # each variant's scoring pass is shown beside its forward + backward (the two targets)
    assert "as configured 7.5 s (old + reference log-probs 2.7 s, forward + backward 4.7 s, peak 104.1 GiB)" in later
    assert "fell back to eager" not in later


def test_a_compiler_that_fell_back_to_eager_is_named_in_the_section(monkeypatch):
    from gigpo_gym.algos.policies import compiler

    gpu_check = load("gpu_check")
    result = json.loads((ROOT / "benchmarks" / "results" / "gpu_check-2026-12-04.json").read_text())
    monkeypatch.setattr(compiler, "_FAILURE", None)
    with pytest.warns(UserWarning):
        compiler._eager_from_now(RuntimeError("no working Triton"), "Qwen2DecoderLayer")
    result["steps"]["iteration-hf"]["compile_failure"] = compiler.failure()  # as the worker records it
    assert ("- Compiling fell back to eager: torch.compile failed on Qwen2DecoderLayer; the compiled parts run eager "
            "from now on: no working Triton\n") in gpu_check.render_section(result)


def test_a_transformers_older_than_train_s_floor_is_named_in_the_section():
    gpu_check = load("gpu_check")
    results = ROOT / "benchmarks" / "results"
    old = gpu_check.render_section(json.loads((results / "gpu_check-2026-12-04-transformers-5.17.json").read_text()))
    assert "Transformers 5.17.0 is older than the 5.23 that `[train]` requires" in old
    result = json.loads((results / "gpu_check-2026-12-04.json").read_text())
    assert "is older than" not in gpu_check.render_section(result)
    # with its profile's operators: profiled before the prefill was subtracted from them, and said so
    profile = json.loads((results / "gpu_check_profile-2026-12-04.json").read_text())
    result["steps"]["iteration-hf"]["decoding"] = profile["decoding"]
    assert "top operators over 24 steps, the prefill included" in gpu_check.render_section(result)
    assert "transformers>=5.23" in (ROOT / "setup.cfg").read_text()  # the floor the section names


def test_without_a_gpu_it_says_so_in_one_line():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True,
                         text=True, timeout=120)
    if "CUDA GPU" not in out.stderr:
        pytest.skip("a CUDA GPU is present")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "--dry-run runs on a CPU" in out.stderr


def test_its_section_of_speed_md_is_replaced_in_place(tmp_path):
    gpu_check = load("gpu_check")
    path = tmp_path / "SPEED.md"
    path.write_text("# report\n\n## Other\n\ntext\n")
    gpu_check.write_section(path, gpu_check.render_section(None))
    pending = path.read_text()
    assert pending.startswith("# report\n\n## Other\n\ntext\n\n") and "GPU numbers are pending" in pending
    path.write_text(pending + "\n## Later\n\nmore\n")
    gpu_check.write_section(path, "<!-- gpu_check: start -->\nnew\n<!-- gpu_check: end -->")
    text = path.read_text()
    assert "GPU numbers are pending" not in text and text.count("gpu_check: start") == 1
    assert text.index("## Other") < text.index("\nnew\n") < text.index("## Later")


def test_the_committed_speed_md_has_its_section():
    text = (ROOT / "benchmarks" / "results" / "SPEED.md").read_text()
    assert text.count("<!-- gpu_check: start -->") == 1 and text.count("<!-- gpu_check: end -->") == 1


def test_two_runs_differ_only_where_a_metric_does():
    gpu_check = load("gpu_check")
    first = [{"iteration": 1, "train/pg_loss": 0.5, "rollout/success": 0.25}]
    assert gpu_check.first_difference(first, [dict(first[0])]) is None
    other = [{**first[0], "train/pg_loss": 0.5000001}]
    assert gpu_check.first_difference(first, other) == ("iteration 1 train/pg_loss: 0.5 in one process, "
                                                         "0.5000001 in the other")
    assert gpu_check.first_difference(first, first + first) == "1 logged rows in one process, 2 in the other"


def test_timings_are_not_compared(tmp_path):
    gpu_check = load("gpu_check")
    log = tmp_path / "metrics.jsonl"
    log.write_text(json.dumps({"iteration": 1, "train/seconds": 3.0, "time/score_seconds": 1.0,
                               "rollout/tokens_per_s": 9.0, "train/kl_ref": 0.1}) + "\n")
    assert gpu_check.comparable(log) == [{"iteration": 1, "train/kl_ref": 0.1}]


def test_the_cuda_test_list_holds_every_test_file_that_asks_for_cuda():
    gpu_check = load("gpu_check")
    listed = {*gpu_check.CUDA_TESTS, *gpu_check.DISTRIBUTED_TESTS}  # the distributed ones run on CPUs in CI
    asking = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
              if p.name not in ("test_gpu_check.py", "test_gpu_choices.py")  # these two need no GPU
              and re.search(r"cuda\.is_available|check_vllm|\"cuda\"", p.read_text())}
    assert asking <= listed, sorted(asking - listed)


def test_a_padded_tokenizer_encodes_as_before_and_decodes_every_id():
    from gigpo_gym.algos.policies.tiny import train_tokenizer

    scale = load("bench_train_scale")
    texts = ["go to the fridge 1", "<action>open fridge 1</action>", "You are in the middle of a room."]
    tokenizer = train_tokenizer(texts * 5, 300)
    padded = scale.pad_vocabulary(tokenizer, 2000)
    assert len(padded) == 2000 and sorted(padded.get_vocab().values()) == list(range(2000))
    for text in texts:
        ids = padded(text)["input_ids"]
        assert padded.convert_ids_to_tokens(ids) == tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
        assert padded.decode(ids) == text
    assert all(padded.decode([i]) for i in range(2000))  # every id a random model samples has a text


def copy_trainer(tmp_path):
    """A CPU trainer of the tiny model that trains on a bf16 rollout copy, as CUDA runs do."""
    from helpers_fake import CORRIDOR_ID

    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import Trainer

    return Trainer(load_config(None, [
        f"env.id={CORRIDOR_ID}", "env.num_groups=2", "env.group_size=2", "env.eval_episodes=0", "progress=false",
        "sampling.max_new_tokens=4", "model.device=cpu", "model.tiny.corpus_episodes=2", "model.tiny.vocab_size=300",
        "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "model.compute_dtype=bfloat16",
        "model.rollout_dtype=bfloat16", "model.train_on_copy=true", f"run_dir={tmp_path / 'run'}"]))


def test_the_variants_time_the_update_on_the_float32_weights_and_restore_the_copy(tmp_path):
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.core.env import derive_seed

    gpu_check = load("gpu_check")
    with copy_trainer(tmp_path) as t:
        t.prepare()
        t.freeze_reference()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        timed = dict(gpu_check.update_variants(t, rollout, 1, deadline=float("inf"), groups=1))
        assert t.policy.train_on_copy  # each variant's change is undone
    off = timed["the update on the float32 weights under autocast"]
    assert isinstance(off, dict) and off["rows"] == timed["as configured"]["rows"] > 0 and off["forward_backward_s"] > 0
    assert all(isinstance(v, dict) for k, v in timed.items() if not k.startswith("Liger")), timed

def test_each_variant_is_handed_over_when_measured_and_none_starts_what_the_time_left_cannot_build(
        tmp_path, monkeypatch):
    import types

    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.core.env import derive_seed

    gpu_check = load("gpu_check")
    clock, builds, built = [0.0], [], []  # each variant's seconds to build its graphs, on a fake clock

    def compile_kernels(trainer, batch):
        built.append(builds[len(built)] if len(built) < len(builds) else 0.0)
        clock[0] += built[-1]
        return built[-1]

    monkeypatch.setattr(gpu_check, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                                 perf_counter=gpu_check.time.perf_counter))
    monkeypatch.setattr(gpu_check, "compile_kernels", compile_kernels)

    def variants(trainer, rollout, seconds: list[float]):
        """The variants' results within 100 s, their builds taking ``seconds``; the first one checked as it comes."""
        clock[0], builds[:], built[:] = 0.0, seconds, []
        each = gpu_check.update_variants(trainer, rollout, 1, deadline=100.0, groups=1)
        name, first = next(each)
        assert name == "as configured" and isinstance(first, dict)
        assert len(built) == 1  # handed over before the next variant built anything: the caller saves it
        return [result for _, result in each]

    with copy_trainer(tmp_path) as t:
        t.prepare()
        t.freeze_reference()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        timed = variants(t, rollout, [0.0, 55.0, 50.0])
        assert t.policy.train_on_copy  # each variant's change is undone, timed or not
        cut = variants(t, rollout, [0.0, 97.0])
    assert isinstance(timed[0], dict) and timed[0]["compile_s"] == 55.0  # 45 s left after its build
    # the longest build so far (55 s) does not fit the 45 s left: none starts
    assert timed[1:] and all(r == "not run: too little time left" for r in timed[1:]) and len(built) == 2
    assert cut[0] == "not run: too little time left after building its graphs in 97 s"  # 3 s left after it
    assert cut[1:] and all(r == "not run: too little time left" for r in cut[1:])


@pytest.mark.slow  # torch.compile builds the kernels with the C++ compiler
def test_every_cuda_choice_on_a_cpu_compiles_first_and_runs_each_variant(tmp_path):
    from torch._dynamo.utils import counters

    from gigpo_gym.algos.policies.base import TokenBatch
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.core.env import derive_seed

    gpu_check = load("gpu_check")
    with copy_trainer(tmp_path) as t:
        t.prepare()
        rows = TokenBatch([[5, 6, 7, 10, 11], [8, 9, 12]], [[13, 14], [15]])
        assert gpu_check.compile_kernels(t, rows) == 0.0  # eager on a CPU: nothing to build
        p = t.policy
        # what CUDA gets, run here
        p.compiled_vocab = p.compiled_layers = p.written_vocab_backward = p.keep_chunk_logits = True
        p.logits_chunk = 2  # several chunks a micro-batch: kept, or run again in a variant
        t.freeze_reference()
        before, graphs = [q.detach().clone() for q in p.parameters()], counters["stats"]["unique_graphs"]
        assert gpu_check.compile_kernels(t, rows) > 0 and counters["stats"]["unique_graphs"] > graphs
        assert all(q.grad is None for q in p.parameters()) and not t.optimizer.state
        assert all(torch.equal(q, b) for q, b in zip(p.parameters(), before))
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        built, update = [], t.update

        def update_counting_graphs(*args, **kwargs):
            before = counters["stats"]["unique_graphs"]
            try:
                return update(*args, **kwargs)
            finally:
                built.append(counters["stats"]["unique_graphs"] - before)

        t.update = update_counting_graphs
        timed = dict(gpu_check.update_variants(t, rollout, 1, deadline=float("inf"), groups=1))
        assert p.compiled_vocab and p.compiled_layers and p.keeps_logits() and p.train_on_copy  # each change undone
    for name in ("the LM head run again in the backward", "the vocabulary's scores eager, not compiled",
                 "the decoder layers eager, not compiled",
                 "the vocabulary's gradient by autograd (so the head runs again in the backward)"):
        assert isinstance(timed[name], dict) and timed[name]["forward_backward_s"] > 0, (name, timed[name])
    assert all(isinstance(v, dict) for v in timed.values()), timed
    # every graph a variant runs (the float32 weights under autocast are other graphs) is built before its update's
    # timer starts, not in it
    assert len(built) == len(timed) and not any(built), dict(zip(timed, built))
