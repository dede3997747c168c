"""Attention implementations the policy registers with transformers for its own passes.

Transformers picks a layer's attention function by ``config._attn_implementation``.  Two
passes run under names of the package's own, each for the length of the pass:

- the scoring pass over right-padded rows: transformers' SDPA call, past its mask code
  (``causal_attention``);
- the static decoder's steps, optionally: one query token a row as two batched matmuls
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
#: A decoding step's attention as two matmuls (see ``one_token_attention``).
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


def matmul_decoding(model: nn.Module, wanted: bool = True):
    """Run a static-cache pass with its one-token steps' attention as ``one_token_attention`` (where ``wanted``).

    The pass hands its layers a 4D mask of its own, which transformers passes through
    unchanged whatever the implementation's name, so the steps see the mask they always did.
    """
    return _attention_named(model, ONE_TOKEN_MATMULS, one_token_attention) if wanted else contextlib.nullcontext()


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
    kernels keep them in float32.  Longer queries (the prefill) and dropout go to transformers' SDPA call.
    """
    if query.shape[2] != 1 or dropout:
        return _sdpa()(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
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
    """``model``'s layers attend through ``forward``, registered as ``name``, for the pass; then SDPA again."""
    config = model.config
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    windowed = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    chunked = getattr(config, "attention_chunk_size", None)
    if config._attn_implementation != "sdpa" or layer_types != {"full_attention"} or windowed or chunked:
        yield
        return
    _register(name, forward)
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


def _register(name: str, forward: Callable) -> None:
    """Register ``forward`` with transformers as ``name`` (a dict entry: cheap at every pass)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, forward)


def _sdpa() -> Callable:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward
