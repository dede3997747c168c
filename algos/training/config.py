"""Trainer configuration: dataclasses, loadable from YAML, checked once.

Help for every field is the string under it.  ``load_config`` reads a YAML file (and
``section.key=value`` overrides); an unknown key is an error naming the key and its
closest match; cross-field rules are checked in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gigpo_gym.algos.policies.base import ATTENTION, DECODERS


DTYPES = ("float32", "bfloat16", "float16")
LR_SCHEDULES = ("constant", "linear", "cosine")


class ConfigError(ValueError):
    """A config file or override the trainer cannot use."""


def scheduled_lr(lr: float, schedule: str, step: int, steps: int, warmup: int = 0) -> float:
    """The learning rate of step ``step`` (1-based) of ``steps`` under ``schedule`` (one of LR_SCHEDULES).

    A pure function of the step, so a resumed run needs no scheduler state.  After
    ``warmup`` steps of linear rise, "linear" and "cosine" decay from ``lr`` at the first
    step after warm-up towards 0 past the last.
    """
    if step <= warmup:
        return lr * step / warmup
    if schedule == "constant":
        return lr
    done = (step - warmup - 1) / max(steps - warmup, 1)
    if schedule == "linear":
        return lr * (1.0 - done)
    return lr * 0.5 * (1.0 + math.cos(math.pi * done))


@dataclass
class TinyModelConfig:
    vocab_size: int = 8192
    """Upper bound of the tiny tokenizer's BPE vocabulary (it saturates below it on small corpora)."""
    hidden_size: int = 128
    """Width of the tiny Qwen2 model."""
    intermediate_size: int = 384
    """MLP width of the tiny model."""
    num_layers: int = 2
    """Decoder layers of the tiny model."""
    corpus_episodes: int = 300
    """Expert episodes whose prompts and actions train the tiny tokenizer (more: more whole-command tokens)."""
    pieces: str = "phrases"
    """Tokenizer pieces: 'phrases' (BPE across spaces: short prompts) or 'words' (names shared across texts)."""


@dataclass
class VLLMConfig:
    gpu_memory_utilization: float = 0.3
    """Share of the GPU's memory the colocated vLLM engine may take (weights + KV cache); training keeps the rest."""
    max_model_len: int | None = None
    """Longest prompt + response the engine serves (None: the model's own limit)."""


