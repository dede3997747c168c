"""Data-parallel training over several processes, through Hugging Face accelerate.

``accelerate launch [--config_file configs/accelerate/X.yaml] -m gigpo_gym.algos.cli train ...``,
``torchrun --nproc_per_node=N -m gigpo_gym.algos.cli train ...`` and
``gigpo-gym train --accelerate X --num-processes N ...`` start N processes; each builds a
``Parallel`` here.  One process (no launcher) never touches accelerate: its path is the
plain single-process loop.

How N processes equal one (the trainer does the bookkeeping, this module the collectives):

- **Whole task groups per process.**  Process r plays global groups
  ``[r*G//N, (r+1)*G//N)`` (``shard_groups``) through ``make_grouped(group_offset=...)``:
  the same group ids, trajectory ids and task seeds one process would use.
- **One batch for the estimator.**  The rows' step data (ids, rewards, anchors, lengths;
  no tokens) is all-gathered and put in one process's row order, so every advantage
  rule (including those that normalise over the whole batch) sees one process's batch,
  and rank 0 logs metrics of the whole rollout.
- **Global mini-batches.**  Each epoch draws one permutation of all rows from the shared
  seed; each process takes its own rows of each mini-batch.  The loss is divided by the
  mini-batch's global token count and multiplied by N (DDP and FSDP average gradients
  over processes), so the summed gradient is one process's.  Every process runs as many
  micro-batches as the busiest one (the others add zero-weight ones), so all make the
  same forward/backward calls and optimiser steps.
- **Generation.**  DDP keeps full weights in every process: each generates with its own
  module, at its own pace.  A sharded engine (FSDP) cannot run its module process by
  process, so every process generates (and scores without gradients) with an
  *inference copy* that holds full weights, refreshed after each update (the same
  push a vLLM engine gets).
- **Checkpoints** hold full weights and the full, index-keyed optimiser state (the
  single-process format), written by rank 0; any process count resumes from them.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Any

import torch

from gigpo_gym.registration import missing_extra_error

KINDS = ("single", "ddp", "fsdp")


def launched_processes() -> int:
    """Processes the launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def shard_groups(num_groups: int, rank: int, world: int) -> tuple[int, int]:
    """``(first group, number of groups)`` process ``rank`` of ``world`` plays."""
    if world > num_groups:
        raise ValueError(
            f"env.num_groups={num_groups} cannot be split among {world} processes: each process plays whole task "
            f"groups; run at most {num_groups} processes or set env.num_groups to a multiple of {world}")
    first, last = rank * num_groups // world, (rank + 1) * num_groups // world
    return first, last - first


