"""The GPU path in one command: the 1.5B recipe's iteration, warm, each phase against its floor on the card.

    python benchmarks/gpu_check.py             # one H100 or H200: at most --budget-s (270 s) of steps
    python benchmarks/gpu_check.py --dry-run   # the same code on a CPU with the tiny model

Needs torch (with CUDA), transformers, accelerate and pytest, and this package with its
dependencies (``pip install ".[train,test]"``, or its wheels with ``--no-deps`` where torch
is installed already).  vLLM is used where it imports.  Nothing downloads.

Each step runs in a process of its own under a time limit, so a failure or a hang costs
only that step, and the results are written after every step (a step stopped at its limit
keeps what it had measured):

1. ``model``: a Qwen2.5-1.5B-shaped model with random weights, written to a temporary
   folder and loaded from there as a local model is (``bench_train_scale.random_weights_model``);
2. ``iteration-hf``: ``configs/alfworld_qwen2.5_1.5b.yaml`` as it ships (16 groups x 8,
   history 2, answers up to its 512 tokens, float32 weights under bf16 autocast,
   checkpointing, micro-batches of 8) with episodes cut to ``--steps`` (3):
   - the card's own floors first: a bf16 matmul's FLOP/s and a device copy's bytes/s;
   - iteration 1, reported apart as the warm-up (CUDA's start, kernel choice, allocator);
   - iteration 2, warm, phase by phase: generation, env steps, old log-probs, the
     reference pass, forward and backward, the optimiser step; for each its time,
     tokens/s, the FLOP or bytes it moves and its floor at the card's rates; the update's
     padding share and peak memory;
   - iteration 2's update again under ``torch.profiler`` (its top operators, the device's
     busy share) and CUDA's sync debug mode (where the host waits for the GPU);
   - the package's decode loop against transformers' continuous batching
     (``generate_batch``, paged attention) on iteration 2's first-step prompts;
3. ``iteration-vllm``: the warm-up iteration with ``model.generation: vllm``, where vllm imports;
4. ``same-seed``: two processes train the recipe with the tiny model and the same seed; their
   ``metrics.jsonl`` must be identical but for the timings;
5. ``tests-cuda``: the tests that need CUDA (tests/test_vllm_backend.py).

``--dry-run`` runs the same code on a CPU with the tiny model (2 groups x 4, 2-step
episodes, 8-token answers, one same-seed iteration), collects the tests without running
them, limits only the whole run's time, and writes into a temporary folder unless
``--results-dir`` is given.  Writes ``gpu_check.json``, ``gpu_check_profile.json`` and the
gpu_check section of ``SPEED.md`` in ``--results-dir`` (default: benchmarks/results).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPE = "alfworld_qwen2.5_1.5b"
#: Seconds each step may take at most (less when the budget is nearly spent).
LIMITS = {"model": 90, "iteration-hf": 280, "iteration-vllm": 150, "same-seed": 90, "tests-cuda": 60}
CUDA_TESTS = ("tests/test_vllm_backend.py",)
DISTRIBUTED_TESTS = ("tests/test_distributed.py",)  # gloo on CPUs: CI runs them; the check does not
#: The tiny model's size in the same-seed runs and the dry run (algos/policies/tiny.py).
TINY = ["model.name=tiny", "model.tiny.corpus_episodes=20", "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64"]
TOKENIZER_NOTE = ("a byte-level BPE trained on ALFWorld's expert episodes, padded with unused tokens to Qwen2.5's "
                  "151,936 ids: Qwen2.5's own tokenizer is not on this machine and nothing downloads; prompts are "
                  "the env's text in that tokenizer's pieces, and every id the model samples decodes")
SECTION_START, SECTION_END = "<!-- gpu_check: start -->", "<!-- gpu_check: end -->"
#: Bytes per weight one fused AdamW step with clipping moves: it reads the weight, gradient and two moments and
#: writes the weight and moments (28 B in float32); clipping reads the gradients for their norm, then scales them (12 B).
OPTIMIZER_BYTES_PER_WEIGHT = 40
PHASES = ("generation", "env steps", "advantages", "old log-probs", "reference", "forward + backward", "optimiser step")


def settings(args: argparse.Namespace) -> dict:
    shape = {"groups": 2, "group_size": 4} if args.dry_run else {"groups": 16, "group_size": 8}
    return {"config": RECIPE, **shape, "history_length": 2, "steps": args.steps, "max_new_tokens": args.max_new_tokens}


def iteration_overrides(args: argparse.Namespace, backend: str, run_dir: str) -> list[str]:
    """The recipe's config for the timed iterations, with the episode (and, if asked, the answer) cut."""
    out = [f"env.kwargs={{split: train, max_episode_steps: {args.steps}}}",
           f"sampling.max_new_tokens={args.max_new_tokens}", f"model.generation={backend}", "env.eval_episodes=0", "progress=false", f"run_dir={run_dir}"]
    if args.dry_run:
        return [*out, *TINY, "model.device=cpu", "env.num_groups=2", "env.group_size=4"]
    return [*out, f"model.name={args.model_dir}"]


