"""One process of the two-process GiGPOTrainer test (run by torch.distributed.run; see test_integration_trl.py).

Each process generates its two rollouts of one task group (the group spans both processes,
as TRL splits a generation batch) and writes its step batch and token advantages.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from gigpo_gym.integrations.trl import GiGPOConfig, GiGPOTrainer, environment_class, task_dataset, token_turns  # noqa: E402


def main(tiny: str, out: str) -> None:
    config = GiGPOConfig(output_dir=out, per_device_train_batch_size=2, num_generations=4, max_completion_length=256,
                         report_to=[], save_strategy="no", seed=0, bf16=False, use_cpu=True, beta=0.0,
                         activation_checkpointing=False, omega=1.0, gamma=0.9)
    rows = task_dataset("gigpo_gym/SearchQA-v0", n=1, seed=3)
    trainer = GiGPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny), args=config,
                           processing_class=AutoTokenizer.from_pretrained(tiny), train_dataset=rows,
                           reward_funcs=[lambda completions, **kw: [0.01 * len(str(c)) for c in completions]],
                           environment_factory=environment_class("gigpo_gym/SearchQA-v0", max_observation_tokens=48))
    rank = trainer.accelerator.process_index
    trainer.model.train()
    torch.manual_seed(rank)
    output = trainer._generate_and_score_completions([dict(rows[0]), dict(rows[0])])
    batch = trainer.last_step_batch
    turn, _ = token_turns(output["completion_mask"] * output["tool_mask"])
    record = {
        "rank": rank, "processes": trainer.accelerator.num_processes,
        "batch": {name: [str(x) if name == "anchors" else float(x) for x in getattr(batch, name)]
                  for name in ("group_ids", "traj_ids", "step_ids", "rewards", "anchors")},
        "turn": turn.tolist(), "advantages": output["advantages"].tolist(),
        "steps": [len(env.steps) for env in trainer.environments],
    }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
