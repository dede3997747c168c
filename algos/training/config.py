"""Trainer configuration: one dataclass per section, each checking itself, loadable from YAML.

Help for every field is the string under it.  ``load_config`` reads a YAML file (and
``section.key=value`` overrides) through ``gigpo_gym.core.typed.from_mapping``: an
unknown key is an error naming the key and its closest match.  Every section checks its
own fields when it is made (types through ``core.typed.check_fields``, then its rules,
each error naming the key and what it must be), ``TrainConfig`` the rules across
sections.  The sections are what the trainer uses: ``prompt`` is the prompt stack's own
``PromptConfig`` (everything that shapes the text a policy reads), ``reward`` the episode
player's ``RewardShaping`` (what the trainer pays), and the others build their runtime
objects in one place each (``ModelConfig.policy_kwargs``, ``SamplingConfig.params``,
``AlgoConfig.build``, ``OptimConfig.loss_weights``, ``TrainConfig.make_envs``).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from gigpo_gym.algos.policies.base import Attention, Decoder, SamplingParams
from gigpo_gym.core.typed import FieldError, check_fields, from_mapping
from gigpo_gym.algos.training.rollout import RewardShaping
from gigpo_gym.wrappers.anchor import AnchorMode
from gigpo_gym.wrappers.stack import PromptConfig, llm_stack

Dtype = Literal["float32", "bfloat16", "float16"]
DTYPES: tuple[str, ...] = get_args(Dtype)
LRSchedule = Literal["constant", "linear", "cosine"]
LR_SCHEDULES: tuple[str, ...] = get_args(LRSchedule)


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


def _at_least(section: Any, *names_lows: tuple[str, float]) -> None:
    """Each named field of ``section`` must be >= its bound (the error names the field and the bound)."""
    for name, low in names_lows:
        value = getattr(section, name)
        if value < low:
            raise ConfigError(f"{name} must be >= {low}, got {value}")


@dataclass
class TinyModelConfig:
    """Shape of the tiny model (``model.tiny``)."""

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
    pieces: Literal["phrases", "words"] = "phrases"
    """Tokenizer pieces: 'phrases' (BPE across spaces: short prompts) or 'words' (names shared across texts)."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("vocab_size", 1), ("hidden_size", 1), ("intermediate_size", 1), ("num_layers", 1),
                  ("corpus_episodes", 1))


