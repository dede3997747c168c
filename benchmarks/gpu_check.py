"""The GPU path in one command: the 1.5B recipe's iteration, warm, each phase against its floor on the card.

    python benchmarks/gpu_check.py             # one H100 or H200: at most --budget-s (300 s) of steps
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
   history 2, answers up to its 512 tokens, float32 weights trained through bf16 rollout
   weights, micro-batches and checkpointing chosen by the card's memory) with
   episodes cut to ``--steps`` (10):
   - the card's own floors first: a bf16 matmul's FLOP/s and a device copy's bytes/s;
   - a few decoding steps of the configured decoder at the recipe's 128 rows, profiled;
   - the decoders (loop, static cache, continuous batching) on those rows, 64 tokens each;
   - torch.compile's build of the decoder layers' and the vocabulary's kernels, timed on
     two rows and one before the answers' length is chosen;
   - a warm-up iteration of 1-step episodes (CUDA's start, kernel choice, the allocator,
     the advantage loops' compilation), reported apart;
   - the warm iteration, phase by phase: generation (each env step's call timed), env
     steps, old and reference log-probs (one pass), forward and backward, the optimiser
     step; for each its time, tokens/s, the FLOP or bytes it moves and its floor at the
     card's rates; the update's padding share and peak memory;
   - the recipe's 50-step iteration extrapolated from the warm one's per-step costs
     (``extrapolate`` says how), beside verl-agent's 363 s on 2 H100s, per GPU;
   - the update of 2 groups under ``torch.profiler`` (its top operators, those of its
     scoring pass apart, the device's busy share) and CUDA's sync debug mode (where the
     host waits for the GPU);
   - the update of 2 groups again with one choice changed at a time;
3. ``iteration-vllm``: the warm-up iteration with ``model.generation: vllm``, where vllm imports;
4. ``same-seed``: two processes train the recipe with the tiny model and the same seed; their
   ``metrics.jsonl`` must be identical but for the timings;
5. ``tests-cuda``: the tests that need CUDA (tests/test_vllm_backend.py).

Answers are cut below 512 tokens only where the decoding pace measured first would not
let the iterations fit the step's time (the report says so).  ``--dry-run`` runs the same
code on a CPU with the tiny model (2 groups x 4, 2-step episodes, 8-token answers, one
same-seed iteration), collects the tests without running them, limits only the whole
run's time, and writes into a temporary folder unless ``--results-dir`` is given.  Writes
``gpu_check.json``, ``gpu_check_profile.json`` and the gpu_check section of ``SPEED.md`` in
``--results-dir`` (default: benchmarks/results).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPE = "alfworld_qwen2.5_1.5b"
#: Seconds each step may take (less when the budget is nearly spent; an iteration more where it has room: ``step_end``).
LIMITS = {"model": 60, "iteration-hf": 240, "iteration-vllm": 150, "same-seed": 120, "tests-cuda": 60}
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
PHASES = ("generation", "env steps", "advantages", "old + reference log-probs", "forward + backward", "optimiser step")
#: The recipe's episode length, which the check's shorter episodes are extrapolated to.
RECIPE_STEPS = 50
#: verl-agent's figure for the same setting: the GiGPO paper's time per ALFWorld training iteration.
VERL_AGENT = {"iteration_s": 363.0, "gpus": 2, "gpu": "H100",
              "source": "the GiGPO paper (arXiv 2505.10978): ALFWorld, Qwen2.5-1.5B-Instruct, verl-agent with vLLM"}


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
        "old + reference log-probs": {
            "seconds": record["scoring_s"], "tokens": record["scoring_models"] * tokens_fwd,
            "flop": record["scoring_models"] * rows_fwd, "floor_s": record["scoring_models"] * rows_fwd / peak,
            "work": " and ".join(filter(None, [
                "one forward of the policy (the rollout's log-probs are not its own)" if record["old_recomputed"]
                else "", "one forward of the frozen reference" if record["scoring_models"] > record["old_recomputed"]
                else ""])) + ", in one pass" if record["scoring_models"] else "none"},
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
    """One RL iteration through the trainer's own pieces, timed phase by phase (each env step's generation apart);
    (record, its rollout)."""
    import torch

    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    actor, step_seconds, retries = trainer.actor, [], alloc_retries(trainer.device)

    def timed_generate(*args, **kwargs):  # its replies are host lists: the GPU is done when it returns
        t0 = time.perf_counter()
        out = type(actor).generate(actor, *args, **kwargs)
        step_seconds.append(time.perf_counter() - t0)
        return out

    t0 = time.perf_counter()
    actor.generate = timed_generate
    try:
        rollout = trainer.rollout(iteration)
    finally:
        del actor.generate
    whole = trainer.gather(rollout)
    t1 = time.perf_counter()
    m = trainer.update(rollout, iteration, whole)
    sync(trainer.device)
    t2 = time.perf_counter()
    old = trainer.recomputes_old_log_probs()
    reference = bool(trainer.weights.kl_coef) and (trainer.reference is not None or trainer.cfg.model.lora is not None)
    record = {
        "iteration_s": t2 - t0, "generate_s": rollout.generate_seconds, "generate_step_s": step_seconds,
        "env_s": rollout.seconds - rollout.generate_seconds, "scoring_s": m["time/score_seconds"],
        "scoring_models": int(old) + int(reference), "old_recomputed": old,
        "forward_backward_s": m["time/optimize_seconds"] - m["time/step_seconds"], "optimizer_s": m["time/step_seconds"],
        "advantage_s": m["time/advantage_seconds"],
        "update_s": t2 - t1, "rows": len(rollout), "generated_tokens": rollout.generated_tokens,
        "prompt_tokens": sum(len(p) for p in rollout.prompt_ids), "padding_share": m["train/padding_share"],
        "optimizer_steps": int(m["train/optimizer_steps"]),
        "peak_memory_mb": peak_memory_mb(trainer.device),
        "alloc_retries": None if retries is None else alloc_retries(trainer.device) - retries,
        "prompt_lengths": [len(p) for p in rollout.prompt_ids], "response_lengths": [len(r) for r in rollout.response_ids],
        "step_ids": list(rollout.step_ids),
    }
    record["generated_tokens_per_s"] = record["generated_tokens"] / max(record["generate_s"], 1e-9)
    return record, rollout


def extrapolate(record: dict, steps: int = RECIPE_STEPS) -> dict:
    """The recipe's ``steps``-step iteration from a shorter warm one's per-step costs.

    Random weights never win, so every episode plays to its step limit and each env step
    has all 128 rows.  With history 2 a prompt stops growing after the second step, so a
    step past the measured ones costs what the measured steps from the third on cost on
    average: its generate call, its share of the env time, and the update's time per
    trained token times that step's tokens (prompt + reply).
    """
    generation = record["generate_step_s"]
    measured = len(generation)
    later = [s for s in sorted(set(record["step_ids"])) if s >= 2] or sorted(set(record["step_ids"]))
    tokens = [p + r for p, r in zip(record["prompt_lengths"], record["response_lengths"])]
    step_tokens = [sum(t for t, s in zip(tokens, record["step_ids"]) if s == k) for k in later]
    more = steps - measured
    per_step_generation = sum(generation[k] for k in later if k < measured) / len(later)
    update = record["update_s"] * (1 + more * (sum(step_tokens) / len(later)) / max(sum(tokens), 1))
    out = {"steps": steps, "from_steps": measured,
           "generation_s": sum(generation) + more * per_step_generation,
           "env_s": record["env_s"] * steps / measured, "update_s": update,
           "how": f"the {measured} measured steps, plus {more} more steps each costing the mean of the measured steps "
                  f"from the third on (prompts stop growing there with history 2): their generate call, their share "
                  f"of the env time, and the update's time per trained token times their tokens"}
    out["iteration_s"] = out["generation_s"] + out["env_s"] + out["update_s"]
    return out


def beside_verl_agent(extrapolated: dict, gpus: int = 1) -> dict:
    """The extrapolated iteration beside verl-agent's on the paper's two H100s, in GPU-seconds per iteration."""
    ours, theirs = extrapolated["iteration_s"] * gpus, VERL_AGENT["iteration_s"] * VERL_AGENT["gpus"]
    return {"gpu_s": ours, "verl_agent_gpu_s": theirs, "ratio": ours / theirs, "verl_agent": VERL_AGENT,
            "differences": [
                "random weights write every answer to its 512 tokens and never end an episode early; a trained "
                "model's answers end at their action and its episodes at success",
                "verl-agent generated with vLLM (paged attention, continuous batching, its own kernels); here the "
                "trained module's weights generate through transformers",
                f"{gpus} GPU here, {VERL_AGENT['gpus']} {VERL_AGENT['gpu']}s there: the figures are GPU-seconds per "
                "iteration; decoding is bound by memory bandwidth, which an H200 has more of than an H100",
            ]}


def peak_memory_mb(device) -> float:
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def alloc_retries(device) -> int | None:
    """How often so far the CUDA allocator emptied its cache to retry an allocation that failed, each time a wait
    for the device: a budget that leaves too little room shows here.  None elsewhere."""
    import torch

    return torch.cuda.memory_stats(device).get("num_alloc_retries", 0) if device.type == "cuda" else None


def first_groups(rollout, groups: int):
    """The rows (and episodes) of ``rollout``'s first ``groups`` task groups, as a rollout of their own."""
    import dataclasses

    rows = [i for i, g in enumerate(rollout.group_ids) if g < groups]
    columns = {name: [getattr(rollout, name)[i] for i in rows]
               for name in (*rollout.ROW_COLUMNS, *rollout.TOKEN_COLUMNS) if getattr(rollout, name)}
    return dataclasses.replace(rollout, **columns, episodes=[e for e in rollout.episodes if e.group_id < groups])


#: The profiler's label around the update's scoring pass (old and reference log-probs), to tell its operators apart.
SCORING = "gpu_check: old + reference log-probs"


def device_busy_s(averages) -> float:
    """Seconds the device worked: its own events (kernels, copies, fills; graph replays too).  Operators'
    device times are those same kernels again, attributed to the operator that launched them."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in averages if e.device_type != DeviceType.CPU) / 1e6


def operators_within(prof, label: str, key: str) -> dict[str, list[float]]:
    """Each operator's calls and own time (``key``) inside the ranges ``label`` marks, by name."""
    found: dict[str, list[float]] = {}

    def walk(event) -> None:
        for child in event.cpu_children:
            calls_and_time = found.setdefault(child.name, [0, 0.0])
            calls_and_time[0] += 1
            calls_and_time[1] += getattr(child, key)
            walk(child)

    for event in prof.events():
        if event.name == label:
            walk(event)
    return found


def profile_update(trainer, rollout, iteration: int, groups: int = 2, top: int = 25) -> dict:
    """The update of ``rollout``'s first ``groups`` task groups, under torch.profiler and CUDA's sync debug mode.

    A part of the update: under the profiler each kernel costs host time, and the whole
    update would take minutes.  Returns its operators by own device time (a CPU: own
    CPU time; kernels count under the operator that launched them), those of the
    scoring pass apart, the device's busy share of the wall time, and every place the
    host waited for the GPU, by source line.
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    rollout = first_groups(rollout, groups)
    cuda = trainer.device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    calls = {"scoring": 0, "training": 0}  # the models' passes: without gradients (scoring) and with
    models = {id(m): m for m in (trainer.policy, trainer.scorer, trainer.reference) if m is not None}
    hooks = [m.register_forward_hook(
        lambda *_: calls.__setitem__(k := "training" if torch.is_grad_enabled() else "scoring", calls[k] + 1))
        for m in models.values()]
    score = trainer.score_old_and_reference

    def labelled_score(*args, **kwargs):
        with record_function(SCORING):
            return score(*args, **kwargs)

    trainer.score_old_and_reference = labelled_score
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with profile(activities=activities) as prof:
                t0 = time.perf_counter()
                trainer.update(rollout, iteration)
                sync(trainer.device)
                wall = time.perf_counter() - t0
        finally:
            del trainer.score_old_and_reference
            for hook in hooks:
                hook.remove()
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    waits: dict[str, int] = {}
    for w in caught:
        if "synchroniz" in str(w.message):
            where = f"{Path(w.filename).name}:{w.lineno}"
            waits[where] = waits.get(where, 0) + 1
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    averages = prof.key_averages()
    events = [e for e in averages if e.device_type == DeviceType.CPU and getattr(e, key, 0) > 0]
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    total = sum(getattr(e, key) for e in events) / 1e6
    busy = device_busy_s(averages) if cuda else total
    scoring = sorted(((n, c, t) for n, (c, t) in operators_within(prof, SCORING, key).items() if t > 0),
                     key=lambda x: -x[2])
    scoring_s = sum(t for *_, t in scoring) / 1e6
    return {"groups": groups, "rows": len(rollout), "wall_s": wall, "device_busy_s": busy,
            "busy_share": busy / wall if cuda else None, "sorted_by": key, "micro_batches": calls["training"],
            "scoring_passes": calls["scoring"], "host_waits": sum(waits.values()),
            "host_waits_by_line": dict(sorted(waits.items(), key=lambda kv: -kv[1])),
            "top_operators": [{"name": e.key, "calls": e.count, "self_ms": getattr(e, key) / 1e3,
                               "share": getattr(e, key) / 1e6 / total if total else None} for e in events[:top]],
            "scoring_s": scoring_s,
            "scoring_top_operators": [{"name": n, "calls": c, "self_ms": t / 1e3,
                                       "share": t / 1e6 / scoring_s if scoring_s else None} for n, c, t in scoring[:top]]}


DECODERS = ("loop", "static", "continuous")
#: What the decoders' comparison times: each decoder as ``model.decoder`` names it, and the static one with its
#: steps' attention by two matmuls (``HFPolicy.matmul_decoding``, off until measured here).
COMPARED = {**{name: (name, False) for name in DECODERS}, "static, steps' attention by matmuls": ("static", True)}


def compare_decoders(policy, prompt_ids: list[list[int]], sampling) -> dict:
    """The policy's decoders on the same prompts, each through the policy's own path (its rollout weights): time and
    tokens/s.

    Each runs twice (a first call captures CUDA graphs, continuous batching sizes its
    cache); each figure is the decoder's second call.  A decoder that fails is reported with its error.
    """
    import torch

    out: dict = {"rows": len(prompt_ids), "prompt_tokens": sum(map(len, prompt_ids)),
                 "max_new_tokens": sampling.max_new_tokens}
    configured, matmuls = policy.decoder, policy.matmul_decoding
    policy.eval()
    with torch.no_grad():
        for name, (decoder, by_matmuls) in COMPARED.items():
            policy.decoder, policy.matmul_decoding = decoder, by_matmuls
            try:
                seconds = []
                for _ in range(2):
                    sync(policy.device)
                    t0 = time.perf_counter()
                    replies = policy._generate(prompt_ids, sampling)
                    sync(policy.device)
                    seconds.append(time.perf_counter() - t0)
                tokens = sum(len(g.response_ids) for g in replies)
                out[name] = {"seconds": seconds[-1], "first_call_s": seconds[0], "generated_tokens": tokens,
                             "tokens_per_s": tokens / seconds[-1]}
            except Exception as e:  # reported, not fatal: the other decoders' figures still count
                out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            finally:
                policy.decoder, policy.matmul_decoding = configured, matmuls
    timed = [k for k in COMPARED if "tokens_per_s" in out.get(k, {})]
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


def compile_kernels(trainer, batch) -> float:
    """Seconds torch.compile takes to build what the update runs compiled (``HFPolicy.compiled_vocab``,
    ``compiled_layers``): the scoring pass's graphs (the policy's and the reference's) and the loss's, on two of
    ``batch``'s rows, then on one row with a one-token answer (a size of 1 is a graph of its own).  Spent here,
    not inside a timed update; nothing else changes (no gradient or optimiser state is left).  Shapes are
    dynamic, so these build what every micro-batch runs; once built, a call takes milliseconds.  The compiler
    fits its kernels' tiling to the sizes of the first call, so ``batch`` should have rows of a real length."""
    import torch

    from gigpo_gym.algos.policies.base import TokenBatch

    policy = trainer.policy
    if not (policy.compiled_vocab or policy.compiled_layers):
        return 0.0
    t0 = time.perf_counter()
    for part in (TokenBatch(batch.prompt_ids[:2], batch.response_ids[:2]),
                 TokenBatch(batch.prompt_ids[:1], [batch.response_ids[0][:1]])):
        with torch.no_grad():
            for scorer in (policy, trainer.reference):
                if scorer is not None:
                    scorer(part)
        scores = policy(part, with_entropy=trainer.weights.entropy_coef > 0)
        loss = scores.log_probs.sum() + (scores.entropy.sum() if scores.entropy is not None else 0.0)
        loss.backward()
        trainer.optimizer.zero_grad(set_to_none=True)
    sync(trainer.device)
    return time.perf_counter() - t0