class Parallel:
    """The processes of a run: one (``accelerator=None``) or N through an ``accelerate.Accelerator``."""

    def __init__(self, accelerator: Any | None = None):
        self.accelerator = accelerator
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.world = accelerator.num_processes if accelerator is not None else 1
        self.is_main = self.rank == 0
        self.kind = "single"
        if accelerator is not None:
            from accelerate.utils import DistributedType

            if accelerator.distributed_type == DistributedType.FSDP:
                self.kind = "fsdp"
                version = accelerator.state.fsdp_plugin.fsdp_version
                if version != 2:
                    raise RuntimeError(f"the accelerate config asks for fsdp_version: {version}; gigpo-gym train "
                                       "shards with FSDP2: set fsdp_version: 2 (as configs/accelerate/fsdp.yaml does)")
            elif accelerator.distributed_type == DistributedType.DEEPSPEED:
                raise RuntimeError(
                    "DeepSpeed is not supported by gigpo-gym train: its ZeRO optimiser state is saved per process, "
                    "so a checkpoint would not resume on another process count; use "
                    "configs/accelerate/fsdp.yaml (FULL_SHARD, as ZeRO-3) or fsdp_grad_op.yaml (SHARD_GRAD_OP, as ZeRO-2)")
            else:
                self.kind = "ddp"

    # -- what the trainer asks ------------------------------------------------------
    @property
    def sharded(self) -> bool:
        """True when no process holds full weights (generation needs an inference copy)."""
        return self.kind == "fsdp"

    @property
    def device(self) -> torch.device | None:
        return self.accelerator.device if self.accelerator is not None else None

    def prepare(self, module: torch.nn.Module, optimizer: Any) -> tuple[Any, Any]:
        """Wrap the trained module and its optimiser (DDP, FSDP); unchanged in one process."""
        if self.accelerator is None:
            return module, optimizer
        return self.accelerator.prepare(module, optimizer)

    def backward(self, engine: Any, loss: torch.Tensor, last: bool) -> None:
        """Backward of one micro-batch; gradients are reduced across processes on the ``last`` one only."""
        if self.accelerator is None:
            loss.backward()
            return
        self.accelerator.sync_gradients = last
        with contextlib.nullcontext() if last else self.accelerator.no_sync(engine):
            self.accelerator.backward(loss)

    def clip_grad_norm(self, engine: Any, params: list[torch.Tensor], max_norm: float) -> float:
        if self.accelerator is None:
            return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        return float(self.accelerator.clip_grad_norm_(engine.parameters(), max_norm))

    # -- collectives (no-ops in one process) ------------------------------------------
    def gather_objects(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over processes (float64)."""
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        torch.distributed.all_reduce(t)
        return t.cpu().tolist()

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    @contextlib.contextmanager
    def main_first(self):
        """Rank 0 runs the block first (it fills caches: tiny models, generated data), then the others."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Give every process rank 0's weights (a plain module, before it is wrapped)."""
        if self.world == 1:
            return
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                if self._comm_device() == t.device:
                    torch.distributed.broadcast(t.data, src=0)
                else:
                    moved = t.data.to(self._comm_device())
                    torch.distributed.broadcast(moved, src=0)
                    t.data.copy_(moved)

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def _comm_device(self) -> torch.device:
        backend = torch.distributed.get_backend()
        return self.device if "nccl" in str(backend) else torch.device("cpu")

    # -- full weights and optimiser state --------------------------------------------------
    def full_state(self, engine: Any) -> dict[str, torch.Tensor]:
        """Every parameter and buffer of the trained module, whole (a collective under FSDP)."""
        module = self.unwrap(engine)
        return {name: _full(t) for name, t in module.state_dict().items()}

    def copy_weights(self, engine: Any, target: torch.nn.Module) -> None:
        """Copy the trained weights into a plain module of the same architecture (an inference copy)."""
        target.load_state_dict(self.full_state(engine))

    def unwrap(self, engine: Any) -> torch.nn.Module:
        if self.accelerator is None:
            return engine
        return self.accelerator.unwrap_model(engine)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """The optimiser's state with whole tensors: the single-process format (a collective under FSDP)."""
        state = optimizer.state_dict()
        if self.kind != "fsdp":
            return state
        return {**state, "state": {k: {n: _full(v) for n, v in s.items()} for k, s in state["state"].items()}}

    def load_optimizer_state(self, optimizer: Any, state: dict[str, Any]) -> None:
        """Load a single-process optimiser state into a (possibly sharded) optimiser."""
        if self.kind == "fsdp":
            from torch.distributed.tensor import DTensor, distribute_tensor

            params = [p for group in optimizer.param_groups for p in group["params"]]
            index = [i for group in state["param_groups"] for i in group["params"]]
            by_index = dict(zip(index, params))
            converted = {}
            for k, s in state["state"].items():
                p = by_index[int(k)]
                converted[k] = {
                    n: (distribute_tensor(v.to(p.device), p.device_mesh, p.placements)
                        if isinstance(p, DTensor) and torch.is_tensor(v) and v.shape == p.shape else v)
                    for n, v in s.items()
                }
            state = {**state, "state": converted}
        optimizer.load_state_dict(state)


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return t.full_tensor().detach().cpu()
    return t.detach().cpu() if torch.is_tensor(t) else t


def start(device: str, timeout_s: float) -> Parallel:
    """The ``Parallel`` of this process: plain when one process runs, else accelerate's state.

    ``timeout_s`` bounds every wait at a collective: a process that stops answering ends
    the run with an error rather than a hang (a process that dies is noticed by the
    launcher, which stops the others at once).
    """
    if launched_processes() <= 1:
        return Parallel()
    try:
        from accelerate import Accelerator
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, InitProcessGroupKwargs
    except ImportError as e:
        raise missing_extra_error("train", "multi-process training (accelerate)") from e
    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    accelerator = Accelerator(cpu=cpu, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=timeout_s))])
    if cpu and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and \
            accelerator.distributed_type == DistributedType.MULTI_CPU:
        # accelerate turns FSDP on for accelerators only; on CPU (gloo) its FSDP2 path works the same
        accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin()
        accelerator.state.distributed_type = DistributedType.FSDP
    return Parallel(accelerator)
