"""How much of a SearchQA run's EM is one constant yes/no answer: the study's runs, with and without those questions.

The embedded test split (world of 800 entities) has 37 comparison questions answered "yes" or
"no", 27 of them "no" (the train split is balanced: 170 and 159).  A small model answers them
all with one word, so flipping that word from "yes" to "no" wins 17 questions, 3.9 EM points of
438, without reading anything.  This prints, for every evaluation of the study
(``bench_llm_study.py``'s carried ``llm_study_runs`` and ``bench_trl_searchqa.py``'s
``trl_searchqa_runs*``): the yes/no questions won, the package's models' answers to them, and
the gain over the run's own warm start on the other 401 questions, paired by question.

    python benchmarks/searchqa_yes_no.py --out benchmarks/results/searchqa_yes_no.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import paired  # noqa: E402  (Student-t interval over seeds)
from bench_llm_learning import paired_gain  # noqa: E402  (gain paired by question)
from bench_llm_study import trl_episodes  # noqa: E402  (TRL's evaluations)

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def yes_no_questions(world_size: int = 800, split: str = "test") -> dict[str, str]:
    """Task id -> "yes" / "no" of the embedded split's questions whose gold answer is one of them."""
    from gigpo_gym.envs.searchqa.dataset import load_questions, locate

    source = locate(None, split, need_corpus=False, world_size=world_size, world_seed=0)
    return {q.id: q.golden_answers[0].lower() for q in load_questions(source.questions_path)
            if q.golden_answers[0].lower() in ("yes", "no")}


def read_evaluation(path: Path) -> list[dict]:
    """The episodes of an ``eval.json``: the package's (``episodes``) or TRL's (``em`` by task id, no replies)."""
    data = json.loads(path.read_text())
    return data["episodes"] if "episodes" in data else trl_episodes(path)


def without(episodes: list[dict], yes_no: dict[str, str]) -> list[dict]:
    """The episodes of the questions that are not yes/no ones."""
    return [e for e in episodes if e["task_id"] not in yes_no]


def final_answer(episode: dict) -> str | None:
    """The episode's last answer, lower-cased (None where it gave none or its replies were not kept)."""
    found = ANSWER.search((episode.get("actions") or [""])[-1] or "")
    return found.group(1).strip().lower() if found else None


def summarise(episodes: list[dict], warm_start: list[dict], yes_no: dict[str, str]) -> dict:
    """One evaluation: yes/no questions won and answered, and the gain over ``warm_start`` without them."""
    asked = [e for e in episodes if e["task_id"] in yes_no]
    answers = [final_answer(e) for e in asked]
    return {"yes_no_won": sum(bool(e["won"]) for e in asked), "yes_no_questions": len(asked),
            "answered_yes": answers.count("yes"), "answered_no": answers.count("no"),
            "answers_kept": any(a is not None for a in answers),
            "gain": paired_gain(warm_start, episodes),
            "gain_without_yes_no": paired_gain(without(warm_start, yes_no), without(episodes, yes_no))}


def study_evaluations(results: Path) -> dict[str, tuple[Path, Path]]:
    """Run name -> (its eval.json, its warm start's eval.json), for every evaluation that has both."""
    out = {}
    package = results / "llm_study_runs" / "searchqa"
    for run in sorted(package.glob("seed*/eval.json")):
        out[run.parent.name] = (run, package / "after-sft" / "eval.json")
    for folder in sorted(results.glob("trl_searchqa_runs*")):
        seed = folder.name.removeprefix("trl_searchqa_runs").removeprefix("_seed") or "0"
        for algo in ("grpo", "gigpo"):
            if (folder / algo / "eval.json").is_file():
                out[f"trl-seed{seed}-{algo}"] = (folder / algo / "eval.json", results / "trl_searchqa_runs" / "sft" / "eval.json")
    out["trl-sft"] = (results / "trl_searchqa_runs" / "sft" / "eval.json",) * 2
    return {name: paths for name, paths in out.items() if all(p.is_file() for p in paths)}