def fitting_answer(decoding: dict, args: argparse.Namespace, deadline: float) -> int:
    """The longest answer (up to ``--max-new-tokens``) whose decoding in the warm-up and the warm iteration
    (``--steps`` + 1 generate calls) takes at most half the time left: the updates, the profile, the decoders'
    comparison and the variants need the rest."""
    left = deadline - time.monotonic()
    per_answer_token = (args.steps + 1) * max(decoding["step_s"], 1e-4)
    return int(min(args.max_new_tokens, max(16, left / 2 / per_answer_token)))


def update_variants(trainer, rollout, iteration: int, deadline: float,
                    groups: int = 2) -> Iterator[tuple[str, dict | str]]:
    """The update of ``rollout``'s first ``groups`` groups, as configured and with one choice changed at a time,
    while time is left: what each choice costs, each yielded as soon as it is measured (so the caller can save it
    before a compile runs the worker into its limit).

    A choice that runs other compiled graphs builds them first (``compile_kernels``, its seconds reported apart), so
    the update's time is the kernels' alone.  A variant starts only where the time left holds the longest build seen
    so far and 1.5x the last update, and is timed only where what is left after its own build holds that update."""
    import torch

    policy, part = trainer.policy, first_groups(rollout, groups)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()

    def setting(owner, name: str, value):
        """``(change, undo)``: ``owner.name`` set to ``value``, then back to what it is now."""
        before = getattr(owner, name)
        return lambda: setattr(owner, name, value), lambda: setattr(owner, name, before)

    variants = {"as configured": (lambda: None, lambda: None)}
    if policy.train_on_copy or policy.rollout_dtype is not None:  # first: the largest change to the update's kernels
        other = "the float32 weights under autocast" if policy.train_on_copy else "the rollout weights"
        variants[f"the update on {other}"] = setting(policy, "train_on_copy", not policy.train_on_copy)
    keeps = policy.keeps_logits()
    if keeps:  # the head's second pass in the backward, against its kept logits
        variants["the LM head run again in the backward"] = setting(policy, "keep_chunk_logits", False)
    if policy.compiled_layers:  # the norms, the rotary embedding, SwiGLU and the residual adds as eager kernels
        variants["the decoder layers eager, not compiled"] = setting(policy, "compiled_layers", False)
    if policy.compiled_vocab:  # the vocabulary's passes as eager kernels over float32 copies
        variants["the vocabulary's scores eager, not compiled"] = setting(policy, "compiled_vocab", False)
    written = policy.written_vocab_backward
    variants[f"the vocabulary's gradient by {'autograd' if written else 'its closed form'}"
             f"{' (so the head runs again in the backward)' if keeps else ''}"] = setting(
        policy, "written_vocab_backward", not written)
    fills = torch.utils.deterministic.fill_uninitialized_memory
    variants[f"deterministic mode {'without' if fills else 'with'} torch's fill of new tensors"] = setting(
        torch.utils.deterministic, "fill_uninitialized_memory", not fills)
    # the weights' dtype sets the forward's precision whatever their values (bf16 -> float32 -> bf16 gives them
    # back; on a CPU float32 -> bf16 -> float32 rounds them, which only the variants after it see)
    if trainer.reference is not None:
        kept = next(trainer.reference.parameters()).dtype
        other = torch.bfloat16 if kept == torch.float32 else torch.float32
        variants[f"the reference's weights in {str(other).removeprefix('torch.')}"] = (
            lambda: trainer.reference.to(other), lambda: trainer.reference.to(kept))
    # each chunk casts the head's weights (under autocast) and adds its gradient once
    variants[f"the LM head on {4 * policy.logits_chunk} positions at a time"] = setting(
        policy, "logits_chunk", 4 * policy.logits_chunk)
    checkpointing = policy.gradient_checkpointing
    variants[f"gradient checkpointing {'off' if checkpointing else 'on'}"] = (
        lambda: policy.set_checkpointing(not checkpointing), lambda: policy.set_checkpointing(checkpointing))
    variants["non-deterministic kernels"] = (
        lambda: torch.use_deterministic_algorithms(False),
        lambda: torch.use_deterministic_algorithms(deterministic, warn_only=warn_only))
    if trainer.micro_batch_tokens:
        variants[f"micro-batches of {trainer.cfg.optim.micro_batch_size} rows"] = setting(
            trainer, "micro_batch_tokens", None)
    if trainer.device.type == "cuda" and importlib.util.find_spec("liger_kernel") is not None:
        layers = policy.compiled_layers

        def liger() -> None:  # its kernels replace what the compiled layers fuse: they run in eager layers
            apply_liger(policy.scoring_model())
            policy.compiled_layers = False

        variants["Liger's Triton RMSNorm, RoPE and SwiGLU in eager layers (last: its patch of transformers stays)"] = (
            liger, lambda: setattr(policy, "compiled_layers", layers))
    pace, longest_build = 0.0, 0.0

    def timed(change: Callable[[], None], undo: Callable[[], None]) -> dict | str:
        nonlocal pace, longest_build
        change()
        try:
            compile_s = compile_kernels(trainer, part.tokens)
            longest_build = max(longest_build, compile_s)
            if deadline - time.monotonic() < 1.5 * pace + 5:
                return f"not run: too little time left after building its graphs in {compile_s:.0f} s"
            sync(trainer.device)
            t0 = time.perf_counter()
            m = trainer.update(part, iteration)
            sync(trainer.device)
            pace = time.perf_counter() - t0
            return {"rows": len(part), "update_s": pace, "forward_backward_s": m["time/optimize_seconds"]
                    - m["time/step_seconds"], "scoring_s": m["time/score_seconds"],
                    "peak_memory_mb": peak_memory_mb(trainer.device), "compile_s": compile_s}
        except Exception as e:  # an out-of-memory variant is a finding, not the end of the check
            return f"{type(e).__name__}: {e}"[:300]
        finally:
            undo()

    for name, (change, undo) in variants.items():
        if pace and deadline - time.monotonic() < longest_build + 1.5 * pace + 5:
            yield name, "not run: too little time left"
        else:
            yield name, timed(change, undo)


