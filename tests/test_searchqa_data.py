"""SearchQA data: answer scoring, the action parser, file loaders and the generated world."""

from __future__ import annotations

import doctest
import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gigpo_gym.envs.searchqa import protocol, retrieval, reward
from gigpo_gym.envs.searchqa.corpus import DataFileError, Document, load_corpus_jsonl
from gigpo_gym.envs.searchqa.dataset import WORLD_VERSION, embedded_world_dir, load_questions, locate
from gigpo_gym.envs.searchqa.protocol import format_information, parse_action
from gigpo_gym.envs.searchqa.questions import load_flashrag_jsonl, load_searchr1_parquet
from gigpo_gym.envs.searchqa.reward import exact_match, f1_score, normalize_answer
from gigpo_gym.envs.searchqa.world import generate_world
from gigpo_gym.envs.searchqa.world_text import world_passages, world_questions

FIXTURES = Path(__file__).parent / "fixtures" / "searchqa" / "flashrag"


@pytest.mark.parametrize("module", [protocol, retrieval, reward])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_normalisation_exact_match_and_f1():
    assert normalize_answer("The  Grey-Sea, of course!") == "greysea of course"
    assert exact_match("a Grey Sea.", ["the grey sea"]) == 1.0
    assert exact_match("Grey", ["Grey Sea"]) == 0.0
    assert f1_score("Grey Sea Coast", ["Grey Sea"]) == pytest.approx(0.8)  # p=2/3, r=1
    assert f1_score("no", ["yes"]) == 0.0 and f1_score("yes it is", ["yes"]) == 0.0


def test_parse_action_takes_the_first_closed_tag():
    assert parse_action("<search>a</search><answer>b</answer>") == protocol.Action("search", "a")
    assert parse_action("<answer>\n multi\nline </answer>") == protocol.Action("answer", "multi\nline")
    assert parse_action("<Search>a</Search>") is None


def test_information_block_matches_search_r1_layout():
    docs = [Document("1", '"A"\nfirst text'), Document("2", '"B"\nsecond\ntext')]
    assert format_information(docs) == (
        '\n\n<information>Doc 1(Title: "A") first text\nDoc 2(Title: "B") second\ntext</information>\n\n'
    )
    assert format_information([]) == "\n\n<information></information>\n\n"


def test_corpus_jsonl_reads_contents_and_title_text_forms(tmp_path):
    corpus = load_corpus_jsonl(FIXTURES / "corpus.jsonl")
    assert len(corpus) == 8 and corpus[1].title == '"Quellport"' and corpus.index_of("3") == 3
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": 7, "title": "T", "text": "body"}) + "\n\n")
    doc = load_corpus_jsonl(path)[0]
    assert (doc.id, doc.title, doc.text) == ("7", "T", "body")


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"id": "0", "contents": "x"}', '{"id": "1", "contents": '], r"corpus.jsonl:2: invalid JSON"),
        (['{"id": "0"}'], r"corpus.jsonl:1: missing field 'contents'"),
        (['{"id": "0", "contents": 5}'], r"corpus.jsonl:1: field 'contents' must be str, got int"),
        (['["a"]'], r"corpus.jsonl:1: expected a JSON object, got list"),
        (['{"id": "0", "contents": "a"}', '{"id": "0", "contents": "b"}'], r"document id '0' appears more than once"),
        ([], r"corpus.jsonl: the corpus has no documents"),
    ],
)
def test_malformed_corpus_names_file_and_line(tmp_path, lines, match):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError, match=match):
        load_corpus_jsonl(path)


def test_flashrag_questions_and_their_errors(tmp_path):
    questions = load_flashrag_jsonl(FIXTURES / "train.jsonl", default_task_type="nq")
    assert questions[1].golden_answers == ("Lowmarsh", "Low Marsh") and questions[1].task_type == "nq"
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"id": 1, "question": "q?", "golden_answers": ["a"]}\n{"id": 2, "question": "q?"}\n')
    with pytest.raises(DataFileError, match=r"train.jsonl:2: missing field 'golden_answers'"):
        load_flashrag_jsonl(bad, default_task_type="x")
    bad.write_text('{"id": 1, "question": "q?", "golden_answers": "a"}\n')
    with pytest.raises(DataFileError, match=r"train.jsonl:1: field 'golden_answers' must be a list of strings, got str"):
        load_flashrag_jsonl(bad, default_task_type="x")
    bad.write_text('{"id": 1, "question": "q?", "golden_answers": ["a"]}\n{"id": 1, "question": "r?", "golden_answers": ["b"]}\n')
    with pytest.raises(DataFileError, match=r"question id '1' appears more than once"):
        load_questions(bad)


