"""The training loop: rollout -> advantages -> clipped-surrogate updates -> metrics.

Reads top to bottom: ``Trainer.run`` optionally warm-starts with SFT on expert
demonstrations, evaluates, then for each iteration collects a grouped rollout,
asks the configured algorithm for per-row advantages, runs PPO-style updates with a
k3 KL to a frozen reference and an entropy bonus, logs metrics (TensorBoard +
``metrics.jsonl``), checkpoints atomically and evaluates on the held-out split.
The algorithm owns only its advantage rule (``estimators.registry``).

Several processes (``accelerate launch``, ``torchrun``) train one model data-parallel:
each plays its own task groups and the update equals one process's over all groups
(``training.distributed`` says how); rank 0 alone logs, evaluates and checkpoints.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training import distributed
from gigpo_gym.algos.training.config import ConfigError, OptimConfig, TrainConfig, config_to_dict, save_config, scheduled_lr
from gigpo_gym.algos.training.loss import LossWeights, choice_kl, policy_loss, value_loss
from gigpo_gym.algos.training.metrics import append_jsonl, keep_iterations, plot_curve, read_jsonl, rollout_metrics
from gigpo_gym.algos.policies.base import ChoiceBatch, SamplingParams, TokenBatch
from gigpo_gym.algos.policies.hf import sdpa_backends
from gigpo_gym.algos.training.rollout import RewardShaping, Rollout, collect, llm_wrapper
from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import write_atomically
from gigpo_gym.core.env import derive_seed


def build_policy(cfg: TrainConfig, device: str | None = None):
    """The configured HF policy ('tiny' is built from the env's expert text, 'smollm2' offline)."""
    from gigpo_gym.algos.policies.hf import HFPolicy

    m = cfg.model
    kwargs = dict(
        device=device or m.device, dtype=m.dtype, compute_dtype=m.compute_dtype, gradient_checkpointing=m.gradient_checkpointing,
        logits_chunk=m.logits_chunk, lora=m.lora, attention=m.attention, decoder=m.decoder, use_chat_template=m.use_chat_template,
        system_prompt=m.system_prompt, max_prompt_tokens=m.max_prompt_tokens, response_prefix=m.response_prefix,
        choose_admissible=m.choose_admissible,
        critic=_algorithm(cfg).needs_critic, sampling_seed=cfg.seed,
    )
    if m.name == "tiny":
        from gigpo_gym.algos.training.sft import expert_demonstrations
        from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

        demos = expert_demonstrations(
            cfg.env.id, m.tiny.corpus_episodes, seed=derive_seed(cfg.seed, 7), env_kwargs=cfg.env.kwargs,
            wrapper=_wrapper(cfg), expert_kwargs=cfg.sft.expert_kwargs,
        )
        corpus = [text for pair in demos for text in pair]
        spec = TinySpec(m.tiny.vocab_size, m.tiny.hidden_size, m.tiny.intermediate_size, m.tiny.num_layers, seed=cfg.seed,
                        pieces=m.tiny.pieces)
        return HFPolicy.from_pretrained(build_tiny(corpus, spec), **kwargs)
    if m.name == "smollm2":
        from gigpo_gym.algos.policies.smollm import smollm2_path

        return HFPolicy.from_pretrained(smollm2_path(), **kwargs)
    return HFPolicy.from_pretrained(m.name, **kwargs)


def _algorithm(cfg: TrainConfig):
    from gigpo_gym.algos.estimators.registry import get_algorithm

    try:
        return get_algorithm(cfg.algo.name, **cfg.algo.kwargs)
    except (TypeError, ValueError) as e:  # an unknown name or key, a bad value: the config's fault
        raise ConfigError(f"algo: {e}") from None


def prompt_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The prompt wrapper's settings of a run (``wrap_llm_env`` kwargs): evaluate as trained."""
    e = cfg.env
    return {"history_length": e.history_length, "anchor_mode": e.anchor_mode, "intro": e.prompt_intro,
            "action_format": e.action_format, "task_key": e.task_key, "list_actions": e.list_actions}


def _wrapper(cfg: TrainConfig):
    return llm_wrapper(**prompt_settings(cfg))


def learning_rate(optim: OptimConfig, iteration: int, iterations: int) -> float:
    """The learning rate of RL iteration ``iteration`` (1-based) of ``iterations`` (see ``scheduled_lr``)."""
    return scheduled_lr(optim.lr, optim.lr_schedule, iteration, iterations, optim.warmup_iterations)


def _pad(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    """Rows of per-token values as one zero-padded ``[rows, width]`` tensor on ``device``.

    The copy does not block (see ``HFPolicy.to_device``): the update loop never waits for the GPU here.
    """
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r[:width], dtype=torch.float32)
    return out.to(device, non_blocking=True)


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


def _synchronize(device: torch.device) -> None:
    """Wait for the GPU's queue (for phase timings, once per mini-batch; nothing on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


@dataclass
class WholeRollout:
    """All processes' rows of a round, in one process's order (``Trainer.gather``)."""

    rollout: Rollout
    #: Process holding each row, and the row's index in that process's rollout.
    owner: np.ndarray
    local: np.ndarray
    prompt_lengths: np.ndarray
    response_lengths: np.ndarray
    values: np.ndarray | None = None


class Trainer:
    """Owns the policy, the reference, the optimiser, the envs and the run folder."""

    def __init__(self, cfg: TrainConfig, policy: Any | None = None):
        import gigpo_gym

        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.algo = _algorithm(cfg)
        e = cfg.env
        self.parallel = distributed.start(cfg.model.device, cfg.collective_timeout_s)
        try:
            first_group, groups = distributed.shard_groups(e.num_groups, self.parallel.rank, self.parallel.world)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if cfg.model.generation == "vllm":
            from gigpo_gym.algos.policies.vllm import BackendUnavailable, check_vllm

            try:
                check_vllm()
            except BackendUnavailable as err:
                raise ConfigError(str(err)) from None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        configure_determinism(cfg.deterministic)
        if cfg.model.dtype != "float32" and (cfg.iterations or cfg.sft.steps):
            warnings.warn(
                f"model.dtype is {cfg.model.dtype}: an optimizer step smaller than the weight's precision (2^-8 of it in "
                "bfloat16) is lost, so at small learning rates most weights never change; train float32 weights with "
                f"model.compute_dtype: {cfg.model.dtype} instead", stacklevel=2)
        device = str(self.parallel.device) if self.parallel.device is not None else None
        with self.parallel.main_first():
            self.policy = policy if policy is not None else build_policy(cfg, device)
        self.device = self.policy.device
        o = cfg.optim
        self.weights = LossWeights(
            clip_low=o.clip_low if o.clip_low is not None else self.algo.clip_low,
            clip_high=o.clip_high if o.clip_high is not None else self.algo.clip_high,
            kl_coef=o.kl_coef, entropy_coef=o.entropy_coef, value_coef=o.value_coef, kl_max=o.kl_max,
        )
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        configure_matmul(self.device, cfg.model.tf32)
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, weight_decay=o.weight_decay,
                                           **optimizer_options(self.device))
        self.reference = None
        self.shaping = RewardShaping(cfg.env.reward_scale, cfg.env.reward_source, cfg.env.invalid_action_penalty,
                                     cfg.env.revisit_penalty)
        with self.parallel.main_first():
            self.envs = gigpo_gym.make_grouped(
                e.id, groups, e.group_size, backend=e.backend, seed=cfg.seed, env_kwargs=e.kwargs,
                wrappers=(_wrapper(cfg),), group_offset=first_group,
            )
        self.eval_envs = self.select_envs = None
        if self.parallel.is_main:  # rank 0 alone evaluates
            if e.eval_episodes:
                self.eval_envs = gigpo_gym.make_grouped(
                    e.id, e.eval_episodes, 1, backend=e.backend, seed=cfg.seed,
                    env_kwargs={**e.kwargs, **e.eval_kwargs}, wrappers=(_wrapper(cfg),),
                )
            if cfg.select_every:
                self.select_envs = gigpo_gym.make_grouped(
                    e.id, e.select_episodes, 1, backend=e.backend, seed=cfg.seed,
                    env_kwargs={**e.kwargs, **e.select_kwargs}, wrappers=(_wrapper(cfg),),
                )
        self.iteration = 0
        self.config_digest = digest(config_to_dict(cfg))
        self._writer = None
        #: What the update's forward/backward goes through (DDP/FSDP wrapper; the policy in one process).
        self.engine = self.policy
        #: A plain module with the trained weights for gradient-free scoring (the policy, or an inference copy).
        self.scorer = self.policy
        #: What generates (the scorer, or a vLLM engine holding the same weights).
        self.actor = self.policy
        self.prepared = False
        self._pending_optimizer_state: dict | None = None

    def prepare(self) -> None:
        """Wrap the trained module for N processes and set up generation; once, after any SFT warm start.

        Rank 0's weights go to every process first.  A sharded engine (and ZeRO-2) gets an inference copy
        (full weights) to generate and score with; ``model.generation: vllm`` a vLLM engine.
        """
        if self.prepared:
            return
        p = self.parallel
        if p.world > 1:
            p.broadcast_parameters(self.policy)
            if p.needs_inference_copy:
                self.scorer = copy.deepcopy(self.policy)
                for q in self.scorer.parameters():
                    q.requires_grad_(False)
            self.engine, self.optimizer = p.prepare(self.policy, self.optimizer, self.cfg.optim.max_grad_norm)
        if self._pending_optimizer_state is not None:
            p.load_optimizer_state(self.optimizer, self._pending_optimizer_state)
            self._pending_optimizer_state = None
        self.actor = self.scorer
        if self.cfg.model.generation == "vllm":
            from gigpo_gym.algos.policies.vllm import VLLMPolicy

            v = self.cfg.model.vllm
            self.actor = VLLMPolicy(self.scorer, gpu_memory_utilization=v.gpu_memory_utilization,
                                    max_model_len=v.max_model_len, seed=derive_seed(self.cfg.seed, p.rank))
        self.prepared = True

    def refresh_actor(self) -> None:
        """After an update: copy the trained weights into the inference copy and the vLLM engine."""
        if self.scorer is not self.policy:
            self.parallel.copy_weights(self.engine, self.scorer)
        if self.actor is not self.scorer:
            self.actor.load_weights(self.scorer)

    # -- pieces ----------------------------------------------------------------------
    def sampling(self, iteration: int, evaluation: bool = False) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(
            max_new_tokens=s.max_new_tokens, temperature=s.eval_temperature if evaluation else s.temperature,
            top_p=1.0 if evaluation else s.top_p, stop=tuple(s.stop),
            seed=self._stream(derive_seed(self.cfg.seed, iteration, 2 if evaluation else 1)),
        )

    def _stream(self, seed: int) -> int:
        """A random stream of this process (one process: the run's own stream, as before)."""
        return seed if self.parallel.world == 1 else derive_seed(seed, self.parallel.rank)

    def evaluate(self, on: str = "eval") -> dict[str, float]:
        """Success per task type on the held-out envs (``on="eval"``) or the selection envs (``"select"``).

        Fixed tasks at the eval temperature, so two evaluations differ only by the policy.
        """
        envs = self.eval_envs if on == "eval" else self.select_envs
        if envs is None:
            return {}
        rollout = collect(
            self.actor, envs, self.sampling(0, evaluation=True), seed=derive_seed(self.cfg.seed, 999 if on == "eval" else 998),
            shaping=self.shaping,
        )
        m = rollout_metrics(rollout, prefix=on)
        return {k: v for k, v in m.items() if not k.startswith((f"{on}/step_", f"{on}/all_equal"))}

    def freeze_reference(self) -> None:
        """The KL anchor: a frozen copy of the policy as it is now (LoRA: adapters off)."""
        if not self.weights.kl_coef or self.cfg.model.lora is not None:
            return
        if self.reference is not None:  # a reset: into the copy there is, not a third one
            self.reference.load_state_dict(self.scorer.state_dict())
            return
        self.reference = copy.deepcopy(self.scorer).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def _score(self, policy: Any, tokens: TokenBatch, use_adapters: bool = True,
               rows: list[int] | None = None) -> list[list[float]]:
        """Log-probs of each row's response (``rows``: only those rows; the others get ``[]``)."""
        wanted = list(range(len(tokens))) if rows is None else rows
        out: list[list[float]] = [[] for _ in range(len(tokens))]
        mb = self.cfg.optim.micro_batch_size
        context = contextlib.nullcontext()
        if not use_adapters:
            context = policy.model.disable_adapter()
        with context:
            for start in range(0, len(wanted), mb):
                index = wanted[start : start + mb]
                part = tokens.select(index)
                s = policy.log_probs(part)
                if isinstance(part, ChoiceBatch):  # the whole distribution over each row's options
                    scored = [lp[: len(o)].tolist() for lp, o in zip(s.extras["option_log_probs"], part.options)]
                else:
                    scored = [lp[: len(r)].tolist() for lp, r in zip(s.log_probs, part.response_ids)]
                for i, row in zip(index, scored):
                    out[i] = row
        return out

    def gather(self, rollout: Rollout) -> "WholeRollout":
        """Every process's rows (without tokens) as one process's rollout, and where each row lives.

        Critic values are computed here, each process for its own rows, and travel along.
        """
        values = None
        if self.algo.needs_critic:
            tokens, mb = rollout.tokens, self.cfg.optim.micro_batch_size
            with torch.no_grad():
                values = np.concatenate([
                    self.scorer.values(tokens.select(range(a, min(a + mb, len(tokens))))).cpu().numpy()
                    for a in range(0, len(tokens), mb)
                ]) if len(tokens) else np.zeros(0)
        lengths = np.array([[len(p), len(r)] for p, r in zip(rollout.prompt_ids, rollout.response_ids)],
                           dtype=np.int64).reshape(-1, 2)
        parts = self.parallel.gather_objects((rollout.without_tokens(), lengths, values))
        whole, source = Rollout.merge([part[0] for part in parts])
        sizes = [len(part[0]) for part in parts]
        owner = np.repeat(np.arange(len(parts)), sizes)[source]
        local = np.concatenate([np.arange(n) for n in sizes])[source]
        lengths = np.concatenate([part[1] for part in parts])[source]
        if values is not None:
            values = np.concatenate([part[2] for part in parts])[source]
        return WholeRollout(whole, owner, local, lengths[:, 0], lengths[:, 1], values)

    def update(self, rollout: Rollout, iteration: int, whole: "WholeRollout | None" = None) -> dict[str, float]:
        """Advantages over all processes' rows, then clipped-surrogate epochs over mini-batches.

        Each epoch permutes all rows with the run's seed; a process trains on its own rows of
        each mini-batch, with the mini-batch's global token count, so N processes take one
        process's step.  All processes run the same number of micro-batches (zero-weight
        padding where a process has fewer rows).
        """
        self.prepare()
        whole = whole if whole is not None else self.gather(rollout)
        p = self.parallel
        batch = whole.rollout.to_step_batch()
        o = self.cfg.optim
        by_choice = o.loss_over == "choices"
        tokens = rollout.choice_batch if by_choice else rollout.tokens
        if self.algo.needs_critic:
            batch.values = whole.values
        t_advantages = time.perf_counter()
        advantages = np.asarray(self.algo.advantages(batch), dtype=np.float64)
        advantage_seconds = time.perf_counter() - t_advantages
        keep = np.asarray(self.algo.row_mask(batch), dtype=bool) & (whole.response_lengths > 0)
        zero_share = float(np.mean(np.abs(advantages[keep]) < 1e-9)) if keep.any() else 1.0
        if o.skip_zero_advantage:
            keep &= np.abs(advantages) >= 1e-9
        mine = sorted(int(whole.local[i]) for i in np.flatnonzero(keep & (whole.owner == p.rank)))  # rows to score here
        targets = np.asarray(self.algo.value_targets(batch), dtype=np.float64) if self.algo.needs_critic else None
        t_score = time.perf_counter()
        s = self.cfg.sampling
        exact = s.temperature == 1.0 and s.top_p == 1.0 and self.actor is self.scorer
        if by_choice:  # one "token" per row: the chosen option's log-prob among the row's options
            options = rollout.option_log_probs if exact else self._score(self.scorer, tokens, rows=mine)
            old = [[lp[c]] if lp else [] for lp, c in zip(options, tokens.choices)]
        else:
            old = rollout.old_log_probs if exact else self._score(self.scorer, tokens, rows=mine)
        ref = None
        t_ref = time.perf_counter()
        if self.weights.kl_coef:
            if self.cfg.model.lora is not None:
                ref = self._score(self.scorer, tokens, use_adapters=False, rows=mine)
            elif self.reference is not None:
                ref = self._score(self.reference, tokens, rows=mine)
        score_seconds = time.perf_counter() - t_score
        reference_seconds = time.perf_counter() - t_ref
        t_update = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(o, iteration, self.cfg.iterations)
        summed = ["pg_loss", "clip_fraction", "approx_kl_old"] + (["kl_ref"] if ref is not None else []) + (
            ["entropy"] if self.weights.entropy_coef > 0 else []) + (["value_loss"] if targets is not None else [])
        stats: dict[str, list[torch.Tensor]] = {k: [] for k in summed}  # read once, after the loop
        norms: list[float] = []
        rng = np.random.default_rng(derive_seed(self.cfg.seed, iteration, 3))
        rows = np.flatnonzero(keep)
        mb = o.micro_batch_size
        total = whole.prompt_lengths + whole.response_lengths
        step_seconds = 0.0
        used: list[np.ndarray] = []  # this process's micro-batches (their padding share is logged)
        self.engine.train()
        for _ in range(o.epochs):
            order = rng.permutation(rows)
            for start in range(0, len(order), o.mini_batch_size):
                mini = order[start : start + o.mini_batch_size]
                token_count = float(len(mini) if by_choice else whole.response_lengths[mini].sum())
                mine = micro_batches(mini[whole.owner[mini] == p.rank], total, mb)  # this process's rows, by length
                used += mine
                calls = int(-(-np.bincount(whole.owner[mini], minlength=p.world).max() // mb))
                self.optimizer.zero_grad(set_to_none=True)
                for call in range(calls):
                    rows_idx = [int(i) for i in mine[call]] if call < len(mine) else []
                    weight = float(p.world) if rows_idx else 0.0
                    # a zero-weight micro-batch (any own row) keeps the processes' calls in step
                    rows_idx = rows_idx or [int(np.flatnonzero(whole.owner == p.rank)[0])]
                    idx = [int(whole.local[i]) for i in rows_idx]
                    part = tokens.select(idx)
                    scores = self.engine(part, with_entropy=self.weights.entropy_coef > 0, with_values=targets is not None)
                    width = scores.log_probs.shape[1]
                    ref_rows, kl = None, None
                    if ref is not None and by_choice:  # exact KL over the options, not an estimate at the choice
                        option_logp = scores.extras["option_log_probs"]
                        kl = choice_kl(option_logp, _pad([ref[i] for i in idx], option_logp.shape[1], self.device))
                    elif ref is not None:
                        ref_rows = _pad([ref[i] for i in idx], width, self.device)
                    loss, st = policy_loss(
                        scores.log_probs, _pad([old[i] for i in idx], width, self.device),
                        torch.from_numpy(advantages[rows_idx]).to(self.device, non_blocking=True), scores.mask,
                        token_count, self.weights, ref_log_probs=ref_rows, kl=kl, entropy=scores.entropy,
                    )
                    if targets is not None:
                        vt = torch.from_numpy(targets[rows_idx]).to(self.device, torch.float32, non_blocking=True)
                        vl = value_loss(scores.extras["values"], vt, float(len(mini)), self.weights)
                        loss = loss + vl
                        st["value_loss"] = vl.detach()
                    if weight != 1.0:
                        loss = loss * weight
                    with sdpa_backends(self.device):  # checkpointing's recompute runs inside the backward
                        p.backward(self.engine, loss, last=call == calls - 1)
                    if weight:
                        for k in summed:
                            stats[k].append(st[k])
                _synchronize(self.device)  # the step's own time, apart from the queued forward and backward
                t_step = time.perf_counter()
                norms.append(p.step(self.engine, self.optimizer, self.params, o.max_grad_norm))
                _synchronize(self.device)
                step_seconds += time.perf_counter() - t_step
        self.refresh_actor()
        # per-micro-batch terms are parts of a mini-batch mean: sum them per mini-batch, average mini-batches
        updates = max(len(norms), 1)
        read = {k: torch.stack(v).double().cpu().numpy() if v else np.zeros(0) for k, v in stats.items()}
        totals = p.sum([float(np.sum(read[k])) for k in summed])
        m = {f"train/{k}": v / updates for k, v in zip(summed, totals) if norms}
        if norms:
            m["train/grad_norm"] = float(np.mean(norms))
        m.update({k.replace("adv/", "train/adv_"): v for k, v in self.algo.diagnostics(batch).items()})
        m["train/rows_used"] = float(len(rows))
        m["train/lr"] = float(self.optimizer.param_groups[0]["lr"])
        m["train/advantage_mean"] = float(advantages[keep].mean()) if keep.any() else 0.0
        m["train/advantage_std"] = float(advantages[keep].std()) if keep.any() else 0.0
        m["train/zero_advantage_share"] = zero_share  # before skip_zero_advantage drops those rows
        m["time/score_seconds"] = score_seconds  # old log-probs (when recomputed) and the reference's
        m["time/reference_seconds"] = reference_seconds
        m["train/padding_share"] = padding_share(used, total)  # of this process's micro-batches
        m["time/optimize_seconds"] = time.perf_counter() - t_update  # forward, backward and the optimiser steps
        m["time/step_seconds"] = step_seconds  # the optimiser steps alone (clipping included)
        m["time/advantage_seconds"] = advantage_seconds
        return m

    # -- bookkeeping -----------------------------------------------------------------
    def log(self, record: dict[str, Any], step: int | None = None) -> None:
        if not self.parallel.is_main:
            return
        append_jsonl(self.run_dir / "metrics.jsonl", record)
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        step = int(record["iteration"]) if step is None else step
        for k, v in record.items():
            if k != "iteration" and isinstance(v, (int, float)):
                self._writer.add_scalar(k, v, step)
        self._writer.flush()

    def save(self, iteration: int) -> Path:
        """Checkpoint (rank 0 writes; every process takes part: a sharded optimiser state is gathered)."""
        state = {"config_digest": self.config_digest, "iteration": iteration}
        root = self.run_dir / "checkpoints"
        if self.parallel.world == 1:
            return ckpt.save_checkpoint(root, iteration, self.policy, self.optimizer, state, keep=self.cfg.keep_checkpoints)
        optimizer = _FullState(self.parallel.optimizer_state(self.optimizer))
        if self.parallel.is_main:  # the scorer holds the full trained weights (the policy, or the inference copy)
            ckpt.save_checkpoint(root, iteration, self.scorer, optimizer, state, keep=self.cfg.keep_checkpoints)
        self.parallel.barrier()
        return ckpt.checkpoint_folder(root, iteration)

    def resume(self, where: str | Path = "latest", echo=print) -> int:
        """Load a checkpoint ('latest': this run's newest complete one, or a folder); returns its iteration.

        Before ``prepare``: any process count resumes from any checkpoint (they hold the
        single-process format); the optimiser state is loaded once the optimiser is wrapped.
        """
        if self.prepared and self.parallel.world > 1:
            raise RuntimeError("resume() must come before prepare() in a multi-process run")
        latest = str(where) == "latest"
        folder = ckpt.find_resumable(self.run_dir / "checkpoints", echo) if latest else Path(where)
        if self.parallel.world == 1:
            state = ckpt.load_checkpoint(folder, self.policy, self.optimizer, verify=not latest)
        else:
            state = ckpt.load_checkpoint(folder, self.policy, None, verify=not latest)
            self._pending_optimizer_state = torch.load(folder / ckpt.OPTIMIZER_FILE, map_location="cpu",
                                                       weights_only=True)
        self.iteration = int(state["iteration"])
        return self.iteration

    def close(self, end_process_group: bool = True) -> None:
        """End the process group and close the envs, the generation engine and the log.

        A process that failed passes ``end_process_group=False``: ending the group waits
        for the other processes, which may be inside a collective that never completes
        (NCCL then deadlocks); the group ends with the process, and the launcher stops the rest.

        A process's first Trainer is not freed when its last name goes: the imports its
        construction triggers leave reference cycles of frames that hold it.  Drop it and
        ``gc.collect()`` before the process exits (``run_training`` does): freed during
        interpreter shutdown instead, a multi-process run's sharded modules, which hold the
        process group, can abort the process there (gloo's threads).
        """
        if self.actor is not self.scorer:
            self.actor.close()
        if end_process_group:
            self.parallel.close()
        self.envs.close()
        for envs in (self.eval_envs, self.select_envs):
            if envs is not None:
                envs.close()
        if self._writer is not None:
            self._writer.close()


class _FullState:
    """An optimiser state already gathered, where ``save_checkpoint`` asks an optimiser for it."""

    def __init__(self, state: dict[str, Any]):
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


# -- the whole run ---------------------------------------------------------------------
REFERENCE_FILE = "reference.safetensors"


def reference_file(run_dir: Path, iteration: int) -> Path:
    """The KL reference in force after ``iteration``: the warm start's file, or the last reset's.

    Each reset (``optim.kl_reset_every``) writes its own file, so a run resumed from an
    earlier checkpoint finds the reference it had then.
    """
    return run_dir / (REFERENCE_FILE if iteration == 0 else f"reference-{iteration:06d}.safetensors")


def _last_reset(cfg: TrainConfig, iteration: int) -> int:
    """The iteration after which the KL reference was last reset (0: the warm start's)."""
    every = cfg.optim.kl_reset_every
    return iteration - iteration % every if every else 0


def _save_reference(trainer: Trainer, iteration: int = 0) -> None:
    from safetensors.torch import save_model

    from gigpo_gym.core.data import replacing

    if trainer.reference is None or not trainer.parallel.is_main:
        return
    with replacing(reference_file(trainer.run_dir, iteration)) as tmp:
        save_model(trainer.reference, str(tmp))


def _prune_references(trainer: Trainer) -> None:
    """Delete the reset references no kept checkpoint resumes with (the warm start's file stays)."""
    if not trainer.parallel.is_main:
        return
    kept = ckpt.list_checkpoints(trainer.run_dir / "checkpoints")
    if not kept:
        return
    every = trainer.cfg.optim.kl_reset_every
    needed = _last_reset(trainer.cfg, ckpt.checkpoint_iteration(kept[0]))
    for iteration in range(every, needed, every or 1):
        reference_file(trainer.run_dir, iteration).unlink(missing_ok=True)


def _load_reference(trainer: Trainer, iteration: int) -> None:
    from safetensors.torch import load_model

    if not trainer.weights.kl_coef or trainer.cfg.model.lora is not None:
        return
    path = reference_file(trainer.run_dir, _last_reset(trainer.cfg, iteration))
    if not path.is_file():
        every = trainer.cfg.optim.kl_reset_every
        raise ckpt.CheckpointError(
            f"{path} is missing: the KL reference of this run cannot be restored (this config "
            f"{f'resets it every {every} iterations' if every else 'never resets it'}: optim.kl_reset_every "
            f"{every}; was the run trained with another value?)")
    trainer.freeze_reference()
    try:
        load_model(trainer.reference, str(path))
    except Exception as e:
        raise ckpt.CheckpointError(f"cannot read {path}: {e}") from e


SELECTED_FILE = "selected.safetensors"


def _save_selected(trainer: Trainer, iteration: int, success: float, **extra: str) -> dict[str, Any]:
    """Keep the weights that score best on the selection envs so far; the file carries its iteration and score
    (and any ``extra`` metadata)."""
    from safetensors.torch import save_model

    from gigpo_gym.core.data import replacing

    with replacing(trainer.run_dir / SELECTED_FILE) as tmp:
        save_model(trainer.scorer, str(tmp), metadata={"iteration": str(iteration), "success": repr(success), **extra})
    return {"iteration": iteration, "success": success}


def read_selected(path: Path) -> dict[str, Any] | None:
    """The iteration and selection success a ``selected.safetensors`` records (None: it records none)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    if "iteration" not in meta:
        return None
    return {"iteration": int(meta["iteration"]), "success": float(meta["success"])}


def _read_selected(run_dir: Path, before: int) -> dict[str, Any] | None:
    """The choice so far of a resumed run: the kept weights, unless they come from an iteration it trains again."""
    path = run_dir / SELECTED_FILE
    chosen = read_selected(path) if path.is_file() else None
    return chosen if chosen is not None and chosen["iteration"] <= before else None


def _load_selected(trainer: Trainer) -> None:
    """Put the chosen weights into the model that generates (rank 0's, after the last update)."""
    from safetensors.torch import load_model

    load_model(trainer.scorer, str(trainer.run_dir / SELECTED_FILE))
    if trainer.actor is not trainer.scorer:
        trainer.actor.load_weights(trainer.scorer)


def success_sem(rate: float, episodes: float) -> float:
    """Standard error of a success rate measured on ``episodes`` independent episodes."""
    return math.sqrt(rate * (1.0 - rate) / episodes) if episodes > 0 else 0.0


def format_success(title: str, m: dict[str, float], prefix: str = "eval") -> str:
    """One line: overall success with its standard error and episode count, then per task type."""
    per_type = {k.split("/")[-1]: v for k, v in m.items() if k.startswith(f"{prefix}/success/")}
    cells = "  ".join(f"{k} {100 * v:5.1f}" for k, v in sorted(per_type.items()))
    invalid = 100 * m.get(f"{prefix}/invalid_action_rate", 0.0)
    rate, n = m.get(f"{prefix}/success", 0.0), m.get(f"{prefix}/episodes", 0.0)
    overall = f"{100 * rate:5.1f} +- {100 * success_sem(rate, n):4.1f} (n={n:.0f})"
    line = f"{title:<22} success % all {overall}  {cells}  | invalid actions {invalid:5.1f}%"
    if f"{prefix}/truncated" in m:  # where the losses go: out of steps, or ended by the env
        line += f"  | out of steps {100 * m[f'{prefix}/truncated']:5.1f}%"
    return line


def format_gain(before: dict[str, float], after: dict[str, float], prefix: str = "eval") -> str:
    """The RL phase's change in held-out success, overall with its standard error and per task type.

    The error treats the two evaluations as independent; they replay the same tasks, so it
    is conservative.
    """
    (a, n_a), (b, n_b) = ((m.get(f"{prefix}/success", 0.0), m.get(f"{prefix}/episodes", 0.0)) for m in (before, after))
    sem = math.hypot(success_sem(a, n_a), success_sem(b, n_b))
    types = sorted(k.split("/")[-1] for k in after if k.startswith(f"{prefix}/success/"))
    cells = "  ".join(f"{k} {100 * (after[f'{prefix}/success/{k}'] - before.get(f'{prefix}/success/{k}', 0.0)):+5.1f}"
                      for k in types)
    return f"{'RL gain (points)':<22} all {100 * (b - a):+5.1f} +- {100 * sem:4.1f}  {cells}"


def run_training(cfg: TrainConfig, *, resume: str | None = None, policy: Any | None = None, echo=print) -> dict:
    """Run (or resume) a whole training; returns the summary also written to ``summary.json``.

    In a multi-process run every process calls this; rank 0 alone prints, logs, evaluates
    and writes files (the others return a summary with ``"main": False``).
    """
    from tqdm.auto import tqdm

    trainer = Trainer(cfg, policy)
    main = trainer.parallel.is_main
    if not main:
        echo = _silent
    if main:
        save_config(cfg, trainer.run_dir / "config.yaml")
    summary: dict[str, Any] = {"run_dir": str(trainer.run_dir), "evals": {}, "main": main,
                               "processes": trainer.parallel.world, "engine": trainer.parallel.engine}
    started = time.perf_counter()
    finished = False
    try:
        if resume:
            start = trainer.resume(resume, echo)
            trainer.prepare()
            _load_reference(trainer, start)
            echo(f"resumed from iteration {start} ({trainer.run_dir / 'checkpoints'})")
            if main:
                keep_iterations(trainer.run_dir / "metrics.jsonl", start)  # the later ones run again
            old = trainer.run_dir / "summary.json"
            try:
                summary["evals"] = json.loads(old.read_text()).get("evals", {}) if old.is_file() else {}
            except json.JSONDecodeError:
                echo(f"note: {old} is damaged; the evals before iteration {start} are not carried over")
        else:
            start = 0
            if main:
                keep_iterations(trainer.run_dir / "metrics.jsonl", -1)
            if cfg.eval_before and trainer.eval_envs is not None:
                summary["evals"]["initial"] = trainer.evaluate()
                echo(format_success("initial", summary["evals"]["initial"]))
            if cfg.sft.steps:  # before the model is wrapped: every process runs the same warm start
                summary["sft_loss"] = _warm_start(trainer, echo)
                if trainer.eval_envs is not None:
                    summary["evals"]["after SFT"] = trainer.evaluate()
                    echo(format_success("after SFT", summary["evals"]["after SFT"]))
            trainer.prepare()
            trainer.freeze_reference()
            _save_reference(trainer)
            first = summary["evals"].get("after SFT") or summary["evals"].get("initial") or {}
            trainer.log({"iteration": 0, **first})
        bar = tqdm(range(start + 1, cfg.iterations + 1), desc=f"{cfg.algo.name}", disable=not (cfg.progress and main))
        last_eval: dict[str, float] = {}
        held_out: dict[int, dict[str, float]] = {}  # this process's held-out evaluations, by iteration
        selected = _read_selected(trainer.run_dir, start) if resume and trainer.select_envs is not None else None
        for it in bar:
            t0 = time.perf_counter()
            rollout = collect(trainer.actor, trainer.envs, trainer.sampling(it), seed=derive_seed(cfg.seed, it),
                              shaping=trainer.shaping)
            whole = trainer.gather(rollout)
            record: dict[str, Any] = {"iteration": it, **rollout_metrics(whole.rollout)}
            t1 = time.perf_counter()
            record.update(trainer.update(rollout, it, whole))
            record["train/seconds"] = time.perf_counter() - t1
            if trainer.select_envs is not None and (it % cfg.select_every == 0 or it == cfg.iterations):
                scores = trainer.evaluate(on="select")
                record.update(scores)
                if selected is None or scores["select/success"] > selected["success"]:  # ties: the earlier
                    selected = _save_selected(trainer, it, scores["select/success"])
            if (cfg.eval_every and it % cfg.eval_every == 0) or (it == cfg.iterations and selected is None):
                last_eval = held_out[it] = trainer.evaluate()
                record.update(last_eval)
            record["time/iteration_seconds"] = time.perf_counter() - t0
            trainer.log(record)
            trainer.iteration = it
            if _last_reset(cfg, it) == it:
                trainer.freeze_reference()  # before the checkpoint: a resume from it finds this reference's file
                _save_reference(trainer, it)
            if it % cfg.save_every == 0 or it == cfg.iterations:
                trainer.save(it)
                _prune_references(trainer)
            bar.set_postfix(success=f"{record['rollout/success']:.2f}", invalid=f"{record['rollout/invalid_action_rate']:.2f}")
        title = f"after {cfg.algo.name} ({cfg.iterations} it)"
        if cfg.iterations > start and selected is not None:  # the chosen weights are the run's result
            _load_selected(trainer)
            last_eval = held_out.get(selected["iteration"]) or trainer.evaluate()  # the same tasks and seeds: no rerun
            where = ", ".join(f"{k} {v}" for k, v in cfg.env.select_kwargs.items()) or "the training envs"
            echo(f"chose iteration {selected['iteration']} of {cfg.iterations}: success {100 * selected['success']:.1f}% "
                 f"on {cfg.env.select_episodes} episodes of {where}")
            summary["selected"] = {**selected, "weights": str(trainer.run_dir / SELECTED_FILE)}
            title = f"after {cfg.algo.name} (it {selected['iteration']}/{cfg.iterations})"
        if cfg.iterations > start and last_eval:
            summary["evals"]["after RL"] = last_eval
            echo(format_success(title, last_eval))
            before = summary["evals"].get("after SFT") or summary["evals"].get("initial")
            if before:
                echo(format_gain(before, last_eval))
        summary["seconds"] = time.perf_counter() - started
        summary["final_checkpoint"] = str(ckpt.latest_checkpoint(trainer.run_dir / "checkpoints")) if (
            trainer.run_dir / "checkpoints" / ckpt.LATEST_FILE).is_file() else None
        if main:
            curve = plot_curve(read_jsonl(trainer.run_dir / "metrics.jsonl"), trainer.run_dir / "learning_curve.png",
                               title=f"{cfg.algo.name} on {cfg.env.id} ({cfg.model.name})")
            summary["curve"] = str(curve) if curve else None
            write_atomically(trainer.run_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
        trainer.parallel.barrier()  # the others wait for rank 0's files before the run ends
        finished = True
        return summary
    finally:
        trainer.close(end_process_group=finished)  # see Trainer.close: not after a failure
        del trainer
        gc.collect()  # see Trainer.close: free the first trainer now, not at interpreter shutdown


def _silent(*_: Any) -> None:
    """``echo`` of the processes other than rank 0."""


def _warm_start(trainer: Trainer, echo) -> list[float]:
    from tqdm.auto import tqdm

    from gigpo_gym.algos.training.sft import expert_demonstrations, oversample, sft_train

    cfg = trainer.cfg
    demos = expert_demonstrations(cfg.env.id, cfg.sft.episodes, seed=derive_seed(cfg.seed, 5),
                                  env_kwargs=cfg.env.kwargs, wrapper=_wrapper(cfg), expert_kwargs=cfg.sft.expert_kwargs)
    bar = tqdm(total=cfg.sft.steps, desc="SFT warm start", disable=not cfg.progress)

    def on_step(step: int, loss: float, lr: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        if step % 10 == 0 or step == cfg.sft.steps - 1:
            trainer.log({"iteration": 0, "sft/step": step, "sft/loss": loss, "sft/lr": lr}, step=step)

    demos = oversample(demos, cfg.sft.oversample)
    losses = sft_train(trainer.policy, demos, steps=cfg.sft.steps, lr=cfg.sft.lr, lr_schedule=cfg.sft.lr_schedule,
                       batch_size=cfg.sft.batch_size, seed=cfg.seed, on_step=on_step)
    bar.close()
    echo(f"SFT warm start: {len(demos)} expert steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return [losses[0], losses[-1]]
