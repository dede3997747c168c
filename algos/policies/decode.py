"""Free-text sampling for ``HFPolicy``: the package's own decode loop.

Prompts run in passes of similar length (sorted, each pass within a token budget), so
little of a pass is padding and the prefill's memory stays bounded however many rows
a rollout asks for.  Each pass is one left-padded batch with a KV cache; a row that
ends (eos or a stop string) leaves the batch and the cache, so the rows still writing
do not carry it.  ``benchmarks/bench_decode.py`` compares this loop with transformers'
``generate`` on the same model and prompts.
"""

from __future__ import annotations

from typing import Any

import torch

from gigpo_gym.algos.policies.base import Generation, SamplingParams


def pass_budget(device: torch.device) -> int:
    """How many tokens (rows x longest prompt plus reply) one pass holds on ``device``.

    A GPU's step costs about the same for 30 rows as for 300, so its passes are large
    (measured on an H200: the 1.5B recipe's 128 rows in passes of 16,384 tokens ran three
    passes one after another, 498 generated tokens/s); a CPU's time grows with the rows, and
    small passes keep its memory low.
    """
    return 131072 if torch.device(device).type == "cuda" else 16384


def generate(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams, gen: torch.Generator,
             tokens_per_pass: int | None = None) -> list[Generation]:
    """One reply per prompt; passes run in order on ``gen``, so a seed gives the same replies in any process.

    ``tokens_per_pass`` defaults to what suits the policy's device (``pass_budget``).
    """
    tokens_per_pass = tokens_per_pass or pass_budget(policy.device)
    by_length = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    out: list[Generation | None] = [None] * len(prompt_ids)
    for part in passes(by_length, [len(p) + sampling.max_new_tokens for p in prompt_ids], tokens_per_pass):
        for i, g in zip(part, _generate_pass(policy, [prompt_ids[i] for i in part], sampling, gen)):
            out[i] = g
    return out  # type: ignore[return-value]


def _generate_pass(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
                   gen: torch.Generator) -> list[Generation]:
    from transformers import DynamicCache

    device, rows, steps = policy.device, len(prompt_ids), sampling.max_new_tokens
    ids, mask = policy._left_padded(prompt_ids)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = policy.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                       **{policy._cache_kw: cache})
    tokens = torch.zeros((rows, steps), dtype=torch.long)
    logps = torch.zeros((rows, steps), dtype=torch.float32)
    lengths = torch.full((rows,), steps, dtype=torch.long)
    finished = torch.zeros(rows, dtype=torch.bool)
    live = torch.arange(rows)  # the row each line of the batch holds
    eos = torch.tensor(sorted(policy.eos_ids), dtype=torch.long)
    may_stop = stop_candidates(policy, tuple(sampling.stop)) if sampling.stop else None
    next_pos = positions[:, -1:] + 1
    for step in range(steps):
        token, logp = sample(out.logits[:, -1, :].float(), sampling, gen)
        token_cpu = token.cpu()
        tokens[live, step] = token_cpu
        logps[live, step] = logp.float().cpu()
        ends = torch.isin(token_cpu, eos)
        if may_stop is not None:  # decode a row's tail only after a token that can complete a stop string
            for j in (may_stop[token_cpu] & ~ends).nonzero().flatten().tolist():
                ends[j] = policy._hit_stop(tokens[live[j], : step + 1].tolist(), sampling.stop)
        lengths[live[ends]] = step + 1
        finished[live[ends]] = True
        if bool(ends.all()) or step == steps - 1:
            break
        if bool(ends.any()):  # the ended rows leave the batch and the cache
            keep = (~ends).nonzero().flatten()
            on_device = keep.to(device)
            cache.batch_select_indices(on_device)
            live, mask, next_pos, token = live[keep], mask[on_device], next_pos[on_device], token[on_device]
        mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=device)], dim=1)
        out = policy.model(input_ids=token.view(-1, 1), attention_mask=mask, position_ids=next_pos, use_cache=True,
                           **{policy._cache_kw: cache})  # the cache grows in place
        next_pos = next_pos + 1
    result = []
    for i, p in enumerate(prompt_ids):
        n = int(lengths[i])
        response = tokens[i, :n].tolist()
        result.append(Generation(policy.response_prefix + policy._decode(response, sampling.stop), list(p), response,
                                 logps[i, :n].tolist(), bool(finished[i])))
    return result


#: Tokens per page of continuous batching's paged KV cache.
PAGE = 256