def apply_liger(model) -> None:
    """Liger-Kernel's fused RMSNorm, rotary embedding and SwiGLU in a Qwen2 ``model`` (where the package is carried):
    the elementwise work the profiled update spends most of its non-matmul time on."""
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2

    apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                fused_linear_cross_entropy=False, model=model)


def profile_decoding(policy, prompt_ids: list[list[int]], sampling, steps: int = 24, top: int = 15) -> dict:
    """A few decoding steps of the policy's decoder on the recipe's rows, under torch.profiler: the time of one step
    and where it goes (the first pass warms the kernels up and is not counted; a static-cache pass captures its step
    anew each time, a cost shared out over the ``steps``).  The operators are the steps' own: a profiled prefill
    (one token) is subtracted from them, name by name."""
    import dataclasses

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    short = dataclasses.replace(sampling, max_new_tokens=steps)
    cuda = policy.device.type == "cuda"
    policy.eval()
    with torch.no_grad():
        policy._generate(prompt_ids, dataclasses.replace(short, max_new_tokens=3))
        sync(policy.device)
        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
        with profile(activities=activities) as prefill_prof:  # timed under the profiler, as the steps are
            t0 = time.perf_counter()
            policy._generate(prompt_ids, dataclasses.replace(short, max_new_tokens=1))
            sync(policy.device)
            prefill = time.perf_counter() - t0
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            replies = policy._generate(prompt_ids, short)
            sync(policy.device)
            wall = time.perf_counter() - t0
    done = max(len(g.response_ids) for g in replies)
    per_step = max(wall - prefill, 0.0) / max(done - 1, 1)  # a busy CPU's noise can exceed a tiny model's steps
    key = "self_device_time_total" if cuda else "self_cpu_time_total"

    def steps_only(kind: str, attr: str) -> list[dict]:
        """Each operator's calls and time in the decoding pass less those in the prefill's, most time first."""
        def table(p) -> dict[str, tuple[int, float]]:
            # on a GPU the device's own events: a replayed graph's kernels belong to no operator
            wanted = (lambda e: (e.device_type != DeviceType.CPU) == cuda) if kind == "device" else (lambda e: True)
            return {e.key: (e.count, getattr(e, attr)) for e in p.key_averages() if wanted(e)}

        full, first = table(prof), table(prefill_prof)
        rows = [(name, calls - first.get(name, (0, 0.0))[0], t - first.get(name, (0, 0.0))[1])
                for name, (calls, t) in full.items()]
        rows = sorted((r for r in rows if r[2] > 0), key=lambda r: -r[2])
        return [{"name": n, "calls": c, ("self_ms" if kind == "device" else "self_cpu_ms"): t / 1e3}
                for n, c, t in rows[:top]]

    return {"rows": len(prompt_ids), "steps": done, "prefill_s": prefill, "step_s": per_step, "wall_s": wall,
            "busy_share": device_busy_s(prof.key_averages()) / wall if cuda else None, "prefill_subtracted": True,
            "top_device_operators": steps_only("device", key),
            "top_host_operators": steps_only("host", "self_cpu_time_total")}