@dataclass
class VLLMConfig:
    """The colocated vLLM engine (``model.vllm``)."""

    gpu_memory_utilization: float = 0.3
    """Share of the GPU's memory the colocated vLLM engine may take (weights + KV cache); training keeps the rest."""
    max_model_len: int | None = None
    """Longest prompt + response the engine serves (None: the model's own limit)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if not 0 < self.gpu_memory_utilization < 1:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1), got {self.gpu_memory_utilization}")


@dataclass
class ModelConfig:
    """The policy: which model, on what, in which precision, and how it answers (``model``); what it reads is the
    ``prompt`` section's."""

    name: str = "tiny"
    """'tiny' (built from the env's own text), 'smollm2' (offline SmolLM2-135M-Instruct), or a path / hub id."""
    device: str = "auto"
    """'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', ..."""
    dtype: Dtype = "float32"
    """Weights' dtype: float32 (the master weights to train), bfloat16 or float16 (inference-sized runs only)."""
    compute_dtype: Dtype | None = None
    """Autocast dtype of forward passes (bfloat16 on GPUs: fast, while float32 weights keep small updates); None: the weights' dtype."""
    gradient_checkpointing: bool | Literal["auto"] = False
    """Recompute each decoder layer in the backward pass instead of storing its activations (long prompts, big models); 'auto': on a GPU, only where the update's micro-batches would not fit without it (``compute.plan_update_memory``), off on a CPU."""
    logits_chunk: int = 1024
    """Response positions whose vocabulary logits are built at once when scoring (bounds memory at 152k vocabularies)."""
    attention: Attention = "auto"
    """Attention kernel: 'auto' (FlashAttention-2 where flash_attn imports on a GPU with 16-bit compute, else PyTorch's SDPA), 'sdpa', 'flash_attention_2' or 'eager'."""
    decoder: Decoder = "auto"
    """What samples free text with model.generation 'hf': 'loop' (the package's decode loop), 'static' (the loop over a static KV cache, its step a CUDA graph on a GPU), 'continuous' (transformers' continuous batching) or 'auto' (static on CUDA, loop elsewhere: docs/gpu.md). Static under autocast over float32 weights (rollout_dtype null) needs transformers >= 5.24; before, 'auto' takes the loop there."""
    rollout_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = "auto"
    """Dtype of a copy of the weights that samples free text, refreshed after every update (null: the trained weights themselves); 'auto': on CUDA, compute_dtype where the weights are kept in another, else none.  With a copy the trained model recomputes the old log-probs."""
    train_on_copy: bool | Literal["auto"] = "auto"
    """Score and train on the rollout copy (rollout_dtype): the update's forwards and backwards compute in its dtype throughout (the residual stream and norms too), each gradient is added into the float32 weights', and the optimiser steps those (verl's FSDP mixed precision); false: the float32 weights under autocast.  'auto': on CUDA, wherever it can (one process, a rollout copy, no LoRA, the loss over tokens)."""
    tf32: bool = True
    """On CUDA, run any float32 matmul on TF32 tensor cores (no effect on a CPU)."""
    lora: dict[str, Any] | None = None
    """peft LoraConfig kwargs (e.g. {r: 8}); None trains every weight."""
    max_prompt_tokens: int = 2048
    """Prompts are cut to their last this-many tokens."""
    choose_admissible: bool = False
    """Answer with one of the admissible actions, drawn from the model's likelihoods of each (constrained decoding)."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the tiny model (name='tiny' only)."""
    generation: Literal["hf", "vllm"] = "hf"
    """What generates rollouts: 'hf' (the trained module) or 'vllm' (a colocated vLLM engine given the weights after each update; CUDA and the [vllm] extra)."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """Settings of the vLLM engine (generation='vllm' only)."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("logits_chunk", 1), ("max_prompt_tokens", 1))

    def policy_kwargs(self, device: str | None = None) -> dict[str, Any]:
        """``HFPolicy.from_pretrained``'s settings from this section (``device`` in place of ``model.device``)."""
        return dict(
            device=device or self.device, dtype=self.dtype, compute_dtype=self.compute_dtype,
            gradient_checkpointing=self.gradient_checkpointing is True, logits_chunk=self.logits_chunk, lora=self.lora,
            attention=self.attention, decoder=self.decoder, rollout_dtype=self.rollout_dtype,
            max_prompt_tokens=self.max_prompt_tokens, choose_admissible=self.choose_admissible,
        )