@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' (built from the env's own text), 'smollm2' (offline SmolLM2-135M-Instruct), or a path / hub id."""
    device: str = "auto"
    """'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', ..."""
    dtype: str = "float32"
    """Weights' dtype: float32 (the master weights to train), bfloat16 or float16 (inference-sized runs only)."""
    compute_dtype: str | None = None
    """Autocast dtype of forward passes (bfloat16 on GPUs: fast, while float32 weights keep small updates); None: the weights' dtype."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer in the backward pass instead of storing its activations (long prompts, big models)."""
    logits_chunk: int = 1024
    """Response positions whose vocabulary logits are built at once when scoring (bounds memory at 152k vocabularies)."""
    attention: str = "auto"
    """Attention kernel: 'auto' (FlashAttention-2 where flash_attn imports on a GPU with 16-bit compute, else PyTorch's SDPA), 'sdpa', 'flash_attention_2' or 'eager'."""
    decoder: str = "auto"
    """What samples free text with model.generation 'hf': 'loop' (the package's decode loop), 'continuous' (transformers' continuous batching) or 'auto' (the faster on the device, docs/gpu.md)."""
    tf32: bool = True
    """On CUDA, run any float32 matmul on TF32 tensor cores (no effect on a CPU)."""
    lora: dict[str, Any] | None = None
    """peft LoraConfig kwargs (e.g. {r: 8}); None trains every weight."""
    use_chat_template: bool | None = None
    """Wrap prompts in the tokenizer's chat template (None: when it has one)."""
    system_prompt: str | None = None
    """System message for chat templates."""
    max_prompt_tokens: int = 2048
    """Prompts are cut to their last this-many tokens."""
    response_prefix: str = ""
    """Text the answer starts with, given as part of the prompt (e.g. '<action>' keeps small models on format)."""
    choose_admissible: bool = False
    """Answer with one of the admissible actions, drawn from the model's likelihoods of each (constrained decoding)."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the tiny model (name='tiny' only)."""
    generation: str = "hf"
    """What generates rollouts: 'hf' (the trained module) or 'vllm' (a colocated vLLM engine given the weights after each update; CUDA and the [vllm] extra)."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """Settings of the vLLM engine (generation='vllm' only)."""


@dataclass
class EnvConfig:
    id: str = "gigpo_gym/ALFWorld-v0"
    """Env id (gymnasium registry)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """gym.make kwargs of the training envs (e.g. split, max_episode_steps)."""
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``kwargs`` for the held-out evaluation envs (e.g. split)."""
    num_groups: int = 4
    """Task groups per rollout (G)."""
    group_size: int = 4
    """Copies of each task per group (N)."""
    eval_episodes: int = 16
    """Held-out episodes per evaluation (distinct tasks)."""
    select_kwargs: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``kwargs`` for the envs that choose the run's result (``select_every``; e.g. {split: valid_unseen})."""
    select_episodes: int = 128
    """Episodes per selection evaluation (``select_every``)."""
    history_length: int = 2
    """Past steps shown in each prompt (the paper uses 2)."""
    anchor_mode: str = "state"
    """What GiGPO groups on: 'state' (true state) or 'observation' (the paper's raw text)."""
    backend: str = "sync"
    """Vector env backend: 'sync' or 'async'."""
    prompt_intro: str | None = None
    """First line of every prompt (None: the env's own)."""
    action_format: str | None = None
    """Last line of every prompt, the answer format (None: the env's own)."""
    task_key: str | None = None
    """Info key shown as the task on every step (ALFWorld: 'goal', as the paper's prompt); None: the first observation."""
    list_actions: bool = True
    """List the admissible actions in every prompt (False: leave them out, for models.choose_admissible policies)."""
    reward_scale: float = 10.0
    """Reward of a won episode (paper: 10)."""
    reward_source: str = "won"
    """'won' (scale x success) or 'env' (scale x the env's reward)."""
    invalid_action_penalty: float = 0.1
    """Subtracted per invalid step (paper: 0.1 ALFWorld/WebShop, 0.01 search)."""
    revisit_penalty: float = 0.0
    """Subtracted per step that returns the episode to a state (anchor) it had already been in (0: off;
    training only, a shaping the paper does not use)."""


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Rollout temperature."""
    top_p: float = 1.0
    """Rollout nucleus mass."""
    max_new_tokens: int = 32
    """Most tokens per response."""
    eval_temperature: float = 0.4
    """Evaluation temperature (0: greedy)."""
    stop: list[str] = field(default_factory=lambda: ["</action>"])
    """A response ends once it contains one of these."""


@dataclass
class AlgoConfig:
    name: str = "gigpo"
    """Advantage estimator (registry name: gigpo, grpo, ppo, rloo, reinforce_pp, dapo, ...)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Estimator settings (e.g. omega, gamma, norm_by_std)."""


@dataclass
class OptimConfig:
    lr: float = 1e-6
    """AdamW learning rate (the peak, under a schedule)."""
    lr_schedule: str = "constant"
    """Learning rate over the run's iterations: "constant", or after any warm-up "linear" or "cosine" decay towards 0."""
    warmup_iterations: int = 0
    """Iterations over which the learning rate rises linearly to ``lr`` first."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    epochs: int = 1
    """Passes over each rollout."""
    mini_batch_size: int = 256
    """Rows per optimiser step."""
    micro_batch_size: int = 16
    """Rows per forward/backward (gradient accumulation up to the mini-batch)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    clip_low: float | None = None
    """Lower ratio clip (1 - clip_low); None: the algorithm's own (0.2)."""
    clip_high: float | None = None
    """Upper ratio clip (1 + clip_high); None: the algorithm's own (DAPO raises it)."""
    kl_coef: float = 0.01
    """Weight of the k3 KL to the reference policy (0: no reference model)."""
    kl_max: float | None = None
    """Cap on each token's k3 KL estimate (None: uncapped; verl's low_var_kl, which GiGPO's code uses, caps at 10)."""
    kl_reset_every: int = 0
    """Every this-many iterations the KL reference becomes the policy as it is then (0: the warm start throughout)."""
    entropy_coef: float = 0.001
    """Entropy bonus."""
    value_coef: float = 0.5
    """Critic loss weight (algorithms that need a critic)."""
    skip_zero_advantage: bool = False
    """Leave rows whose advantage is 0 (every group where all episodes scored alike) out of the update and of the
    reference pass: their policy-gradient term is 0, so they would only add KL and entropy terms at full cost."""
    loss_over: str = "tokens"
    """What the ratio, KL and entropy are over: "tokens" (each response token) or "choices" (the policy's
    distribution over the admissible actions it draws from; needs model.choose_admissible)."""


