"""The training loop: rollout -> advantages -> clipped-surrogate updates -> metrics.

Reads top to bottom: ``Trainer.run`` optionally warm-starts with SFT on expert
demonstrations, evaluates, then for each iteration collects a grouped rollout,
asks the configured algorithm for per-row advantages, runs PPO-style updates with a
k3 KL to a frozen reference and an entropy bonus, logs metrics (TensorBoard +
``metrics.jsonl``), checkpoints atomically and evaluates on the held-out split.
The algorithm owns only its advantage rule (``estimators.registry``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training.config import ConfigError, TrainConfig, config_to_dict, save_config
from gigpo_gym.algos.training.loss import LossWeights, policy_loss, value_loss
from gigpo_gym.algos.training.metrics import append_jsonl, keep_iterations, plot_curve, read_jsonl, rollout_metrics
from gigpo_gym.algos.policies.base import SamplingParams, TokenBatch
from gigpo_gym.algos.training.rollout import RewardShaping, Rollout, collect, llm_wrapper
from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import write_atomically
from gigpo_gym.core.env import derive_seed


def build_policy(cfg: TrainConfig):
    """The configured HF policy ('tiny' is built from the env's expert text, 'smollm2' offline)."""
    from gigpo_gym.algos.policies.hf import HFPolicy

    m = cfg.model
    kwargs = dict(
        device=m.device, dtype=m.dtype, compute_dtype=m.compute_dtype, gradient_checkpointing=m.gradient_checkpointing,
        logits_chunk=m.logits_chunk, lora=m.lora, use_chat_template=m.use_chat_template,
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


def _pad(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r[:width], dtype=torch.float32)
    return out.to(device)


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


class Trainer:
    """Owns the policy, the reference, the optimiser, the envs and the run folder."""

    def __init__(self, cfg: TrainConfig, policy: Any | None = None):
        import gigpo_gym

        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.algo = _algorithm(cfg)
        configure_determinism(cfg.deterministic)
        if cfg.model.dtype != "float32" and (cfg.iterations or cfg.sft.steps):
            warnings.warn(
                f"model.dtype is {cfg.model.dtype}: an optimizer step smaller than the weight's precision (2^-8 of it in "
                "bfloat16) is lost, so at small learning rates most weights never change; train float32 weights with "
                f"model.compute_dtype: {cfg.model.dtype} instead", stacklevel=2)
        self.policy = policy if policy is not None else build_policy(cfg)
        self.device = self.policy.device
        o = cfg.optim
        self.weights = LossWeights(
            clip_low=o.clip_low if o.clip_low is not None else self.algo.clip_low,
            clip_high=o.clip_high if o.clip_high is not None else self.algo.clip_high,
            kl_coef=o.kl_coef, entropy_coef=o.entropy_coef, value_coef=o.value_coef,
        )
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, weight_decay=o.weight_decay)
        self.reference = None
        self.shaping = RewardShaping(cfg.env.reward_scale, cfg.env.reward_source, cfg.env.invalid_action_penalty)
        e = cfg.env
        self.envs = gigpo_gym.make_grouped(
            e.id, e.num_groups, e.group_size, backend=e.backend, seed=cfg.seed, env_kwargs=e.kwargs,
            wrappers=(_wrapper(cfg),),
        )
        self.eval_envs = None
        if e.eval_episodes:
            self.eval_envs = gigpo_gym.make_grouped(
                e.id, e.eval_episodes, 1, backend=e.backend, seed=cfg.seed, env_kwargs={**e.kwargs, **e.eval_kwargs},
                wrappers=(_wrapper(cfg),),
            )
        self.iteration = 0
        self.config_digest = digest(config_to_dict(cfg))
        self._writer = None

    # -- pieces ----------------------------------------------------------------------
    def sampling(self, iteration: int, evaluation: bool = False) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(
            max_new_tokens=s.max_new_tokens, temperature=s.eval_temperature if evaluation else s.temperature,
            top_p=1.0 if evaluation else s.top_p, stop=tuple(s.stop),
            seed=derive_seed(self.cfg.seed, iteration, 2 if evaluation else 1),
        )

    def evaluate(self, iteration: int) -> dict[str, float]:
        """Success per task type on the held-out envs (fixed tasks, eval temperature)."""
        if self.eval_envs is None:
            return {}
        rollout = collect(
            self.policy, self.eval_envs, self.sampling(0, evaluation=True), seed=derive_seed(self.cfg.seed, 999),
            shaping=self.shaping,
        )
        m = rollout_metrics(rollout, prefix="eval")
        return {k: v for k, v in m.items() if not k.startswith(("eval/step_", "eval/all_equal"))}

    def freeze_reference(self) -> None:
        """The KL anchor: a frozen copy of the policy as it is now (LoRA: adapters off)."""
        if not self.weights.kl_coef or self.cfg.model.lora is not None:
            return
        self.reference = copy.deepcopy(self.policy).eval()
        for p in self.reference.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def _score(self, policy: Any, tokens: TokenBatch, use_adapters: bool = True) -> list[list[float]]:
        out: list[list[float]] = []
        mb = self.cfg.optim.micro_batch_size
        context = contextlib.nullcontext()
        if not use_adapters:
            context = policy.model.disable_adapter()
        with context:
            for start in range(0, len(tokens), mb):
                part = tokens.select(range(start, min(start + mb, len(tokens))))
                s = policy.log_probs(part)
                out.extend(lp[: len(r)].tolist() for lp, r in zip(s.log_probs, part.response_ids))
        return out

    def update(self, rollout: Rollout, iteration: int) -> dict[str, float]:
        """Advantages, then clipped-surrogate epochs over mini-batches of rows."""
        batch = rollout.to_step_batch()
        tokens = rollout.tokens
        o = self.cfg.optim
        if self.algo.needs_critic:
            with torch.no_grad():
                batch.values = np.concatenate([
                    self.policy.values(tokens.select(range(a, min(a + o.micro_batch_size, len(tokens))))).cpu().numpy()
                    for a in range(0, len(tokens), o.micro_batch_size)
                ])
        advantages = np.asarray(self.algo.advantages(batch), dtype=np.float64)
        keep = np.asarray(self.algo.row_mask(batch), dtype=bool) & np.array([len(r) > 0 for r in tokens.response_ids])
        targets = np.asarray(self.algo.value_targets(batch), dtype=np.float64) if self.algo.needs_critic else None
        s = self.cfg.sampling
        exact = s.temperature == 1.0 and s.top_p == 1.0
        old = rollout.old_log_probs if exact else self._score(self.policy, tokens)
        ref = None
        if self.weights.kl_coef:
            if self.cfg.model.lora is not None:
                ref = self._score(self.policy, tokens, use_adapters=False)
            elif self.reference is not None:
                ref = self._score(self.reference, tokens)
        stats: dict[str, list[float]] = {}
        rng = np.random.default_rng(derive_seed(self.cfg.seed, iteration, 3))
        rows = np.flatnonzero(keep)
        self.policy.train()
        for _ in range(o.epochs):
            order = rng.permutation(rows)
            for start in range(0, len(order), o.mini_batch_size):
                mini = order[start : start + o.mini_batch_size]
                mini = mini[np.argsort([len(tokens.prompt_ids[i]) + len(tokens.response_ids[i]) for i in mini], kind="stable")]
                token_count = float(sum(len(tokens.response_ids[i]) for i in mini))
                self.optimizer.zero_grad(set_to_none=True)
                for a in range(0, len(mini), o.micro_batch_size):
                    idx = [int(i) for i in mini[a : a + o.micro_batch_size]]
                    part = tokens.select(idx)
                    scores = self.policy(part, with_entropy=self.weights.entropy_coef > 0, with_values=targets is not None)
                    width = scores.log_probs.shape[1]
                    loss, st = policy_loss(
                        scores.log_probs, _pad([old[i] for i in idx], width, self.device),
                        torch.tensor(advantages[idx], device=self.device), scores.mask, token_count, self.weights,
                        ref_log_probs=_pad([ref[i] for i in idx], width, self.device) if ref is not None else None,
                        entropy=scores.entropy,
                    )
                    if targets is not None:
                        vt = torch.tensor(targets[idx], device=self.device, dtype=torch.float32)
                        vl = value_loss(scores.extras["values"], vt, float(len(mini)), self.weights)
                        loss = loss + vl
                        st["value_loss"] = float(vl.detach())
                    loss.backward()
                    for k, v in st.items():
                        stats.setdefault(k, []).append(v)
                norm = torch.nn.utils.clip_grad_norm_(self.params, o.max_grad_norm)
                stats.setdefault("grad_norm", []).append(float(norm))
                self.optimizer.step()
        # per-micro-batch terms are parts of a mini-batch mean: sum them per mini-batch, average mini-batches
        summed = {"pg_loss", "clip_fraction", "approx_kl_old", "kl_ref", "entropy", "value_loss"}
        updates = max(len(stats.get("grad_norm", [])), 1)
        m = {f"train/{k}": (float(np.sum(v)) / updates if k in summed else float(np.mean(v))) for k, v in stats.items()}
        m.update({k.replace("adv/", "train/adv_"): v for k, v in self.algo.diagnostics(batch).items()})
        m["train/rows_used"] = float(len(rows))
        m["train/advantage_mean"] = float(advantages[keep].mean()) if keep.any() else 0.0
        m["train/advantage_std"] = float(advantages[keep].std()) if keep.any() else 0.0
        m["train/zero_advantage_share"] = float(np.mean(np.abs(advantages[keep]) < 1e-9)) if keep.any() else 1.0
        return m

    # -- bookkeeping -----------------------------------------------------------------
    def log(self, record: dict[str, Any], step: int | None = None) -> None:
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
        state = {"config_digest": self.config_digest, "iteration": iteration}
        return ckpt.save_checkpoint(
            self.run_dir / "checkpoints", iteration, self.policy, self.optimizer, state, keep=self.cfg.keep_checkpoints
        )

    def resume(self, where: str | Path = "latest", echo=print) -> int:
        """Load a checkpoint ('latest': this run's newest complete one, or a folder); returns its iteration."""
        latest = str(where) == "latest"
        folder = ckpt.find_resumable(self.run_dir / "checkpoints", echo) if latest else Path(where)
        state = ckpt.load_checkpoint(folder, self.policy, self.optimizer, verify=not latest)
        self.iteration = int(state["iteration"])
        return self.iteration

    def close(self) -> None:
        self.envs.close()
        if self.eval_envs is not None:
            self.eval_envs.close()
        if self._writer is not None:
            self._writer.close()


# -- the whole run ---------------------------------------------------------------------
REFERENCE_FILE = "reference.safetensors"


def _save_reference(trainer: Trainer) -> None:
    from safetensors.torch import save_model

    from gigpo_gym.core.data import replacing

    if trainer.reference is None:
        return
    with replacing(trainer.run_dir / REFERENCE_FILE) as tmp:
        save_model(trainer.reference, str(tmp))


def _load_reference(trainer: Trainer) -> None:
    from safetensors.torch import load_model

    if not trainer.weights.kl_coef or trainer.cfg.model.lora is not None:
        return
    path = trainer.run_dir / REFERENCE_FILE
    if not path.is_file():
        raise ckpt.CheckpointError(f"{path} is missing: the KL reference of this run cannot be restored")
    trainer.freeze_reference()
    try:
        load_model(trainer.reference, str(path))
    except Exception as e:
        raise ckpt.CheckpointError(f"cannot read {path}: {e}") from e


def format_success(title: str, m: dict[str, float], prefix: str = "eval") -> str:
    per_type = {k.split("/")[-1]: v for k, v in m.items() if k.startswith(f"{prefix}/success/")}
    cells = "  ".join(f"{k} {100 * v:5.1f}" for k, v in sorted(per_type.items()))
    invalid = 100 * m.get(f"{prefix}/invalid_action_rate", 0.0)
    return f"{title:<22} success % all {100 * m.get(f'{prefix}/success', 0.0):5.1f}  {cells}  | invalid actions {invalid:5.1f}%"


def run_training(cfg: TrainConfig, *, resume: str | None = None, policy: Any | None = None, echo=print) -> dict:
    """Run (or resume) a whole training; returns the summary also written to ``summary.json``."""
    from tqdm.auto import tqdm

    trainer = Trainer(cfg, policy)
    save_config(cfg, trainer.run_dir / "config.yaml")
    summary: dict[str, Any] = {"run_dir": str(trainer.run_dir), "evals": {}}
    started = time.perf_counter()
    try:
        if resume:
            start = trainer.resume(resume, echo)
            _load_reference(trainer)
            echo(f"resumed from iteration {start} ({trainer.run_dir / 'checkpoints'})")
            keep_iterations(trainer.run_dir / "metrics.jsonl", start)  # the later ones run again
            old = trainer.run_dir / "summary.json"
            try:
                summary["evals"] = json.loads(old.read_text()).get("evals", {}) if old.is_file() else {}
            except json.JSONDecodeError:
                echo(f"note: {old} is damaged; the evals before iteration {start} are not carried over")
        else:
            start = 0
            keep_iterations(trainer.run_dir / "metrics.jsonl", -1)
            if cfg.eval_before and trainer.eval_envs is not None:
                summary["evals"]["initial"] = trainer.evaluate(0)
                echo(format_success("initial", summary["evals"]["initial"]))
            if cfg.sft.steps:
                summary["sft_loss"] = _warm_start(trainer, echo)
                if trainer.eval_envs is not None:
                    summary["evals"]["after SFT"] = trainer.evaluate(0)
                    echo(format_success("after SFT", summary["evals"]["after SFT"]))
            trainer.freeze_reference()
            _save_reference(trainer)
            first = summary["evals"].get("after SFT") or summary["evals"].get("initial") or {}
            trainer.log({"iteration": 0, **first})
        bar = tqdm(range(start + 1, cfg.iterations + 1), desc=f"{cfg.algo.name}", disable=not cfg.progress)
        last_eval: dict[str, float] = {}
        for it in bar:
            t0 = time.perf_counter()
            rollout = collect(trainer.policy, trainer.envs, trainer.sampling(it), seed=derive_seed(cfg.seed, it),
                              shaping=trainer.shaping)
            record: dict[str, Any] = {"iteration": it, **rollout_metrics(rollout)}
            t1 = time.perf_counter()
            record.update(trainer.update(rollout, it))
            record["train/seconds"] = time.perf_counter() - t1
            if (cfg.eval_every and it % cfg.eval_every == 0) or it == cfg.iterations:
                last_eval = trainer.evaluate(it)
                record.update(last_eval)
            record["time/iteration_seconds"] = time.perf_counter() - t0
            trainer.log(record)
            trainer.iteration = it
            if it % cfg.save_every == 0 or it == cfg.iterations:
                trainer.save(it)
            bar.set_postfix(success=f"{record['rollout/success']:.2f}", invalid=f"{record['rollout/invalid_action_rate']:.2f}")
        if cfg.iterations > start and last_eval:
            summary["evals"]["after RL"] = last_eval
            echo(format_success(f"after {cfg.algo.name} ({cfg.iterations} it)", last_eval))
        summary["seconds"] = time.perf_counter() - started
        curve = plot_curve(read_jsonl(trainer.run_dir / "metrics.jsonl"), trainer.run_dir / "learning_curve.png",
                           title=f"{cfg.algo.name} on {cfg.env.id} ({cfg.model.name})")
        summary["curve"] = str(curve) if curve else None
        summary["final_checkpoint"] = str(ckpt.latest_checkpoint(trainer.run_dir / "checkpoints")) if (
            trainer.run_dir / "checkpoints" / ckpt.LATEST_FILE).is_file() else None
        write_atomically(trainer.run_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
        return summary
    finally:
        trainer.close()


def _warm_start(trainer: Trainer, echo) -> list[float]:
    from tqdm.auto import tqdm

    from gigpo_gym.algos.training.sft import expert_demonstrations, oversample, sft_train

    cfg = trainer.cfg
    demos = expert_demonstrations(cfg.env.id, cfg.sft.episodes, seed=derive_seed(cfg.seed, 5),
                                  env_kwargs=cfg.env.kwargs, wrapper=_wrapper(cfg), expert_kwargs=cfg.sft.expert_kwargs)
    bar = tqdm(total=cfg.sft.steps, desc="SFT warm start", disable=not cfg.progress)

    def on_step(step: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        if step % 10 == 0 or step == cfg.sft.steps - 1:
            trainer.log({"iteration": 0, "sft/step": step, "sft/loss": loss}, step=step)

    demos = oversample(demos, cfg.sft.oversample)
    losses = sft_train(trainer.policy, demos, steps=cfg.sft.steps, lr=cfg.sft.lr, batch_size=cfg.sft.batch_size,
                       seed=cfg.seed, on_step=on_step)
    bar.close()
    echo(f"SFT warm start: {len(demos)} expert steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return [losses[0], losses[-1]]