# -- the card's floors ---------------------------------------------------------------
def measure_card(device) -> dict:
    """The card's achievable rates: a bf16 matmul's FLOP/s and a device-to-device copy's bytes/s.

    They are the floors' denominators: what this card does on the best case of each kind of work.
    """
    import torch

    cuda = device.type == "cuda"
    n, size = (8192, 2**30) if cuda else (512, 2**24)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    src = torch.empty(size // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)

    def rate(work, amount: float, reps: int = 10) -> float:
        for _ in range(3):
            work()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            work()
        sync(device)
        return amount * reps / (time.perf_counter() - t0)

    flops = rate(lambda: a @ b, 2.0 * n**3)
    bandwidth = rate(lambda: dst.copy_(src), 2.0 * size)  # each byte read and written
    name = torch.cuda.get_device_properties(device).name if cuda else platform.processor() or "CPU"
    return {"device": name, "matmul_flops_per_s": flops, "copy_bytes_per_s": bandwidth,
            "matmul": f"{n}x{n}x{n} {str(dtype).removeprefix('torch.')}", "copy_bytes": size}


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_shape(model) -> dict:
    """What the FLOP and byte counts need: the decoder layers' weights, widths, heads, vocabulary."""
    config = model.config
    layers = sum(p.numel() for name, p in model.named_parameters() if ".layers." in name)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return {"layer_params": layers, "params": sum(p.numel() for p in model.parameters()),
            "hidden": config.hidden_size, "vocab": config.vocab_size, "layers": config.num_hidden_layers,
            "q_dim": config.num_attention_heads * head_dim, "kv_dim": config.num_key_value_heads * head_dim}


def forward_flop(shape: dict, length: int, scored: int) -> float:
    """One row's forward FLOP: every token through the layers, causal attention, the LM head on ``scored`` positions."""
    attention = 4.0 * shape["layers"] * shape["q_dim"] * length * (length + 1) / 2
    return 2.0 * shape["layer_params"] * length + attention + 2.0 * shape["hidden"] * shape["vocab"] * scored


def phases(record: dict, shape: dict, card: dict, checkpointing: bool, compute_bytes: int) -> dict:
    """Each phase of one iteration: time, tokens/s, the work it moves, and its floor at the card's rates."""
    peak, bandwidth = card["matmul_flops_per_s"], card["copy_bytes_per_s"]
    prompts, responses, steps = record["prompt_lengths"], record["response_lengths"], record["step_ids"]
    trained = [i for i in range(len(prompts)) if responses[i] > 0]
    rows_fwd = sum(forward_flop(shape, prompts[i] + responses[i], responses[i]) for i in trained)
    tokens_fwd = sum(prompts[i] + responses[i] for i in trained)
    weight_bytes = compute_bytes * (shape["layer_params"] + shape["hidden"] * shape["vocab"])
    prefill = sum(forward_flop(shape, p, 1) for p in prompts)
    decode_floor, decode_bytes, decode_flop = 0.0, 0.0, 0.0
    for step in sorted(set(steps)):  # one pass per env step: every row decodes until the longest reply ends
        rows = [i for i, s in enumerate(steps) if s == step]
        for k in range(max(responses[i] for i in rows)):
            kv = sum(2 * compute_bytes * shape["layers"] * shape["kv_dim"] * (prompts[i] + k) for i in rows)
            flop = len(rows) * (2.0 * shape["layer_params"] + 2.0 * shape["hidden"] * shape["vocab"])
            decode_bytes += weight_bytes + kv
            decode_flop += flop
            decode_floor += max((weight_bytes + kv) / bandwidth, flop / peak)
    generated = sum(responses)
    out = {
        "generation": {"seconds": record["generate_s"], "tokens": generated, "flop": prefill + decode_flop,
                       "bytes": decode_bytes, "floor_s": prefill / peak + decode_floor,
                       "work": "prefill FLOP at the matmul rate + each decoding step's weights and KV cache read "
                               "once (or its FLOP, if more)"},
        "env steps": {"seconds": record["env_s"], "tokens": None, "floor_s": None, "steps": len(prompts),
                      "work": "CPU: the envs' own steps (no GPU floor)"},
        "advantages": {"seconds": record["advantage_s"], "tokens": None, "floor_s": None,
                       "work": "CPU: the algorithm's advantages over the rows (no GPU floor)"},
        "old log-probs": {"seconds": record["old_log_probs_s"], "tokens": tokens_fwd if record["old_recomputed"] else 0,
                          "flop": rows_fwd if record["old_recomputed"] else 0.0,
                          "floor_s": rows_fwd / peak if record["old_recomputed"] else 0.0,
                          "work": "one forward" if record["old_recomputed"] else
                          "none: sampled at temperature 1, the generation's own log-probs are the old ones"},
        "reference": {"seconds": record["reference_s"], "tokens": tokens_fwd, "flop": rows_fwd, "floor_s": rows_fwd / peak,
                      "work": "one forward of the frozen reference"},
        "forward + backward": {"seconds": record["forward_backward_s"], "tokens": tokens_fwd, "flop": 3 * rows_fwd,
                               "floor_s": 3 * rows_fwd / peak,
                               "work": "forward + backward (2x forward)" + (
                                   "; checkpointing recomputes the forward once more, not counted in the floor"
                                   if checkpointing else "")},
        "optimiser step": {"seconds": record["optimizer_s"], "tokens": None,
                           "bytes": OPTIMIZER_BYTES_PER_WEIGHT * shape["params"] * record["optimizer_steps"],
                           "floor_s": OPTIMIZER_BYTES_PER_WEIGHT * shape["params"] * record["optimizer_steps"] / bandwidth,
                           "work": f"{record['optimizer_steps']} fused AdamW step(s) with clipping, "
                                   f"{OPTIMIZER_BYTES_PER_WEIGHT} bytes per float32 weight"},
    }
    for phase in out.values():
        seconds = phase["seconds"]
        phase["tokens_per_s"] = phase["tokens"] / seconds if phase["tokens"] and seconds > 0 else None
        phase["times_floor"] = seconds / phase["floor_s"] if phase["floor_s"] else None
    return out


# -- the workers (each step's own process) --------------------------------------------
def model_worker(args: argparse.Namespace) -> dict:
    import torch

    from bench_train_scale import random_weights_model

    folder = random_weights_model("1.5b", Path(args.model_dir))
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "gpu_memory_gb": props.total_memory / 1e9, "torch": torch.__version__,
            "cuda": torch.version.cuda, "folder": str(folder), "tokenizer": TOKENIZER_NOTE}


