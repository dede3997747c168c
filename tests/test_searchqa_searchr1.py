"""SearchQA protocol="search-r1" vs the default, row by row, on hand-written model replies.

Each test names a row of the table in docs/envs/searchqa.md; the expected values are
what Search-R1's rollout (cut after the first </search>, else </answer>) and scorer
(last <answer> pair of prompt + episode, none below two pairs) give on that reply.
"""

from __future__ import annotations

import doctest
import shutil
import warnings
from pathlib import Path

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_gym  # noqa: F401
from gigpo_gym.core import tags
from gigpo_gym.envs.searchqa.env import SearchQAEnv
from gigpo_gym.envs.searchqa.protocol import INVALID_MESSAGE, find_action, parse_action
from gigpo_gym.envs.searchqa.retrieval import MAX_QUERY_CHARS
from gigpo_gym.wrappers import ActionParser, wrap_for_llm

ENV_ID = "gigpo_gym/SearchQA-v0"
FIXTURES = Path(__file__).parent / "fixtures" / "searchqa" / "flashrag"


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GIGPO_GYM_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("GIGPO_SEARCHQA_DATA", raising=False)
        yield


@pytest.fixture()
def data_dir(tmp_path):
    """The fixture corpus and two questions, one of them answered by the prompts' example."""
    shutil.copy(FIXTURES / "corpus.jsonl", tmp_path / "corpus.jsonl")
    (tmp_path / "test.jsonl").write_text(
        '{"id": "lw", "question": "Who kept the lighthouse of Quellport?", "golden_answers": ["Tobias Wren"]}\n'
        '{"id": "bj", "question": "Which city is the capital of China?", "golden_answers": ["Beijing"]}\n'
    )
    return tmp_path


def make(data_dir, protocol="default", task="lw", **kwargs):
    env = gym.make(ENV_ID, split="test", data_dir=str(data_dir), protocol=protocol, **kwargs)
    env.reset(options={"task_id": task})
    return env


class Recorder:
    """A retriever that remembers the queries it was asked and finds one passage each."""

    def __init__(self, inner):
        self.inner, self.queries = inner, []

    def search(self, queries, topk):
        self.queries += list(queries)
        return [self.inner.search([q], topk)[0][:1] for q in queries]