@contextlib.contextmanager
def episodes_of(trainer, steps: int):
    """The trainer's training envs cut to ``steps``-step episodes for a while (the warm-up), then its own again."""
    cfg = trainer.cfg
    short = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, kwargs={**cfg.env.kwargs,
                                                                              "max_episode_steps": steps}))
    own, trainer.envs = trainer.envs, short.make_envs("train")
    try:
        yield
    finally:
        trainer.envs.close()
        trainer.envs = own


def iteration_worker(args: argparse.Namespace) -> dict:
    """The card's floors, a warm-up and a warm iteration, the 50-step estimate, the profile, the decoders and the
    variants; saved after each part.

    A part is left out when what is left of ``--worker-budget`` would not hold it at the pace measured so far.
    """
    import gc

    import torch
    import transformers

    from gigpo_gym.algos.cli import resolve_config
    from gigpo_gym.algos.policies import compiler
    from gigpo_gym.algos.policies.base import TokenBatch
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
            trainer.prepare()  # a vLLM engine starts here; the memory plan is made here
            report["engine_start_s"] = time.perf_counter() - t0
            trainer.freeze_reference()
            shape = model_shape(trainer.scorer.model)
            report.update(shape=shape, attention=trainer.scorer.model.config._attn_implementation,
                          optimizer_fused=bool(trainer.optimizer.defaults.get("fused")),
                          tf32=torch.backends.cuda.matmul.allow_tf32,
                          decoder=trainer.scorer.resolved_decoder(),
                          rollout_dtype=trainer.scorer.rollout_dtype, micro_batch_tokens=trainer.micro_batch_tokens,
                          gradient_checkpointing=trainer.policy.gradient_checkpointing,
                          train_on_copy=trainer.policy.train_on_copy, keeps_logits=trainer.policy.keeps_logits(),
                          compiled_vocab=trainer.policy.compiled_vocab,
                          compiled_layers=trainer.policy.compiled_layers,
                          reference_dtype=None if trainer.reference is None else trainer.reference.weights_dtype)
            save(f"trainer ready, card {report['card']['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s")
            if args.backend == "hf":
                prompts = recipe_prompts(trainer, cfg)
                report["decoding"] = profile_decoding(trainer.scorer, prompts, trainer.sampling(1))
                # before the iterations, which take what time is left: model.decoder's "auto" rests on this
                comparison = dataclasses.replace(trainer.sampling(2), max_new_tokens=min(64, cfg.sampling.max_new_tokens))
                calls = 2 * len(COMPARED)  # each entry twice
                if deadline - time.monotonic() > calls * comparison.max_new_tokens * report["decoding"]["step_s"] + 60:
                    report["decoders"] = compare_decoders(trainer.scorer, prompts, comparison)
                    save("decoders compared")
                else:
                    report["left_out"].append("the decoders' comparison: too little time left")
                # its time is spent before the pace; answers of full length, as the iterations' first rows have
                answers = [(p * cfg.sampling.max_new_tokens)[: cfg.sampling.max_new_tokens] for p in prompts[:2]]
                report["compile_s"] = compile_kernels(trainer, TokenBatch(prompts[:2], answers))
                report["compile_failure"] = compiler.failure()
                answer = fitting_answer(report["decoding"], args, deadline)
                if answer < cfg.sampling.max_new_tokens:
                    report["left_out"].append(f"answers cut from {cfg.sampling.max_new_tokens} to {answer} tokens: at "
                                              f"{1e3 * report['decoding']['step_s']:.0f} ms a decoding step the iterations "
                                              "would not fit the time left")
                    cfg.sampling.max_new_tokens = answer
                report["max_new_tokens"] = cfg.sampling.max_new_tokens
                save(f"decoding step {1e3 * report['decoding']['step_s']:.1f} ms at {len(prompts)} "
                     f"rows; answers up to {cfg.sampling.max_new_tokens} tokens")
            with episodes_of(trainer, 1):  # CUDA's start, kernels, graphs, the allocator, compiled advantage loops
                first, _ = timed_iteration(trainer, 1)
            report["warm_up"] = first
            save(f"warm-up iteration of 1-step episodes {first['iteration_s']:.1f} s (generation "
                 f"{first['generate_s']:.1f}, env {first['env_s']:.1f}, update {first['update_s']:.1f})")
            if args.backend != "hf":
                return report
            bf16 = cfg.model.compute_dtype in ("bfloat16", "float16") or cfg.model.dtype != "float32"
            record, rollout = timed_iteration(trainer, 2)
            report["warm"] = record
            report["phases"] = phases(record, shape, report["card"], trainer.policy.gradient_checkpointing,
                                      2 if bf16 else 4)
            report["extrapolated"] = extrapolate(record)
            report["beside_verl_agent"] = beside_verl_agent(report["extrapolated"])
            save(f"warm iteration {record['iteration_s']:.1f} s; {RECIPE_STEPS} steps: "
                 f"{report['extrapolated']['iteration_s']:.0f} s")
            pace = record["update_s"] * 2 * cfg.env.group_size / max(record["rows"], 1) * len(set(record["step_ids"]))
            if deadline - time.monotonic() > 3 * pace + 10:  # two groups' update, under the profiler
                report["profile"] = profile_update(trainer, rollout, 2)
                save(f"profiled update {report['profile']['wall_s']:.1f} s")
            else:
                report["left_out"].append("the profiled update: too little time left")
            report["variants"] = {}
            for name, timed in update_variants(trainer, rollout, 2, deadline):
                report["variants"][name] = timed
                save(f"variant: {name}")
        finally:
            report["compile_failure"] = compiler.failure()  # the compiled choices ran eager from then on
            save(f"torch.compile {'failed' if report['compile_failure'] else 'did not fail'}")
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
    for name, p in phase_table.items():
        work = " + ".join(x for x in (_si(p.get("flop"), "FLOP"), _si(p.get("bytes"), "B")) if x) or "-"
        floor = f"{p['floor_s']:.2f} s" if p.get("floor_s") else "-"
        times = f"{p['times_floor']:.1f}x" if p.get("times_floor") else "-"
        rate = f"{p['tokens_per_s']:,.0f}" if p.get("tokens_per_s") else "-"
        out.append(f"| {name} | {p['seconds']:.2f} s | {rate} | {work} | {floor} | {times} |")
    return out


