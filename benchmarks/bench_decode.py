"""The package's decode loop (``HFPolicy.generate``) against transformers' ``generate``, same model and prompts.

Both decode the same left-padded SearchQA prompts (the recipe's prompt settings,
SmolLM2-135M-Instruct by default) greedily, so their tokens must agree; the time of
each is the median of ``--repeats`` runs, taken in alternation in one process.  Two
settings: ``no stop`` (every row runs to ``--max-new-tokens``: the loops themselves)
and ``stop strings`` (``</search>`` / ``</answer>``, transformers' ``stop_strings``:
rows end at different steps, as in a rollout).  ``--weights`` loads trained weights
(e.g. a warm start, whose replies end early), which is where the loops differ: the
package's drops a row that has ended from the batch and its KV cache.

    python benchmarks/bench_decode.py --prompts 32 --weights runs/bench_llm_learning/warm-start/selected.safetensors
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def prompts_of(cfg, count: int) -> list[str]:
    """SearchQA prompts of the expert's episodes: first steps and later steps (with passages)."""
    from gigpo_gym.algos.training.sft import expert_demonstrations

    demos = expert_demonstrations(cfg.env.id, count, env_kwargs=cfg.env_kwargs("train"), wrapper=cfg.wrapper())
    return [p for p, _ in demos][:count]


def hf_generate(policy, prompt_ids, max_new_tokens: int, stop: tuple[str, ...]) -> tuple[list[list[int]], int]:
    """transformers' generate on the same batch: each row's tokens, padded after it ends."""
    ids, mask = policy._left_padded(prompt_ids)
    extra = {"stop_strings": list(stop), "tokenizer": policy.tokenizer} if stop else {}
    with torch.no_grad():
        out = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=policy.tokenizer.pad_token_id, **extra)
    return out[:, ids.shape[1]:].tolist(), int(out.shape[1] - ids.shape[1])


def same_reply(own: list[int], theirs: list[int], pad: int) -> bool:
    """transformers pads a row after it ends (eos or stop string); the package's row just ends."""
    return theirs[: len(own)] == own and all(t == pad for t in theirs[len(own):])


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "searchqa_smollm2.yaml"))
    p.add_argument("--weights", default=None, help="safetensors of the whole policy to load (default: the pretrained model)")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the results JSON here")
    args = p.parse_args()
    from gigpo_gym.algos.policies.base import SamplingParams
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.models import build_policy

    cfg = load_config(args.config, ["model.device=cpu"])
    policy = build_policy(cfg)
    if args.weights:
        from safetensors.torch import load_model

        load_model(policy, args.weights)
    policy.eval()
    prompts = prompts_of(cfg, args.prompts)
    prompt_ids = [policy.encode_prompt(x) for x in prompts]
    result = {"benchmark": "decode_loop_vs_generate", "model": cfg.model.name, "weights": args.weights,
              "prompts": len(prompts), "prompt_tokens": sum(map(len, prompt_ids)), "max_new_tokens": args.max_new_tokens,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(), "settings": {}}
    for name, stop in (("no stop", ()), ("stop strings", tuple(cfg.sampling.stop))):
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0, stop=stop)
        own_s, hf_s = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            own = policy.generate(prompts, sampling)
            own_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            theirs, steps = hf_generate(policy, prompt_ids, args.max_new_tokens, stop)
            hf_s.append(time.perf_counter() - t)
        tokens = sum(len(g.response_ids) for g in own)
        agree = sum(same_reply(g.response_ids, r, policy.tokenizer.pad_token_id) for g, r in zip(own, theirs))
        row = {"package_s": statistics.median(own_s), "transformers_s": statistics.median(hf_s), "generated_tokens": tokens,
               "rows_agreeing": agree, "transformers_steps": steps}
        row["package_tokens_per_s"] = tokens / row["package_s"]
        row["transformers_tokens_per_s"] = tokens / row["transformers_s"]
        result["settings"][name] = row
        print(f"{name:<13} package {row['package_s']:6.2f} s ({row['package_tokens_per_s']:6.1f} tok/s)  transformers "
              f"{row['transformers_s']:6.2f} s ({row['transformers_tokens_per_s']:6.1f} tok/s)  ratio "
              f"{row['transformers_s'] / row['package_s']:.2f}x  | {tokens} tokens, {agree}/{len(own)} rows agree", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