def timed_iteration(trainer, iteration: int) -> tuple[dict, object]:
    """One RL iteration through the trainer's own pieces, timed phase by phase; (record, its rollout)."""
    import torch

    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    rollout = trainer.rollout(iteration)
    whole = trainer.gather(rollout)
    t1 = time.perf_counter()
    m = trainer.update(rollout, iteration, whole)
    sync(trainer.device)
    t2 = time.perf_counter()
    s = trainer.cfg.sampling
    record = {
        "iteration_s": t2 - t0, "generate_s": rollout.generate_seconds, "env_s": rollout.seconds - rollout.generate_seconds,
        "old_log_probs_s": m["time/score_seconds"] - m["time/reference_seconds"], "reference_s": m["time/reference_seconds"],
        "forward_backward_s": m["time/optimize_seconds"] - m["time/step_seconds"], "optimizer_s": m["time/step_seconds"],
        "advantage_s": m["time/advantage_seconds"],
        "update_s": t2 - t1, "rows": len(rollout), "generated_tokens": rollout.generated_tokens,
        "prompt_tokens": sum(len(p) for p in rollout.prompt_ids), "padding_share": m["train/padding_share"],
        "optimizer_steps": -(-int(m["train/rows_used"]) // trainer.cfg.optim.mini_batch_size) * trainer.cfg.optim.epochs,
        "old_recomputed": not (s.temperature == 1.0 and s.top_p == 1.0 and trainer.actor is trainer.scorer),
        "peak_memory_mb": peak_memory_mb(trainer.device),
        "prompt_lengths": [len(p) for p in rollout.prompt_ids], "response_lengths": [len(r) for r in rollout.response_ids],
        "step_ids": list(rollout.step_ids),
    }
    record["generated_tokens_per_s"] = record["generated_tokens"] / max(record["generate_s"], 1e-9)
    return record, rollout


def peak_memory_mb(device) -> float:
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def first_groups(rollout, groups: int):
    """The rows (and episodes) of ``rollout``'s first ``groups`` task groups, as a rollout of their own."""
    import dataclasses

    rows = [i for i, g in enumerate(rollout.group_ids) if g < groups]
    columns = {name: [getattr(rollout, name)[i] for i in rows]
               for name in (*rollout.ROW_COLUMNS, *rollout.TOKEN_COLUMNS) if getattr(rollout, name)}
    return dataclasses.replace(rollout, **columns, episodes=[e for e in rollout.episodes if e.group_id < groups])


def profile_update(trainer, rollout, iteration: int, groups: int = 2, top: int = 25) -> dict:
    """The update of ``rollout``'s first ``groups`` task groups, under torch.profiler and CUDA's sync debug mode.

    A part of the update: under the profiler each kernel costs host time, and the whole
    update would take minutes.  Returns its top operators by own device time (a CPU: own
    CPU time), the device's busy share of the wall time, and every place the host waited
    for the GPU, by source line.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    rollout = first_groups(rollout, groups)
    cuda = trainer.device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with profile(activities=activities) as prof:
                t0 = time.perf_counter()
                m = trainer.update(rollout, iteration)
                sync(trainer.device)
                wall = time.perf_counter() - t0
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    waits: dict[str, int] = {}
    for w in caught:
        if "synchroniz" in str(w.message):
            where = f"{Path(w.filename).name}:{w.lineno}"
            waits[where] = waits.get(where, 0) + 1
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    busy = sum(getattr(e, key) for e in events) / 1e6
    micro = -(-int(m["train/rows_used"]) // trainer.cfg.optim.micro_batch_size) * trainer.cfg.optim.epochs
    return {"groups": groups, "rows": len(rollout), "wall_s": wall, "device_busy_s": busy,
            "busy_share": busy / wall if cuda else None,
            "sorted_by": key, "micro_batches": micro, "host_waits": sum(waits.values()),
            "host_waits_by_line": dict(sorted(waits.items(), key=lambda kv: -kv[1])),
            "top_operators": [{"name": e.key, "calls": e.count, "self_ms": getattr(e, key) / 1e3,
                               "share": getattr(e, key) / 1e6 / busy if busy else None} for e in events[:top]]}


def compare_decoders(policy, prompt_ids: list[list[int]], sampling) -> dict:
    """The package's decode loop and transformers' continuous batching on the same prompts: time and tokens/s.

    Continuous batching runs twice (its first call captures CUDA graphs and sizes its
    cache); each figure is the decoder's last call.  A decoder that fails is reported with its error.
    """
    import torch

    from gigpo_gym.algos.policies import decode

    gen = torch.Generator(device=policy.device)
    runs = {"loop": (1, lambda: decode.generate(policy, prompt_ids, sampling, gen.manual_seed(0))),
            "continuous": (2, lambda: decode.generate_continuous(policy, prompt_ids, sampling))}
    out: dict = {"rows": len(prompt_ids), "prompt_tokens": sum(map(len, prompt_ids)),
                 "max_new_tokens": sampling.max_new_tokens}
    policy.eval()
    with torch.no_grad(), policy.compute():
        for name, (calls, work) in runs.items():
            try:
                seconds = []
                for _ in range(calls):
                    sync(policy.device)
                    t0 = time.perf_counter()
                    replies = work()
                    sync(policy.device)
                    seconds.append(time.perf_counter() - t0)
                tokens = sum(len(g.response_ids) for g in replies)
                out[name] = {"seconds": seconds[-1], "first_call_s": seconds[0], "generated_tokens": tokens,
                             "tokens_per_s": tokens / seconds[-1]}
            except Exception as e:  # reported, not fatal: the other decoder's figure still counts
                out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
    timed = [k for k in ("loop", "continuous") if "tokens_per_s" in out.get(k, {})]
    out["faster"] = max(timed, key=lambda k: out[k]["tokens_per_s"]) if timed else None
    return out


def recipe_prompts(trainer, cfg) -> list[list[int]]:
    """A round's worth of the recipe's first-step prompts (expert episodes' prompts, in the policy's tokens)."""
    from gigpo_gym.algos.training.sft import expert_demonstrations

    rows = cfg.env.num_groups * cfg.env.group_size
    demos: list = []
    for episodes in (rows // 8 + 1, rows):  # won episodes only: the expert's, without the check's step cut
        demos = expert_demonstrations(cfg.env.id, episodes, seed=1, env_kwargs={**cfg.env_kwargs("train"),
                                      "max_episode_steps": 50}, wrapper=cfg.wrapper())
        if len(demos) >= rows:
            break
    return [trainer.scorer.encode_prompt(prompt) for prompt, _ in demos[:rows]]


def fitting_answer(decoding: dict, args: argparse.Namespace, deadline: float) -> int:
    """The longest answer (up to ``--max-new-tokens``) whose decoding takes at most a share of the time left per
    iteration's generation (an eighth): two iterations, the profile and the decoders' comparison must fit as well."""
    left = deadline - time.monotonic()
    per_answer_token = args.steps * max(decoding["step_s"], 1e-4)
    return int(min(args.max_new_tokens, max(16, left / 8 / per_answer_token)))


def update_variants(trainer, rollout, iteration: int, deadline: float, pace: float) -> dict:
    """The same update again with one setting changed at a time, while time is left: what each choice costs."""
    import torch

    policy = trainer.scorer
    checkpointing = policy.gradient_checkpointing
    variants = {
        "as configured": (lambda: None, lambda: None),
        f"gradient checkpointing {'off' if checkpointing else 'on'}": (
            lambda: policy.set_checkpointing(not checkpointing), lambda: policy.set_checkpointing(checkpointing)),
        "non-deterministic kernels": (lambda: torch.use_deterministic_algorithms(False),
                                      lambda: torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)),
    }
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    out = {}
    for name, (change, undo) in variants.items():
        if deadline - time.monotonic() < 1.5 * pace + 5:
            out[name] = "not run: too little time left"
            continue
        change()
        try:
            sync(trainer.device)
            t0 = time.perf_counter()
            m = trainer.update(rollout, iteration)
            sync(trainer.device)
            out[name] = {"update_s": time.perf_counter() - t0, "forward_backward_s": m["time/optimize_seconds"]
                         - m["time/step_seconds"], "reference_s": m["time/reference_seconds"],
                         "peak_memory_mb": peak_memory_mb(trainer.device)}
        except Exception as e:  # an out-of-memory variant is a finding, not the end of the check
            out[name] = f"{type(e).__name__}: {e}"[:300]
        finally:
            undo()
    return out


def profile_decoding(policy, prompt_ids: list[list[int]], sampling, steps: int = 12, top: int = 15) -> dict:
    """A few decoding steps of the package's loop on the recipe's rows, under torch.profiler: the time of one step
    and where it goes (the first pass warms the kernels up and is not counted)."""
    import dataclasses

    import torch
    from torch.profiler import ProfilerActivity, profile

    from gigpo_gym.algos.policies import decode

    short = dataclasses.replace(sampling, max_new_tokens=steps)
    cuda = policy.device.type == "cuda"
    gen = torch.Generator(device=policy.device)
    policy.eval()
    with torch.no_grad(), policy.compute():
        decode.generate(policy, prompt_ids, dataclasses.replace(short, max_new_tokens=2), gen.manual_seed(0))
        sync(policy.device)
        t0 = time.perf_counter()
        decode.generate(policy, prompt_ids, dataclasses.replace(short, max_new_tokens=1), gen.manual_seed(0))
        sync(policy.device)
        prefill = time.perf_counter() - t0
        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            replies = decode.generate(policy, prompt_ids, short, gen.manual_seed(0))
            sync(policy.device)
            wall = time.perf_counter() - t0
    done = max(len(g.response_ids) for g in replies)
    per_step = max(wall - prefill, 0.0) / max(done - 1, 1)  # a busy CPU's noise can exceed a tiny model's steps
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = sorted((e for e in prof.key_averages() if getattr(e, key, 0) > 0), key=lambda e: getattr(e, key),
                    reverse=True)
    busy = sum(getattr(e, key) for e in events) / 1e6
    by_cpu = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return {"rows": len(prompt_ids), "steps": done, "prefill_s": prefill, "step_s": per_step, "wall_s": wall,
            "busy_share": busy / wall if cuda else None,
            "top_device_operators": [{"name": e.key, "calls": e.count, "self_ms": getattr(e, key) / 1e3}
                                     for e in events[:top]],
            "top_host_operators": [{"name": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3}
                                   for e in by_cpu[:top]]}


def iteration_worker(args: argparse.Namespace) -> dict:
    """The card's floors, a warm-up and a warm iteration, the profile and the decoders; saved after each part.

    A part is left out when what is left of ``--worker-budget`` would not hold it at the pace measured so far.
    """
    import gc

    import torch
    import transformers

    from gigpo_gym.algos.cli import resolve_config
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import Trainer

    deadline = time.monotonic() + args.worker_budget
    began = time.monotonic()
    report: dict = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                    "left_out": []}

    def save(what: str) -> None:
        Path(args.worker_out).write_text(json.dumps(report))
        print(f"[gpu_check worker] {time.monotonic() - began:6.1f} s: {what}", flush=True)

    with tempfile.TemporaryDirectory(prefix="gpu-check-run-") as run_dir:
        cfg = load_config(resolve_config(RECIPE), iteration_overrides(args, args.backend, run_dir))
        trainer = Trainer(cfg)
        try:
            report["card"] = measure_card(trainer.device)
            t0 = time.perf_counter()
            trainer.prepare()  # a vLLM engine starts here
            report["engine_start_s"] = time.perf_counter() - t0
            trainer.freeze_reference()
            shape = model_shape(trainer.scorer.model)
            report.update(shape=shape, attention=trainer.scorer.model.config._attn_implementation,
                          optimizer_fused=bool(trainer.optimizer.defaults.get("fused")),
                          tf32=torch.backends.cuda.matmul.allow_tf32, decoder=trainer.scorer.decoder)
            save(f"trainer ready, card {report['card']['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s")
            if args.backend == "hf":
                prompts = recipe_prompts(trainer, cfg)
                report["decoding"] = profile_decoding(trainer.scorer, prompts, trainer.sampling(1))
                answer = fitting_answer(report["decoding"], args, deadline)
                if answer < cfg.sampling.max_new_tokens:
                    report["left_out"].append(f"answers cut from {cfg.sampling.max_new_tokens} to {answer} tokens: at "
                                              f"{1e3 * report['decoding']['step_s']:.0f} ms a decoding step the iterations "
                                              "would not fit the time left")
                    cfg.sampling.max_new_tokens = report["max_new_tokens"] = answer
                save(f"decoding step {1e3 * report['decoding']['step_s']:.1f} ms at {len(prompts)} "
                     f"rows; answers up to {cfg.sampling.max_new_tokens} tokens")
            first, rollout = timed_iteration(trainer, 1)
            report["warm_up"] = first
            save(f"warm-up iteration {first['iteration_s']:.1f} s (generation {first['generate_s']:.1f}, env "
                 f"{first['env_s']:.1f}, update {first['update_s']:.1f})")
            if args.backend != "hf":
                return report
            pace, bf16 = first["iteration_s"], cfg.model.compute_dtype in ("bfloat16", "float16") or cfg.model.dtype != "float32"
            report["phases"] = phases(first, shape, report["card"], cfg.model.gradient_checkpointing, 2 if bf16 else 4)
            record, iteration = first, 1
            if deadline - time.monotonic() > 1.5 * first["update_s"]:  # the update is warm from here on
                report["profile"] = profile_update(trainer, rollout, iteration)
                save(f"profiled update {report['profile']['wall_s']:.1f} s")
            else:
                report["left_out"].append("the profiled update: too little time left")
            if deadline - time.monotonic() > 1.2 * pace:
                record, rollout = timed_iteration(trainer, 2)
                report["warm"], iteration = record, 2
                report["phases"] = phases(record, shape, report["card"], cfg.model.gradient_checkpointing,
                                          2 if bf16 else 4)
                save(f"warm iteration {record['iteration_s']:.1f} s")
            else:
                report["left_out"].append(f"the warm iteration: {deadline - time.monotonic():.0f} s left, the "
                                          f"warm-up took {pace:.0f} s (the phases are the warm-up's)")
            if deadline - time.monotonic() > 3 * record["generate_s"] / max(len(set(record["step_ids"])), 1) + 20:
                first_step = [p for p, s in zip(rollout.prompt_ids, rollout.step_ids) if s == 0]
                report["decoders"] = compare_decoders(trainer.scorer, first_step, trainer.sampling(iteration))
                save("decoders compared")
            else:
                report["left_out"].append("the decoders' comparison: too little time left")
            report["variants"] = update_variants(trainer, rollout, iteration, deadline, record["update_s"])
            save("variants")
        finally:
            trainer.close()
            del trainer
            gc.collect()
    return report


# -- running steps ---------------------------------------------------------------------
def start(command: list[str], cwd: Path = ROOT) -> subprocess.Popen:
    """``command`` in a process group of its own (a timeout ends its children too).

    PYTHONSAFEPATH keeps the working folder off ``sys.path``: run from the checkout, ``-m``
    would import its ``gigpo_gym/`` folder in place of an installed (non-editable) package.
    """
    env = {**os.environ, "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float) -> tuple[int | None, str]:
    """Wait for ``proc`` until ``deadline``; (None, output so far) when it had to be stopped."""
    try:
        out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def failure(state: str, rc: int | None, output: str, what: str = "") -> dict:
    """A step that failed or ran out of time: the reason with the output's last line, and its tail."""
    last = tail(output, 1) or "no output"
    return {"status": state, "reason": f"{what}{state} (exit code {rc}): {last}", "output_tail": tail(output)}


def run_worker(kind: str, args: argparse.Namespace, deadline: float, *extra: str) -> dict:
    """A worker in its own process; on a failure or timeout, what it had saved so far is kept."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_file = Path(f.name)
    budget = max(deadline - time.monotonic() - 15, 10)  # the worker plans its parts within this
    command = [sys.executable, __file__, "--worker", kind, "--worker-out", str(out_file), "--steps", str(args.steps),
               "--max-new-tokens", str(args.max_new_tokens), "--worker-budget", f"{budget:.0f}",
               *(["--dry-run"] if args.dry_run else []), *(["--model-dir", args.model_dir] if args.model_dir else []),
               *extra]
    rc, output = finish(start(command), deadline)
    try:
        saved = json.loads(out_file.read_text()) if out_file.stat().st_size else {}
        if rc == 0:
            return {"status": "passed", **saved}
        return {**saved, **failure("timed out" if rc is None else "failed", rc, output)}
    finally:
        out_file.unlink(missing_ok=True)


def comparable(path: Path) -> list[dict]:
    """A run's logged metrics without the timings (which no two runs share)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith(("seconds", "tokens_per_s")))}
            for row in rows]


