"""Free-text sampling for ``HFPolicy``: the package's decode loop, its static-cache form, continuous batching.

Prompts run in passes of similar length (sorted, each pass within a token budget), so
little of a pass is padding and the prefill's memory stays bounded however many rows
a rollout asks for.  Each pass is one left-padded batch with a KV cache.  Two decoders
share the sampling (``sample``) and the end of a row (eos, or the token that completes a
stop string):

- ``generate`` (the loop): a cache that grows by one position a step; a row that ends
  leaves the batch and the cache, so the rows still writing do not carry it;
- ``generate_static``: a cache of fixed size and a decoding step whose shapes never
  change, run as a replayed CUDA graph on a GPU (no kernel launches, no host work per
  step); ended rows stay in the batch, and the host reads the tokens only every
  ``stop_check_every`` steps.  Where it checks every step (a CPU) it draws the same
  random numbers as the loop, so a seed gives the same replies.

``generate_continuous`` hands the rows to transformers' continuous batching instead.
``benchmarks/bench_decode.py`` compares the loop with transformers' ``generate``, and
``benchmarks/gpu_check.py`` the decoders with each other on a GPU.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable

import torch

from gigpo_gym.algos.policies.attention import static_cache_attention
from gigpo_gym.algos.policies.base import Generation, SamplingParams


def pass_budget(device: torch.device) -> int:
    """How many tokens (rows x longest prompt plus reply) one pass holds on ``device``.

    A GPU's step costs about the same for 30 rows as for 300, so its passes are large
    (measured on an H200: the 1.5B recipe's 128 rows in passes of 16,384 tokens ran three
    passes one after another, 498 generated tokens/s; in one pass, 989).  262,144 tokens
    hold the recipe's 128 rows with 512-token answers after prompts of up to 1,536 tokens:
    for the 1.5B shape a KV cache of 7 GB in bf16.  A CPU's time grows with the rows, and
    small passes keep its memory low.
    """
    return 262144 if torch.device(device).type == "cuda" else 16384


def generate(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams, gen: torch.Generator,
             tokens_per_pass: int | None = None, model: Any = None) -> list[Generation]:
    """One reply per prompt; passes run in order on ``gen``, so a seed gives the same replies in any process.

    ``tokens_per_pass`` defaults to what suits the policy's device (``pass_budget``);
    ``model`` (default: the policy's own) is what computes, e.g. its rollout weights.
    """
    return _in_passes(_generate_pass, policy, prompt_ids, sampling, gen, tokens_per_pass, model or policy.model)


def _in_passes(one_pass: Callable, policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
               gen: torch.Generator, tokens_per_pass: int | None, model: Any) -> list[Generation]:
    """``one_pass`` over the prompts in passes of similar length, the replies back in prompt order."""
    tokens_per_pass = tokens_per_pass or pass_budget(policy.device)
    by_length = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    out: list[Generation | None] = [None] * len(prompt_ids)
    for part in passes(by_length, [len(p) + sampling.max_new_tokens for p in prompt_ids], tokens_per_pass):
        for i, g in zip(part, one_pass(policy, model, [prompt_ids[i] for i in part], sampling, gen)):
            out[i] = g
    return out  # type: ignore[return-value]


def _generate_pass(policy: Any, model: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
                   gen: torch.Generator) -> list[Generation]:
    from transformers import DynamicCache

    device, rows, steps = policy.device, len(prompt_ids), sampling.max_new_tokens
    ids, mask = policy._left_padded(prompt_ids)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
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
        out = model(input_ids=token.view(-1, 1), attention_mask=mask, position_ids=next_pos, use_cache=True,
                    **{policy._cache_kw: cache})  # the cache grows in place
        next_pos = next_pos + 1
    return _replies(policy, prompt_ids, tokens, logps, lengths, finished, sampling)


def _replies(policy: Any, prompt_ids: list[list[int]], tokens: torch.Tensor, logps: torch.Tensor,
             lengths: torch.Tensor, finished: torch.Tensor, sampling: SamplingParams) -> list[Generation]:
    """A pass's ``Generation`` per row from its host tensors of tokens, log-probs, lengths and ends."""
    result = []
    for i, p in enumerate(prompt_ids):
        n = int(lengths[i])
        response = tokens[i, :n].tolist()
        result.append(Generation(policy.response_prefix + policy._decode(response, sampling.stop), list(p), response,
                                 logps[i, :n].tolist(), bool(finished[i])))
    return result


#: Steps between two reads of the sampled tokens by the host on a GPU (each read waits for the GPU's queue):
#: a row that ends runs on at most this many steps, its extra tokens cut.  A CPU reads every step.
STOP_CHECK_EVERY = 16


def stop_check_every(device: torch.device) -> int:
    """How often ``generate_static`` reads the tokens back to find the rows that ended (``STOP_CHECK_EVERY``)."""
    return STOP_CHECK_EVERY if torch.device(device).type == "cuda" else 1


def generate_static(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams, gen: torch.Generator,
                    tokens_per_pass: int | None = None, model: Any = None) -> list[Generation]:
    """``generate`` with a static KV cache and a decoding step of fixed shapes (replayed as a CUDA graph on a GPU).

    The same passes, the same sampling and the same ends of rows as ``generate``; with
    ``stop_check_every`` 1 (a CPU) the same random draws too.
    """
    return _in_passes(_static_pass, policy, prompt_ids, sampling, gen, tokens_per_pass, model or policy.model)


def _static_pass(policy: Any, model: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
                 gen: torch.Generator) -> list[Generation]:
    """One pass: prefill into a cache of ``width + max_new_tokens`` positions, then one fixed-shape step a token.

    Attention sees an additive mask built here, so transformers builds none (its mask
    code reads tensors back to the host): ``[rows, 1, width, width]`` at the prefill (the
    prompt's real tokens, causally; over the whole cache where the model keeps its own
    attention, see ``static_cache_attention``), then ``[rows, 1, 1, cache]`` at each step
    (the prompt's real tokens and the tokens written so far).  Only the rows live at the
    last check are sampled, in row order, as the loop samples its live rows.
    """
    with static_cache_attention(model, policy.matmul_decoding) as prompt_only:
        return _static_decoding(policy, model, prompt_ids, sampling, gen, prompt_only)


def _static_decoding(policy: Any, model: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
                     gen: torch.Generator, prompt_only: bool) -> list[Generation]:
    device, rows, steps = policy.device, len(prompt_ids), sampling.max_new_tokens
    ids, mask = policy._left_padded(prompt_ids)
    width, size = ids.shape[1], ids.shape[1] + steps
    dtype = next(model.parameters()).dtype
    blocked = torch.finfo(dtype).min
    seen = torch.zeros((rows, size), dtype=torch.bool, device=device)
    seen[:, :width] = mask.bool()
    keys = width if prompt_only else size  # the prefill's mask: over the prompt, or the whole cache
    causal = torch.ones((width, keys), dtype=torch.bool, device=device).tril()
    prefill_mask = torch.zeros((rows, 1, width, keys), dtype=dtype, device=device)
    prefill_mask.masked_fill_(~(seen[:, None, None, :keys] & causal[None, None]), blocked)
    step_mask = torch.zeros((rows, 1, 1, size), dtype=dtype, device=device)
    step_mask.masked_fill_(~seen[:, None, None, :], blocked)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = static_cache(model, size)
    where = torch.arange(width, device=device)  # the cache positions the next call writes
    writes = _writes_cache_position(model)
    out = model(input_ids=ids, attention_mask=prefill_mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{policy._cache_kw: cache}, **({"cache_position": where} if writes else {}))
    logits = out.logits[:, -1, :].clone()  # the step writes its logits here (a fixed address, as a graph needs)
    token_in = torch.zeros((rows, 1), dtype=torch.long, device=device)
    position = positions[:, -1:] + 1
    cursor = torch.full((1,), width, dtype=torch.long, device=device)

    def decode_step() -> None:
        step_mask.index_fill_(-1, cursor, 0.0)  # the token fed now sees itself
        out = model(input_ids=token_in, attention_mask=step_mask, position_ids=position, use_cache=True,
                    **{policy._cache_kw: cache}, **({"cache_position": cursor} if writes else {}))
        logits.copy_(out.logits[:, -1, :])
        cursor.add_(1)
        position.add_(1)

    run_step = replayed(decode_step, device)
    tokens = torch.zeros((rows, steps), dtype=torch.long, device=device)
    logps = torch.zeros((rows, steps), dtype=torch.float32, device=device)
    ends = _Ends(policy, rows, steps, sampling)
    every = stop_check_every(device)
    checked = 0
    live = torch.arange(rows, device=device)
    for step in range(steps):
        token, logp = sample(logits.index_select(0, live).float(), sampling, gen)
        tokens[live, step] = token
        logps[live, step] = logp.float()
        if (step + 1) % every == 0 or step == steps - 1:
            still = ends.read(tokens[:, checked : step + 1].cpu(), checked)
            checked = step + 1
            if not still.any() or step == steps - 1:
                break
            live = still.nonzero().flatten().to(device)
        token_in.copy_(tokens[:, step : step + 1])  # an ended row feeds what it has; its outputs are not read
        run_step()
    return _replies(policy, prompt_ids, tokens.cpu(), logps.cpu(), ends.lengths, ends.finished, sampling)


class _Ends:
    """Where each row of a pass ends, found on the host from the tokens it reads (eos, or a stop string completed)."""

    def __init__(self, policy: Any, rows: int, steps: int, sampling: SamplingParams):
        self.policy, self.stop = policy, tuple(sampling.stop)
        self.eos = torch.tensor(sorted(policy.eos_ids), dtype=torch.long)
        self.may_stop = stop_candidates(policy, self.stop) if self.stop else None
        self.written = torch.zeros((rows, steps), dtype=torch.long)
        self.lengths = torch.full((rows,), steps, dtype=torch.long)
        self.finished = torch.zeros(rows, dtype=torch.bool)

    def read(self, block: torch.Tensor, start: int) -> torch.Tensor:
        """Take steps ``start ..`` of every row (``block``, on the host); which rows still write."""
        self.written[:, start : start + block.shape[1]] = block
        for j in range(block.shape[1]):
            live, token = ~self.finished, block[:, j]
            ends = torch.isin(token, self.eos) & live
            if self.may_stop is not None:  # decode a row's tail only after a token that can complete a stop string
                for r in (self.may_stop[token] & live & ~ends).nonzero().flatten().tolist():
                    ends[r] = self.policy._hit_stop(self.written[r, : start + j + 1].tolist(), self.stop)
            self.lengths[ends] = start + j + 1
            self.finished |= ends
        return ~self.finished


def static_cache_fits(weights: torch.dtype, autocast: torch.dtype | None) -> bool:
    """Whether transformers' ``StaticCache`` holds what a model with ``weights`` writes under ``autocast`` (None: off).

    Under autocast over float32 weights the keys leave the rotary embedding in float32 and
    the values in the autocast dtype.  Transformers allocates each in its own dtype from 5.24
    on; before, both in the keys', and the first write of the values fails.
    """
    if autocast is None or autocast == weights:
        return True
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__).release >= (5, 24)