@dataclass
class SFTConfig:
    steps: int = 0
    """Supervised warm-start steps on expert demonstrations before RL (0: none)."""
    episodes: int = 40
    """Expert episodes collected for the warm start."""
    lr: float = 1e-3
    """Warm-start learning rate (the peak, under a schedule)."""
    lr_schedule: str = "constant"
    """Learning rate over the warm-start steps: "constant", "linear" or "cosine" decay towards 0."""
    batch_size: int = 16
    """Demonstration steps per warm-start update."""
    expert_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to the env's ``expert_action`` (ALFWorld: {style: search} imitates a searcher)."""
    oversample: dict[str, int] = field(default_factory=dict)
    """Command verb -> copies of each demo step whose command starts with it (e.g. {take: 4}: rare decisive steps)."""


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    iterations: int = 10
    """RL iterations (rollout + update)."""
    seed: int = 0
    """Seeds tasks, sampling and data order."""
    run_dir: str = "runs/train"
    """Where the config, logs, checkpoints and curve go."""
    eval_every: int = 5
    """Evaluate every this-many iterations (0: only before and after)."""
    save_every: int = 1
    """Checkpoint every this-many iterations (the last one is always saved)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted after a new one is complete)."""
    progress: bool = True
    """Show progress bars."""
    eval_before: bool = True
    """Evaluate the untrained model first (and again after the SFT warm start)."""
    select_every: int = 0
    """Every this-many iterations (and at the last) score the policy on the selection envs (``env.select_kwargs``);
    the best-scoring weights are the run's result, the ones evaluated "after RL" (0: the last iteration's)."""
    deterministic: bool = True
    """Ask torch for deterministic kernels (cuDNN, cuBLAS workspaces); a run then repeats exactly on the same machine."""
    collective_timeout_s: float = 1800.0
    """Multi-process runs: seconds a process waits for the others (rank 0 evaluates alone meanwhile) before the run fails."""

    def __post_init__(self) -> None:
        o, e = self.optim, self.env
        for name, value, low in (
            ("iterations", self.iterations, 0), ("env.num_groups", e.num_groups, 1),
            ("env.group_size", e.group_size, 1), ("env.eval_episodes", e.eval_episodes, 0),
            ("optim.epochs", o.epochs, 1), ("optim.micro_batch_size", o.micro_batch_size, 1),
            ("keep_checkpoints", self.keep_checkpoints, 1), ("save_every", self.save_every, 1),
            ("sft.steps", self.sft.steps, 0), ("sft.batch_size", self.sft.batch_size, 1),
            ("select_every", self.select_every, 0), ("env.select_episodes", e.select_episodes, 1),
            ("env.invalid_action_penalty", e.invalid_action_penalty, 0), ("env.revisit_penalty", e.revisit_penalty, 0),
        ):
            if value < low:
                raise ConfigError(f"{name} must be >= {low}, got {value}")
        if o.mini_batch_size < o.micro_batch_size:
            raise ConfigError(
                f"optim.mini_batch_size ({o.mini_batch_size}) must be >= optim.micro_batch_size ({o.micro_batch_size})"
            )
        for name, value in (("model.dtype", self.model.dtype), ("model.compute_dtype", self.model.compute_dtype)):
            if value is not None and value not in DTYPES:
                close = difflib.get_close_matches(str(value), DTYPES, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{name} must be one of {list(DTYPES)}, got {value!r}{hint}")
        if self.model.attention not in ATTENTION:
            raise ConfigError(f"model.attention must be one of {', '.join(ATTENTION)}, got {self.model.attention!r}")
        if self.model.decoder not in DECODERS:
            raise ConfigError(f"model.decoder must be one of {', '.join(DECODERS)}, got {self.model.decoder!r}")
        if self.model.logits_chunk < 1:
            raise ConfigError(f"model.logits_chunk must be >= 1, got {self.model.logits_chunk}")
        if e.anchor_mode not in ("state", "observation"):
            raise ConfigError(f"env.anchor_mode must be 'state' or 'observation', got {e.anchor_mode!r}")
        if self.model.generation not in ("hf", "vllm"):
            close = difflib.get_close_matches(str(self.model.generation), ("hf", "vllm"), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"model.generation must be 'hf' or 'vllm', got {self.model.generation!r}{hint}")
        if not 0 < self.model.vllm.gpu_memory_utilization < 1:
            raise ConfigError(f"model.vllm.gpu_memory_utilization must be in (0, 1), got {self.model.vllm.gpu_memory_utilization}")
        if self.collective_timeout_s <= 0:
            raise ConfigError(f"collective_timeout_s must be > 0, got {self.collective_timeout_s}")
        if e.reward_source not in ("won", "env"):
            raise ConfigError(f"env.reward_source must be 'won' or 'env', got {e.reward_source!r}")
        if o.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"optim.lr_schedule must be one of {list(LR_SCHEDULES)}, got {o.lr_schedule!r}")
        if self.sft.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"sft.lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.sft.lr_schedule!r}")
        if o.warmup_iterations < 0:
            raise ConfigError(f"optim.warmup_iterations must be >= 0, got {o.warmup_iterations}")
        if o.kl_max is not None and not o.kl_max > 0:
            raise ConfigError(f"optim.kl_max must be > 0 or null, got {o.kl_max}")
        if o.kl_reset_every < 0:
            raise ConfigError(f"optim.kl_reset_every must be >= 0, got {o.kl_reset_every}")
        if o.kl_reset_every and (not o.kl_coef or self.model.lora is not None):
            raise ConfigError("optim.kl_reset_every needs a frozen reference model: optim.kl_coef > 0 and no model.lora")
        if o.loss_over not in ("tokens", "choices"):
            raise ConfigError(f"optim.loss_over must be 'tokens' or 'choices', got {o.loss_over!r}")
        if self.select_every and e.eval_episodes and {**e.kwargs, **e.select_kwargs} == {**e.kwargs, **e.eval_kwargs}:
            raise ConfigError("select_every chooses the run's result on the held-out envs themselves, so their success "
                              "would be measured on the tasks it was chosen on: set env.select_kwargs to another split "
                              "(e.g. {split: valid_unseen})")
        if o.loss_over == "choices" and not self.model.choose_admissible:
            raise ConfigError("optim.loss_over: choices trains the choice among admissible actions; "
                              "it needs model.choose_admissible: true")


# -- loading ----------------------------------------------------------------------------
def _check_value(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_value(value, option, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return _from_dict(hint, value, where + ".")
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return list(value)
    return value


def _from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint}; {prefix or 'top level'} keys: {names}")
    kwargs = {k: _check_value(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A ``TrainConfig`` from nested mappings (unknown keys are errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping, got {type(data).__name__}")
    return _from_dict(TrainConfig, data)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply ``section.key=value`` (value parsed as YAML) to nested mappings in place."""
    import yaml

    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like section.key=value")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {assignment!r}: {key!r} is not a section")
    node[keys[-1]] = yaml.safe_load(raw)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read a YAML config (``None``: the defaults) and apply ``key=value`` overrides."""
    import yaml

    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path is not None else str(e)) from None


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (the file ``load_config`` reads back)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