class CharTokenizer:
    """One token per character, so a cut to n tokens is the first n characters."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_tag_rule_docstrings():
    result = doctest.testmod(tags)
    assert result.attempted > 0 and result.failed == 0


# -- tag case: one rule for the trainer's parser and the env ----------------------------
@pytest.mark.parametrize(
    "reply",
    ["<answer>x</answer>", "<Answer>x</Answer>", "<ANSWER>x</ANSWER>", "<Search>q</Search>", "<search>q</search>",
     "<answer>x</Answer>", "<think>t</think>\n<search>a\nb</search>"],
)
def test_parser_and_env_accept_the_same_tags(data_dir, reply):
    parser = ActionParser(make(data_dir))
    assert (parser.parse(reply) is not None) == (parse_action(reply) is not None) == (find_action(reply) is not None)


@pytest.mark.parametrize("protocol", ["default", "search-r1"])
def test_capitalised_answer_tag_is_invalid_through_the_llm_stack(data_dir, protocol):
    env = ActionParser(make(data_dir, protocol))
    obs, reward, terminated, _, info = env.step("<Answer>Tobias Wren</Answer>")
    assert (obs, reward, terminated, info["action_valid"]) == (INVALID_MESSAGE, 0.0, False, False)


# -- first </search> -----------------------------------------------------------------------
STRAY = "<think>no need to </search> look it up</think><answer>Tobias Wren</answer>"


def test_stray_closing_search_tag_default_reads_on(data_dir):
    _, reward, terminated, _, info = make(data_dir).step(STRAY)
    assert (reward, terminated, info["action_valid"]) == (1.0, True, True)


def test_stray_closing_search_tag_search_r1_cuts_the_reply(data_dir):
    obs, reward, terminated, _, info = make(data_dir, "search-r1").step(STRAY)
    assert (obs, reward, terminated, info["action_valid"]) == (INVALID_MESSAGE, 0.0, False, False)
    assert info["response"] == "<think>no need to </search>"


def test_search_r1_cut_prefers_a_later_closing_search_tag(data_dir):
    env = make(data_dir, "search-r1")
    env.unwrapped.retriever = recorder = Recorder(env.unwrapped.retriever)
    obs, _, terminated, _, info = env.step("<search>Quellport</answer> lighthouse</search> and more")
    assert recorder.queries == ["Quellport</answer> lighthouse"] and not terminated
    assert info["response"] == "<search>Quellport</answer> lighthouse</search>" and "<information>" in obs


# -- two answers ---------------------------------------------------------------------------
TWO = "<answer>Maribel Ostrander</answer> no, <answer>Tobias Wren</answer>"


def test_two_answers_default_takes_the_first(data_dir):
    _, reward, terminated, _, info = make(data_dir).step(TWO)
    assert (reward, terminated, info["em"]) == (0.0, True, 0.0)


def test_two_answers_search_r1_keeps_only_the_first_when_nothing_follows(data_dir):
    _, reward, terminated, _, info = make(data_dir, "search-r1").step(TWO)
    assert (reward, terminated) == (0.0, True) and info["response"] == "<answer>Maribel Ostrander</answer>"


def test_two_answers_search_r1_scores_the_last_when_a_search_tag_keeps_both(data_dir):
    obs, reward, terminated, _, info = make(data_dir, "search-r1").step(TWO + " <search>more</search> tail")
    assert (obs, reward, terminated, info["em"], info["won"]) == ("", 1.0, True, 1.0, True)
    assert info["response"] == TWO + " <search>more</search>"  # the action is the first answer; the reward the last


def test_an_answer_inside_a_search_query_counts_for_the_search_r1_reward(data_dir):
    env = make(data_dir, "search-r1")
    env.step("<search>Quellport <answer>Tobias Wren</answer></search>")
    env.step("<search>lighthouse</search>")
    env.step("no tags")
    _, reward, terminated, _, info = env.step("still no tags")  # the last turn, unanswered
    assert (reward, terminated, info["em"]) == (0.0, True, 0.0)  # the invalid message's "<answer> and </answer>" is last
    env = make(data_dir, "search-r1")
    for reply in ("<search>Quellport <answer>Tobias Wren</answer></search>", "<search>x</search>", "<search>y</search>"):
        env.step(reply)
    _, reward, terminated, *_ = env.step("no tags")
    assert (reward, terminated) == (1.0, True)


# -- empty and blank tags ------------------------------------------------------------------
@pytest.mark.parametrize("reply", ["<search></search>", "<search>  \n </search>", "<answer></answer>", "<answer> </answer>"])
def test_empty_tags_default_are_invalid(data_dir, reply):
    obs, reward, terminated, _, info = make(data_dir).step(reply)
    assert (obs, reward, terminated, info["action_valid"]) == (INVALID_MESSAGE, 0.0, False, False)


@pytest.mark.parametrize("reply", ["<search></search>", "<search>  \n </search>"])
def test_empty_search_search_r1_runs_an_empty_query(data_dir, reply):
    env = make(data_dir, "search-r1")
    env.unwrapped.retriever = recorder = Recorder(env.unwrapped.retriever)
    obs, reward, terminated, _, info = env.step(reply)
    assert recorder.queries == [""] and (reward, terminated, info["action_valid"]) == (0.0, False, True)
    assert obs == "\n\n<information></information>\n\n"  # BM25 finds nothing for no words


@pytest.mark.parametrize("reply", ["<answer></answer>", "<answer> </answer>"])
def test_empty_answer_search_r1_ends_the_episode_with_zero(data_dir, reply):
    obs, reward, terminated, _, info = make(data_dir, "search-r1").step(reply)
    assert (obs, reward, terminated, info["action_valid"], info["em"]) == ("", 0.0, True, True, 0.0)


# -- long query ----------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["default", "search-r1"])
def test_long_query_is_cut_to_the_retriever_bound(data_dir, protocol):
    env = make(data_dir, protocol)
    env.unwrapped.retriever = recorder = Recorder(env.unwrapped.retriever)
    query = "Quellport lighthouse " * 400
    _, _, _, _, info = env.step(f"<search>{query}</search>")
    assert info["action_valid"] and recorder.queries == [query.strip()[:MAX_QUERY_CHARS]]


# -- observation cap -----------------------------------------------------------------------
def test_search_r1_observation_is_cut_to_max_obs_tokens(data_dir):
    full, *_ = make(data_dir, "search-r1").step("<search>Quellport</search>")
    cut, *_ = make(data_dir, "search-r1", tokenizer=CharTokenizer(), max_obs_tokens=40).step("<search>Quellport</search>")
    assert len(full) > 40 and cut == full[:40] and not cut.endswith("</information>\n\n")
    invalid, *_ = make(data_dir, "search-r1", tokenizer=CharTokenizer(), max_obs_tokens=40).step("no tag")
    assert invalid == INVALID_MESSAGE[:40]
    short, *_ = make(data_dir, "search-r1", tokenizer=CharTokenizer(), max_obs_tokens=5000).step("<search>Quellport</search>")
    assert short == full


# -- turn limit ----------------------------------------------------------------------------
def test_search_r1_runs_max_turns_searches_then_one_last_reply(data_dir):
    env = make(data_dir, "search-r1")  # max_turns=3: four replies, the registered max_episode_steps
    env.unwrapped.retriever = recorder = Recorder(env.unwrapped.retriever)
    for turn in range(3):
        obs, reward, terminated, truncated, _ = env.step("<search>Quellport</search>")
        assert "<information>" in obs and (reward, terminated, truncated) == (0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("<search>lighthouse</search>")
    assert (obs, terminated, info["action_valid"]) == ("", True, True) and len(recorder.queries) == 3
    assert (reward, info["em"]) == (0.0, 0.0)  # the last pair is the prompt's example, "Beijing"


def test_search_r1_last_reply_can_still_answer(data_dir):
    env = make(data_dir, "search-r1", max_turns=1, max_episode_steps=2)
    env.step("<search>Quellport</search>")
    _, reward, terminated, truncated, info = env.step("<answer>Tobias Wren</answer>")
    assert (reward, terminated, info["won"]) == (1.0, True, True)


def test_search_r1_unanswered_episode_is_graded_on_the_prompt_example(data_dir):
    env = make(data_dir, "search-r1", task="bj", max_turns=2, max_episode_steps=3)
    for reply in ("<search>capital</search>", "<search>China</search>", "I do not know"):
        _, reward, terminated, *_ = env.step(reply)
    assert (reward, terminated) == (1.0, True)  # Search-R1's scorer falls back to "<answer> Beijing </answer>"


def test_default_protocol_truncates_at_max_episode_steps_with_zero(data_dir):
    env = make(data_dir, task="bj")
    for turn in range(4):
        _, reward, terminated, truncated, info = env.step("<search>capital</search>")
    assert (reward, terminated, truncated) == (0.0, False, True) and "em" not in info


# -- invalid message -----------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["default", "search-r1"])
def test_invalid_message_is_search_r1_wording(data_dir, protocol):
    obs, *_ = make(data_dir, protocol).step("I think it is Tobias Wren.")
    assert obs == (
        "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
        "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
        "Let me try again.\n"
    )


# -- reward: the prompt is part of what is scored ---------------------------------------------
def _parquet_dir(tmp_path: Path, prompt: str) -> Path:
    tmp_path.mkdir()
    shutil.copy(FIXTURES / "corpus.jsonl", tmp_path / "corpus.jsonl")
    row = {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": prompt + "Question: Who kept the lighthouse of Quellport?\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": ["Tobias Wren"]}},
        "extra_info": {"split": "test", "index": 0},
    }
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "test.parquet")
    return tmp_path


def test_search_r1_reward_reads_the_rows_prompt(tmp_path):
    with_examples = _parquet_dir(tmp_path / "a", "Reply inside <answer> and </answer>, e.g. <answer> Paris </answer>. ")
    _, reward, *_ = make(with_examples, "search-r1", task="nq_test_0").step("<answer>Tobias Wren</answer>")
    assert reward == 1.0
    bare = _parquet_dir(tmp_path / "b", "Reply with the answer in tags. ")
    _, reward, terminated, _, info = make(bare, "search-r1", task="nq_test_0").step("<answer>Tobias Wren</answer>")
    assert (reward, terminated, info["em"]) == (0.0, True, 0.0)  # one pair in all: Search-R1's scorer grades nothing
    _, reward, *_ = make(bare, task="nq_test_0").step("<answer>Tobias Wren</answer>")
    assert reward == 1.0


# -- the LLM stack and the contract ----------------------------------------------------------
def test_llm_stack_passes_the_whole_reply_to_the_search_r1_env(data_dir):
    env = wrap_for_llm(gym.make(ENV_ID, split="test", data_dir=str(data_dir), protocol="search-r1"))
    env.reset(options={"task_id": "lw"})
    _, reward, terminated, _, info = env.step(TWO + "<search>x</search>")
    assert (reward, terminated) == (1.0, True) and info["parsed_action"] == TWO + "<search>x</search>"
    assert ActionParser(make(data_dir)).parse(TWO + "<search>x</search>") == "<answer>Maribel Ostrander</answer>"


def test_check_env_passes_in_search_r1_mode(data_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make(ENV_ID, split="test", data_dir=str(data_dir), protocol="search-r1").unwrapped)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"protocol": "searchr1"}, ValueError, r"protocol must be one of \('default', 'search-r1'\).*Did you mean 'search-r1'"),
        ({"max_turns": 2}, ValueError, "max_turns and tokenizer belong to protocol='search-r1'"),
        ({"protocol": "search-r1", "max_turns": 0}, ValueError, "max_turns must be an int >= 1, got 0"),
        ({"protocol": "search-r1", "max_obs_tokens": True}, ValueError, "max_obs_tokens must be an int >= 1"),
        ({"protocol": "search-r1", "tokenizer": 3}, TypeError, "tokenizer must have encode"),
    ],
)
def test_bad_protocol_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SearchQAEnv(**kwargs)