def first_difference(first: list[dict], second: list[dict]) -> str | None:
    """Where two runs' logged metrics first differ (None: nowhere)."""
    for a, b in zip(first, second):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return (f"iteration {a.get('iteration')} {key}: {a.get(key)!r} in one process, "
                        f"{b.get(key)!r} in the other")
    if len(first) != len(second):
        return f"{len(first)} logged rows in one process, {len(second)} in the other"
    return None


def same_seed(args: argparse.Namespace, deadline: float) -> dict:
    """Two processes train the recipe (tiny model; 2 iterations, 1 in a dry run) with seed 0 at once; compare their logs."""
    iterations = 1 if args.dry_run else 2
    overrides = [*TINY, f"model.device={'cpu' if args.dry_run else 'cuda'}", "env.num_groups=2", "env.group_size=4",
                 "env.kwargs={split: train, max_episode_steps: 4}", "sampling.max_new_tokens=8", "env.eval_episodes=4",
                 f"iterations={iterations}", f"save_every={iterations}", "seed=0"]
    with tempfile.TemporaryDirectory(prefix="gpu-check-seed-") as tmp:
        procs = []
        for k in (1, 2):
            command = [sys.executable, "-m", "gigpo_gym.algos.cli", "train", "--config", RECIPE, "--no-progress",
                       "--run-dir", str(Path(tmp) / f"run{k}")]
            procs.append(start([*command, *(a for o in overrides for a in ("--set", o))], cwd=Path(tmp)))
        results = [finish(p, deadline) for p in procs]
        for rc, output in results:
            if rc != 0:
                return failure("timed out" if rc is None else "failed", rc, output, "a training run ")
        first, second = (comparable(Path(tmp) / f"run{k}" / "metrics.jsonl") for k in (1, 2))
    report = {"rows": len(first), "metrics_per_row": max(len(r) for r in first), "overrides": overrides}
    difference = first_difference(first, second)
    if difference is None and len(first) != iterations + 1:  # iteration 0 (the first evaluation), then each one
        difference = f"{len(first)} logged rows, expected {iterations + 1}"
    return {"status": "failed", **report, "reason": difference} if difference else {"status": "passed", **report}