def iteration_line(label: str, r: dict) -> str:
    # a result of before the one scoring pass timed the old log-probs and the reference apart
    scoring = r.get("scoring_s", r.get("old_log_probs_s", 0.0) + r.get("reference_s", 0.0))
    return (f"{label}: {r['iteration_s']:.1f} s = generation {r['generate_s']:.1f} + env {r['env_s']:.1f} + update "
            f"{r['update_s']:.1f} (advantages {r['advantage_s']:.1f}, old + reference log-probs {scoring:.1f}, "
            f"forward + backward {r['forward_backward_s']:.1f}, "
            f"optimiser {r['optimizer_s']:.2f}); {r['rows']} rows of {r['prompt_tokens'] / max(r['rows'], 1):.0f} "
            f"prompt tokens on average, {r['generated_tokens']:,} generated; padding {100 * r['padding_share']:.1f}% of "
            f"the update's micro-batches; peak memory {r['peak_memory_mb'] / 1024:.1f} GiB"
            + (f", {r['alloc_retries']} allocator retries" if r.get("alloc_retries") is not None else ""))


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


def _op(name: str, width: int = 60) -> str:
    """An operator's name for the report: a CUDA kernel's templated name cut to ``width`` characters."""
    return name if len(name) <= width else name[: width - 1] + "…"