@dataclass
class EnvConfig:
    """The envs: which, with which kwargs, and how many (``env``); what the trainer pays is the ``reward`` section."""

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
    anchor_mode: AnchorMode = "state"
    """What GiGPO groups on: 'state' (true state) or 'observation' (the paper's raw text)."""
    backend: Literal["sync", "async", "ray"] = "sync"
    """Vector env backend: 'sync', 'async' (worker processes) or 'ray'."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("num_groups", 1), ("group_size", 1), ("eval_episodes", 0), ("select_episodes", 1))


@dataclass
class SamplingConfig:
    """How the policy samples in rollouts and in evaluations (``sampling``)."""

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

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("max_new_tokens", 1), ("temperature", 0), ("eval_temperature", 0))
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    def params(self, evaluation: bool = False, seed: int | None = None) -> SamplingParams:
        """The ``SamplingParams`` of a rollout, or of an evaluation (at ``eval_temperature``, the whole distribution)."""
        return SamplingParams(max_new_tokens=self.max_new_tokens,
                              temperature=self.eval_temperature if evaluation else self.temperature,
                              top_p=1.0 if evaluation else self.top_p, stop=tuple(self.stop), seed=seed)


@dataclass
class AlgoConfig:
    """The advantage estimator (``algo``): checked against the registry when the section is made."""

    name: str = "gigpo"
    """Advantage estimator (registry name: gigpo, grpo, ppo, rloo, reinforce_pp, dapo, ...)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Estimator settings (e.g. omega, gamma, norm_by_std)."""

    def __post_init__(self) -> None:
        check_fields(self)
        self.build()

    def build(self):
        """The configured ``Algorithm`` (an unknown name or setting names the key: algo.name, algo.kwargs)."""
        from gigpo_gym.algos.estimators.registry import algorithm_class

        try:
            cls = algorithm_class(self.name)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"name: {e}") from None
        try:
            return cls.from_config(**self.kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"kwargs: {e}") from None


@dataclass
class OptimConfig:
    """The update: learning rate, batches, clipping, KL and entropy terms (``optim``)."""

    lr: float = 1e-6
    """AdamW learning rate (the peak, under a schedule)."""
    lr_schedule: LRSchedule = "constant"
    """Learning rate over the run's iterations: "constant", or after any warm-up "linear" or "cosine" decay towards 0."""
    warmup_iterations: int = 0
    """Iterations over which the learning rate rises linearly to ``lr`` first."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    epochs: int = 1
    """Passes over each rollout."""
    mini_batch_size: int | None = 256
    """Rows per optimiser step; null: all of the iteration's rows, one optimiser step per epoch (as TRL's GRPOTrainer)."""
    micro_batch_size: int = 16
    """Rows per forward/backward (gradient accumulation up to the mini-batch), where micro_batch_tokens does not set them."""
    micro_batch_tokens: int | Literal["auto"] | None = "auto"
    """Tokens per forward/backward instead (rows x longest row, rows of similar length together; the loss is the same);
    'auto': on a GPU, what fits its memory (``compute.plan_update_memory``), on a CPU micro_batch_size rows; null: micro_batch_size rows."""
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
    loss_over: Literal["tokens", "choices"] = "tokens"
    """What the ratio, KL and entropy are over: "tokens" (each response token) or "choices" (the policy's
    distribution over the admissible actions it draws from; needs model.choose_admissible)."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("epochs", 1), ("micro_batch_size", 1), ("warmup_iterations", 0), ("kl_reset_every", 0))
        if isinstance(self.micro_batch_tokens, int) and self.micro_batch_tokens < 1:
            raise ConfigError(f"micro_batch_tokens must be >= 1, 'auto' or null, got {self.micro_batch_tokens}")
        if self.mini_batch_size is not None and self.mini_batch_size < self.micro_batch_size:
            raise ConfigError(f"mini_batch_size ({self.mini_batch_size}) must be >= micro_batch_size "
                              f"({self.micro_batch_size}): a mini-batch is made of whole micro-batches")
        if self.kl_max is not None and not self.kl_max > 0:
            raise ConfigError(f"kl_max must be > 0 or null, got {self.kl_max}")

    def loss_weights(self, algo: Any):
        """The loss's ``LossWeights``: these settings, with ``algo``'s own clip range where none is set."""
        from gigpo_gym.algos.training.loss import LossWeights

        return LossWeights(
            clip_low=self.clip_low if self.clip_low is not None else algo.clip_low,
            clip_high=self.clip_high if self.clip_high is not None else algo.clip_high,
            kl_coef=self.kl_coef, entropy_coef=self.entropy_coef, value_coef=self.value_coef, kl_max=self.kl_max,
        )