def static_cache(model: Any, size: int) -> Any:
    """A KV cache of ``size`` positions allocated once (transformers' ``StaticCache``), written in place."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=size)


def _writes_cache_position(model: Any) -> bool:
    """Whether the installed transformers' forward takes ``cache_position`` (where a static cache writes; later
    5.x releases keep that count in the cache itself)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache_position" in inspect.signature(base.forward).parameters


def replayed(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """``step`` (a decoding step of fixed shapes, writing only into tensors it holds) as a CUDA graph on a GPU.

    Its first call runs it on a side stream (kernels chosen, workspaces allocated); the
    second captures it, which records without running, and replays it; every later call
    replays it: one launch a step instead of hundreds of kernels, and no Python.  A step
    that cannot be captured (an operation that waits for the GPU) runs as it is from
    then on, with a warning.  On a CPU, ``step`` itself.
    """
    if torch.device(device).type != "cuda":
        return step
    state: dict[str, Any] = {"warm": False, "graph": None, "eager": False}

    def call() -> None:
        if state["graph"] is not None:
            state["graph"].replay()
        elif state["eager"]:
            step()
        elif not state["warm"]:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream(device).wait_stream(side)
            state["warm"] = True
        else:
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    step()
            except Exception as e:  # noqa: BLE001  (any capture failure: the step still runs, eagerly)
                warnings.warn(f"the decoding step could not be captured as a CUDA graph ({type(e).__name__}: {e}); "
                              "it runs without one", RuntimeWarning, stacklevel=2)
                state["eager"] = True
                step()
                return
            state["graph"] = graph
            graph.replay()

    return call


#: Tokens per page of continuous batching's paged KV cache.
PAGE = 256


def generate_continuous(policy: Any, prompt_ids: list[list[int]], sampling: SamplingParams,
                        model: Any = None) -> list[Generation]:
    """One reply per prompt through transformers' continuous batching (``generate_batch``, paged attention).

    The measured alternative to ``generate`` (``benchmarks/gpu_check.py`` times both on the
    same rows).  Its scheduler ends a row on eos only, so a row that writes a stop string
    runs on to eos or ``max_new_tokens`` and is cut here after the stop string's token; its
    sampler draws from torch's default generator, seeded here from ``sampling.seed`` and
    restored afterwards.  Rows come back in prompt order.  ``model``: as in ``generate``.
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
    accepted = set(inspect.signature(ContinuousBatchingConfig.__init__).parameters)
    batching = ContinuousBatchingConfig(**batching_kwargs(
        accepted, page=PAGE, blocks=blocks, seed=seed,
        max_batch_tokens=min(sum(map(len, prompt_ids)) + len(prompt_ids), 16384)))
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)  # the sampler's generator, where the config takes no seed
        outputs = (model or policy.model).generate_batch([list(p) for p in prompt_ids], generation_config=config,
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


def batching_kwargs(accepted: set[str], *, page: int, blocks: int, max_batch_tokens: int, seed: int) -> dict[str, Any]:
    """``ContinuousBatchingConfig``'s kwargs in the names ``accepted`` (its parameters in the installed transformers).

    The page size of the paged cache is ``page_size`` in recent 5.x releases and
    ``block_size`` before (5.17 rejects ``page_size``); ``seed`` is passed where it is taken.
    """
    page_name = "page_size" if "page_size" in accepted else "block_size"
    needed = {"return_logprobs": True, page_name: page, "num_blocks": blocks, "max_batch_tokens": max_batch_tokens}
    lacking = sorted(set(needed) - accepted)
    if lacking:
        import transformers

        raise RuntimeError(f"transformers {transformers.__version__}: ContinuousBatchingConfig takes none of "
                           f"{lacking} (it takes {sorted(accepted - {'self'})}); use model.decoder: loop or static")
    return {**needed, **({"seed": seed} if "seed" in accepted else {})}


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