#: The transformers release ``[train]`` requires (setup.cfg): the first to decode grouped-query attention
#: without copying keys and values per query head.
TRANSFORMERS_FLOOR = (5, 23)


def render_section(result: dict | None, profile_file: str = "gpu_check_profile.json") -> str:
    lines = [SECTION_START, "## GPU check (`benchmarks/gpu_check.py`)", ""]
    if result is None:
        lines += ["GPU numbers are pending: no machine with a GPU has run this check yet. On one H100 or H200,",
                  "`python benchmarks/gpu_check.py` runs it (its steps stop within `--budget-s`)",
                  "and writes this section and `benchmarks/results/gpu_check.json`. What it runs: docs/gpu.md."]
        return "\n".join([*lines, SECTION_END])
    s, hf = result["settings"], result["steps"].get("iteration-hf", {})
    answers = hf.get("max_new_tokens", s["max_new_tokens"])
    answers = (f"answers up to {answers} tokens" if answers == s["max_new_tokens"] else
               f"answers cut to {answers} of the recipe's {s['max_new_tokens']} tokens")
    lines += [f"`{result['command']}` on {result['date']}, {result['device']}: `{s['config']}` ({s['groups']} groups x "
              f"{s['group_size']}, history {s['history_length']}, {answers}) with "
              f"{s['steps']}-step episodes, random weights"
              f"{' (dry run: the tiny model on a CPU)' if result['dry_run'] else ''}.", ""]
    if "card" in hf:
        card = hf["card"]
        lines += [f"The card's measured rates, the floors' denominators: {_si(card['matmul_flops_per_s'], 'FLOP/s')} "
                  f"({card['matmul']} matmul), {_si(card['copy_bytes_per_s'], 'B/s')} (device copy, bytes read + "
                  f"written). Attention `{hf['attention']}`, fused AdamW {hf['optimizer_fused']}, TF32 {hf['tf32']}, "
                  f"decoder `{hf['decoder']}`" + "".join(
                      f", {label} {hf[key]}" for key, label in (
                          ("rollout_dtype", "rollout weights"), ("micro_batch_tokens", "tokens per micro-batch"),
                          ("gradient_checkpointing", "gradient checkpointing"),
                          ("train_on_copy", "the update on the rollout weights"),
                          ("keeps_logits", "the LM head's logits kept for the backward"),
                          ("compiled_vocab", "the vocabulary's scores compiled"),
                          ("compiled_layers", "the decoder layers compiled"),
                          ("reference_dtype", "reference weights"))
                      if key in hf) + ".", ""]
    installed = hf.get("versions", {}).get("transformers")
    if installed:
        from packaging.version import Version  # transformers' own dependency: the worker that ran had it

        if Version(installed).release < TRANSFORMERS_FLOOR:
            floor = ".".join(map(str, TRANSFORMERS_FLOOR))
            lines += [f"Transformers {installed} is older than the {floor} that `[train]` requires: before {floor} "
                      "a grouped-query model's decoding step copies keys and values for every query head (on an "
                      "H200, 50.4 ms a step under 5.17 against 19.3 under 5.25).", ""]
    if "phases" in hf:
        which = "warm" if "warm" in hf else "warm-up"
        lines += [f"Iteration {2 if which == 'warm' else 1} ({which}), phase by phase:", "",
                  "| phase | time | tokens/s | work | floor | x floor |", "|---|---:|---:|---:|---:|---:|",
                  *phase_rows(hf["phases"]), ""]
    dec = hf.get("decoding")
    if dec:
        ops = ", ".join(f"`{_op(o['name'])}` {o['self_ms']:.0f} ms" for o in dec.get("top_device_operators", [])[:5])
        busy = f", device busy {100 * dec['busy_share']:.0f}%" if dec["busy_share"] is not None else ""
        window = (f"of the {dec['steps'] - 1} steps after it" if dec.get("prefill_subtracted") else
                  f"over {dec['steps']} steps, the prefill included")  # results of before the prefill was subtracted
        host = ", ".join(f"`{_op(o['name'])}` {o['self_cpu_ms']:.0f} ms" for o in dec.get("top_host_operators", [])[:3])
        lines.append(f"- Decoding, {dec['rows']} rows: prefill {dec['prefill_s']:.2f} s, then {1e3 * dec['step_s']:.1f} "
                     f"ms a step{busy}" + (f"; top operators {window}: {ops}" if ops else "")
                     + (f"; on the host: {host}" if host else ""))
    if hf.get("compile_s"):
        lines.append(f"- torch.compile built the kernels of what runs compiled in {hf['compile_s']:.1f} s, before the "
                     "iterations")
    if hf.get("compile_failure"):
        lines.append(f"- Compiling fell back to eager: {hf['compile_failure']}")
    for key, label in (("warm_up", "Warm-up (iteration 1)"), ("warm", "Warm (iteration 2)")):
        if key in hf:
            lines.append(f"- {iteration_line(label, hf[key])}")
    more, verl = hf.get("extrapolated"), hf.get("beside_verl_agent")
    if more:
        lines.append(f"- The recipe's {more['steps']}-step iteration, extrapolated: {more['iteration_s']:.0f} s = "
                     f"generation {more['generation_s']:.0f} + env {more['env_s']:.1f} + update {more['update_s']:.0f} "
                     f"({more['how']})")
    if verl:
        lines.append(f"- Beside verl-agent: {verl['gpu_s']:.0f} GPU-seconds an iteration here, "
                     f"{verl['verl_agent_gpu_s']:.0f} for verl-agent ({verl['verl_agent']['iteration_s']:.0f} s on "
                     f"{verl['verl_agent']['gpus']} {verl['verl_agent']['gpu']}s, {verl['verl_agent']['source']}): "
                     f"{verl['ratio']:.2f}x. What differs: " + "; ".join(verl["differences"]))
    prof = hf.get("profile")
    if prof:
        ops = ", ".join(f"`{_op(o['name'])}` {o['self_ms']:.0f} ms" for o in prof.get("top_operators", [])[:6])
        busy = f", device busy {100 * prof['busy_share']:.0f}% of it" if prof["busy_share"] is not None else ""
        scoring = ", ".join(f"`{_op(o['name'])}` {o['self_ms']:.0f} ms" for o in prof.get("scoring_top_operators", [])[:6])
        lines.append(f"- Profiled update of {prof['rows']} rows ({prof['groups']} groups): {prof['wall_s']:.1f} s{busy}; "
                     f"{prof['host_waits']} host waits for the GPU over {prof['micro_batches']} micro-batches"
                     + (f"; top operators: {ops}" if ops else "")
                     + (f"; of them in the old + reference log-probs ({prof['scoring_s']:.1f} s): {scoring}" if scoring
                        else "") + f" (all: `{profile_file}`)")
    decoders = hf.get("decoders")
    if decoders:
        cells = [f"{k} " + (f"{decoders[k]['tokens_per_s']:,.0f} tok/s ({decoders[k]['seconds']:.1f} s; first call "
                            f"{decoders[k]['first_call_s']:.1f} s)" if "tokens_per_s" in decoders[k] else decoders[k]["error"])
                 for k in COMPARED if k in decoders]
        lines.append(f"- Decoders on the {decoders['rows']} first-step prompts, up to {decoders['max_new_tokens']} tokens: "
                     + "; ".join(cells))
    variants = hf.get("variants") or {}
    cells = [variant_cell(k, v) if isinstance(v, dict) else f"{k}: {v}" for k, v in variants.items()]
    if cells:
        lines.append("- The update again, one choice changed: " + "; ".join(cells))
    for note in hf.get("left_out", []):
        lines.append(f"- Left out: {note}")
    if hf:
        lines.append("")
    lines += [f"- {summary_line(name, r) if name != 'iteration-hf' else name + ': ' + r['status']}"
              for name, r in result["steps"].items()]
    return "\n".join([*lines, SECTION_END])