def _searchr1_rows(with_flashrag_columns: bool) -> list[dict]:
    rows = []
    for i, (question, answers) in enumerate([("who drew the varn survey?", ["Maribel Ostrander"]), ("capital of edrith?", ["Lowmarsh"])]):
        row = {
            "data_source": "hotpotqa",
            "prompt": [{"role": "user", "content": f"Answer the given question. ... Question: {question}\n"}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
            "extra_info": {"split": "train", "index": i},
        }
        if with_flashrag_columns:
            row.update(id=f"train_{i}", question=question, golden_answers=answers)
        rows.append(row)
    return rows


@pytest.mark.parametrize("with_flashrag_columns", [True, False])
def test_searchr1_parquet_rows(tmp_path, with_flashrag_columns):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(_searchr1_rows(with_flashrag_columns)), path)
    questions = load_searchr1_parquet(path)
    assert [q.question for q in questions] == ["who drew the varn survey?", "capital of edrith?"]
    assert questions[0].golden_answers == ("Maribel Ostrander",) and questions[0].task_type == "hotpotqa"
    assert questions[1].id == ("train_1" if with_flashrag_columns else "hotpotqa_train_1")


def test_searchr1_prompt_keeps_a_question_that_says_question(tmp_path):
    """Without a 'question' column the question is read from the prompt, after its first "Question:"."""
    rows = _searchr1_rows(False)
    tricky = "Question: who drew the varn survey? Answer: the Quellport cartographer. Question: her name?"
    rows[0]["prompt"] = [{"role": "user", "content": f"Answer with <answer> and </answer>. Question: {tricky}\n"}]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    questions = load_searchr1_parquet(path)
    assert questions[0].question == tricky and questions[1].question == "capital of edrith?"
    assert questions[0].prompt == f"Answer with <answer> and </answer>. Question: {tricky}\n"  # read by protocol="search-r1"
    rows[0]["prompt"] = [{"role": "user", "content": "Answer it. Question:   \n"}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataFileError, match=r"row 0: field \"prompt.content \(after 'Question:'\)\" must be a non-empty"):
        load_searchr1_parquet(path)


def test_malformed_parquet_names_file_row_and_field(tmp_path):
    rows = _searchr1_rows(False)
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": {"answer": ["x"]}}
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataFileError, match=r"test.parquet: row 1: field 'reward_model.ground_truth.target' must be a list"):
        load_searchr1_parquet(path)
    pq.write_table(pa.Table.from_pylist([{"data_source": "nq", "extra_info": {"index": 0}}]), path)
    with pytest.raises(DataFileError, match=r"test.parquet: row 0: missing field 'question' \(or 'prompt'\)"):
        load_searchr1_parquet(path)
    path.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataFileError, match=r"test.parquet: not a readable parquet file"):
        load_searchr1_parquet(path)


def test_data_folder_layout_errors(tmp_path):
    shutil.copy(FIXTURES / "train.jsonl", tmp_path / "train.jsonl")
    with pytest.raises(FileNotFoundError, match=r"no question file for split 'test': expected one of \['test.parquet', 'test.jsonl'\]"):
        locate(tmp_path, "test", need_corpus=True, world_size=600, world_seed=0)
    with pytest.raises(FileNotFoundError, match=r"has no corpus file .* needs none"):
        locate(tmp_path, "train", need_corpus=True, world_size=600, world_seed=0)
    assert locate(tmp_path, "train", need_corpus=False, world_size=600, world_seed=0).corpus_path is None


def test_world_is_deterministic_and_seed_dependent():
    def texts(seed):
        world = generate_world(60, seed=seed)
        return [d.contents for d in world_passages(world, seed)], [q.to_record() for q in world_questions(world, seed)]

    assert texts(1) == texts(1) and texts(1) != texts(2)


def test_world_answers_are_stated_in_their_supporting_passages():
    world = generate_world(100)
    passages: dict[str, str] = {}
    for doc in world_passages(world):
        passages[doc.title.strip('"')] = passages.get(doc.title.strip('"'), "") + " " + doc.text
    for q in world_questions(world):
        if q.task_type != "comparison":  # comparisons are derived from two facts
            assert q.golden_answers[0] in passages[q.supports[-1]], q


def test_world_cache_is_written_once_with_a_version_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("GIGPO_GYM_CACHE", str(tmp_path))
    folder = embedded_world_dir(40)
    assert (folder / "VERSION").read_text().strip() == str(WORLD_VERSION)
    stamp = (folder / "corpus.jsonl").stat().st_mtime_ns
    assert embedded_world_dir(40) == folder and (folder / "corpus.jsonl").stat().st_mtime_ns == stamp
    assert {"train.jsonl", "test.jsonl"} <= {p.name for p in folder.iterdir()}
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
