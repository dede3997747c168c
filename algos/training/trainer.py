"""The trainer: SFT warm start, then rollout -> advantages -> clipped-surrogate updates, evaluated and saved.

``Trainer(cfg).train()`` runs a whole training and reads top to bottom: optionally a
supervised warm start on expert demonstrations (``warm_start``) and an evaluation, then
for each iteration ``run_iteration`` (a grouped rollout through the episode player, the
configured algorithm's per-row advantages, PPO-style updates with a k3 KL to a frozen
reference and an entropy bonus), the choice of the run's result on selection envs
(``select``), held-out evaluations, metrics and atomic checkpoints (``save``).  Every
file of the run goes through ``checkpoint.RunFolder``.  The algorithm owns only its
advantage rule (``estimators.registry``).

Several processes (``accelerate launch``, ``torchrun``) train one model data-parallel:
each plays its own task groups and the update equals one process's over all groups
(``training.distributed`` says how); rank 0 alone logs, evaluates and checkpoints.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training import distributed
from gigpo_gym.algos.training.checkpoint import RunFolder, last_reset
from gigpo_gym.algos.training.compute import (
    DeviceTimer,
    configure_determinism,
    configure_matmul,
    micro_batches,
    optimizer_options,
    padded,
    padding_share,
    plan_update_memory,
    token_micro_batches,
)
from gigpo_gym.algos.training.config import ConfigError, OptimConfig, TrainConfig, config_to_dict, scheduled_lr
from gigpo_gym.algos.training.loss import choice_kl, policy_loss, value_loss
from gigpo_gym.algos.training.metrics import format_gain, format_iteration, format_success, rollout_metrics, sample_prompts
from gigpo_gym.algos.training.models import build_policy
from gigpo_gym.algos.training.records import Recorder, Updated
from gigpo_gym.algos.estimators.batch import StepBatch
from gigpo_gym.algos.estimators.registry import AdvantageParts
from gigpo_gym.algos.policies.base import ChoiceBatch, SamplingParams
from gigpo_gym.algos.policies.hf import rollout_weights_dtype, sdpa_backends
from gigpo_gym.algos.training.rollout import Rollout, collect
from gigpo_gym.core.anchor import digest
from gigpo_gym.core.env import derive_seed


def say(*parts: Any) -> None:
    """Print a line at once (a run's log is read while it runs, often through a pipe or a file)."""
    print(*parts, flush=True)


def learning_rate(optim: OptimConfig, iteration: int, iterations: int) -> float:
    """The learning rate of RL iteration ``iteration`` (1-based) of ``iterations`` (see ``scheduled_lr``)."""
    return scheduled_lr(optim.lr, optim.lr_schedule, iteration, iterations, optim.warmup_iterations)


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


@dataclass
class Advantages:
    """The "compute advantages" phase of an update (``Trainer.compute_advantages``), kept as ``Trainer.advantages``.

    Arrays are over the whole round's rows (every process's, in one process's order, as
    ``WholeRollout`` and ``batch`` hold them).
    """

    #: The rows as the algorithm saw them.
    batch: StepBatch
    #: Each row's advantage.
    per_row: np.ndarray
    #: The rows the update trains on: the algorithm's row mask, a non-empty reply, and with
    #: ``optim.skip_zero_advantage`` a nonzero advantage.
    keep: np.ndarray
    #: The critic's regression targets (algorithms with a critic), else None.
    value_targets: np.ndarray | None
    #: Share of zero advantages among the rows the algorithm keeps (before ``skip_zero_advantage``).
    zero_share: float
    seconds: float
    #: The parts the algorithm made ``per_row`` of (A^E, A^S, step groups: ``Algorithm.advantage_parts``).
    parts: AdvantageParts | None = None


@dataclass
class UpdateRows:
    """This process's rows as the loss reads them (``Trainer.training_rows``), indexed by their place in its rollout.

    Everything per row lives on the device from here to the loss: a micro-batch is an
    index into these tensors, not lists padded on the host.
    """

    #: The rows the update trains on, as indices into the whole round's rows (every process's).
    kept: np.ndarray

    #: Prompt + response ids (``TokenRows``), or the rows as choices among their options (``ChoiceBatch``).
    tokens: Any
    #: Old log-probs, ``[rows, width]`` (choices: the chosen option's, ``[rows, 1]``).
    old: torch.Tensor
    #: The KL reference's log-probs (choices: of every option), or None without a KL term.
    ref: torch.Tensor | None
    advantages: torch.Tensor
    targets: torch.Tensor | None
    #: One row of this process's, for the zero-weight micro-batches that keep the processes in step.
    padding_row: np.ndarray
    #: The scoring pass's time on the device, read with the update's other times.
    scoring_time: DeviceTimer
    #: The reference's share of the scoring pass (the models that scored in it took the same rows, an equal share each).
    reference_share: float = 0.0


class Trainer:
    """Owns the policy, the reference, the optimiser, the envs and the run folder; ``train()`` trains.

    ``train`` is the whole run; its steps are public for benchmarks and tools that run
    part of one: ``warm_start``, ``prepare``, ``run_iteration``, ``select``,
    ``evaluate``, ``save`` / ``resume``, ``save_selected`` / ``load_selected``.  Use it
    as a context manager (or call ``close``) to free the envs and the process group.
    """

    def __init__(self, cfg: TrainConfig, policy: Any | None = None):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        #: Every file of the run (config, metrics, checkpoints, reference and selected weights, summary).
        self.run = RunFolder(self.run_dir)
        self.algo = cfg.algo.build()
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
        if policy is not None and cfg.prompt.template == "tools" and "messages" not in policy.needs_context:
            raise ConfigError("prompt.template 'tools' plays chats with tool calls, and the given policy answers "
                              "prompt strings only (its needs_context has no 'messages')")
        cfg.check_envs()  # a bad split, task type or data folder: one line, before the run folder exists
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
        if hasattr(self.policy, "train_on_copy"):
            self.policy.train_on_copy = self.trains_on_copy()
        if self.parallel.world > 1 and hasattr(self.policy, "compiled_layers"):
            self.policy.compiled_layers = False  # DDP's and FSDP's wrappers: not compiled through, and not tested
        self.run_dir.mkdir(parents=True, exist_ok=True)  # after the last refusal of the config
        o = cfg.optim
        self.weights = o.loss_weights(self.algo)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        configure_matmul(self.device, cfg.model.tf32)
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, weight_decay=o.weight_decay,
                                           **optimizer_options(self.device))
        self.reference = None
        self.shaping = cfg.reward
        with self.parallel.main_first():
            self.envs = cfg.make_envs("train", groups, first_group)
        self.eval_envs = self.select_envs = None
        if self.parallel.is_main:  # rank 0 alone evaluates
            if e.eval_episodes:
                self.eval_envs = cfg.make_envs("eval")
            if cfg.select_every:
                self.select_envs = cfg.make_envs("select")
        self.iteration = 0
        self.config_digest = digest(config_to_dict(cfg))
        #: What the update's forward/backward goes through (DDP/FSDP wrapper; the policy in one process).
        self.engine = self.policy
        #: A plain module with the trained weights for gradient-free scoring (the policy, or an inference copy).
        self.scorer = self.policy
        #: What generates (the scorer, or a vLLM engine holding the same weights).
        self.actor = self.policy
        self.prepared = False
        self._pending_optimizer_state: dict | None = None
        #: The last update's advantages (``update``'s first phase); None before the first update.
        self.advantages: Advantages | None = None
        #: Rank 0's recorder of a few task groups per iteration (``training.records``); None: recording is off.
        self.recorder = Recorder(self.run.records, cfg.records.groups, cfg.seed, cfg.records.text_chars) \
            if cfg.records.groups and self.parallel.is_main else None
        #: Tokens per micro-batch (``optim.micro_batch_tokens``; None: ``micro_batch_size`` rows), set in ``prepare``.
        self.micro_batch_tokens: int | None = None

    # -- the whole run -------------------------------------------------------------
    def train(self, resume: str | Path | None = None, echo=say) -> dict[str, Any]:
        """Run (or, with ``resume``: 'latest' or a checkpoint folder, continue) the whole training.

        Returns the summary also written to ``summary.json``.  In a multi-process run every
        process calls this; rank 0 alone prints, logs, evaluates and writes files (the
        others return a summary with ``"main": False``).
        """
        cfg, main = self.cfg, self.parallel.is_main
        echo = echo if main else _silent
        if main:
            self.run.write_config(cfg)
        summary: dict[str, Any] = {"run_dir": str(self.run_dir), "evals": {}, "main": main,
                                   "processes": self.parallel.world, "engine": self.parallel.engine}
        started = time.perf_counter()
        start = self._resume_run(resume, summary, echo) if resume else self._start_run(summary, echo)
        last_eval: dict[str, float] = {}
        held_out: dict[int, dict[str, float]] = {}  # this process's held-out evaluations, by iteration
        selected = self.run.selected(before=start) if resume and self.select_envs is not None else None
        for it in range(start + 1, cfg.iterations + 1):
            t0 = time.perf_counter()
            record = self.run_iteration(it)
            if self.select_envs is not None and (it % cfg.select_every == 0 or it == cfg.iterations):
                scores, selected = self.select(it, selected)
                record.update(scores)
            if (cfg.eval_every and it % cfg.eval_every == 0) or (it == cfg.iterations and selected is None):
                last_eval = held_out[it] = self.evaluate()
                record.update(last_eval)
            record["time/iteration_seconds"] = time.perf_counter() - t0
            self.log(record)
            self.iteration = it
            if last_reset(it, cfg.optim.kl_reset_every) == it:
                self.freeze_reference()  # before the checkpoint: a resume from it finds this reference's file
                self._save_reference(it)
            if it % cfg.save_every == 0 or it == cfg.iterations:
                self.save(it)
            echo(format_iteration(record, cfg.iterations))
        title = f"after {cfg.algo.name} ({cfg.iterations} it)"
        if cfg.iterations > start and selected is not None:  # the chosen weights are the run's result
            self.load_selected()
            last_eval = held_out.get(selected["iteration"]) or self.evaluate()  # the same tasks and seeds: no rerun
            where = ", ".join(f"{k} {v}" for k, v in cfg.env.select_kwargs.items()) or "the training envs"
            echo(f"chose iteration {selected['iteration']} of {cfg.iterations}: success {100 * selected['success']:.1f}% "
                 f"on {cfg.env.select_episodes} episodes of {where}")
            summary["selected"] = {**selected, "weights": str(self.run.selected_file)}
            title = f"after {cfg.algo.name} (it {selected['iteration']}/{cfg.iterations})"
        if cfg.iterations > start and last_eval:
            summary["evals"]["after RL"] = last_eval
            echo(format_success(title, last_eval))
            before = summary["evals"].get("after SFT") or summary["evals"].get("initial")
            if before:
                echo(format_gain(before, last_eval))
            if "after SFT" in summary["evals"] and "initial" in summary["evals"]:  # the whole run's, warm start included
                echo(format_gain(summary["evals"]["initial"], last_eval, title="gain over the untrained model"))
        summary["seconds"] = time.perf_counter() - started
        final = self.run.final_checkpoint()
        summary["final_checkpoint"] = str(final) if final is not None else None
        if main:
            curve = self.run.plot_curve(title=f"{cfg.algo.name} on {cfg.env.id} ({cfg.model.name})")
            summary["curve"] = str(curve) if curve else None
            self.run.write_summary(summary)
        self.parallel.barrier()  # the others wait for rank 0's files before the run ends
        return summary

    def _start_run(self, summary: dict[str, Any], echo) -> int:
        """A fresh run up to its first iteration: evaluation, warm start, reference; returns 0."""
        cfg = self.cfg
        if self.parallel.is_main:
            self.run.keep_iterations(-1)
        if cfg.eval_before and self.eval_envs is not None:
            summary["evals"]["initial"] = self.evaluate()
            echo(format_success("initial", summary["evals"]["initial"]))
        if cfg.sft.steps:  # before the model is wrapped: every process runs the same warm start
            summary["sft_loss"] = self.warm_start(echo)
            if self.eval_envs is not None:
                summary["evals"]["after SFT"] = self.evaluate()
                echo(format_success("after SFT", summary["evals"]["after SFT"]))
        self.prepare()
        self.freeze_reference()
        self._save_reference(0)
        first = summary["evals"].get("after SFT") or summary["evals"].get("initial") or {}
        self.log({"iteration": 0, **first})
        return 0

    def _resume_run(self, where: str | Path, summary: dict[str, Any], echo) -> int:
        """A killed run back at its checkpoint (weights, optimiser, reference, metrics, evals); returns its iteration."""
        start = self.resume(where, echo)
        self.prepare()
        self._load_reference(start)
        echo(f"resumed from iteration {start} ({self.run.checkpoints})")
        if self.parallel.is_main:
            self.run.keep_iterations(start)  # the later ones run again
        try:
            summary["evals"] = (self.run.summary() or {}).get("evals", {})
        except json.JSONDecodeError:
            echo(f"note: {self.run.path / RunFolder.SUMMARY_FILE} is damaged; the evals before iteration {start} "
                 "are not carried over")
        return start

    def warm_start(self, echo=say) -> list[float]:
        """Supervised warm start on the env expert's demonstrations (the ``sft`` section); the first and last loss.

        Runs before ``prepare``: every process trains the same warm start.
        """
        from tqdm.auto import tqdm

        from gigpo_gym.algos.training.sft import expert_demonstrations, oversample, sft_train

        cfg = self.cfg
        echo(f"SFT warm start: {cfg.sft.steps} steps on {cfg.sft.episodes} expert episodes")
        demos = expert_demonstrations(cfg.env.id, cfg.sft.episodes, seed=derive_seed(cfg.seed, 5),
                                      env_kwargs=cfg.env_kwargs("train"), wrapper=cfg.wrapper(),
                                      expert_kwargs=cfg.sft.expert_kwargs)
        bar = tqdm(total=cfg.sft.steps, desc="SFT warm start", disable=not cfg.progress)

        def on_step(step: int, loss: float, lr: float) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            if step % 10 == 0 or step == cfg.sft.steps - 1:
                self.log({"iteration": 0, "sft/step": step, "sft/loss": loss, "sft/lr": lr}, step=step)

        demos = oversample(demos, cfg.sft.oversample)
        losses = sft_train(self.policy, demos, steps=cfg.sft.steps, lr=cfg.sft.lr, lr_schedule=cfg.sft.lr_schedule,
                           batch_size=cfg.sft.batch_size, seed=cfg.seed, on_step=on_step)
        bar.close()
        echo(f"SFT warm start: {len(demos)} expert steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        return [losses[0], losses[-1]]

    def rollout(self, iteration: int) -> Rollout:
        """Iteration ``iteration``'s training rollout: every env of this process played to the end (a few of its
        prompts go to the run's ``prompts.jsonl``)."""
        rollout = collect(self.actor, self.envs, self.sampling(iteration), seed=derive_seed(self.cfg.seed, iteration),
                          shaping=self.shaping)
        if self.parallel.is_main:
            self.run.log_prompts(sample_prompts(rollout, iteration))
        return rollout

    def run_iteration(self, iteration: int) -> dict[str, Any]:
        """One RL iteration in SB3's phases: collect (``rollout``, ``gather``), then ``update`` (compute the
        advantages, kept as ``self.advantages``, and train); its record (every process's rollout metrics, the
        update's)."""
        rollout = self.rollout(iteration)
        whole = self.gather(rollout)
        record: dict[str, Any] = {"iteration": iteration, **rollout_metrics(whole.rollout)}
        t1 = time.perf_counter()
        record.update(self.update(rollout, iteration, whole))
        record["train/seconds"] = time.perf_counter() - t1
        if self.recorder is not None:
            a = self.advantages
            self.recorder.record_rollout(iteration, rollout, whole, Updated(a.batch, a.per_row, a.keep, a.parts),
                                         self.algo.config())
        return record

    def select(self, iteration: int, selected: dict[str, Any] | None) -> tuple[dict[str, float], dict[str, Any] | None]:
        """Score the policy on the selection envs and keep its weights when it beats ``selected`` (ties: the earlier).

        Returns the scores and the choice so far (``{"iteration", "success"}``).
        """
        scores = self.evaluate(on="select")
        if selected is None or scores["select/success"] > selected["success"]:
            selected = self.save_selected(iteration, scores["select/success"])
        return scores, selected

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

    # -- its pieces: generation, scoring, the update -------------------------------------
    def prepare(self) -> None:
        """Wrap the trained module for N processes and set up generation; once, after any SFT warm start.

        Rank 0's weights go to every process first.  A sharded engine (and ZeRO-2) gets an inference copy
        (full weights) to generate and score with; ``model.generation: vllm`` a vLLM engine.
        """
        if self.prepared:
            return
        p = self.parallel
        self._plan_memory()  # before any wrapping: checkpointing is set on the plain model
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

    def _plan_memory(self) -> None:
        """Tokens per micro-batch (``optim.micro_batch_tokens``) and gradient checkpointing (``model.gradient_checkpointing``)
        where the config leaves them to the card (``auto``; ``compute.plan_update_memory``).  Off a GPU, ``auto``
        means ``micro_batch_size`` rows and no checkpointing."""
        tokens, checkpointing = self.cfg.optim.micro_batch_tokens, self.cfg.model.gradient_checkpointing
        if self.device.type == "cuda" and "auto" in (tokens, checkpointing):
            total = torch.cuda.get_device_properties(self.device).total_memory
            config = self.policy.model.config
            planned, chosen = plan_update_memory(
                total, self._resident_bytes(total), config.hidden_size, config.num_hidden_layers,
                self.cfg.model.max_prompt_tokens + self.cfg.sampling.max_new_tokens,
                None if checkpointing == "auto" else checkpointing, self.policy.kept_logits_bytes())
            tokens, checkpointing = (planned if tokens == "auto" else tokens), chosen
        self.micro_batch_tokens = tokens if isinstance(tokens, int) else None
        if self.cfg.model.gradient_checkpointing == "auto":
            self.policy.set_checkpointing(checkpointing is True)

    def _resident_bytes(self, total: int) -> int:
        """Bytes that stay on the card through an update: the weights, the trained ones' gradients and AdamW moments,
        the KL reference, a rollout copy, an inference copy, a colocated vLLM engine's share, a chunk's logits."""
        params = list(self.policy.parameters())
        weights, count = sum(q.numel() * q.element_size() for q in params), sum(q.numel() for q in params)
        out = weights + 3 * sum(q.numel() * q.element_size() for q in params if q.requires_grad)
        if self.weights.kl_coef and self.cfg.model.lora is None:
            reference = self.reference_dtype()
            out += weights if reference is None else count * reference.itemsize
        out += weights * self.parallel.needs_inference_copy
        if self.policy.rollout_dtype is not None:
            out += count * getattr(torch, self.policy.rollout_dtype).itemsize
        if self.cfg.model.generation == "vllm":
            out += int(self.cfg.model.vllm.gpu_memory_utilization * total)
        vocab = self.policy.model.get_output_embeddings().weight.shape[0]
        return out + 3 * 4 * self.policy.logits_chunk * vocab  # float32 logits, their softmax and gradient

    def refresh_actor(self) -> None:
        """After an update: copy the trained weights into the inference copy and the vLLM engine."""
        if self.scorer is not self.policy:
            self.parallel.copy_weights(self.engine, self.scorer)
        if self.actor is not self.scorer:
            self.actor.load_weights(self.scorer)

    def sampling(self, iteration: int, evaluation: bool = False) -> SamplingParams:
        """How iteration ``iteration``'s rollout (or an evaluation) samples: the config's, on this process's stream."""
        seed = self._stream(derive_seed(self.cfg.seed, iteration, 2 if evaluation else 1))
        return self.cfg.sampling.params(evaluation, seed)

    def _stream(self, seed: int) -> int:
        """A random stream of this process (one process: the run's own stream, as before)."""
        return seed if self.parallel.world == 1 else derive_seed(seed, self.parallel.rank)

    def freeze_reference(self) -> None:
        """The KL anchor: a frozen copy of the policy as it is now (LoRA: adapters off)."""
        if not self.weights.kl_coef or self.cfg.model.lora is not None:
            return
        if self.reference is not None:  # a reset: into the copy there is, not a third one
            self.reference.load_state_dict(self.scorer.state_dict())
            return
        self.reference = copy.deepcopy(self.scorer).eval()
        if (dtype := self.reference_dtype()) is not None:
            self.reference.to(dtype)
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def reference_dtype(self) -> torch.dtype | None:
        """The dtype the KL reference keeps its weights in; None: the trained weights' own.

        On CUDA, where float32 weights train under a 16-bit ``model.compute_dtype``, the
        reference keeps its weights in that dtype, as verl's does: its forward then computes
        in 16 bits throughout (the residual stream too, not float32 as autocast leaves it)
        and it holds half the bytes.  Elsewhere it is an exact copy: CPU runs keep their numbers.
        The rule is the rollout copy's under ``model.rollout_dtype: auto``.
        """
        compute = getattr(self.policy, "compute_dtype", None)
        if compute is None:
            return None
        name = rollout_weights_dtype("auto", self.device, self._weights_dtype(), compute)
        return None if name is None else getattr(torch, name)

    def _weights_dtype(self) -> str:
        """The trained weights' dtype as the config names it ("float32")."""
        return str(next(self.policy.parameters()).dtype).removeprefix("torch.")

    def trains_on_copy(self) -> bool:
        """``model.train_on_copy`` resolved: whether the update scores and trains on the rollout copy.

        It needs a copy in another dtype than the weights' and one process without LoRA
        (DDP and FSDP reduce the trained module's own gradients; LoRA trains a few small
        matrices, nothing to gain), over tokens (``choice`` scores the trained module).
        ``auto`` takes it on CUDA wherever it can; a CPU run keeps its numbers.
        """
        m = self.cfg.model
        copy_dtype, weights = getattr(self.policy, "rollout_dtype", None), self._weights_dtype()
        why_not = [reason for reason, applies in (
            (f"there is no rollout copy in another dtype than the weights' {weights} (model.rollout_dtype)",
             copy_dtype in (None, weights)),
            ("several processes train (DDP and FSDP reduce the trained weights' own gradients)", self.parallel.world > 1),
            ("model.lora trains adapters", m.lora is not None),
            ("optim.loss_over: choices scores the trained weights", self.cfg.optim.loss_over == "choices"),
        ) if applies]
        if m.train_on_copy == "auto":
            return self.device.type == "cuda" and not why_not
        if m.train_on_copy and why_not:
            raise ConfigError(f"model.train_on_copy: true, but {why_not[0]}; set it to auto or false")
        return bool(m.train_on_copy)

    def gather(self, rollout: Rollout) -> "WholeRollout":
        """Every process's rows (without tokens) as one process's rollout, and where each row lives.

        Critic values are computed here, each process for its own rows, and travel along.
        """
        values = None
        if self.algo.needs_critic:
            tokens, mb = rollout.tokens, self.cfg.optim.micro_batch_size
            with torch.no_grad():  # read back once, not per micro-batch
                values = torch.cat([
                    self.scorer.values(tokens.select(range(a, min(a + mb, len(tokens))))).float()
                    for a in range(0, len(tokens), mb)
                ]).cpu().numpy() if len(tokens) else np.zeros(0)
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
        """The phases after the rollout, as SB3 names them: compute the advantages, then train on them.

        ``self.advantages`` keeps the first phase's result (``Advantages``) for whoever reads
        the iteration after it.  Returns the update's metrics.
        """
        self.prepare()
        whole = whole if whole is not None else self.gather(rollout)
        self.advantages = self.compute_advantages(whole)
        rows = self.training_rows(rollout, whole, self.advantages)
        metrics = self.optimise(rows, whole, iteration)
        self.refresh_actor()
        return {**metrics, **self._advantage_metrics(self.advantages)}

    def compute_advantages(self, whole: "WholeRollout") -> "Advantages":
        """The algorithm's per-row advantages over all processes' rows, and which rows the update trains on."""
        o, algo = self.cfg.optim, self.algo
        batch = whole.rollout.to_step_batch()
        if algo.needs_critic:
            batch.values = whole.values
        started = time.perf_counter()
        parts = algo.advantage_parts(batch)
        advantages = np.asarray(parts.advantages, dtype=np.float64)
        seconds = time.perf_counter() - started
        keep = np.asarray(algo.row_mask(batch), dtype=bool) & (whole.response_lengths > 0)
        zero_share = float(np.mean(np.abs(advantages[keep]) < 1e-9)) if keep.any() else 1.0
        if o.skip_zero_advantage:
            keep &= np.abs(advantages) >= 1e-9
        targets = np.asarray(algo.value_targets(batch), dtype=np.float64) if algo.needs_critic else None
        return Advantages(batch, advantages, keep, targets, zero_share, seconds, parts)

    def recomputes_old_log_probs(self) -> bool:
        """Whether the trained model scores the old log-probs again, instead of taking the rollout's own.

        The rollout's are the old policy's only when it sampled from the whole distribution
        (temperature 1, top-p 1) with the trained weights themselves: not a vLLM engine, not
        a rollout copy in another dtype (``model.rollout_dtype``; choices are drawn by the
        trained weights in any case).
        """
        s = self.cfg.sampling
        same_weights = self.actor is self.scorer and (self.cfg.optim.loss_over == "choices"
                                                      or self.scorer.rollout_dtype is None)
        return not (s.temperature == 1.0 and s.top_p == 1.0 and same_weights)

    def training_rows(self, rollout: Rollout, whole: "WholeRollout", advantages: "Advantages") -> "UpdateRows":
        """This process's rows as the loss reads them, on the device: tokens, old and reference log-probs,
        advantages and value targets, each one tensor cut into micro-batches there."""
        mine = np.sort(whole.local[advantages.keep & (whole.owner == self.parallel.rank)])  # local rows to score
        if self.cfg.optim.loss_over == "choices":  # one "token" per row: the chosen option among the row's options
            tokens = rollout.choice_batch
            old = None if self.recomputes_old_log_probs() else padded(
                [[lp[c]] if lp else [] for lp, c in zip(rollout.option_log_probs, tokens.choices)], 1, self.device)
        else:
            tokens = self.policy.token_rows(rollout.tokens)
            old = None if self.recomputes_old_log_probs() else padded(
                rollout.old_log_probs, max(int(tokens.response_lengths.max(initial=0)), 1), self.device)
        scoring_time = DeviceTimer(self.device)  # its work may still be queued when it returns
        with scoring_time.span():
            scored_old, ref, models = self.score_old_and_reference(tokens, mine, old is None)
        on_device = {}
        for name, per_row in (("advantages", advantages.per_row), ("targets", advantages.value_targets)):
            if per_row is not None:  # each local row's value, from the whole round's rows
                local = np.zeros(len(rollout), dtype=np.float64 if name == "advantages" else np.float32)
                local[whole.local[whole.owner == self.parallel.rank]] = per_row[whole.owner == self.parallel.rank]
                on_device[name] = torch.from_numpy(local).to(self.device, non_blocking=True)
        own = np.flatnonzero(whole.owner == self.parallel.rank)
        return UpdateRows(np.flatnonzero(advantages.keep), tokens, old if old is not None else scored_old, ref,
                          on_device["advantages"], on_device.get("targets"), whole.local[own[:1]], scoring_time,
                          reference_share=("reference" in models) / max(len(models), 1))

    @torch.no_grad()
    def score_old_and_reference(self, tokens: Any, rows: np.ndarray,
                                old: bool) -> tuple[torch.Tensor | None, torch.Tensor | None, list[str]]:
        """One pass over ``rows`` (local indices): each batch of rows is scored by the trained weights (the old
        log-probs, when ``old``) and by the KL reference (when the loss has a KL term).

        Returns both as ``[local rows, width]`` tensors on the device (zero where not
        scored; None where not asked) and the names of the models that scored.  Over
        choices the old log-prob is the chosen option's and the reference's every option's.
        """
        models: dict[str, tuple[Any, Any]] = {}
        if old:
            models["old"] = (self.scorer, contextlib.nullcontext)
        if self.weights.kl_coef and self.cfg.model.lora is not None:  # the base model: the adapters off
            models["reference"] = (self.scorer, self.scorer.without_adapters)
        elif self.weights.kl_coef and self.reference is not None:
            models["reference"] = (self.reference, contextlib.nullcontext)
        by_choice = isinstance(tokens, ChoiceBatch)
        width = 1 if by_choice else max(int(tokens.response_lengths.max(initial=0)), 1)
        widths = {"old": width, "reference": max(map(len, tokens.options)) if by_choice else width}
        out = {name: torch.zeros((len(tokens), widths[name]), dtype=torch.float32, device=self.device)
               for name in models}
        lengths = (tokens.prompt_lengths + tokens.response_lengths if not by_choice else
                   np.array([len(q) + len(r) for q, r in zip(tokens.prompt_ids, tokens.response_ids)], dtype=np.int64))
        for index in self._scoring_batches(rows, lengths):
            on_device = torch.from_numpy(index).to(self.device, non_blocking=True)
            part = tokens.select(index.tolist()) if by_choice else tokens.select(index, on_device)
            for name, (policy, context) in models.items():
                with context():
                    s = policy.log_probs(part)
                scored = s.log_probs
                if by_choice and name == "reference":  # -inf past a row's options: zero, as a padded row
                    scored = s.extras["option_log_probs"]
                    scored = scored.masked_fill(~torch.isfinite(scored), 0.0)
                out[name][on_device, : scored.shape[1]] = scored.float()
        return out.get("old"), out.get("reference"), list(models)

    def _scoring_batches(self, rows: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """The batches the scoring pass runs: rows in order, ``micro_batch_size`` at a time; under a token budget,
        rows of similar length (``lengths``) within four times the training budget (no gradients are kept;
        the factor is not measured yet)."""
        if self.micro_batch_tokens:
            return token_micro_batches(rows, lengths, 4 * self.micro_batch_tokens)
        mb = self.cfg.optim.micro_batch_size
        return [rows[a : a + mb] for a in range(0, len(rows), mb)]

    def optimise(self, rows: "UpdateRows", whole: "WholeRollout", iteration: int) -> dict[str, float]:
        """Clipped-surrogate epochs over mini-batches of the kept rows; the update's metrics.

        Each epoch permutes all rows with the run's seed; a process trains on its own rows of
        each mini-batch, with the mini-batch's global token count, so N processes take one
        process's step.  All processes run the same number of micro-batches (zero-weight
        ones where a process has fewer).  The loop reads nothing back from the device until
        its end (the gradient norms and the steps' times included).
        """
        o, p = self.cfg.optim, self.parallel
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(o, iteration, self.cfg.iterations)
        summed = ["pg_loss", "clip_fraction", "approx_kl_old"] + (["kl_ref"] if rows.ref is not None else []) + (
            ["entropy"] if self.weights.entropy_coef > 0 else []) + (["value_loss"] if rows.targets is not None else [])
        stats: dict[str, list[torch.Tensor]] = {k: [] for k in summed}  # read once, after the loop
        norms: list[torch.Tensor] = []  # each optimiser step's gradient norm, on the device until the end
        rng = np.random.default_rng(derive_seed(self.cfg.seed, iteration, 3))
        total = whole.prompt_lengths + whole.response_lengths
        loop_time, step_time = DeviceTimer(self.device), DeviceTimer(self.device)
        used: list[np.ndarray] = []  # this process's micro-batches (their padding share is logged)
        self.engine.train()
        with loop_time.span():  # on the device: the scoring pass's queued work is not counted here
            for _ in range(o.epochs):
                order = rng.permutation(rows.kept)
                size = o.mini_batch_size or max(len(order), 1)  # null: the whole iteration in one step
                for start in range(0, len(order), size):
                    mini = order[start : start + size]
                    token_count = float(len(mini) if o.loss_over == "choices" else whole.response_lengths[mini].sum())
                    mine, calls = self._micro_batches(mini, whole.owner, total)
                    used += mine
                    self.optimizer.zero_grad(set_to_none=True)
                    # local row ids of each micro-batch, then one own row for zero-weight ones: one copy to the device
                    local = [whole.local[b] for b in mine] + [rows.padding_row]
                    parts = torch.from_numpy(np.concatenate(local)).to(self.device, non_blocking=True).split(
                        [len(b) for b in local])
                    for call in range(calls):
                        # a zero-weight micro-batch keeps the processes' calls in step
                        weight = float(p.world) if call < len(mine) else 0.0
                        k = min(call, len(mine))
                        loss, st = self._micro_batch_loss(rows, local[k], parts[k], token_count, float(len(mini)))
                        if weight != 1.0:
                            loss = loss * weight
                        with sdpa_backends(self.device):  # checkpointing's recompute runs inside the backward
                            p.backward(self.engine, loss, last=call == calls - 1)
                        if weight:
                            for key in summed:
                                stats[key].append(st[key])
                    with step_time.span():  # the step's own time, apart from the queued forward and backward
                        norms.append(p.step(self.engine, self.optimizer, self.params, o.max_grad_norm))
        # per-micro-batch terms are parts of a mini-batch mean: sum them per mini-batch, average mini-batches
        steps = len(norms)
        read = {k: torch.stack(v).double().cpu().numpy() if v else np.zeros(0) for k, v in stats.items()}
        totals = p.sum([float(np.sum(read[k])) for k in summed])
        m = {f"train/{k}": v / steps for k, v in zip(summed, totals)} if steps else {}
        if steps:
            m["train/grad_norm"] = float(np.mean(torch.stack(norms).double().cpu().numpy()))
        m["train/optimizer_steps"] = float(steps)
        m["train/padding_share"] = padding_share(used, total)  # of this process's micro-batches
        m["time/optimize_seconds"] = loop_time.seconds()  # forward, backward and the optimiser steps
        m["time/step_seconds"] = step_time.seconds()  # the optimiser steps alone (clipping included)
        scored = rows.scoring_time.seconds()
        m["time/score_seconds"] = scored  # old log-probs (when recomputed) and the reference's, one pass
        m["time/reference_seconds"] = scored * rows.reference_share
        return m

    def _micro_batches(self, mini: np.ndarray, owner: np.ndarray, total: np.ndarray) -> tuple[list[np.ndarray], int]:
        """This process's rows of ``mini`` in micro-batches of similar length (global row ids), and how many
        forward/backward calls every process makes (the busiest process's micro-batches)."""
        def plan(rows: np.ndarray) -> list[np.ndarray]:
            if self.micro_batch_tokens:
                return token_micro_batches(rows, total, self.micro_batch_tokens)
            return micro_batches(rows, total, self.cfg.optim.micro_batch_size)

        mine = plan(mini[owner[mini] == self.parallel.rank])
        calls = max(len(plan(mini[owner[mini] == rank])) for rank in range(self.parallel.world))
        return mine, calls

    def _micro_batch_loss(self, rows: "UpdateRows", local: np.ndarray, on_device: torch.Tensor, token_count: float,
                          row_count: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of the local rows ``local`` (``on_device``: the same, on the device) and its stats."""
        by_choice = isinstance(rows.tokens, ChoiceBatch)
        part = rows.tokens.select(local.tolist()) if by_choice else rows.tokens.select(local, on_device)
        scores = self.engine(part, with_entropy=self.weights.entropy_coef > 0, with_values=rows.targets is not None)
        width = scores.log_probs.shape[1]
        ref_rows, kl = None, None
        if rows.ref is not None and by_choice:  # exact KL over the options, not an estimate at the choice
            option_logp = scores.extras["option_log_probs"]
            kl = choice_kl(option_logp, rows.ref.index_select(0, on_device)[:, : option_logp.shape[1]])
        elif rows.ref is not None:
            ref_rows = rows.ref.index_select(0, on_device)[:, :width]
        loss, st = policy_loss(
            scores.log_probs, rows.old.index_select(0, on_device)[:, :width], rows.advantages.index_select(0, on_device),
            scores.mask, token_count, self.weights, ref_log_probs=ref_rows, kl=kl, entropy=scores.entropy,
        )
        if rows.targets is not None:
            vl = value_loss(scores.extras["values"], rows.targets.index_select(0, on_device), row_count, self.weights)
            loss = loss + vl
            st["value_loss"] = vl.detach()
        return loss, st

    def _advantage_metrics(self, advantages: "Advantages") -> dict[str, float]:
        """What the update logs of its advantages and rows, next to the algorithm's own diagnostics."""
        a, keep = advantages.per_row, advantages.keep
        m = {k.replace("adv/", "train/adv_"): v
             for k, v in self.algo.diagnostics(advantages.batch, advantages.parts).items()}
        m["train/rows_used"] = float(keep.sum())
        m["train/lr"] = float(self.optimizer.param_groups[0]["lr"])
        m["train/advantage_mean"] = float(a[keep].mean()) if keep.any() else 0.0
        m["train/advantage_std"] = float(a[keep].std()) if keep.any() else 0.0
        m["train/zero_advantage_share"] = advantages.zero_share  # before skip_zero_advantage drops those rows
        m["time/advantage_seconds"] = advantages.seconds
        return m

    # -- files and lifecycle -------------------------------------------------------------
    def log(self, record: dict[str, Any], step: int | None = None) -> None:
        """Log ``record`` to the run's metrics (rank 0)."""
        if self.parallel.is_main:
            self.run.log(record, step)

    def save(self, iteration: int) -> Path:
        """Checkpoint ``iteration`` (rank 0 writes; every process takes part: a sharded optimiser state is gathered)."""
        state = {"config_digest": self.config_digest, "iteration": iteration}
        if self.recorder is not None:  # first: a checkpoint is never without its iterations' records
            self.recorder.flush()
        keep = self.cfg.keep_checkpoints
        if self.parallel.world == 1:
            folder = self.run.save_checkpoint(iteration, self.policy, self.optimizer, state, keep=keep)
        else:
            optimizer = _FullState(self.parallel.optimizer_state(self.optimizer))
            if self.parallel.is_main:  # the scorer holds the full trained weights (the policy, or the inference copy)
                self.run.save_checkpoint(iteration, self.scorer, optimizer, state, keep=keep)
            self.parallel.barrier()
            folder = ckpt.checkpoint_folder(self.run.checkpoints, iteration)
        if self.parallel.is_main:  # the reset references no kept checkpoint resumes with go
            self.run.prune_references(self.cfg.optim.kl_reset_every)
        return folder

    def resume(self, where: str | Path = "latest", echo=say) -> int:
        """Load a checkpoint ('latest': this run's newest complete one, or a folder); returns its iteration.

        Before ``prepare``: any process count resumes from any checkpoint (they hold the
        single-process format); the optimiser state is loaded once the optimiser is wrapped.
        """
        if self.prepared and self.parallel.world > 1:
            raise RuntimeError("resume() must come before prepare() in a multi-process run")
        latest = str(where) == "latest"
        folder = self.run.resumable(echo) if latest else Path(where)
        if self.parallel.world == 1:
            state = ckpt.load_checkpoint(folder, self.policy, self.optimizer, verify=not latest)
        else:
            if not latest:  # the optimiser state is read below: the whole checkpoint must be intact
                ckpt.verify_checkpoint(folder)
            state = ckpt.load_checkpoint(folder, self.policy, None, verify=False)
            self._pending_optimizer_state = torch.load(folder / ckpt.OPTIMIZER_FILE, map_location="cpu",
                                                       weights_only=True)
        self.iteration = int(state["iteration"])
        return self.iteration

    def save_selected(self, iteration: int, success: float, **extra: str) -> dict[str, Any]:
        """Keep the trained weights as the run's result (``selected.safetensors``), with ``extra`` metadata."""
        return self.run.save_selected(self.scorer, iteration, success, **extra)

    def load_selected(self) -> None:
        """Put the chosen weights into the model that generates (rank 0's, after the last update)."""
        self.run.load_selected(self.scorer)
        if self.actor is not self.scorer:
            self.actor.load_weights(self.scorer)

    def _save_reference(self, iteration: int) -> None:
        if self.reference is not None and self.parallel.is_main:
            self.run.save_reference(self.reference, iteration)

    def _load_reference(self, iteration: int) -> None:
        if not self.weights.kl_coef or self.cfg.model.lora is not None:
            return
        self.freeze_reference()
        self.run.load_reference(self.reference, iteration, self.cfg.optim.kl_reset_every)

    def close(self, end_process_group: bool = True) -> None:
        """End the process group and close the envs, the generation engine and the log.

        A process that failed passes ``end_process_group=False`` (leaving a ``with`` block
        on an exception does so): ending the group waits for the other processes, which
        may be inside a collective that never completes (NCCL then deadlocks); the group
        ends with the process, and the launcher stops the rest.

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
        self.run.close()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close(end_process_group=kind is None)


class _FullState:
    """An optimiser state already gathered, where ``save_checkpoint`` asks an optimiser for it."""

    def __init__(self, state: dict[str, Any]):
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


def run_training(cfg: TrainConfig, *, resume: str | None = None, policy: Any | None = None, echo=say) -> dict:
    """Build a ``Trainer``, ``train()`` and close it: what ``gigpo-gym train`` runs (returns the summary)."""
    trainer = Trainer(cfg, policy)
    finished = False
    try:
        summary = trainer.train(resume=resume, echo=echo)
        finished = True
        return summary
    finally:
        trainer.close(end_process_group=finished)  # see Trainer.close: not after a failure
        del trainer
        gc.collect()  # see Trainer.close: free the first trainer now, not at interpreter shutdown


def _silent(*_: Any) -> None:
    """``echo`` of the processes other than rank 0."""