def run_tests(files: tuple[str, ...], args: argparse.Namespace, deadline: float) -> dict:
    """pytest on ``files``: counts by outcome, each skip's reason (the dry run collects only)."""
    command = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", *(
        ["--collect-only", "-q"] if args.dry_run else ["-rs", "-v"])]
    rc, output = finish(start(command), deadline)
    outcomes = re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", output, re.M)
    counts = {o.lower(): sum(1 for _, x in outcomes if x == o) for o in {x for _, x in outcomes}}
    report = {"command": " ".join(["python", *command[1:]]), "counts": counts,
              "skips": sorted(set(re.findall(r"^SKIPPED \[\d+\] (.+)$", output, re.M))),
              "failures": [t for t, x in outcomes if x in ("FAILED", "ERROR")]}
    if args.dry_run:
        collected = re.findall(r"^tests/\S+::\S+$", output, re.M)
        return {**report, "collected": len(collected),
                **({"status": "passed"} if rc == 0 else failure("failed", rc, output, "collecting "))}
    if rc is None:
        return {**report, "status": "timed out", "reason": f"stopped after {len(outcomes)} test(s)",
                "output_tail": tail(output)}
    if rc != 0:
        return {**report, **failure("failed", rc, output, "pytest "), "output_tail": tail(output, 30)}
    return {**report, "status": "passed"}


