"""``benchmarks/searchqa_yes_no.py`` splits a SearchQA evaluation into its yes/no questions and the rest."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def yes_no_bench():
    spec = importlib.util.spec_from_file_location("searchqa_yes_no", ROOT / "benchmarks" / "searchqa_yes_no.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def episode(task: str, won: bool, answer: str | None) -> dict:
    actions = ["<search>x</search>", f"<answer>{answer}</answer>" if answer else None]
    return {"task_id": task, "task_type": "comparison", "won": won, "actions": actions}


def test_the_embedded_test_split_has_37_yes_no_questions_most_of_them_no(yes_no_bench):
    yes_no = yes_no_bench.yes_no_questions()
    assert len(yes_no) == 37
    assert sum(a == "no" for a in yes_no.values()) == 27


def test_a_flipped_constant_answer_counts_in_the_gain_and_not_without_the_yes_no_questions(yes_no_bench):
    yes_no = {"q1": "no", "q2": "no", "q3": "yes"}
    warm = [episode("q1", False, "yes"), episode("q2", False, "Yes"), episode("q3", True, "yes"),
            episode("e1", False, "Paris"), episode("e2", True, "Rome")]
    after = [episode("q1", True, "no"), episode("q2", True, "no"), episode("q3", False, "no"),
             episode("e1", True, "Lyon"), episode("e2", True, None)]
    row = yes_no_bench.summarise(after, warm, yes_no)
    assert (row["yes_no_won"], row["yes_no_questions"], row["answered_yes"], row["answered_no"]) == (2, 3, 0, 3)
    assert row["gain"]["mean"] == pytest.approx(2 / 5)  # +1 +1 -1 on yes/no, +1 on e1
    assert row["gain_without_yes_no"]["mean"] == pytest.approx(1 / 2)
    assert row["gain_without_yes_no"]["questions"] == 2
    assert yes_no_bench.summarise(warm, warm, yes_no)["answered_yes"] == 3  # case folded


def test_study_evaluations_pairs_each_run_with_its_own_warm_start(yes_no_bench, tmp_path):
    package = tmp_path / "llm_study_runs" / "searchqa"
    for run in ("after-sft", "seed0-grpo", "seed1-grpo"):
        (package / run).mkdir(parents=True)
        (package / run / "eval.json").write_text(json.dumps({"episodes": [episode("q1", True, "no")]}))
    for folder in ("trl_searchqa_runs/sft", "trl_searchqa_runs/grpo", "trl_searchqa_runs_seed1/grpo"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "eval.json").write_text(json.dumps({"em": {"q1": 1.0, "e1": 0.0}}))
    found = yes_no_bench.study_evaluations(tmp_path)
    assert found["seed1-grpo"] == (package / "seed1-grpo" / "eval.json", package / "after-sft" / "eval.json")
    assert found["trl-seed1-grpo"][1] == tmp_path / "trl_searchqa_runs" / "sft" / "eval.json"
    assert sorted(found) == ["seed0-grpo", "seed1-grpo", "trl-seed0-grpo", "trl-seed1-grpo", "trl-sft"]
    trl = yes_no_bench.read_evaluation(found["trl-seed0-grpo"][0])
    assert trl == [{"task_id": "q1", "won": True}, {"task_id": "e1", "won": False}]