@dataclass
class SFTConfig:
    """The supervised warm start on the env expert's demonstrations (``sft``)."""

    steps: int = 0
    """Supervised warm-start steps on expert demonstrations before RL (0: none)."""
    episodes: int = 40
    """Expert episodes collected for the warm start."""
    lr: float = 1e-3
    """Warm-start learning rate (the peak, under a schedule)."""
    lr_schedule: LRSchedule = "constant"
    """Learning rate over the warm-start steps: "constant", "linear" or "cosine" decay towards 0."""
    batch_size: int = 16
    """Demonstration steps per warm-start update."""
    expert_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to the env's ``expert_action`` (ALFWorld: {style: search} imitates a searcher)."""
    oversample: dict[str, int] = field(default_factory=dict)
    """Command verb -> copies of each demo step whose command starts with it (e.g. {take: 4}: rare decisive steps)."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("steps", 0), ("episodes", 1), ("batch_size", 1))


@dataclass
class RecordsConfig:
    """What each iteration records for ``gigpo-gym inspect`` (``records``; ``training.records`` says what a record holds)."""

    groups: int = 2
    """Task groups recorded whole per iteration, every episode and step (0: record nothing, write no records/)."""
    text_chars: int = 1000
    """Each recorded observation and reply is cut to this many characters."""

    def __post_init__(self) -> None:
        check_fields(self)
        _at_least(self, ("groups", 0), ("text_chars", 1))


@dataclass
class TrainConfig:
    """A whole training run: its sections, and the rules across them."""

    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """What the policy reads at each env step (``gigpo_gym.wrappers.PromptConfig``): the same in training,
    evaluation, the SFT transcripts and on the leaderboard (``gigpo-gym prompt`` prints it)."""
    reward: RewardShaping = field(default_factory=RewardShaping)
    """What the trainer pays for each step (``rollout.RewardShaping``): a scale of the success signal or of the
    env's own reward, minus penalties."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    records: RecordsConfig = field(default_factory=RecordsConfig)
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
        check_fields(self)
        _at_least(self, ("iterations", 0), ("keep_checkpoints", 1), ("save_every", 1), ("select_every", 0),
                  ("eval_every", 0))
        if not self.collective_timeout_s > 0:
            raise ConfigError(f"collective_timeout_s must be > 0, got {self.collective_timeout_s}")
        e, o = self.env, self.optim
        if self.prompt.template == "tools":
            self._check_chat()
        for kwargs in ("kwargs", "eval_kwargs", "select_kwargs"):  # how the policy sees the env belongs to its prompt
            if "observation_mode" in getattr(e, kwargs):
                raise ConfigError(f"env.{kwargs}.observation_mode: how the policy sees the env is "
                                  f"prompt.observation_mode (set it there: prompt.observation_mode: "
                                  f"{getattr(e, kwargs)['observation_mode']})")
        if o.kl_reset_every and (not o.kl_coef or self.model.lora is not None):
            raise ConfigError("optim.kl_reset_every needs a frozen reference model: optim.kl_coef > 0 and no model.lora")
        if self.select_every and e.eval_episodes and self.env_kwargs("select") == self.env_kwargs("eval"):
            raise ConfigError("select_every chooses the run's result on the held-out envs themselves, so their success "
                              "would be measured on the tasks it was chosen on: set env.select_kwargs to another split "
                              "(e.g. {split: valid_unseen})")
        if o.loss_over == "choices" and not self.model.choose_admissible:
            raise ConfigError("optim.loss_over: choices trains the choice among admissible actions; "
                              "it needs model.choose_admissible: true")

    def _check_chat(self) -> None:
        """The 'tools' template trains in TRL's tool-calling chat: what reads prompt strings instead is refused."""
        if self.sft.steps:
            raise ConfigError("sft.steps: the warm start trains on prompt strings, and prompt.template 'tools' plays "
                              "chats; warm-start in TRL's chat (gigpo_gym.integrations.trl.expert_conversations with "
                              "TRL's SFTTrainer), then set model.name to that folder and sft.steps: 0")
        if self.model.choose_admissible:
            raise ConfigError("model.choose_admissible answers prompt strings with an admissible action; "
                              "prompt.template 'tools' asks for tool calls: use one or the other")
        if self.model.generation == "vllm":
            raise ConfigError("model.generation 'vllm' is fed prompt ids only and answers no chats; "
                              "prompt.template 'tools' needs model.generation: hf")

    def env_kwargs(self, role: Literal["train", "eval", "select"] = "train") -> dict[str, Any]:
        """``gym.make`` kwargs of the run's training, held-out or selection envs (the prompt's observation mode too)."""
        e = self.env
        overrides = {"train": {}, "eval": e.eval_kwargs, "select": e.select_kwargs}[role]
        return {**e.kwargs, **overrides, **self.prompt.env_kwargs()}

    def check_envs(self) -> None:
        """Make each env the run will make once, so a bad env kwarg (a split, a task type, a data folder) is one
        ``ConfigError`` naming the section, before any run folder or model exists."""
        import gymnasium as gym

        import gigpo_gym  # noqa: F401  (registers the suite)

        e = self.env
        try:
            gym.spec(e.id)
        except gym.error.Error as err:
            raise ConfigError(f"env.id: {err}") from None
        roles = [("train", "kwargs")] + ([("eval", "eval_kwargs")] if e.eval_episodes else []) + (
            [("select", "select_kwargs")] if self.select_every else [])
        for role, key in roles:
            try:
                gym.make(e.id, **self.env_kwargs(role)).close()
            except (gym.error.Error, TypeError, ValueError, FileNotFoundError) as err:
                message = str(err).split(" was raised from the environment creator")[0]
                raise ConfigError(f"env.{key} (the {role} envs of {e.id}): {message}") from None

    def wrapper(self):
        """The prompt stack every env of the run wears (picklable, for ``make_grouped(wrappers=...)``).

        The 'tools' template cuts tool results in the tokens of the model folder's own tokenizer
        unless ``prompt.observation_tokenizer`` names another, as TRL's recipe and the leaderboard do.
        """
        prompt = self.prompt
        if prompt.template == "tools" and prompt.observation_tokenizer is None and Path(self.model.name).is_dir():
            prompt = dataclasses.replace(prompt, observation_tokenizer=self.model.name)
        return llm_stack(prompt, self.env.anchor_mode)

    def make_envs(self, role: Literal["train", "eval", "select"] = "train", num_groups: int | None = None,
                  group_offset: int = 0):
        """The run's grouped envs: training (``num_groups`` of ``env.group_size``, from ``group_offset``: one
        process's share) or held-out / selection (one episode per task), all through the run's prompt stack."""
        import gigpo_gym

        e = self.env
        if role == "train":
            groups, size = (e.num_groups if num_groups is None else num_groups), e.group_size
        else:
            groups, size = (e.eval_episodes if role == "eval" else e.select_episodes), 1
        return gigpo_gym.make_grouped(e.id, groups, size, backend=e.backend, seed=self.seed,
                                      env_kwargs=self.env_kwargs(role), wrappers=(self.wrapper(),),
                                      group_offset=group_offset)

