"""One RL iteration on 1 and N processes: where the wall time goes, tokens/s, peak memory.

For each process count the same run (config, seeds, groups) is timed for a few
iterations after a warm-up one: env stepping (the rollout minus generation),
generation, scoring (old and reference log-probs), and the update (forward, backward,
optimiser steps); generated tokens per second of generation and trained tokens per
second of update; peak memory (CUDA's max allocated on a GPU, the process's peak RSS
on a CPU).  With N processes a figure is the slowest process's (they wait for it),
memory the largest process's.  One process runs the plain loop; N run under
``torch.distributed.run`` (gloo on CPU, NCCL on GPUs) with the settings ``accelerate
launch`` gives the engine asked for (``--engine``: DDP, FSDP2, DeepSpeed ZeRO-2 or ZeRO-3).

    python benchmarks/bench_train_scale.py                      # the tiny model on CPU, 1 and 2 processes
    python benchmarks/bench_train_scale.py --config alfworld_qwen2.5_1.5b --set model.name=/models/Qwen2.5-1.5B-Instruct \\
        --processes 1 8 --engine fsdp                            # the paper's setting on 8 GPUs
    python benchmarks/bench_train_scale.py --config alfworld_qwen2.5_1.5b --random-weights 1.5b --processes 1

``--random-weights SIZE`` trains a model of a Qwen2.5 size's published shape (layers,
widths, heads, its 151,936-token vocabulary) with random weights and a tokenizer trained
on the env's text (``pad_vocabulary`` gives it every id the model can sample): memory
and time of a model size without downloading it.
(Random weights write random answers, so the env's steps are all invalid actions.)

Writes ``benchmarks/results/train_scale.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The CPU default: the tiny model on embedded ALFWorld (4 groups x 4, 10-step episodes).
TINY = [
    "model.name=tiny", "model.device=auto", "model.choose_admissible=true", "model.tiny.pieces=words",
    "model.max_prompt_tokens=1024", "env.id=gigpo_gym/ALFWorld-v0", "env.kwargs={split: train, max_episode_steps: 10}",
    "env.num_groups=4", "env.group_size=4", "prompt.task_key=goal", "sampling.max_new_tokens=12",
    "optim.mini_batch_size=64", "optim.micro_batch_size=16", "optim.lr=1e-4",
]


#: Qwen2.5's published shapes: hidden, MLP width, layers, attention heads, KV heads, tied embeddings.
QWEN25_SHAPES = {
    "0.5b": (896, 4864, 24, 14, 2, True),
    "1.5b": (1536, 8960, 28, 12, 2, True),
    "3b": (2048, 11008, 36, 16, 2, True),
    "7b": (3584, 18944, 28, 28, 4, False),
}


#: Qwen2.5's vocabulary (the rows of its embedding and output layers).
QWEN25_VOCAB = 151936


def pad_vocabulary(tokenizer, size: int):
    """``tokenizer`` with unused tokens added up to ``size`` ids, encoding text as before.

    A model with random weights samples every id of its vocabulary; a tokenizer that
    knows them all decodes each one (vLLM's detokenizer is not safe with unknown ids).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    added = [token for token in state["added_tokens"] if token["content"] not in vocab]  # they keep the last ids
    first = len(vocab)
    for k in range(size - first - len(added)):
        vocab[f"<|unused_{k}|>"] = first + k
    for k, token in enumerate(added):
        token["id"] = len(vocab) + k
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)),
                                   pad_token=tokenizer.pad_token, eos_token=tokenizer.eos_token)