# -- the report ------------------------------------------------------------------------
def _si(value: float | None, unit: str) -> str:
    if not value:
        return ""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def phase_rows(phase_table: dict) -> list[str]:
    """The phases as markdown table rows: time, tokens/s, work moved, floor, times the floor."""
    out = []
    for name in PHASES:
        p = phase_table[name]
        work = " + ".join(x for x in (_si(p.get("flop"), "FLOP"), _si(p.get("bytes"), "B")) if x) or "-"
        floor = f"{p['floor_s']:.2f} s" if p.get("floor_s") else "-"
        times = f"{p['times_floor']:.1f}x" if p.get("times_floor") else "-"
        rate = f"{p['tokens_per_s']:,.0f}" if p.get("tokens_per_s") else "-"
        out.append(f"| {name} | {p['seconds']:.2f} s | {rate} | {work} | {floor} | {times} |")
    return out


def iteration_line(label: str, r: dict) -> str:
    return (f"{label}: {r['iteration_s']:.1f} s = generation {r['generate_s']:.1f} + env {r['env_s']:.1f} + update "
            f"{r['update_s']:.1f} (advantages {r['advantage_s']:.1f}, reference {r['reference_s']:.1f}, forward + backward {r['forward_backward_s']:.1f}, "
            f"optimiser {r['optimizer_s']:.2f}); {r['rows']} rows of {r['prompt_tokens'] / max(r['rows'], 1):.0f} "
            f"prompt tokens on average, {r['generated_tokens']:,} generated; padding {100 * r['padding_share']:.1f}% of "
            f"the update's micro-batches; peak memory {r['peak_memory_mb'] / 1024:.1f} GiB")


def summary_line(name: str, r: dict) -> str:
    head = f"{name}: {r['status']} ({r.get('seconds', 0):.0f} s)"
    if r["status"] != "passed":
        return f"{head}: {r.get('reason', '')}"
    if name.startswith("iteration-"):
        parts = [iteration_line(k.replace("_", "-"), r[k]) for k in ("warm_up", "warm") if k in r]
        return f"{head}: " + "; ".join(parts)
    if name == "same-seed":
        return f"{head}: {r['rows']} logged rows of {r['metrics_per_row']} metrics identical in both processes"
    if name == "model":
        return f"{head}: {r['device']}, tokenizer: {r['tokenizer']}"
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["counts"].items())) or f"{r.get('collected', 0)} collected"
    return f"{head}: {counts}" + "".join(f"; skipped {skip}" for skip in r.get("skips", []))