# -- loading ----------------------------------------------------------------------------
#: The shipped configs: a checkout's ``configs/``, or the copy the wheel ships (``gigpo_gym/configs``).
CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"
#: What ``gigpo-gym train`` trains without ``--config``.
DEFAULT_CONFIG = "quickstart"


def shipped_configs() -> dict[str, Path]:
    """Name -> file of the shipped configs."""
    return {p.stem: p for p in sorted(CONFIGS_DIR.glob("*.yaml"))}


def resolve_config(text: str | Path | None, what: str = "--config") -> Path | None:
    """A config file path, or a shipped config by name (``demo``, ``demo.yaml``, ``configs/demo.yaml``)."""
    if text is None or Path(text).is_file():
        return None if text is None else Path(text)
    text = str(text)
    shipped = shipped_configs()
    name = Path(text).stem if Path(text).suffix in (".yaml", ".yml") and Path(text).parent.name in ("", "configs") else text
    if name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{what} {text!r} is neither a file nor a shipped config{hint}; shipped: {', '.join(shipped)}")



def _yaml_loader():
    """PyYAML's safe loader that also reads ``1e-5`` as a number (YAML 1.1 wants ``1.0e-5``)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
                                 list("-+0123456789."))
    return Loader


def _parse_yaml(text: str) -> Any:
    import yaml

    return yaml.load(text, Loader=_yaml_loader())  # noqa: S506  (a SafeLoader subclass)


#: Keys that moved to another section on 2026-11-29 -> where they are now: a run folder written before names them,
#: and its ``config.yaml`` is refused with the new place (the old keys are not read: edit the file).
MOVED_KEYS = {
    "model.use_chat_template": "prompt.chat_template", "model.system_prompt": "prompt.system_prompt",
    "model.response_prefix": "prompt.response_prefix", "env.reward_scale": "reward.scale",
    "env.reward_source": "reward.source", "env.invalid_action_penalty": "reward.invalid_action_penalty",
    "env.revisit_penalty": "reward.revisit_penalty", "env.history_length": "prompt.history_length",
    "env.prompt_intro": "prompt.intro", "env.action_format": "prompt.action_format",
    "env.task_key": "prompt.task_key", "env.list_actions": "prompt.list_actions",
}


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A ``TrainConfig`` from nested mappings (an unknown key is an error naming its closest match, or its new
    place when it moved: ``MOVED_KEYS``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping, got {type(data).__name__}")
    moved = [f"{old} is {new} now" for old, new in MOVED_KEYS.items()
             if old.split(".")[1] in (data.get(old.split(".")[0]) or {})]
    if moved:
        raise ConfigError(f"keys from before the prompt: and reward: sections (not read; rename them): {'; '.join(moved)}")
    try:
        return from_mapping(TrainConfig, data, what="config key")
    except FieldError as e:
        raise ConfigError(str(e)) from None


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply ``section.key=value`` (value parsed as YAML) to nested mappings in place."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like section.key=value")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {assignment!r}: {key!r} is not a section")
    node[keys[-1]] = _parse_yaml(raw)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read a YAML config, a file or a shipped config by name as the command line takes it (``"demo"``; ``None``:
    the defaults), and apply ``key=value`` overrides."""
    import yaml

    data: dict[str, Any] = {}
    path = resolve_config(path, what="config")
    if path is not None:
        try:
            data = _parse_yaml(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
    from_file = copy.deepcopy(data)
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return config_from_dict(data)
    except ConfigError as e:
        if path is None or (overrides and _valid(from_file)):  # an override's mistake is not the file's
            raise
        raise ConfigError(f"{path}: {e}") from None


def _valid(data: dict[str, Any]) -> bool:
    try:
        config_from_dict(data)
    except ConfigError:
        return False
    return True


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (the file ``load_config`` reads back)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