def variant_cell(name: str, timed: dict) -> str:
    """One timed variant of the update in SPEED.md: its time, its two phases, its peak, and its compile if any."""
    parts = [f"forward + backward {timed['forward_backward_s']:.1f} s",
             f"peak {timed['peak_memory_mb'] / 1024:.1f} GiB"]
    if timed.get("scoring_s") is not None:
        parts.insert(0, f"old + reference log-probs {timed['scoring_s']:.1f} s")
    built = f"; its graphs built first in {timed['compile_s']:.1f} s" if timed.get("compile_s", 0) >= 0.5 else ""
    return f"{name} {timed['update_s']:.1f} s ({', '.join(parts)}{built})"


def write_section(path: Path, section: str) -> None:
    """Put ``section`` in place of the file's gpu_check section (appended when there is none)."""
    text = path.read_text() if path.is_file() else "# gigpo-gym speed report\n"
    pattern = re.compile(re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def step_end(name: str, args: argparse.Namespace, started: float, deadline: float) -> float:
    """When step ``name``, started at ``started``, must stop: at its own limit (``LIMITS``), or for an iteration at
    whatever the budget leaves after the limits of the steps still to run, if later.  So a larger ``--budget-s``
    buys the recipe's iteration its full answers and time for the variants.  A dry run (a CPU is slow) limits only
    the whole run."""
    if args.dry_run:
        return deadline
    end = started + LIMITS[name]
    if name.startswith("iteration-"):
        later = list(LIMITS)[list(LIMITS).index(name) + 1 :]
        end = max(end, deadline - sum(LIMITS[step] for step in later if step not in args.skip))
    return min(deadline, end)


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
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="the same steps on a CPU with the tiny model")
    p.add_argument("--steps", type=int, help="steps per episode (default 10; dry run 2; the recipe's are 50)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per answer (default: the recipe's 512; dry run 8)")
    p.add_argument("--budget-s", type=float, default=300.0, help="seconds for all steps together (default 300)")
    optional = [name for name in LIMITS if name != "model"]
    p.add_argument("--skip", nargs="+", action="extend", default=[], choices=optional, metavar="STEP",
                   help=f"steps not to run: {', '.join(optional)}")
    p.add_argument("--results-dir", help="where gpu_check.json, gpu_check_profile.json and SPEED.md go (default: "
                   "benchmarks/results; a dry run: a temporary folder)")
    p.add_argument("--worker", choices=["model", "iteration"], help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-budget", type=float, default=600.0, help=argparse.SUPPRESS)
    p.add_argument("--backend", default="hf", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.steps = args.steps or (2 if args.dry_run else 10)
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
            step_deadline = step_end(name, args, started, deadline)
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
