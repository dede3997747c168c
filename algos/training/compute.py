"""How the update runs on the device: micro-batches by length, the optimiser's kernels,
TF32, deterministic kernels.

Each choice is explicit and tested on a CPU (tests/test_gpu_choices.py); a CPU run
repeats the numbers it always gave.
"""

from __future__ import annotations

import os
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
    """
    if not enabled:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if torch.cuda.is_available():
        torch.use_deterministic_algorithms(True, warn_only=True)


def micro_batches(rows: np.ndarray, lengths: np.ndarray, size: int) -> list[np.ndarray]:
    """``rows`` cut into micro-batches of ``size`` rows of similar length (sorted by length, stable).

    Each micro-batch pads its rows to its longest, so sorting keeps the padding small.
    """
    ordered = rows[np.argsort(lengths[rows], kind="stable")]
    return [ordered[a : a + size] for a in range(0, len(ordered), size)]


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


def synchronize(device: torch.device) -> None:
    """Wait for the GPU's queue (for phase timings, once per mini-batch; nothing on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