def random_weights_model(size: str, folder: Path) -> Path:
    """A Qwen2.5-``size``-shaped causal LM with random weights (seed 0), saved with a tokenizer of the env's text.

    The tokenizer is a BPE trained on ALFWorld's expert episodes (Qwen2.5's own is not on
    the machine and nothing downloads), padded with unused tokens to Qwen2.5's 151,936 ids.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gigpo_gym.algos.policies.tiny import train_tokenizer
    from gigpo_gym.algos.training.sft import expert_demonstrations
    from gigpo_gym.wrappers import PromptConfig, llm_stack

    hidden, mlp, layers, heads, kv_heads, tied = QWEN25_SHAPES[size]
    demos = expert_demonstrations("gigpo_gym/ALFWorld-v0", 300, seed=0, wrapper=llm_stack(PromptConfig()))
    tokenizer = pad_vocabulary(train_tokenizer([text for pair in demos for text in pair], 8192, "words"), QWEN25_VOCAB)
    config = Qwen2Config(vocab_size=QWEN25_VOCAB, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=tied,
                         rms_norm_eps=1e-6, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None)
    with torch.random.fork_rng(devices=[]), torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    print(f"random-weights Qwen2.5-{size} shape: {sum(p.numel() for p in model.parameters()) / 1e9:.3f}B parameters",
          flush=True)
    return folder


def peak_memory_mb() -> float:
    import resource

    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def time_iteration(trainer, iteration: int) -> dict:
    """One RL iteration of ``trainer`` (prepared, reference frozen), timed piece by piece."""
    t0 = time.perf_counter()
    rollout = trainer.rollout(iteration)
    whole = trainer.gather(rollout)
    t1 = time.perf_counter()
    m = trainer.update(rollout, iteration, whole)
    t2 = time.perf_counter()
    return {
        "env_s": rollout.seconds - rollout.generate_seconds, "generate_s": rollout.generate_seconds,
        "score_s": m["time/score_seconds"], "reference_s": m["time/reference_seconds"],
        "optimize_s": m["time/optimize_seconds"], "update_s": t2 - t1, "iteration_s": t2 - t0, "rows": len(rollout),
        "prompt_tokens": sum(len(p) for p in rollout.prompt_ids), "generated_tokens": rollout.generated_tokens,
        "trained_tokens": sum(len(r) for r in rollout.response_ids),
    }


def worker(args: argparse.Namespace) -> None:
    """Time the iterations in this process; rank 0 writes the slowest process's figures."""
    import torch

    from gigpo_gym.algos.cli import resolve_config
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import Trainer

    overrides = [*(TINY if args.config is None else []), *args.set,
                 f"run_dir={tempfile.mkdtemp(prefix='bench-scale-')}", "env.eval_episodes=0", "progress=false"]
    cfg = load_config(resolve_config(args.config), overrides)
    trainer = Trainer(cfg)
    trainer.prepare()
    trainer.freeze_reference()
    records = []
    try:
        for it in range(1, args.iterations + 2):
            records.append(time_iteration(trainer, it))
        mine = {"records": records[1:], "peak_memory_mb": peak_memory_mb()}
        everyone = trainer.parallel.gather_objects(mine)
    finally:
        trainer.close()
        del trainer
        gc.collect()  # as run_training does (see Trainer.close)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    per_iteration = []
    for k in range(len(everyone[0]["records"])):
        rows = [p["records"][k] for p in everyone]
        slowest = {key: max(r[key] for r in rows) for key in ("env_s", "generate_s", "score_s", "reference_s",
                                                              "optimize_s", "update_s", "iteration_s")}
        totals = {key: sum(r[key] for r in rows) for key in ("rows", "generated_tokens", "trained_tokens")}
        per_iteration.append({**slowest, **totals})
    median = {key: statistics.median(r[key] for r in per_iteration) for key in per_iteration[0]}
    median["generate_tokens_per_s"] = median["generated_tokens"] / max(median["generate_s"], 1e-9)
    median["update_tokens_per_s"] = median["trained_tokens"] / max(median["optimize_s"], 1e-9)
    result = {"processes": len(everyone), "iterations": per_iteration, "median": median,
              "peak_memory_mb": max(p["peak_memory_mb"] for p in everyone),
              "device": "cuda" if torch.cuda.is_available() else "cpu", "torch_threads": torch.get_num_threads()}
    Path(args.worker_out).write_text(json.dumps(result))


def run(processes: int, args: argparse.Namespace, out: Path) -> dict:
    command = [__file__, "--worker-out", str(out), "--iterations", str(args.iterations)]
    if args.config:
        command += ["--config", args.config]
    for assignment in args.set:
        command += ["--set", assignment]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)} if args.threads else dict(os.environ)
    if processes == 1:
        full = [sys.executable, *command]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        full = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                f"--master_port={port}", "--max_restarts=0", *command]
        from gigpo_gym.algos.training.distributed import LAUNCH_ENV

        env.update(LAUNCH_ENV[args.engine])
    subprocess.run(full, env=env, check=True, cwd=ROOT)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="a run config (file or shipped name); default: the tiny model on CPU")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations (after one warm-up)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each process (CPU)")
    parser.add_argument("--engine", choices=["ddp", "fsdp", "zero2", "zero3"], default="ddp",
                        help="data-parallel engine when processes > 1: DDP, FSDP2, DeepSpeed ZeRO-2 or ZeRO-3 (needs [deepspeed])")
    parser.add_argument("--random-weights", choices=sorted(QWEN25_SHAPES), metavar="SIZE",
                        help=f"train a Qwen2.5-SIZE-shaped model with random weights ({', '.join(QWEN25_SHAPES)}): "
                             "memory and time without the model's download")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_scale.json"))
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_out:
        worker(args)
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.random_weights:
            folder = random_weights_model(args.random_weights, Path(tmp) / f"qwen2.5-{args.random_weights}-random")
            args.set = [*args.set, f"model.name={folder}"]
        for n in args.processes:
            r = run(n, args, Path(tmp) / f"p{n}.json")
            results.append({**r, "engine": "single" if n == 1 else args.engine})
            m = r["median"]
            engine = "" if n == 1 else f", {args.engine}"
            print(f"{n} process(es) [{r['device']}{engine}]: iteration {m['iteration_s']:.2f} s = env {m['env_s']:.2f} + "
                  f"generation {m['generate_s']:.2f} + scoring {m['score_s']:.2f} + update {m['optimize_s']:.2f} "
                  f"(+ bookkeeping); {m['generate_tokens_per_s']:.0f} generated tok/s, "
                  f"{m['update_tokens_per_s']:.0f} trained tok/s; {m['rows']:.0f} rows; "
                  f"peak memory {r['peak_memory_mb']:.0f} MB/process", flush=True)
    report = {"machine": platform.platform(), "cpu_count": os.cpu_count(), "command": " ".join(sys.argv),
              "date": time.strftime("%Y-%m-%d"), "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