def over_seeds(rows: dict, evaluations: dict, yes_no: dict[str, str]) -> dict[str, dict]:
    """Per setting with two seeds or more: its gain over SFT, TRL's GRPO over it, and (where GiGPO ran in the same
    setting) GiGPO over GRPO, each without the yes/no questions, per seed and over seeds."""
    by_setting: dict[str, dict[int, str]] = {}
    for name in rows:
        if name.startswith("seed"):
            seed, setting = name.split("-", 1)
            by_setting.setdefault(setting, {})[int(seed.removeprefix("seed"))] = name
    out = {}
    for setting, runs in by_setting.items():
        if len(runs) < 2:
            continue
        out[f"{setting}: gain over SFT"] = paired([rows[n]["gain_without_yes_no"]["mean"] for n in runs.values()])
        trl = [rows[n]["trl_grpo_over_this_without_yes_no"]["mean"] for n in runs.values()
               if "trl_grpo_over_this_without_yes_no" in rows[n]]
        if len(trl) == len(runs):
            out[f"{setting}: TRL's GRPO over it"] = paired(trl)
        if setting.startswith("gigpo"):
            grpo = by_setting.get("grpo" + setting.removeprefix("gigpo"), {})
            seeds = [s for s in runs if s in grpo]
            if len(seeds) >= 2:
                out[f"{setting} over {'grpo' + setting.removeprefix('gigpo')}"] = paired(
                    [paired_gain(without(evaluations[grpo[s]][0], yes_no), without(evaluations[runs[s]][0], yes_no))["mean"] for s in seeds])
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="benchmarks/results", help="where the study's carried runs are")
    parser.add_argument("--out", default=None, help="write the summary here as JSON")
    args = parser.parse_args(argv)
    yes_no = yes_no_questions()
    evaluations = {name: (read_evaluation(run), read_evaluation(sft))
                   for name, (run, sft) in study_evaluations(Path(args.results)).items()}
    rows = {name: summarise(run, sft, yes_no) for name, (run, sft) in evaluations.items()}
    for name, row in rows.items():  # TRL's GRPO on the same seed against each of the package's runs
        trl = evaluations.get(f"trl-{name.split('-')[0]}-grpo")
        if name.startswith("seed") and trl:
            row["trl_grpo_over_this_without_yes_no"] = paired_gain(without(evaluations[name][0], yes_no),
                                                                   without(trl[0], yes_no))
    print(f"{len(yes_no)} yes/no questions ({sum(a == 'no' for a in yes_no.values())} 'no'); gains in EM points, "
          f"paired by question")
    print(f"{'run':<34} {'yes/no won':>10} {'yes':>4} {'no':>4} {'gain':>13} {'gain without yes/no':>20} "
          f"{'TRL GRPO - this, without':>25}")
    for name, r in rows.items():
        answered = (f"{r['answered_yes']:>4} {r['answered_no']:>4}" if r["answers_kept"] else f"{'-':>4} {'-':>4}")
        g, w = r["gain"], r["gain_without_yes_no"]
        print(f"{name:<34} {r['yes_no_won']:>5} / {r['yes_no_questions']:<2} {answered} "
              f"{100 * g['mean']:+5.1f} +- {100 * g['sem_paired']:.1f} {100 * w['mean']:+12.1f} +- {100 * w['sem_paired']:.1f}"
              + (f" {100 * t['mean']:+17.1f} +- {100 * t['sem_paired']:.1f}" if (t := r.get("trl_grpo_over_this_without_yes_no")) else ""))
    settings = over_seeds(rows, evaluations, yes_no)
    print("over seeds, without the yes/no questions (mean, Student-t 95% interval):")
    for name, stats in settings.items():
        print(f"  {name:<42} {' '.join(f'{100 * d:+5.1f}' for d in stats['per_seed'])}   mean {100 * stats['mean']:+5.1f} "
              f"[{100 * stats['ci95'][0]:+.1f}, {100 * stats['ci95'][1]:+.1f}]")
    summary = {"yes_no_questions": yes_no, "runs": rows, "over_seeds_without_yes_no": settings}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
