"""SearchQA: answer a question by searching a corpus, Search-R1 style.

Description
    Each episode is one question.  The agent may search a corpus (top-k passages
    come back) and ends the episode by answering.
Observation
    At reset, the question.  After a search, ``<information>`` with one
    ``Doc {i}(Title: {title}) {text}`` line per passage.  After an invalid action,
    Search-R1's "My previous action is invalid..." message.  After the answer, "".
Actions
    Free text; the first ``<search>query</search>`` or ``<answer>text</answer>``
    is the action (``<think>`` is free).  No tag, an unclosed or empty tag is
    invalid (``action_valid=False``) and the episode goes on.  Queries longer than
    4,096 characters are cut to that length.  Open action space:
    ``admissible_actions`` is empty.  Actions of more than 16,384 characters raise.
Rewards
    Exact match (0/1) of the normalised answer with any gold answer.
    ``info["em"]``, ``info["f1"]`` and ``info["gold_answers"]`` come with the answer
    (an episode truncated before any answer scores 0).
Termination
    Answering terminates; ``max_episode_steps=4`` truncates.
Anchor
    Digest of task id, question and the set of retrieved passage ids: the state
    that decides the future.  ``anchor_text`` is the raw current observation.
Registered ids and kwargs
    ``gigpo_gym/SearchQA-v0``: ``split="train"|"test"``, ``data_dir=None`` (else
    ``$GIGPO_SEARCHQA_DATA``; see ``dataset.py`` for the files),
    ``retriever="bm25"|"dense"|"http://host:port/retrieve"``, ``topk=3``,
    ``world_size=600`` and ``world_seed=0`` (the embedded world).
Data
    Embedded: a generated fictional world (single_hop / bridge / comparison
    questions).  Real: Search-R1 parquet or FlashRAG jsonl questions with a wiki-18
    style corpus; ``task_type`` is then the row's ``data_source``.
"""

from __future__ import annotations

import difflib
from typing import Any

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import resolve_data_dir
from gigpo_gym.core.env import TextEnv, derive_seed
from gigpo_gym.envs.searchqa.dataset import locate
from gigpo_gym.envs.searchqa.factory import check_retriever_name, is_url, open_retriever, shared_questions
from gigpo_gym.envs.searchqa.protocol import (
    ACTION_FORMAT,
    ACTION_TAGS,
    INVALID_MESSAGE,
    PROMPT_INTRO,
    format_information,
    parse_action,
)
from gigpo_gym.envs.searchqa.questions import Question
from gigpo_gym.envs.searchqa.retrieval import MAX_QUERY_CHARS, MAX_TOPK
from gigpo_gym.envs.searchqa.reward import exact_match, f1_score

DATA_ENV_VAR = "GIGPO_SEARCHQA_DATA"
_OPTIONS = ("task_id",)


class SearchQAEnv(TextEnv):
    """Search-augmented question answering (see the module docstring for the full contract)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4, "action_tags": ACTION_TAGS, "prompt_intro": PROMPT_INTRO,
                "action_format": ACTION_FORMAT}
    max_action_length = 16384

    def __init__(
        self,
        split: str = "train",
        data_dir: str | None = None,
        retriever: str = "bm25",
        topk: int = 3,
        world_size: int = 600,
        world_seed: int = 0,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
            raise ValueError(f"topk must be an int in [1, {MAX_TOPK}], got {topk!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 20:
            raise ValueError(f"world_size must be an int >= 20, got {world_size!r}")
        check_retriever_name(retriever)
        folder = resolve_data_dir(data_dir, DATA_ENV_VAR)
        source = locate(folder, split, need_corpus=not is_url(retriever), world_size=world_size, world_seed=world_seed)
        self.split, self.topk = split, topk
        self.questions = shared_questions(source.questions_path)
        self._by_id = {q.id: q for q in self.questions}
        self.retriever = open_retriever(retriever, source)
        self._question: Question | None = None
        self._retrieved: set[str] = set()
        self._titles: set[str] = set()
        self._queries: set[str] = set()

    @property
    def task_ids(self) -> list[str]:
        return [q.id for q in self.questions]

    # -- the contract ----------------------------------------------------------------
    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option {unknown[0]!r}; SearchQA accepts {list(_OPTIONS)}")
        if "task_id" in options:
            self._question = self._task(options["task_id"])
        else:
            self._question = self.questions[derive_seed(seed) % len(self.questions)]
        self._retrieved, self._titles, self._queries = set(), set(), set()
        obs = self._question.question
        return obs, self._info(obs, valid=True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        question = self._question
        parsed = parse_action(action)
        if parsed is None:
            obs = INVALID_MESSAGE
            return obs, 0.0, False, self._info(obs, valid=False)
        if parsed.kind == "answer":
            em = exact_match(parsed.content, question.golden_answers)
            f1 = f1_score(parsed.content, question.golden_answers)
            info = self._info("", valid=True, won=em == 1.0)
            info.update(em=em, f1=f1, gold_answers=list(question.golden_answers))
            return "", em, True, info
        query = parsed.content[:MAX_QUERY_CHARS]  # an absurdly long query is cut, not an exception
        self._queries.add(query)
        docs = [hit.document for hit in self.retriever.search([query], self.topk)[0]]
        self._retrieved.update(doc.id for doc in docs)
        self._titles.update(doc.title.strip('"') for doc in docs)
        obs = self._bounded(format_information(docs))
        return obs, 0.0, False, self._info(obs, valid=True)

    # -- the expert hook --------------------------------------------------------------
    def expert_action(self) -> str:
        """Search each supporting passage's title not yet seen (once), then answer the gold answer."""
        if self._question is None:
            raise RuntimeError("call reset() before expert_action()")
        for title in self._question.supports:
            if title not in self._titles and title not in self._queries:
                return f"<search>{title}</search>"
        return f"<answer>{self._question.golden_answers[0]}</answer>"

    # -- helpers ----------------------------------------------------------------------
    def _task(self, task_id: Any) -> Question:
        question = self._by_id.get(str(task_id))
        if question is None:
            close = difflib.get_close_matches(str(task_id), list(self._by_id), n=3)
            hint = f" Close matches: {close}." if close else ""
            raise KeyError(f"no task_id {task_id!r} in the {self.split} split ({len(self._by_id)} tasks).{hint}")
        return question

    def _bounded(self, obs: str) -> str:
        if len(obs) <= self.max_observation_length:
            return obs
        keep = self.max_observation_length - len("…</information>\n\n")
        return obs[:keep] + "…</information>\n\n"

    def _info(self, obs: str, *, valid: bool, won: bool = False) -> dict[str, Any]:
        question = self._question
        info: dict[str, Any] = {
            "admissible_actions": [],
            "anchor": digest({"task": question.id, "question": question.question, "retrieved": sorted(self._retrieved)}),
            "anchor_text": obs,
            "action_valid": valid,
            "won": won,
            "task_id": question.id,
            "task_type": question.task_type,
        }
        return info
