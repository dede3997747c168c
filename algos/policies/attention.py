"""Attention implementations the policy registers with transformers for its own passes.

Transformers picks a layer's attention function by ``config._attn_implementation``.  Two
passes run under names of the package's own, each for the length of the pass:

- the scoring pass over right-padded rows: transformers' SDPA call, past its mask code
  (``causal_attention``);
- the static decoder's passes: SDPA over the cache positions written so far
  (``written_prefix_attention``), its one-token steps optionally as two batched matmuls
  (``one_token_attention``).

Only models whose layers all attend over the whole sequence (no sliding windows, no
chunks, whose masks must stay) switch; any other model keeps its own attention.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn

#: SDPA under a name transformers has no mask function for (see ``causal_attention``).
CAUSAL_SDPA = "gigpo_gym_causal_sdpa"
#: SDPA over a static cache's written positions only (see ``static_cache_attention``).
WRITTEN_PREFIX_SDPA = "gigpo_gym_written_prefix_sdpa"
#: The same, with a decoding step's attention as two matmuls (see ``one_token_attention``).
ONE_TOKEN_MATMULS = "gigpo_gym_one_token_matmuls"


def causal_attention(model: nn.Module):
    """Run a pass over right-padded rows without a cache as SDPA's causal kernel, past transformers' mask code.

    Such a pass needs no mask, and transformers builds none, but first looks for packed
    sequences in the position ids, which reads a tensor back to the host: on a GPU, a wait
    for the queue before every forward, so once per micro-batch of the update.  An
    attention implementation transformers has no mask function for gets no mask and no
    check; ``CAUSAL_SDPA`` is transformers' own SDPA call under such a name, so the kernel
    and the numbers are the same.
    """
    return _attention_named(model, CAUSAL_SDPA, _sdpa())


def static_cache_attention(model: nn.Module, by_matmuls: bool = False):
    """Run a static-cache pass whose 4D masks reach only as far as the positions written; yields whether it switched.

    A static cache hands attention all its positions, written or not: at the prefill, the
    prompt's and every answer token's still to come, so a prefill of 450 prompt tokens in a
    cache of 962 attends over twice the keys it needs.  Here keys and values are cut to the
    mask's width, which the pass sets (``written_prefix_attention``); with ``by_matmuls`` the
    one-token steps attend by ``one_token_attention``.  Where the model keeps its own
    attention (see ``_attention_named``) nothing is cut, and the pass's masks must span
    the whole cache: hence the answer.  Transformers passes a pass's own 4D mask through
    unchanged whatever the implementation's name.
    """
    if by_matmuls:
        return _attention_named(model, ONE_TOKEN_MATMULS, one_token_attention)
    return _attention_named(model, WRITTEN_PREFIX_SDPA, written_prefix_attention)


def written_prefix_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' SDPA call over the first ``attention_mask.shape[-1]`` cache positions (all, without a mask)."""
    if attention_mask is not None and attention_mask.shape[-1] < key.shape[-2]:
        key, value = key[:, :, : attention_mask.shape[-1]], value[:, :, : attention_mask.shape[-1]]
    return _sdpa()(module, query, key, value, attention_mask, **kwargs)


def one_token_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                        **kwargs: Any) -> tuple[torch.Tensor, None]:
    """One query token a row (a decoding step) against the whole cache, as two batched matmuls.

    SDPA's memory-efficient kernel, the one that takes the left-padded rows' mask, walks a
    row's keys in a single thread block, one block of keys after another: at one query token
    and a cache of a thousand positions it leaves the card's memory mostly idle (profiled on an
    H200 on 2026-12-04 at 128 rows: 167 ms over 24 steps, the prefill's calls included, where
    the 23 steps after the prefill took 0.44 s).  Here the query heads that share a
    key/value head are the rows of one matmul against that head's keys, then of one against
    its values: each key and value is read once, and the matmuls spread over the keys.  The
    scores round to the compute dtype (bf16 on a GPU) before the float32 softmax, where SDPA's
    kernels keep them in float32.  Longer queries (the prefill) and dropout go to ``written_prefix_attention``.
    """
    if query.shape[2] != 1 or dropout:
        return written_prefix_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                        **kwargs)
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    grouped = (query * scale).view(rows, kv_heads, heads // kv_heads, dim)  # query head h reads key/value head h // g
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float()  # [rows, kv heads, heads a kv head, cache]
    if attention_mask is not None:
        scores = scores + attention_mask[..., : key.shape[-2]]  # [rows, 1, 1, cache]: blocked positions at -inf
    out = torch.matmul(scores.softmax(-1).to(value.dtype), value)
    return out.reshape(rows, 1, heads, dim), None  # transformers' layout: [rows, query tokens, heads, dim]


@contextlib.contextmanager
def _attention_named(model: nn.Module, name: str, forward: Callable):
    """``model``'s layers attend through ``forward``, registered as ``name``, for the pass; then SDPA again.

    Yields whether they do: a model whose attention is not SDPA's over the whole sequence keeps its own.
    """
    config = model.config
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    windowed = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    chunked = getattr(config, "attention_chunk_size", None)
    if config._attn_implementation != "sdpa" or layer_types != {"full_attention"} or windowed or chunked:
        yield False
        return
    _register(name, forward)
    config._attn_implementation = name
    try:
        yield True
    finally:
        config._attn_implementation = "sdpa"


def _register(name: str, forward: Callable) -> None:
    """Register ``forward`` with transformers as ``name`` (a dict entry: cheap at every pass)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, forward)


def _sdpa() -> Callable:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward
