"""The suite inside Hugging Face TRL: environments, task datasets and GiGPO as a ``GRPOTrainer``.

- ``environment_class(env_id, ...)``: a class for ``GRPOTrainer(environment_factory=...)``
  whose tools are the env's own actions (``gigpo_gym.wrappers.tool_env``).
- ``task_dataset(env_id, split, n, seed)``: rows with ``prompt``, ``seed`` and
  ``task_id``, so TRL's ``num_generations`` copies of a row play one task.
- ``with_tool_template(tokenizer)``: a tool-calling chat template and TRL's response
  parser for tokenizers that lack them (SmolLM2).
- ``GiGPOTrainer`` / ``GiGPOConfig``: per-token advantages from the package's step-level
  estimators (GiGPO by default) over the anchors each tool call was made in; like the
  package's trainer it records a few task groups per step in ``output_dir/records/``
  (``gigpo-gym inspect OUTPUT_DIR`` shows them).

Importing this module checks that the installed TRL is in the range the ``[trl]`` extra pins.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gigpo_gym.integrations import require

TRL_VERSION = require("trl")
TRANSFORMERS_VERSION = require("transformers")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import add_response_schema, supports_tool_calling  # noqa: E402

from gigpo_gym.algos.estimators.batch import StepBatch  # noqa: E402
from gigpo_gym.algos.policies.quiet import quiet_libraries  # noqa: E402
from gigpo_gym.algos.estimators.registry import algorithm_class  # noqa: E402
from gigpo_gym.algos.training.records import (  # noqa: E402
    RECORDS_DIR, EpisodeView, Recorder, StepView, Updated, choose_groups, drop_after, iteration_record)
from gigpo_gym.core.env import derive_seed  # noqa: E402
from gigpo_gym.wrappers.anchor import ANCHOR_MODES  # noqa: E402
from gigpo_gym.wrappers.chat import TOOL_CHAT_TEMPLATE, response_template  # noqa: E402
from gigpo_gym.wrappers.tool_calls import family_of  # noqa: E402
from gigpo_gym.wrappers.tool_env import (  # noqa: E402, F401
    CompletionBudget, StepRecord, ToolEnvironment, environment_class, tool_schemas)

logger = logging.getLogger(__name__)
quiet_libraries()
# TRL 1.16's trainers read transformers 5's deprecated `is_gradient_checkpointing`: TRL's to change, not the user's
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

__all__ = ["GiGPOConfig", "GiGPOTrainer", "StepRecord", "ToolEnvironment", "environment_class", "expert_conversations",
           "task_dataset",
           "token_turns", "with_tool_template"]


def with_tool_template(tokenizer: Any) -> Any:
    """``tokenizer`` with a tool-calling chat template and a response parser TRL can use.

    A template TRL already knows (Qwen, Llama 3.1, ...) is kept; any other (SmolLM2's
    has no tools) is replaced by ``chat.TOOL_CHAT_TEMPLATE``, ended by the tokenizer's EOS.
    """
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos_token; the tool template ends each turn with it")
    if getattr(tokenizer, "chat_template", None) and supports_tool_calling(tokenizer):
        if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None) is not None:
            return tokenizer
        try:
            return add_response_schema(tokenizer)
        except ValueError:  # a template TRL cannot parse: use ours
            pass
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = response_template(tokenizer.eos_token)
    return tokenizer


def task_dataset(env_id: str, split: str = "train", n: int | None = None, seed: int = 0, **env_kwargs: Any):
    """A ``datasets.Dataset`` of tasks: ``prompt`` (the family's instructions), ``seed`` and ``task_id``.

    Row i plays the task of reset seed ``derive_seed(seed, i)``; ``n=None`` takes every
    task of the split once (envs that list ``task_ids``, e.g. SearchQA's 438 test
    questions), in order.  Pass the same ``split`` and ``env_kwargs`` to
    ``environment_class``.
    """
    from datasets import Dataset

    family = family_of(env_id)
    env = gym.make(env_id, split=split, **env_kwargs)
    if n is None:
        task_ids = getattr(env.unwrapped, "task_ids", None)
        if task_ids is None:
            raise ValueError(f"{env_id} does not list its tasks; pass n=")
        seeds = [derive_seed(seed, i) for i in range(len(task_ids))]
    else:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int or None (every task), got {n!r}")
        seeds = [derive_seed(seed, i) for i in range(n)]
        task_ids = [env.reset(seed=s)[1]["task_id"] for s in seeds]
    env.close()
    prompt = [{"role": "user", "content": family.first_message("")}]
    return Dataset.from_dict({"prompt": [prompt] * len(seeds), "seed": seeds, "task_id": [str(t) for t in task_ids]})


def expert_conversations(env_id: str, split: str = "train", n: int = 100, seed: int = 0, *,
                         tokenizer: Any = None, max_observation_tokens: int = 512, **env_kwargs: Any):
    """A ``datasets.Dataset`` of the expert's episodes as tool-calling conversations (``messages``, ``tools``).

    Row i is the expert playing the task of ``task_dataset(env_id, split, n, seed)``'s
    row i through ``environment_class(env_id, ...)``: the same prompt, tool results and
    cuts RL sees, one tool call per assistant turn and an empty last turn (the model
    stops).  For TRL's ``SFTTrainer`` (``assistant_only_loss=True`` trains the replies only).
    """
    from datasets import Dataset

    tasks = task_dataset(env_id, split, n, seed, **env_kwargs)
    env = environment_class(env_id, tokenizer=tokenizer, max_observation_tokens=max_observation_tokens,
                            split=split, **env_kwargs)()
    family = env.family
    # in TRL's order (GRPOTrainer lists them so); JSON text, as datasets would otherwise merge the different
    # tools' (and calls') fields into one struct
    tools = json.dumps(tool_schemas(env))
    rows = []
    for row in tasks:
        first = env.reset(seed=row["seed"], task_id=row["task_id"])
        messages = [{"role": "user", "content": row["prompt"][0]["content"] + first}]
        while not env.done:
            call = family.tool_call(env._env.unwrapped.expert_action())
            if call is None:
                raise RuntimeError(f"the expert's action of {env_id} is no tool call of {family.name}")
            result = getattr(env, call["name"])(**call["arguments"])
            call = {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}
            messages.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]})
            messages.append({"role": "tool", "name": call["name"], "content": result})
        messages.append({"role": "assistant", "content": ""})
        rows.append({"messages": messages, "tools": tools, "reward": env.get_reward()})
    return Dataset.from_list(rows)


def token_turns(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn index of each token (-1 outside generated text) and the number of turns per rollout.

    ``mask`` (B, T) is 1 on generated tokens and 0 on tool results and padding; each run
    of 1s is one generated turn, since TRL puts a tool result between two turns.
    """
    on = mask.bool()
    starts = on & ~torch.nn.functional.pad(on[:, :-1], (1, 0))
    turn = torch.where(on, starts.long().cumsum(dim=1) - 1, torch.full_like(mask, -1, dtype=torch.long))
    return turn, starts.sum(dim=1)


@dataclass
class GiGPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the step-level estimator's settings.

    ``scale_rewards`` sets the estimator's ``norm_by_std`` ("group": True, "none": False),
    so that with ``omega=0`` the advantages are TRL's GRPO ones.
    """

    estimator: str = field(default="gigpo", metadata={"help": "Name of a registered advantage estimator "
                                                               "(gigpo_gym.algos.available_algorithms())."})
    omega: float = field(default=1.0, metadata={"help": "Weight of the step-level advantage (estimators with omega)."})
    gamma: float = field(default=0.95, metadata={"help": "Discount of the step-level return (estimators with gamma)."})
    anchor_mode: str = field(default="state", metadata={"help": "What a step group shares: 'state' (the env's "
                                                                 "true-state anchor) or 'observation' (its text)."})
    estimator_kwargs: dict | None = field(default=None, metadata={"help": "More estimator settings "
                                                                           "(e.g. {'grouping': 'similarity'})."})
    record_groups: int = field(default=2, metadata={"help": "Task groups recorded whole per step in "
                                                            "output_dir/records/ for gigpo-gym inspect (0: none)."})
    record_text_chars: int = field(default=1000, metadata={"help": "Each recorded observation and reply is cut "
                                                                   "to this many characters."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.anchor_mode not in ANCHOR_MODES:
            raise ValueError(f"anchor_mode must be one of {ANCHOR_MODES}, got {self.anchor_mode!r}")
        if self.scale_rewards not in ("group", "none"):
            raise ValueError(f"GiGPOConfig supports scale_rewards='group' or 'none' (the estimator's norm_by_std), "
                             f"got {self.scale_rewards!r}")
        if self.record_groups < 0 or self.record_text_chars < 1:
            raise ValueError(f"record_groups must be >= 0 and record_text_chars >= 1, got {self.record_groups} and "
                             f"{self.record_text_chars}")
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("GiGPOConfig needs multi_objective_aggregation='sum_then_normalize': the estimator "
                             "reads one return per episode")
        self.build_estimator()  # an unknown name or setting fails here

    def build_estimator(self):
        """The configured estimator, given the settings its config has (omega, gamma, norm_by_std)."""
        cls = algorithm_class(self.estimator)
        if cls.needs_critic:
            raise ValueError(f"estimator {self.estimator!r} needs a critic, which GRPOTrainer does not train")
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        settings = {"omega": self.omega, "gamma": self.gamma, "norm_by_std": self.scale_rewards == "group"}
        config = {k: v for k, v in settings.items() if k in names}
        config.update(self.estimator_kwargs or {})
        return cls.from_config(**config)


class GiGPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are per token: each generated turn gets the step-level estimator's
    advantage of the env step it made (GiGPO: A^E + omega * A^S of its anchor group).

    The environment factory must be an ``environment_class``.  Every generated turn is a
    row of a ``StepBatch``: its anchor is the state the turn started in, its reward the
    env rewards of its tool calls; the last row also gets whatever TRL's other reward
    functions add, so a trajectory's return is TRL's reward.  Rows are gathered across
    processes before the estimator runs.  Logs ``adv/*`` (step-group sizes) and ``env/*``.
    """

    _name = "GiGPO"
    _tag_names = ["trl", "gigpo"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        if not isinstance(config, GiGPOConfig):
            raise TypeError(f"GiGPOTrainer needs args=GiGPOConfig(...), got {type(config).__name__}")
        super().__init__(*args, **kwargs)
        pools = getattr(self, "_environment_pool", None) or {}
        if not pools or not all(isinstance(env, ToolEnvironment) for pool in pools.values() for env in pool):
            raise TypeError("GiGPOTrainer needs environment_factory=environment_class(env_id, ...): the turns' "
                            "anchors come from its step records")
        self.estimator = config.build_estimator()
        self.last_step_batch: StepBatch | None = None
        self._episode_returns: torch.Tensor | None = None
        #: The main process's recorder (``training.records``): written with each checkpoint and at the end.
        self.recorder = Recorder(Path(config.output_dir) / RECORDS_DIR, config.record_groups, config.seed,
                                 config.record_text_chars) if config.record_groups and self.accelerator.is_main_process \
            else None
        if self.recorder is not None:
            self.add_callback(RecordsInStep(self.recorder))

    # -- hooks into GRPOTrainer ------------------------------------------------------------
    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, *args, **kwargs):
        """Give each environment its rollout's budget, then run TRL's tool loop."""
        if self.use_vllm and self.vllm_mode == "colocate":
            max_model_len = self.vllm_generation.llm.llm_engine.model_config.max_model_len
        else:
            config = self.model.config.text_config if self._is_vlm else self.model.config
            max_model_len = config.max_position_embeddings
        for i, env in enumerate(self.environments or []):
            # the test TRL applies after the tools ran, applied before the env steps
            env.budget = CompletionBudget(len(prompt_ids[i]), lambda i=i: len(completion_ids[i]),
                                          self.max_completion_length, max_model_len, self._get_tool_suffix_ids)
        return super()._tool_call_loop(prompts, prompt_ids, completion_ids, *args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards, keeping each rollout's total (all processes) for the trajectory returns."""
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._episode_returns = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        return per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        generated = output["completion_mask"] * output["tool_mask"] if "tool_mask" in output else output["completion_mask"]
        turn, n_turns = token_turns(generated)
        tool_runs = token_turns(output["completion_mask"] * (1 - output["tool_mask"]))[1] if "tool_mask" in output \
            else torch.zeros_like(n_turns)
        local, first = len(inputs), self.accelerator.process_index * len(inputs)
        returns = self._episode_returns[first: first + local].tolist()
        iteration = self.state.global_step + 1
        # every process knows the sampled groups (the same draw), so only their rows carry texts
        sampled = set(choose_groups(range(local * self.accelerator.num_processes // group_size),
                                    self.args.record_groups, self.args.seed, iteration)) \
            if mode == "train" and self.args.record_groups else set()
        rows, stats = [], []
        for i, env in enumerate(self.environments):
            replies = None
            if (first + i) // group_size in sampled:
                ids = output["completion_ids"][i]
                replies = [self.processing_class.decode(ids[turn[i] == k].tolist()) for k in range(int(n_turns[i]))]
            episode_rows, episode_stats = self._episode_rows(env, first + i, group_size, int(n_turns[i]), returns[i],
                                                             int(tool_runs[i]), replies)
            rows += episode_rows
            stats.append(episode_stats)
        rows, stats = gather_object(rows), gather_object(stats)
        batch = StepBatch(
            group_ids=[r["group_id"] for r in rows], traj_ids=[r["traj_id"] for r in rows],
            step_ids=[r["step_id"] for r in rows], rewards=[r["reward"] for r in rows],
            anchors=[r["anchor"] for r in rows], anchor_texts=[r["anchor_text"] for r in rows],
        )  # fmt: skip
        parts = self.estimator.advantage_parts(batch)
        mask = np.asarray(self.estimator.row_mask(batch), dtype=bool)
        advantages = parts.advantages * mask
        self.last_step_batch = batch
        if self.recorder is not None and sampled:
            self._record(iteration, Updated(batch, parts.advantages, mask, parts), rows, stats, sorted(sampled))
        table = torch.zeros(local, int(n_turns.max().item()) + 1 if local else 1, dtype=torch.float32)
        for row, value in zip(rows, advantages.tolist()):
            if first <= row["traj_id"] < first + local:
                table[row["traj_id"] - first, row["step_id"]] = value
        table = table.to(turn.device)
        output["advantages"] = torch.where(turn >= 0, table.gather(1, turn.clamp(min=0)), torch.zeros_like(table[:, :1]))
        self._log_rollouts(mode, batch, stats, parts)
        return output

    # -- rows and logs -------------------------------------------------------------------
    def _episode_rows(self, env: ToolEnvironment, traj: int, group_size: int, n_turns: int, total: float,
                      tool_runs: int, replies: list[str] | None = None) -> tuple[list[dict], dict]:
        """One row per generated turn (at least one per episode), with the env steps each turn made.

        With ``replies`` (each turn's generated text) the rows also carry what the records show.
        """
        turns = max(n_turns, 1)
        steps = env.steps
        mode = self.args.anchor_mode
        key = "anchor" if mode == "state" else "observation_anchor"
        current = env.anchor
        rows = []
        for k in range(turns):
            made = [s for s in steps if s.turn is not None and min(s.turn, turns - 1) == k]
            later = [s for s in steps if s.turn is not None and s.turn >= k]
            anchor = getattr(later[0], key) if later else current[mode]
            text = later[0].anchor_text if later else current["text"]
            rows.append({"group_id": traj // group_size, "traj_id": traj, "step_id": k,
                         "reward": float(sum(s.reward for s in made)), "anchor": anchor, "anchor_text": text})
            if replies is not None:
                rows[-1]["shown"] = {"reply": replies[k] if k < len(replies) else "",
                                     "action": " | ".join(s.action for s in made) if made else None,
                                     "valid": all(s.valid for s in made), "env_reward": float(sum(s.reward for s in made))}
        rows[-1]["reward"] += total - env.get_reward()  # what TRL's other reward functions add
        info = env.info
        status = {"completion budget": "budget", "step limit": "truncated"}.get(env.truncation or "", "terminated") \
            if env.done else "unfinished"
        stats = {"steps": len(steps), "invalid": sum(not s.valid for s in steps),
                 "unseen": sum(1 for s in steps if s.turn is None or s.turn >= tool_runs),
                 "budget": env.truncation == "completion budget", "step_limit": env.truncation == "step limit",
                 "episode": EpisodeView(traj, str(info.get("task_id", "")), str(info.get("task_type", "")),
                                        bool(info.get("won", False)), status, env.get_reward())}
        return rows, stats

    def _record(self, iteration: int, updated: Updated, rows: list[dict], stats: list[dict], groups: list[int]) -> None:
        """Record this step's sampled task groups (main process; written with the next checkpoint)."""
        by_type: dict[str, list[bool]] = {}
        for s in stats:
            by_type.setdefault(s["episode"].task_type, []).append(s["episode"].won)
        success = {**{t: float(np.mean(w)) for t, w in sorted(by_type.items())},
                   "all": float(np.mean([s["episode"].won for s in stats])) if stats else 0.0}

        def step_of(row: int) -> StepView:
            shown = rows[row]["shown"]
            return StepView(rows[row]["anchor_text"], shown["reply"], shown["action"], shown["valid"],
                            shown["env_reward"])

        self.recorder.add(iteration_record(iteration, updated, groups, [s["episode"] for s in stats], step_of,
                                           success, algo=self.estimator.config(), source="trl",
                                           text_chars=self.recorder.text_chars))

    def _save_checkpoint(self, model, trial) -> None:
        if self.recorder is not None:  # first: a checkpoint is never without its steps' records
            self.recorder.flush()
        super()._save_checkpoint(model, trial)

    def _log_rollouts(self, mode: str, batch: StepBatch, stats: list[dict], parts: Any = None) -> None:
        metrics = self._metrics[mode]
        for name, value in self.estimator.diagnostics(batch, parts).items():
            metrics[name].append(value)
        episodes = max(len(stats), 1)
        steps = sum(s["steps"] for s in stats)
        metrics["env/steps_per_episode"].append(steps / episodes)
        metrics["env/invalid_step_share"].append(sum(s["invalid"] for s in stats) / max(steps, 1))
        metrics["env/truncated_by_budget"].append(sum(s["budget"] for s in stats) / episodes)
        metrics["env/truncated_by_step_limit"].append(sum(s["step_limit"] for s in stats) / episodes)
        unseen = sum(s["unseen"] for s in stats)
        metrics["env/unseen_steps"].append(float(unseen))
        budget = sum(s["budget"] for s in stats)
        if budget:
            logger.info("%d of %d episodes ended as truncated: no room left in the completion for another "
                        "observation (raise max_completion_length or lower max_observation_tokens)", budget, episodes)
        if unseen:
            logger.warning("%d env steps were made whose result the model never saw", unseen)



class RecordsInStep(TrainerCallback):
    """Keeps ``records/`` in step with the checkpoints: a resumed run drops the records after its checkpoint (it
    records those steps again), and the end of training writes what no checkpoint took."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def on_train_begin(self, args, state, control, **kwargs):
        self.recorder.pending.clear()
        drop_after(self.recorder.folder, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.recorder.flush()
