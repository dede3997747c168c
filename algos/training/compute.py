"""How the update runs on the device: micro-batches by length (rows or a token budget that fits the card's
memory), gradient checkpointing, the optimiser's kernels, TF32, deterministic kernels.

Each choice is explicit and tested on a CPU (tests/test_gpu_choices.py); a CPU run
repeats the numbers it always gave.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import numpy as np
import torch


def optimizer_options(device: torch.device) -> dict[str, Any]:
    """AdamW's implementation: fused (one kernel for every tensor) on CUDA, torch's default elsewhere.

    The fused step reads and writes each weight, gradient and moment once, where the
    per-tensor loop launches kernels per tensor.  On a CPU the default is kept, so CPU
    runs repeat the numbers they always gave.
    """
    return {"fused": True} if torch.device(device).type == "cuda" else {}


def configure_matmul(device: torch.device, tf32: bool) -> None:
    """TF32 tensor cores for any float32 matmul and convolution on CUDA (``model.tf32``).

    Under bf16 autocast the big matmuls are bf16 already; what stays float32 (the value
    head, a float32-only run) then runs on tensor cores at TF32's 10-bit mantissa instead of
    the much slower full-float32 path.  These are torch's process-wide switches; a CPU
    run leaves them as they are.
    """
    if torch.device(device).type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def configure_determinism(enabled: bool) -> None:
    """Deterministic kernels where torch offers them cheaply.

    On CPU the kernels the trainer uses are already deterministic for a fixed thread
    count; on CUDA this fixes cuBLAS's workspace (which must be set before its first
    use), turns off cuDNN's benchmark autotuning and asks for deterministic
    algorithms (warning, not failing, where an op has none).

    Deterministic mode would also fill every new tensor before its kernel writes it
    (``fill_uninitialized_memory``), which only matters to a kernel that reads memory it
    never wrote.  In the GPU check of 2026-12-04 (H200) those fills were 22,338 kernels,
    about 4.5% of the update's device time, so they stay off; the check's same-seed run
    still compares two runs' numbers.
    """
    if not enabled:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if torch.cuda.is_available():
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False


def micro_batches(rows: np.ndarray, lengths: np.ndarray, size: int) -> list[np.ndarray]:
    """``rows`` cut into micro-batches of ``size`` rows of similar length (sorted by length, stable).

    Each micro-batch pads its rows to its longest, so sorting keeps the padding small.
    """
    ordered = rows[np.argsort(lengths[rows], kind="stable")]
    return [ordered[a : a + size] for a in range(0, len(ordered), size)]


def token_micro_batches(rows: np.ndarray, lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """``rows`` cut into micro-batches of similar length whose rows x longest row stays within ``budget`` tokens.

    Sorted by length (stable) as ``micro_batches``; a row longer than the budget is a
    micro-batch of its own.  The loss is a token mean over the mini-batch, so any cut gives
    the same loss and gradients (up to the order of float sums).
    """
    from gigpo_gym.algos.policies.decode import passes

    ordered = rows[np.argsort(lengths[rows], kind="stable")]
    return [np.asarray(b, dtype=rows.dtype) for b in passes(ordered.tolist(), lengths, int(budget))]


#: Bytes of activations a token keeps for the backward pass, per decoder layer and unit of hidden width, without
#: and with gradient checkpointing.  Fitted to an H200's peak memory with Qwen2.5-1.5B's shape (28 layers x 1536)
#: under bf16 autocast over float32 weights, 96 rows of 680 tokens in micro-batches of 8 and 32: about 4.1 MB a
#: token without checkpointing and 1.0 MB with, once the weights and gradients are taken out.
ACTIVATION_BYTES = {False: 96, True: 24}
#: Share of the memory left to activations that a micro-batch may fill (the rest: the allocator's slack).
ACTIVATION_SHARE = 0.75
#: Gradient checkpointing stays off (under ``auto``) where a micro-batch holds this many of the longest rows without it.
ROWS_WITHOUT_CHECKPOINTING = 4


def plan_update_memory(total: int, resident: int, hidden: int, layers: int, longest_row: int,
                       checkpointing: bool | None, logits_bytes: int = 0) -> tuple[int, bool]:
    """Tokens per micro-batch, and gradient checkpointing (``None``: chosen here), for a card of ``total`` bytes.

    ``resident`` is what stays on the card through the update (weights, gradients, the
    optimiser's moments, the KL reference, copies, a logits chunk); activations get
    ``ACTIVATION_SHARE`` of the rest at ``ACTIVATION_BYTES`` a token, plus ``logits_bytes``
    a token without checkpointing (the LM head's logits kept for the backward, as though
    every token were a response's: ``HFPolicy.keeps_logits``).  Checkpointing
    recomputes a third of the work, so it is chosen only where a micro-batch would hold
    fewer than ``ROWS_WITHOUT_CHECKPOINTING`` of the longest rows without it.  A function
    of sizes alone (never of the free memory of the moment), so processes that share a
    card plan alike.
    """
    free = total - resident
    if free <= 0:
        raise ValueError(f"the update needs {resident / 2**30:.1f} GiB resident on a card of {total / 2**30:.1f} GiB: "
                         "use a smaller model, LoRA (model.lora), or more processes with FSDP")

    def budget(recompute: bool) -> int:
        per_token = ACTIVATION_BYTES[recompute] * hidden * layers + (0 if recompute else logits_bytes)
        return max(int(ACTIVATION_SHARE * free) // per_token, 1)

    if checkpointing is None:
        checkpointing = budget(False) < ROWS_WITHOUT_CHECKPOINTING * longest_row
    return budget(checkpointing), checkpointing


def padding_share(batches: list[np.ndarray], lengths: np.ndarray) -> float:
    """Share of the tokens in ``batches`` (each padded to its longest row) that are padding."""
    padded = sum(len(b) * int(lengths[b].max()) for b in batches if len(b))
    return 1.0 - float(sum(int(lengths[b].sum()) for b in batches)) / padded if padded else 0.0


def padded(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    """Rows of per-token values as one zero-padded ``[rows, width]`` tensor on ``device``.

    The copy does not block (see ``HFPolicy.to_device``): the update loop never waits for the GPU here.
    """
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r[:width], dtype=torch.float32)
    return out.to(device, non_blocking=True)


class DeviceTimer:
    """The time a repeated phase of device work takes in all, read once, at the end.

    On a GPU each timed span is a pair of CUDA events queued around the work, so timing
    it never makes the host wait for the GPU's queue (``seconds`` waits once, for the
    last event); elsewhere it is the host's clock.
    """

    def __init__(self, device: torch.device):
        self._events = [] if torch.device(device).type == "cuda" else None
        self._host_seconds = 0.0

    @contextlib.contextmanager
    def span(self):
        if self._events is None:
            started = time.perf_counter()
            yield
            self._host_seconds += time.perf_counter() - started
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self._events.append((start, end))

    def seconds(self) -> float:
        if not self._events:
            return self._host_seconds
        self._events[-1][1].synchronize()
        return sum(start.elapsed_time(end) for start, end in self._events) / 1000
