"""The package's GRPO in TRL's tool-calling chat, from TRL's warm start: is TRL's larger gain its trainer?

TRL's GRPO gains more over its own warm start than the package's GRPO over the package's,
but the two also differ in prompt and warm start.  This run keeps TRL's prompt and warm
start and changes the trainer only:

1. the warm start is ``bench_trl_searchqa.py``'s (TRL's ``SFTTrainer`` on the expert's
   tool-calling chats), trained again where its weights are gone (its carried log says
   whether it is the same model);
2. the package's trainer runs the SearchQA recipe (``configs/searchqa_smollm2.yaml``) with
   GRPO from that folder, in the chat (``prompt.template: tools``, TRL's recipe's
   160-token tool results and 48-token replies);
3. its final weights answer the 438 test questions as TRL's models did
   (``bench_trl_searchqa.evaluate``: greedy, TRL's conversation and completion budget);
4. it is paired by question with TRL's warm start and TRL's GRPO of the same seed, with
   and without the 37 yes/no questions (``searchqa_yes_no.py``).

    python benchmarks/bench_trainer_trl_chat.py --carry-trl benchmarks/results/trl_searchqa_runs \\
        --carry benchmarks/results/trainer_trl_chat_runs

Each stage is skipped when done: a killed run resumes from its newest checkpoint, and
``--carry`` keeps the run's small files (config, metrics, evaluation) across machines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_trl_searchqa as trl_bench  # noqa: E402  (TRL's warm start, its evaluation, paired gains)
from searchqa_yes_no import yes_no_questions  # noqa: E402

#: The recipe moved into TRL's chat; TRL's recipe's tool-result cut and reply length; the template's defaults for
#: the prompt keys the recipe sets for its own prompt; room for the whole conversation in the prompt.
CHAT = ("prompt.template=tools", "prompt.history_length=2", "prompt.intro=null", "prompt.action_format=null",
        "prompt.max_observation_tokens=160", "sampling.max_new_tokens=48", "sampling.stop=[]",
        "model.max_prompt_tokens=2048", "sft.steps=0", "algo.name=grpo", "algo.kwargs={}", "env.eval_episodes=0")
#: The small files of a run that another machine needs for the report.
KEPT = ("config.yaml", "metrics.jsonl", "summary.json", "eval.json")


def run_folder(args) -> Path:
    return args.run_root / f"seed{args.seed}-grpo"


def train(args, warm: Path) -> Path:
    """The package's GRPO run from ``warm`` (resumed, or skipped when done); its folder."""
    from gigpo_gym.algos.training.checkpoint import list_checkpoints
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import run_training

    run_dir = run_folder(args)
    cfg = load_config("searchqa_smollm2", [*CHAT, f"model.name={warm}", f"seed={args.seed}", f"run_dir={run_dir}",
                                           "save_every=1", *args.set])
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    if not ((run_dir / "summary.json").is_file() and checkpoints):
        run_training(cfg, resume="latest" if checkpoints else None)
    return run_dir


def exported(run_dir: Path, warm: Path) -> Path:
    """The run's final weights as a Hugging Face folder (with the warm start's tokenizer), which TRL's evaluation
    loads."""
    from safetensors.torch import load_model

    from gigpo_gym.algos.policies.hf import HFPolicy
    from gigpo_gym.algos.training.checkpoint import POLICY_FILE, latest_checkpoint

    folder = run_dir / "model"
    if not (folder / "model.safetensors").is_file():
        policy = HFPolicy.from_pretrained(str(warm), device="cpu")
        load_model(policy, str(latest_checkpoint(run_dir / "checkpoints") / POLICY_FILE))
        policy.save(folder)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--run-root", type=Path, default=Path("runs/trainer_trl_chat"),
                   help="the package's runs, one folder a seed (default: %(default)s)")
    p.add_argument("--trl-root", type=Path, default=Path("runs/trl_searchqa"),
                   help="bench_trl_searchqa.py's run root: its warm start and evaluations (default: %(default)s)")
    p.add_argument("--carry-trl", type=Path, default=None, metavar="DIR",
                   help="bench_trl_searchqa.py's carried results of this seed (benchmarks/results/trl_searchqa_runs "
                        "for seed 0), copied into --trl-root first (default: none)")
    p.add_argument("--carry", type=Path, default=None, metavar="DIR",
                   help="this benchmark's carried run files: copied into --run-root first and back after each stage "
                        "(default: none)")
    p.add_argument("--seed", type=int, default=0, help="the training seed (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="another config override of the package's run (repeatable)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "trainer_trl_chat.json",
                   help="the summary (default: benchmarks/results/trainer_trl_chat.json)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    trl = trl_bench.build_parser().parse_args(["--run-root", str(args.trl_root), "--threads", str(args.threads)])
    if args.carry_trl:
        trl_bench.carry(args.carry_trl, args.trl_root)
    if args.carry:
        trl_bench.carry(args.carry, args.run_root, KEPT)
    run_dir = run_folder(args)
    if not (run_dir / "eval.json").is_file():  # a carried evaluation needs neither weights nor training
        warm = trl_bench.sft(trl, args.trl_root)
        train(args, warm)
        if args.carry:
            trl_bench.carry(args.run_root, args.carry, KEPT)
        result = trl_bench.evaluate(trl, exported(run_dir, warm))
        (run_dir / "eval.json").write_text(json.dumps(result))
        if args.carry:
            trl_bench.carry(args.run_root, args.carry, KEPT)
    em = {name: json.loads(path.read_text())["em"] for name, path in (
        ("trl_sft", args.trl_root / "sft" / "eval.json"), ("trl_grpo", args.trl_root / "grpo" / "eval.json"),
        ("package_grpo", run_dir / "eval.json")) if path.is_file()}
    yes_no = yes_no_questions()
    rest = {name: {k: v for k, v in scores.items() if k not in yes_no} for name, scores in em.items()}
    pairs = [(a, b) for a, b in (("trl_sft", "package_grpo"), ("trl_sft", "trl_grpo"), ("trl_grpo", "package_grpo"))
             if {a, b} <= set(em)]
    summary = {"seed": args.seed, "em": {name: 100 * sum(s.values()) / len(s) for name, s in em.items()},
               **{key: {f"{b} - {a}": trl_bench.paired(scores[a], scores[b]) for a, b in pairs}
                  for key, scores in (("gains", em), ("gains_without_yes_no", rest))},
               "train_seconds": json.loads((run_dir / "summary.json").read_text()).get("seconds")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