def generate_continuous(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams) -> list[Generation]:
    """One reply per prompt through transformers' continuous batching (``generate_batch``, paged attention).

    The measured alternative to ``generate`` (``benchmarks/gpu_check.py`` times both on the
    same rows).  Its scheduler ends a row on eos only, so a row that writes a stop string
    runs on to eos or ``max_new_tokens`` and is cut here after the stop string's token; its
    sampler draws from torch's default generator, seeded here from ``sampling.seed`` and
    restored afterwards.  Rows come back in prompt order.
    """
    from transformers import ContinuousBatchingConfig, GenerationConfig

    if not prompt_ids:
        return []
    greedy = sampling.temperature == 0
    config = GenerationConfig(max_new_tokens=sampling.max_new_tokens, do_sample=not greedy,
                              temperature=None if greedy else sampling.temperature,
                              top_p=None if greedy else sampling.top_p, top_k=None,
                              eos_token_id=sorted(policy.eos_ids), pad_token_id=policy.tokenizer.pad_token_id)
    gen = policy._generator
    seed = int(sampling.seed) if sampling.seed is not None else int(torch.randint(2**31, (1,), generator=gen,
                                                                                    device=gen.device))
    devices = [policy.device] if policy.device.type == "cuda" else []
    # a paged cache sized to these rows (left to itself it takes most of the device's free memory)
    blocks = sum(-(-(len(p) + sampling.max_new_tokens) // PAGE) for p in prompt_ids) + 1
    batching = ContinuousBatchingConfig(return_logprobs=True, seed=seed, page_size=PAGE, num_blocks=blocks,
                                        max_batch_tokens=min(sum(map(len, prompt_ids)) + len(prompt_ids), 16384))
    with torch.random.fork_rng(devices=devices):
        outputs = policy.model.generate_batch([list(p) for p in prompt_ids], generation_config=config,
                                              progress_bar=False, continuous_batching_config=batching)
    by_prompt = {}
    for out in outputs.values():
        by_prompt.setdefault(tuple(out.prompt_ids), []).append(out)
    result = []
    for p in prompt_ids:
        out = by_prompt[tuple(p)].pop(0)
        tokens, logps = list(out.generated_tokens), [float(x) for x in out.logprobs]
        n, finished = _end(policy, tokens, sampling.stop)
        result.append(Generation(policy.response_prefix + policy._decode(tokens[:n], sampling.stop), list(p),
                                 tokens[:n], logps[:n], finished))
    return result


def _end(policy: Any, tokens: list[int], stop: tuple[str, ...]) -> tuple[int, bool]:
    """Where a reply ends: after its first eos or the token that completes a stop string; (length, ended)."""
    may_stop = stop_candidates(policy, tuple(stop)) if stop else None
    for k, token in enumerate(tokens):
        if token in policy.eos_ids:
            return k + 1, True
        if may_stop is not None and bool(may_stop[token]) and policy._hit_stop(tokens[: k + 1], stop):
            return k + 1, True
    return len(tokens), False


def stop_candidates(policy: Any, stop: tuple[str, ...]) -> torch.Tensor:
    """``[vocabulary]`` bool: tokens whose text holds the last character of a stop string (cached on the policy).

    Only such a token can newly complete a stop string.  A stop string that ends in a
    character outside ASCII may end inside a multi-byte token split: every token counts.
    """
    cached = policy._stop_cache
    if stop not in cached:
        vocabulary = len(policy.tokenizer)
        size = max(vocabulary, int(policy.model.get_output_embeddings().weight.shape[0]))
        lasts = {s[-1] for s in stop if s}
        if not lasts or any(not c.isascii() for c in lasts):
            cached[stop] = torch.ones(size, dtype=torch.bool)
        else:
            texts = policy.tokenizer.batch_decode([[i] for i in range(vocabulary)])
            flags = torch.zeros(size, dtype=torch.bool)
            flags[:vocabulary] = torch.tensor([any(c in t for c in lasts) for t in texts])
            cached[stop] = flags
    return cached[stop]


def sample(logits: torch.Tensor, sampling: SamplingParams, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row and its log-prob under the sampling distribution."""
    if sampling.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = logits.argmax(-1)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / sampling.temperature, dim=-1)
    probs = logp.exp()
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < sampling.top_p
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
        logp = torch.log(probs.clamp_min(1e-30))
    token = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def passes(order: list[int], sizes: list[int], budget: int) -> list[list[int]]:
    """Cut ``order`` into consecutive passes whose rows x widest row stays within ``budget`` tokens."""
    out: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for k in order:
        if current and (len(current) + 1) * max(widest, sizes[k]) > budget:
            out.append(current)
            current, widest = [], 0
        current.append(k)
        widest = max(widest, sizes[k])
    if current:
        out.append(current)
    return out
