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
  module, at its own pace.  A sharded engine (FSDP, ZeRO-3) cannot run its module process
  by process, so every process generates (and scores without gradients) with an
  *inference copy* that holds full weights, refreshed after each update (the same
  push a vLLM engine gets); ZeRO-2 gets one too, as its weights are views of the
  engine's flat buffers.
- **Checkpoints** hold full weights and the full, index-keyed optimiser state (the
  single-process format), written by rank 0; any process count resumes from them.
- **DeepSpeed ZeRO-2/3** (an accelerate config with ``distributed_type: DEEPSPEED``):
  the engine is DeepSpeed's own (``deepspeed.initialize`` with the config accelerate
  read), the micro-batches end their accumulation where the trainer says, and the
  optimiser state goes to and from the single-process format parameter by parameter
  (DeepSpeed's full-state API), so ZeRO checkpoints resume on any process count too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from datetime import timedelta
from typing import Any

import torch

from gigpo_gym.core.extras import missing_extra_error

KINDS = ("single", "ddp", "fsdp", "deepspeed")

#: What ``accelerate launch`` sets, beyond torchrun's variables, for the shipped configs of
#: each engine (configs/accelerate/): benchmarks and tests start ``torch.distributed.run`` with it.
LAUNCH_ENV = {
    "ddp": {},
    "fsdp": {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "true",
             "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP"},
    "zero2": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
    "zero3": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
}


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
    """The processes of a run: one (``accelerator=None``) or N through an ``accelerate.Accelerator``.

    ``deepspeed``: the ``accelerate.utils.DeepSpeedPlugin`` of a DeepSpeed config, when the
    accelerator itself does not carry it (on CPU accelerate turns DeepSpeed off; the
    engine runs there all the same, on gloo).
    """

    def __init__(self, accelerator: Any | None = None, deepspeed: Any | None = None):
        self.accelerator = accelerator
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.world = accelerator.num_processes if accelerator is not None else 1
        self.is_main = self.rank == 0
        self.kind = "single"
        self.deepspeed_plugin = deepspeed
        self._params: list[torch.Tensor] = []  # the trained parameters in the optimiser's order (DeepSpeed)
        if accelerator is not None:
            from accelerate.utils import DistributedType

            if accelerator.distributed_type == DistributedType.FSDP:
                self.kind = "fsdp"
                version = accelerator.state.fsdp_plugin.fsdp_version
                if version != 2:
                    raise RuntimeError(f"the accelerate config asks for fsdp_version: {version}; gigpo-gym train "
                                       "shards with FSDP2: set fsdp_version: 2 (as configs/accelerate/fsdp.yaml does)")
            elif accelerator.distributed_type == DistributedType.DEEPSPEED or deepspeed is not None:
                self.kind = "deepspeed"
                self.deepspeed_plugin = deepspeed or accelerator.state.deepspeed_plugin
                stage = self.deepspeed_plugin.zero_stage
                if stage not in (2, 3):
                    raise RuntimeError(f"the accelerate config asks for DeepSpeed zero_stage: {stage}; gigpo-gym train "
                                       "runs ZeRO-2 and ZeRO-3 (configs/accelerate/deepspeed_zero2.yaml, deepspeed_zero3.yaml)")
            else:
                self.kind = "ddp"

    # -- what the trainer asks ------------------------------------------------------
    @property
    def engine(self) -> str:
        """What trains: single, ddp, fsdp, deepspeed_zero2 or deepspeed_zero3 (in summary.json)."""
        return f"deepspeed_zero{self.deepspeed_plugin.zero_stage}" if self.kind == "deepspeed" else self.kind

    @property
    def needs_inference_copy(self) -> bool:
        """True when generation and checkpoints need a plain module with full weights: no process
        holds them (FSDP, ZeRO-3), or the engine keeps them as views of its flat buffers (ZeRO-2)."""
        return self.kind in ("fsdp", "deepspeed")

    @property
    def device(self) -> torch.device | None:
        return self.accelerator.device if self.accelerator is not None else None

    def prepare(self, module: torch.nn.Module, optimizer: Any, max_grad_norm: float) -> tuple[Any, Any]:
        """Wrap the trained module and its optimiser (DDP, FSDP, DeepSpeed); unchanged in one process."""
        if self.accelerator is None:
            return module, optimizer
        if self.kind != "deepspeed":
            return self.accelerator.prepare(module, optimizer)
        import deepspeed

        if self.device.type == "cpu":
            _skip_shared_memory_all_reduce()
        self._params = [p for group in optimizer.param_groups for p in group["params"]]
        engine, wrapped, _, _ = deepspeed.initialize(
            model=module, optimizer=optimizer, config=self._deepspeed_config(max_grad_norm), dist_init_required=False)
        return engine, wrapped

    def backward(self, engine: Any, loss: torch.Tensor, last: bool) -> None:
        """Backward of one micro-batch; gradients are reduced across processes on the ``last`` one only."""
        if self.accelerator is None:
            loss.backward()
            return
        if self.kind == "deepspeed":
            engine.set_gradient_accumulation_boundary(last)
            engine.backward(loss)
            return
        self.accelerator.sync_gradients = last
        with contextlib.nullcontext() if last else self.accelerator.no_sync(engine):
            self.accelerator.backward(loss)

    def step(self, engine: Any, optimizer: Any, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        """Clip the gradients to ``max_norm`` and take the optimiser step; returns the norm before clipping, a
        0-d tensor the host reads when it needs it (reading it waits for the device)."""
        if self.accelerator is None:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        elif self.kind == "deepspeed":  # the engine clips (gradient_clipping) and steps
            engine.step()
            return torch.as_tensor(engine.get_global_grad_norm(), dtype=torch.float64)
        else:
            norm = self.accelerator.clip_grad_norm_(engine.parameters(), max_norm)
        optimizer.step()
        return norm.detach()

    def _deepspeed_config(self, max_grad_norm: float) -> dict[str, Any]:
        """The DeepSpeed config accelerate read, with the values the trainer decides itself.

        The trainer forms its own micro-batches and says where each accumulation ends,
        so DeepSpeed's batch sizes are nominal; float32 master weights (bf16 compute is
        the run config's autocast, as for FSDP); accelerate's "auto" bucket sizes are left
        to DeepSpeed's defaults.
        """
        config = dict(self.deepspeed_plugin.deepspeed_config)
        config.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1, train_batch_size=self.world,
                      gradient_clipping=float(max_grad_norm), zero_allow_untested_optimizer=True)
        for precision in ("fp16", "bf16"):
            if config.get(precision, {}).get("enabled") is True:
                raise RuntimeError(f"the DeepSpeed config enables {precision}: gigpo-gym train keeps float32 master "
                                   "weights; set mixed_precision: 'no' and model.compute_dtype: bfloat16 in the run config")
            config.pop(precision, None)
        config["zero_optimization"] = {k: v for k, v in config.get("zero_optimization", {}).items() if v != "auto"}
        return config

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
        if self.kind == "deepspeed" and self.deepspeed_plugin.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(module.parameters())):
                return {name: t.detach().cpu().clone() for name, t in module.state_dict().items()}
        return {name: _full(t) for name, t in module.state_dict().items()}

    def copy_weights(self, engine: Any, target: torch.nn.Module) -> None:
        """Copy the trained weights into a plain module of the same architecture (an inference copy)."""
        target.load_state_dict(self.full_state(engine))

    def unwrap(self, engine: Any) -> torch.nn.Module:
        if self.accelerator is None:
            return engine
        if self.kind == "deepspeed":
            return engine.module
        return self.accelerator.unwrap_model(engine)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """The optimiser's state with whole tensors: the single-process format (a collective under FSDP)."""
        if self.kind == "deepspeed":
            return _deepspeed_optimizer_state(optimizer, self._params)
        state = optimizer.state_dict()
        if self.kind != "fsdp":
            return state
        return {**state, "state": {k: {n: _full(v) for n, v in s.items()} for k, s in state["state"].items()}}

    def load_optimizer_state(self, optimizer: Any, state: dict[str, Any]) -> None:
        """Load a single-process optimiser state into a (possibly sharded) optimiser."""
        if self.kind == "deepspeed":
            _load_deepspeed_optimizer_state(optimizer, self._params, state)
            return
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


_ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


def _is_zero3(optimizer: Any) -> bool:
    return getattr(optimizer, "fp32_partitioned_groups_flat", None) is not None


def _skip_shared_memory_all_reduce() -> None:
    """Keep DeepSpeed on CPU from compiling its shared-memory all-reduce, which only its inference
    all-reduce (tensor-parallel serving) calls; ZeRO training never does.  The op is a C++ build
    (ninja, a compiler) of 40-90 s at the first start in every new environment, for nothing here."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _deepspeed_flat_partitions(optimizer: Any) -> list[torch.Tensor]:
    """The float32 partitions a ZeRO optimiser steps (its inner optimiser's parameters)."""
    if _is_zero3(optimizer):
        return list(optimizer.fp32_partitioned_groups_flat)
    return list(optimizer.single_partition_of_fp32_groups)  # ZeRO-1/2


def _deepspeed_optimizer_state(optimizer: Any, params: list[torch.Tensor]) -> dict[str, Any]:
    """A ZeRO optimiser's AdamW state in torch's single-process format (a collective)."""
    from deepspeed.utils import safe_get_full_optimizer_state

    inner = optimizer.optimizer
    groups = [{k: v for k, v in g.items() if k != "params"} for g in inner.param_groups]
    groups[0]["params"] = list(range(len(params)))  # the trainer's one parameter group
    steps = [inner.state[f]["step"] for f in _deepspeed_flat_partitions(optimizer) if inner.state.get(f)]
    if not steps:  # no step taken yet
        return {"state": {}, "param_groups": groups}
    state = {i: {"step": steps[0].detach().cpu().clone(),
                 **{k: safe_get_full_optimizer_state(p, k).detach().cpu().reshape(p.ds_shape if hasattr(p, "ds_shape") else p.shape)
                    for k in _ADAM_MOMENTS}}
             for i, p in enumerate(params)}
    return {"state": state, "param_groups": groups}


def _load_deepspeed_optimizer_state(optimizer: Any, params: list[torch.Tensor], state: dict[str, Any]) -> None:
    """Put a single-process AdamW state into a ZeRO optimiser's partitions."""
    if not state["state"]:
        return
    inner = optimizer.optimizer
    for group, saved in zip(inner.param_groups, state["param_groups"]):
        group.update({k: v for k, v in saved.items() if k != "params"})
    step = next(iter(state["state"].values()))["step"]
    for flat in _deepspeed_flat_partitions(optimizer):  # AdamW creates its state at the first step: create it now
        inner.state[flat] = {"step": torch.as_tensor(step, dtype=torch.float32).clone(),
                             **{k: torch.zeros_like(flat) for k in _ADAM_MOMENTS}}
    zero3 = _is_zero3(optimizer)
    if not zero3:
        optimizer._lazy_init_hp_params_optimizer_state()  # link each parameter to its piece of the new state
    from deepspeed.utils import safe_set_full_optimizer_state

    for i, p in enumerate(params):
        saved = state["state"].get(i, state["state"].get(str(i)))
        if saved is None:  # a parameter that never had a gradient: its moments stay zero
            continue
        for key in _ADAM_MOMENTS:
            value = torch.as_tensor(saved[key], dtype=torch.float32)
            if zero3:
                _set_zero3_state(optimizer, p, value, key)
            else:
                safe_set_full_optimizer_state(p, value.to(p.device), key)


def _set_zero3_state(optimizer: Any, param: torch.Tensor, value: torch.Tensor, key: str) -> None:
    """This process's piece of a ZeRO-3 parameter's optimiser state ``key``, from the whole ``value``.

    DeepSpeed's own setter cuts the unpadded value and fails where the size is not a
    multiple of the process count; its partitions are the padded value's.
    """
    piece, _ = optimizer._get_fp32_opt_state_partition(param, release_swap_buffers=False, optim_state_key=key)
    rank, world = optimizer._get_param_partition_rank(param), optimizer._get_param_partition_world_size(param)
    padded = torch.zeros(piece.numel() * world, dtype=piece.dtype)
    padded[: value.numel()] = value.flatten()
    piece.data.copy_(padded.narrow(0, piece.numel() * rank, piece.numel()).to(piece.device))


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
    on_cpu = cpu and accelerator.distributed_type == DistributedType.MULTI_CPU
    if on_cpu and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        # accelerate turns FSDP on for accelerators only; on CPU (gloo) its FSDP2 path works the same
        accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin()
        accelerator.state.distributed_type = DistributedType.FSDP
        # with no mesh given, FSDP2 shards over a mesh on a visible GPU: a CPU run on a GPU machine names its own
        from accelerate import ParallelismConfig

        accelerator.state.parallelism_config = ParallelismConfig(dp_shard_size=accelerator.num_processes)
        accelerator.state.device_mesh = accelerator.state.parallelism_config.get_device_mesh("cpu")
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        from accelerate.utils import DeepSpeedPlugin  # accelerate's own; DeepSpeed itself is the extra

        if importlib.util.find_spec("deepspeed") is None:
            raise missing_extra_error("deepspeed", "DeepSpeed ZeRO training")
        # on CPU accelerate turns DeepSpeed off; the plugin reads the config from the launcher's variables
        return Parallel(accelerator, deepspeed=DeepSpeedPlugin() if on_cpu else None)
    return Parallel(accelerator)