def render_section(result: dict | None) -> str:
    lines = [SECTION_START, "## GPU check (`benchmarks/gpu_check.py`)", ""]
    if result is None:
        lines += ["GPU numbers are pending: no machine with a GPU has run this check yet. On one H100 or H200,",
                  "`python benchmarks/gpu_check.py` runs it (its steps stop within `--budget-s`)",
                  "and writes this section and `benchmarks/results/gpu_check.json`. What it runs: docs/gpu.md."]
        return "\n".join([*lines, SECTION_END])
    s = result["settings"]
    lines += [f"`{result['command']}` on {result['date']}, {result['device']}: `{s['config']}` ({s['groups']} groups x "
              f"{s['group_size']}, history {s['history_length']}, answers up to {s['max_new_tokens']} tokens) with "
              f"{s['steps']}-step episodes, random weights"
              f"{' (dry run: the tiny model on a CPU)' if result['dry_run'] else ''}.", ""]
    hf = result["steps"].get("iteration-hf", {})
    if "card" in hf:
        card = hf["card"]
        lines += [f"The card's measured rates, the floors' denominators: {_si(card['matmul_flops_per_s'], 'FLOP/s')} "
                  f"({card['matmul']} matmul), {_si(card['copy_bytes_per_s'], 'B/s')} (device copy, bytes read + "
                  f"written). Attention `{hf['attention']}`, fused AdamW {hf['optimizer_fused']}, TF32 {hf['tf32']}, "
                  f"decoder `{hf['decoder']}`.", ""]
    if "phases" in hf:
        which = "warm" if "warm" in hf else "warm-up"
        lines += [f"Iteration {2 if which == 'warm' else 1} ({which}), phase by phase:", "",
                  "| phase | time | tokens/s | work | floor | x floor |", "|---|---:|---:|---:|---:|---:|",
                  *phase_rows(hf["phases"]), ""]
    dec = hf.get("decoding")
    if dec:
        ops = ", ".join(f"`{o['name']}` {o['self_ms']:.0f} ms" for o in dec.get("top_device_operators", [])[:5])
        busy = f", device busy {100 * dec['busy_share']:.0f}%" if dec["busy_share"] is not None else ""
        host = ", ".join(f"`{o['name']}` {o['self_cpu_ms']:.0f} ms" for o in dec.get("top_host_operators", [])[:3])
        lines.append(f"- Decoding, {dec['rows']} rows: prefill {dec['prefill_s']:.2f} s, then {1e3 * dec['step_s']:.1f} "
                     f"ms a step{busy}" + (f"; top operators over {dec['steps']} steps: {ops}" if ops else "")
                     + (f"; on the host: {host}" if host else ""))
    for key, label in (("warm_up", "Warm-up (iteration 1)"), ("warm", "Warm (iteration 2)")):
        if key in hf:
            lines.append(f"- {iteration_line(label, hf[key])}")
    prof = hf.get("profile")
    if prof:
        ops = ", ".join(f"`{o['name']}` {o['self_ms']:.0f} ms" for o in prof.get("top_operators", [])[:6])
        busy = f", device busy {100 * prof['busy_share']:.0f}% of it" if prof["busy_share"] is not None else ""
        lines.append(f"- Profiled update of {prof['rows']} rows ({prof['groups']} groups): {prof['wall_s']:.1f} s{busy}; "
                     f"{prof['host_waits']} host waits for the GPU over {prof['micro_batches']} micro-batches"
                     + (f"; top operators: {ops}" if ops else "") + " (all: `gpu_check_profile.json`)")
    decoders = hf.get("decoders")
    if decoders:
        cells = [f"{k} " + (f"{decoders[k]['tokens_per_s']:,.0f} tok/s ({decoders[k]['seconds']:.1f} s; first call "
                            f"{decoders[k]['first_call_s']:.1f} s)" if "tokens_per_s" in decoders[k] else decoders[k]["error"])
                 for k in ("loop", "continuous") if k in decoders]
        lines.append(f"- Decoders on the {decoders['rows']} first-step prompts, up to {decoders['max_new_tokens']} tokens: "
                     + "; ".join(cells))
    variants = hf.get("variants") or {}
    cells = [f"{k} {v['update_s']:.1f} s (forward + backward {v['forward_backward_s']:.1f} s, peak "
             f"{v['peak_memory_mb'] / 1024:.1f} GiB)" if isinstance(v, dict) else f"{k}: {v}" for k, v in variants.items()]
    if cells:
        lines.append("- The update again, one choice changed: " + "; ".join(cells))
    for note in hf.get("left_out", []):
        lines.append(f"- Left out: {note}")
    if hf:
        lines.append("")
    lines += [f"- {summary_line(name, r) if name != 'iteration-hf' else name + ': ' + r['status']}"
              for name, r in result["steps"].items()]
    return "\n".join([*lines, SECTION_END])


def write_section(path: Path, section: str) -> None:
    """Put ``section`` in place of the file's gpu_check section (appended when there is none)."""
    text = path.read_text() if path.is_file() else "# gigpo-gym speed report\n"
    pattern = re.compile(re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def vllm_problem() -> str | None:
    """Why the vLLM backend cannot run here (the trainer's own check), or None."""
    from gigpo_gym.algos.policies.vllm import BackendUnavailable, check_vllm

    try:
        check_vllm()
    except BackendUnavailable as e:
        return str(e)
    return None


def missing(args: argparse.Namespace) -> list[str]:
    """What this machine lacks for the check."""
    needs = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate", "yaml": "pyyaml",
             "safetensors": "safetensors", "tokenizers": "tokenizers", "tensorboard": "tensorboard",
             "matplotlib": "matplotlib"}
    if "tests-cuda" not in args.skip:
        needs["pytest"] = "pytest (or --skip tests-cuda)"
    out = [what for module, what in needs.items() if importlib.util.find_spec(module) is None]
    try:
        import gigpo_gym.algos  # noqa: F401  (this package and its own dependencies)
    except ImportError as e:
        out.append(f"this package's dependencies ({e})")
    if not out and not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            out.append(f"a CUDA GPU (torch {torch.__version__} sees none; --dry-run runs on a CPU)")
    return out


