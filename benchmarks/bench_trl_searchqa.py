"""SmolLM2-135M-Instruct learns SearchQA through TRL, offline on the CPU: SFT, then GRPO and GiGPO.

The setting of ``configs/searchqa_smollm2.yaml`` (world of 800 entities, top-2 passages,
8 task groups x 8 episodes an iteration, lr 2e-5, KL 0.01 to the warm start, 15
iterations), in TRL's tool-calling conversation:

1. ``sft``: TRL's ``SFTTrainer`` on the expert's transcripts as tool calls
   (``expert_conversations``), the replies only (``assistant_only_loss``);
2. ``grpo`` and ``gigpo``: TRL's ``GRPOTrainer`` and ``GiGPOTrainer`` (omega 1, gamma 0.95)
   from that warm start, on the same task rows and seed; a reply has at most
   ``--reply-tokens`` new tokens (``generation_kwargs``), as the recipe caps its replies;
3. each model answers the 438 test questions, greedy, in the conversation it trained in
   (prompt tokens, its own reply tokens, the tool results' tokens: as TRL builds it).

Each stage writes its folder and is skipped when the folder is complete, so a killed run
resumes (an RL stage from TRL's last checkpoint).  The summary (EM per point, paired
differences by question, wall times) goes to ``--out``.

The run outlasts a sitting through ``--carry DIR`` (``benchmarks/results/trl_searchqa_runs``,
committed): after each stage its small files (``done.json``: the training log and wall time;
``eval.json``: the answer per question) are copied there, and a later sitting copies them
back first.  An RL stage whose evaluation is carried is not run again.  A warm start whose
weights are gone is trained again (the RL stages need them) and its training log is checked
against the carried one: on a machine like the first, the same seed and thread count give
the same losses, so the carried evaluations still belong to it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

ENV_ID = "gigpo_gym/SearchQA-v0"
ENV_KWARGS = {"world_size": 800, "topk": 2}


def last_checkpoint(folder: Path) -> str | None:
    """TRL's newest complete checkpoint in ``folder`` (a killed stage resumes from it), or None.

    The trainer writes ``trainer_state.json`` last and only then deletes the older
    checkpoint, so a stage killed in the middle of a save leaves a folder without it and
    the previous checkpoint whole: resume from that one.
    """
    complete = [p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
    return str(max(complete, key=lambda p: int(p.name.split("-")[1]))) if complete else None


def sft(args, root: Path) -> Path:
    """The warm start: SmolLM2 fine-tuned on the expert's tool-calling transcripts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from gigpo_gym.algos.policies.smollm import smollm2_path
    from gigpo_gym.integrations.trl import expert_conversations, with_tool_template

    out = root / "sft"
    if trained(out):
        return out
    carried = json.loads((out / "done.json").read_text()) if (out / "done.json").is_file() else None
    start = time.time()
    tokenizer = with_tool_template(AutoTokenizer.from_pretrained(str(smollm2_path())))
    data = expert_conversations(ENV_ID, "train", n=args.sft_episodes, seed=args.sft_seed, tokenizer=tokenizer,
                                max_observation_tokens=args.max_observation_tokens, **ENV_KWARGS)
    config = SFTConfig(output_dir=str(out / "trainer"), max_steps=args.sft_steps, per_device_train_batch_size=1,
                       gradient_accumulation_steps=8,
                       learning_rate=args.lr, lr_scheduler_type="constant", logging_steps=1, report_to=[],
                       save_strategy="steps", save_steps=5, save_total_limit=1, use_cpu=True, bf16=False,
                       activation_checkpointing=False, assistant_only_loss=True, seed=args.sft_seed)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(smollm2_path())), args=config,
                         train_dataset=data.remove_columns(["reward"]), processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=last_checkpoint(out / "trainer"))
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    done = {"seconds": time.time() - start, "log": trainer.state.log_history}
    if carried is not None:  # a later sitting's copy of the warm start: is it the one the carried results came from?
        gap = loss_gap(losses(done["log"]), losses(carried["log"]))
        done = {**carried, "retrained": {**done, "same_losses": gap <= 1e-5, "largest_loss_difference": gap}}
        print(f"warm start trained again: {'the same' if gap <= 1e-5 else 'OTHER'} losses as the carried run's "
              f"(largest difference {gap:.1e})", flush=True)
    (out / "done.json").write_text(json.dumps(done))
    return out


def trained(folder: Path) -> bool:
    """A stage's training is done and its weights are here (a carried ``done.json`` alone has no weights)."""
    return (folder / "done.json").is_file() and (folder / "model.safetensors").is_file()


def train_seconds(done: dict) -> float:
    """A stage's training time: the sum of TRL's ``step_time`` over its steps, which a resumed stage's log keeps
    from every sitting (``done["seconds"]`` is the last sitting's alone); ``seconds`` where the log has none."""
    steps = [entry["step_time"] for entry in done["log"] if "step_time" in entry]
    return float(sum(steps)) if steps else float(done["seconds"])