def write_results(results_dir: Path, result: dict) -> None:
    """gpu_check.json (the profiles' operator lists apart, in gpu_check_profile.json) and SPEED.md's section.

    The per-row lengths stay in gpu_check.json: the phases' FLOP and bytes can be recounted from them.
    """
    hf = result["steps"].get("iteration-hf", {})
    slim = json.loads(json.dumps(result))
    profiles = {"update": hf.get("profile"), "decoding": hf.get("decoding")}
    if any(profiles.values()):
        (results_dir / "gpu_check_profile.json").write_text(json.dumps(profiles, indent=2) + "\n")
        for key in profiles:
            if hf.get(key):
                slim["steps"]["iteration-hf"][key] = {k: v for k, v in hf[key].items() if not k.startswith("top_")}
    (results_dir / "gpu_check.json").write_text(json.dumps(slim, indent=2) + "\n")
    write_section(results_dir / "SPEED.md", render_section(result))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="the same steps on a CPU with the tiny model")
    p.add_argument("--steps", type=int, help="steps per episode (default 3; dry run 2; the recipe's are 50)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per answer (default: the recipe's 512; dry run 8)")
    p.add_argument("--budget-s", type=float, default=270.0, help="seconds for all steps together (default 270)")
    optional = [name for name in LIMITS if name != "model"]
    p.add_argument("--skip", nargs="+", default=[], choices=optional, metavar="STEP",
                   help=f"steps not to run: {', '.join(optional)}")
    p.add_argument("--results-dir", help="where gpu_check.json, gpu_check_profile.json and SPEED.md go (default: "
                   "benchmarks/results; a dry run: a temporary folder)")
    p.add_argument("--worker", choices=["model", "iteration"], help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-budget", type=float, default=600.0, help=argparse.SUPPRESS)
    p.add_argument("--backend", default="hf", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.steps = args.steps or (2 if args.dry_run else 3)
    args.max_new_tokens = args.max_new_tokens or (8 if args.dry_run else 512)
    if args.worker:
        work = model_worker if args.worker == "model" else iteration_worker
        Path(args.worker_out).write_text(json.dumps(work(args)))
        return 0
    lacking = missing(args)
    if lacking:
        print(f"gpu_check needs {', '.join(lacking)}: install them next to this package "
              '(pip install ".[train,test]"), then run it again', file=sys.stderr)
        return 2
    default = tempfile.mkdtemp(prefix="gpu-check-") if args.dry_run and not args.results_dir else HERE / "results"
    results_dir = Path(args.results_dir or default)
    results_dir.mkdir(parents=True, exist_ok=True)
    result = {"check": "gpu_check", "dry_run": args.dry_run, "date": time.strftime("%Y-%m-%d"),
              "command": " ".join(["python benchmarks/gpu_check.py", *sys.argv[1:]]), "machine": platform.platform(),
              "device": "CPU (dry run)", "settings": settings(args), "steps": {}}
    deadline = time.monotonic() + args.budget_s
    s = result["settings"]
    print(f"[gpu_check] {RECIPE}: {s['groups']} groups x {s['group_size']}, history 2, {s['steps']}-step episodes "
          f"(the recipe's: 50), answers up to {s['max_new_tokens']} tokens; steps stop within {args.budget_s:g} s",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-model-") as model_dir:
        args.model_dir = None if args.dry_run else model_dir
        for name in LIMITS:
            started = time.monotonic()
            step_deadline = deadline if args.dry_run else min(deadline, started + LIMITS[name])  # a CPU is slow
            if name in args.skip:
                r = {"status": "skipped", "reason": "--skip"}
            elif step_deadline - started < 30:
                r = {"status": "not run", "reason": f"the time budget (--budget-s {args.budget_s:g}) was spent"}
            elif name == "model" and args.dry_run:
                r = {"status": "skipped", "reason": "the dry run uses the tiny model and its tokenizer (a BPE "
                     "trained on the env's text, algos/policies/tiny.py)"}
            elif name.startswith("iteration-") and result["steps"]["model"]["status"] not in ("passed", "skipped"):
                r = {"status": "not run", "reason": "no model (the model step did not pass)"}
            elif name == "iteration-vllm" and vllm_problem():
                r = {"status": "skipped", "reason": vllm_problem()}
            elif name == "model":
                r = run_worker("model", args, step_deadline)
                result["device"] = r.get("device", "CUDA GPU")
            elif name.startswith("iteration-"):
                r = run_worker("iteration", args, step_deadline, "--backend", name.removeprefix("iteration-"))
            elif name == "same-seed":
                r = same_seed(args, step_deadline)
            else:
                r = run_tests(CUDA_TESTS, args, step_deadline)
            result["steps"][name] = {**r, "seconds": time.monotonic() - started}
            print(f"[gpu_check] {summary_line(name, result['steps'][name])}", flush=True)
            if r.get("output_tail"):
                print("    " + r["output_tail"].replace("\n", "\n    "), flush=True)
            write_results(results_dir, result)
    print(render_section(result))
    print(f"[gpu_check] wrote {results_dir / 'gpu_check.json'} and its section of {results_dir / 'SPEED.md'}")
    return 0 if all(r["status"] in ("passed", "skipped") for r in result["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