def losses(log: list[dict]) -> list[float]:
    return [entry["loss"] for entry in log if "loss" in entry]


def loss_gap(first: list[float], second: list[float]) -> float:
    """The largest difference between two runs' losses, step by step (inf where their steps differ).

    Another CPU or library release rounds differently: the same warm start's losses then
    differ in the seventh digit (3e-7 was seen), where another warm start's differ in the first.
    """
    if len(first) != len(second):
        return float("inf")
    return max((abs(a - b) for a, b in zip(first, second)), default=0.0)


#: The small files of a stage's folder that carry its results to a later sitting (the weights stay behind).
CARRIED = ("done.json", "eval.json")


def carry(source: Path, target: Path, names: tuple[str, ...] = CARRIED) -> list[Path]:
    """Copy each stage's files named in ``names`` from ``source`` to the same places under ``target``, where
    ``target`` has none or an older one (a warm start trained again this sitting keeps its record of that)."""
    import shutil

    copied = []
    for path in sorted(p for name in names for p in source.glob(f"*/{name}")):
        to = target / path.relative_to(source)
        if not to.is_file() or (to.read_bytes() != path.read_bytes() and to.stat().st_mtime < path.stat().st_mtime):
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, to)
            copied.append(to)
    return copied


def rl(args, root: Path, algo: str, warm: Path) -> Path:
    """``algo`` ("grpo": TRL's GRPOTrainer, "gigpo": GiGPOTrainer) from the warm start."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gigpo_gym.integrations.trl import GiGPOConfig, GiGPOTrainer, environment_class, task_dataset

    out = root / algo
    if trained(out):
        return out
    start = time.time()
    tokenizer = AutoTokenizer.from_pretrained(str(warm))
    common = dict(
        # 64 episodes a step, generated at once; the loss runs over them 2 at a time (memory: 49k-token logits)
        output_dir=str(out / "trainer"), per_device_train_batch_size=2,
        gradient_accumulation_steps=args.groups * args.group_size // 2, num_generations=args.group_size,
        max_steps=args.iterations,
        learning_rate=args.lr, lr_scheduler_type="constant", beta=args.kl, temperature=1.0,
        max_completion_length=args.max_completion_length, max_tool_calling_iterations=5, logging_steps=1,
        generation_kwargs={"max_new_tokens": args.reply_tokens},
        save_strategy="steps", save_steps=1, save_total_limit=1, report_to=[], use_cpu=True, bf16=False,
        activation_checkpointing=False, seed=args.seed,
    )  # fmt: skip
    if algo == "gigpo":
        trainer_cls, config = GiGPOTrainer, GiGPOConfig(**common, omega=1.0, gamma=0.95)
    else:
        trainer_cls, config = GRPOTrainer, GRPOConfig(**common)
    trainer = trainer_cls(
        model=AutoModelForCausalLM.from_pretrained(str(warm)), args=config, processing_class=tokenizer,
        train_dataset=task_dataset(ENV_ID, "train", n=args.groups * args.iterations, seed=args.seed + 1, **ENV_KWARGS),
        environment_factory=environment_class(ENV_ID, tokenizer=tokenizer,
                                              max_observation_tokens=args.max_observation_tokens, **ENV_KWARGS),
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=last_checkpoint(out / "trainer"))
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "done.json").write_text(json.dumps({"seconds": time.time() - start, "log": trainer.state.log_history}))
    return out


def evaluate(args, model_dir: Path, task_ids: list[str] | None = None) -> dict:
    """Greedy EM on every test question (or those of ``task_ids``), in TRL's conversation: prompt + reply tokens +
    tool-result tokens.

    Its own loop, not the leaderboard's ``--prompt tools``: it applies TRL's completion
    budget as training did (``max_completion_length``, 5 tool rounds; a reply cut to what
    is left; a tool result that would not fit ends the episode before the env steps),
    which binds at 160-token tool results and which the episode player has no counterpart
    for; where the budget does not bind both give the same EM per question
    (tests/test_tools_template.py).  Each batch's answers are kept in
    ``eval.partial.json``, so a killed evaluation goes on where it stopped.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import parse_response

    from gigpo_gym.wrappers.chat import tool_suffix_ids
    from gigpo_gym.integrations.trl import environment_class, task_dataset
    from gigpo_gym.wrappers.tool_env import CompletionBudget, run_call, tool_methods

    out, partial = model_dir / "eval.json", model_dir / "eval.partial.json"
    if out.is_file():
        return json.loads(out.read_text())
    kept = json.loads(partial.read_text()) if partial.is_file() else {"results": {}, "seconds": 0.0}
    results, start = kept["results"], time.time() - kept["seconds"]
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    max_model_len = model.config.max_position_embeddings
    rows = task_dataset(ENV_ID, "test", n=None, **ENV_KWARGS)
    if task_ids is not None:
        where = {task: i for i, task in enumerate(rows["task_id"])}
        rows = rows.select([where[task] for task in task_ids])
    elif args.eval_questions:
        rows = rows.select(range(min(args.eval_questions, len(rows))))
    Env = environment_class(ENV_ID, tokenizer=tokenizer, max_observation_tokens=args.max_observation_tokens,
                            split="test", **ENV_KWARGS)
    todo = [i for i in range(len(rows)) if rows[i]["task_id"] not in results]
    for first in range(0, len(todo), args.eval_batch):
        batch = [rows[i] for i in todo[first: first + args.eval_batch]]
        envs = [Env() for _ in batch]
        tools = [tool_methods(env) for env in envs]  # in TRL's order
        prompts, completions = [], [[] for _ in batch]
        for env, row, tool_list, completion in zip(envs, batch, tools, completions):
            messages = [{"role": "user", "content": row["prompt"][0]["content"] + env.reset(**row)}]
            prompts.append(tokenizer.apply_chat_template(messages, tools=tool_list, add_generation_prompt=True,
                                                         tokenize=True, return_dict=False))
            # as GiGPOTrainer gives it in training: a result that cannot fit ends the episode before the env steps
            env.budget = CompletionBudget(len(prompts[-1]), lambda c=completion: len(c), args.max_completion_length,
                                          max_model_len, lambda messages: tool_suffix_ids(tokenizer, messages))
        active = list(range(len(batch)))
        for _ in range(6):  # the first reply and at most 5 rounds of tool results (TRL's max_tool_calling_iterations)
            if not active:
                break
            inputs = [prompts[i] + completions[i] for i in active]
            width = max(map(len, inputs))
            ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(x)) + x for x in inputs])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
            with torch.no_grad():
                generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.reply_tokens,
                                           do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                           eos_token_id=tokenizer.eos_token_id)[:, width:].tolist()
            still = []
            for i, new in zip(active, generated):
                if tokenizer.eos_token_id in new:
                    new = new[: new.index(tokenizer.eos_token_id) + 1]
                new = new[: args.max_completion_length - len(completions[i])]  # TRL cuts a reply to what is left
                reply = parse_response(tokenizer, new, prefix=prompts[i] + completions[i], tools=tools[i])
                completions[i] += new
                calls = reply.get("tool_calls") or []
                if not calls or len(completions[i]) >= args.max_completion_length:
                    continue
                messages = [{"role": "tool", "name": call["function"]["name"],
                             "content": run_call(envs[i], call["function"]["name"], call["function"]["arguments"])}
                            for call in calls]
                if envs[i].done and envs[i].truncation == "completion budget":
                    continue  # the result would not fit: the episode ended before the env stepped
                suffix = tool_suffix_ids(tokenizer, messages)
                if len(completions[i]) + len(suffix) > args.max_completion_length:
                    continue  # TRL drops a result that does not fit and stops
                completions[i] += suffix
                still.append(i)
            active = still
        for env, row in zip(envs, batch):
            results[row["task_id"]] = {"em": env.get_reward(), "steps": len(env.steps),
                                       "invalid": sum(not s.valid for s in env.steps),
                                       "budget_ended": env.truncation == "completion budget"}
        partial.write_text(json.dumps({"results": results, "seconds": time.time() - start}))
        print(f"  {model_dir.name}: {len(results)}/{len(rows)} questions, EM so far "
              f"{np.mean([r['em'] for r in results.values()]):.3f}", flush=True)
    summary = {"em": {k: v["em"] for k, v in results.items()}, "seconds": time.time() - start,
               "steps_mean": float(np.mean([r["steps"] for r in results.values()])),
               "invalid_steps": int(sum(r["invalid"] for r in results.values())),
               "budget_ended": int(sum(r.get("budget_ended", False) for r in results.values()))}
    out.write_text(json.dumps(summary))
    partial.unlink(missing_ok=True)
    return summary


def paired(a: dict, b: dict) -> dict:
    """b - a over the questions both answered: mean and standard error of the per-question difference, in points."""
    keys = sorted(set(a) & set(b))
    diff = np.array([b[k] - a[k] for k in keys]) * 100
    return {"gain": float(diff.mean()), "se": float(diff.std(ddof=1) / np.sqrt(len(diff))),
            "won": int((diff > 0).sum()), "lost": int((diff < 0).sum()), "questions": len(keys)}


def run(args) -> dict[str, dict]:
    """Every point's evaluation (SFT, then each of ``--algos``): carried, or trained and evaluated, then carried out."""
    if args.carry:
        print(f"carried over {len(carry(args.carry, args.run_root))} results files from {args.carry}", flush=True)
    warm: list[Path] = []

    def warm_start() -> Path:  # trained only when a point that is not carried needs it
        warm[:] = warm or [sft(args, args.run_root)]
        return warm[0]

    def point(name: str, make) -> dict:
        done = args.run_root / name / "eval.json"
        result = json.loads(done.read_text()) if done.is_file() else evaluate(args, make())
        if args.carry:
            carry(args.run_root, args.carry)
        return result

    points = {"sft": point("sft", warm_start)}
    for algo in [a for a in args.algos.split(",") if a]:
        points[algo] = point(algo, lambda algo=algo: rl(args, args.run_root, algo, warm_start()))
    return points


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options (their defaults are TRL's recipe, which other benchmarks read too)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-root", type=Path, default=Path("runs/trl_searchqa"),
                        help="folder of the stages (sft, grpo, gigpo): models, TRL checkpoints, done.json, eval.json "
                             "(default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/trl_searchqa.json"),
                        help="the summary: EM per point, paired gains, wall times (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads; part of what reproduces a run exactly (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="RL seed: the RL task rows draw with seed + 1, TRL's sampling with seed "
                             "(default: %(default)s)")
    parser.add_argument("--sft-seed", type=int, default=0,
                        help="the warm start's seed: its transcripts and SFT draw with it. Every RL seed starts from "
                             "the same warm start, as in bench_llm_study.py, so seeds differ in RL alone; copy its "
                             "carried sft/ files into another seed's --carry to skip evaluating it again "
                             "(default: %(default)s)")
    parser.add_argument("--algos", default="grpo,gigpo",
                        help="RL stages after SFT, comma-separated; empty: SFT and its evaluation only "
                             "(default: %(default)s)")
    parser.add_argument("--sft-steps", type=int, default=20,
                        help="SFTTrainer steps of 8 chats (default: %(default)s)")
    parser.add_argument("--sft-episodes", type=int, default=400,
                        help="expert episodes rendered as tool-calling chats for SFT (default: %(default)s)")
    parser.add_argument("--iterations", type=int, default=15,
                        help="RL steps (default: %(default)s)")
    parser.add_argument("--groups", type=int, default=8,
                        help="task rows (groups) per RL step (default: %(default)s)")
    parser.add_argument("--group-size", type=int, default=8,
                        help="episodes per task row, TRL's num_generations (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=2e-5,
                        help="learning rate of SFT and RL, constant (default: %(default)s)")
    parser.add_argument("--kl", type=float, default=0.01,
                        help="KL coefficient to the warm start, TRL's beta (default: %(default)s)")
    parser.add_argument("--max-observation-tokens", type=int, default=160,
                        help="tool results are cut to this many tokens, the cut marked (default: %(default)s)")
    parser.add_argument("--max-completion-length", type=int, default=768,
                        help="TRL's completion budget: replies and tool results of an episode (default: %(default)s)")
    parser.add_argument("--eval-batch", type=int, default=32,
                        help="test questions decoded together (default: %(default)s)")
    parser.add_argument("--reply-tokens", type=int, default=48,
                        help="new tokens a reply may have, in RL and evaluation (the recipe caps its replies too; "
                             "uncapped, one rambling reply holds a whole generation batch for hundreds of tokens)")
    parser.add_argument("--eval-questions", type=int, default=0, help="the first N test questions (0: all 438)")
    parser.add_argument("--carry", type=Path, default=None, metavar="DIR",
                        help="results files of earlier sittings (benchmarks/results/trl_searchqa_runs): copied into "
                             "--run-root first, and the run root's copied there after each stage (default: none)")
    return parser


def main() -> None:
    args = build_parser().parse_args()

    import torch

    torch.set_num_threads(args.threads)
    args.run_root.mkdir(parents=True, exist_ok=True)
    points = run(args)
    summary = {"points": {name: {"em": 100 * float(np.mean(list(p["em"].values()))),
                                 "se": 100 * float(np.std(list(p["em"].values()), ddof=1) / np.sqrt(len(p["em"]))),
                                 "eval_seconds": p["seconds"], "steps_mean": p["steps_mean"],
                                 "invalid_steps": p["invalid_steps"], "budget_ended": p.get("budget_ended", 0)}
                        for name, p in points.items()},
               "gains_over_sft": {name: paired(points["sft"]["em"], p["em"]) for name, p in points.items() if name != "sft"},
               "train_seconds": {name: train_seconds(json.loads((args.run_root / name / "done.json").read_text()))
                                 for name in points},
               "args": {k: str(v) for k, v in vars(args).items()}}
    if {"grpo", "gigpo"} <= set(points):
        summary["gigpo_minus_grpo"] = paired(points["grpo"]["em"], points["gigpo"]["em"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "args"}, indent=2))


if __name__ == "__main__":
    main()
