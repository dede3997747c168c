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
Protocols
    ``protocol="default"``: as above.  ``protocol="search-r1"`` gives what Search-R1's
    rollout and scorer give on the same replies.  The whole reply is read
    (``ActionParser`` passes it on) and cut after its first ``</search>``, else its
    first ``</answer>`` (``info["response"]`` is what is kept); empty tags are actions
    (an empty search runs, an empty answer ends the episode); observations are cut
    to ``max_obs_tokens`` tokens of ``tokenizer`` when one is given; after
    ``max_turns`` searches the next reply is the last (a search in it runs nothing).
    The reward comes when the episode ends: the exact match of the answer that
    Search-R1's scorer picks from the prompt, replies and observations
    (``reward.searchr1_answer``).  With ``max_turns > 3`` pass
    ``max_episode_steps=max_turns + 1`` to ``gym.make``.
Anchor
    Digest of task id, question and the set of retrieved passage ids: the state
    that decides the future.  ``anchor_text`` is the raw current observation.
Registered ids and kwargs
    ``gigpo_gym/SearchQA-v0``: ``split="train"|"test"``, ``data_dir=None`` (else
    ``$GIGPO_SEARCHQA_DATA``; see ``dataset.py`` for the files),
    ``retriever="bm25"|"dense"|"http://host:port/retrieve"``, ``topk=3``,
    ``world_size=600`` and ``world_seed=0`` (the embedded world),
    ``protocol="default"|"search-r1"``; with ``"search-r1"`` only: ``max_turns=3``,
    ``max_obs_tokens=500``, ``tokenizer=None`` (the policy's tokenizer object; None:
    no token cut).
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
    PROTOCOLS,
    Action,
    cut_reply,
    find_action,
    format_information,
    parse_action,
)
from gigpo_gym.envs.searchqa.prompts import METADATA as PROMPTS
from gigpo_gym.envs.searchqa.questions import Question
from gigpo_gym.envs.searchqa.retrieval import MAX_QUERY_CHARS, MAX_TOPK
from gigpo_gym.envs.searchqa.reward import exact_match, f1_score, searchr1_answer

DATA_ENV_VAR = "GIGPO_SEARCHQA_DATA"
_OPTIONS = ("task_id",)


class SearchQAEnv(TextEnv):
    """Search-augmented question answering (see the module docstring for the full contract)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4, "action_tags": ACTION_TAGS, "prompt_intro": PROMPT_INTRO,
                "action_format": ACTION_FORMAT, **PROMPTS}
    max_action_length = 16384

    def __init__(
        self,
        split: str = "train",
        data_dir: str | None = None,
        retriever: str = "bm25",
        topk: int = 3,
        world_size: int = 600,
        world_seed: int = 0,
        protocol: str = "default",
        max_turns: int | None = None,
        max_obs_tokens: int = 500,
        tokenizer: Any = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
            raise ValueError(f"topk must be an int in [1, {MAX_TOPK}], got {topk!r}")
        self.protocol = _check_protocol(protocol, max_turns, max_obs_tokens, tokenizer)
        self.max_turns = 3 if max_turns is None else max_turns
        self.max_obs_tokens = max_obs_tokens
        self.tokenizer = _check_tokenizer(tokenizer)
        if protocol == "search-r1":  # the whole reply reaches the env (see wrappers.ActionParser)
            self.metadata = {**type(self).metadata, "reads_whole_reply": True}
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
        self._turns = 0
        self._transcript: list[str] = []

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
        self._turns = 0
        # What Search-R1's scorer reads before the replies: the row's prompt, else ours.
        self._transcript = [self._question.prompt or f"{PROMPT_INTRO} Question: {self._question.question}\n"]
        obs = self._question.question
        return obs, self._info(obs, valid=True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.protocol == "search-r1":
            return self._step_searchr1(action)
        parsed = parse_action(action)
        if parsed is None:
            obs = INVALID_MESSAGE
            return obs, 0.0, False, self._info(obs, valid=False)
        if parsed.kind == "answer":
            return self._scored("", parsed.content, self._info("", valid=True))
        obs = self._search(parsed.content)
        return obs, 0.0, False, self._info(obs, valid=True)

    def _step_searchr1(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """One turn of Search-R1's rollout: cut the reply, act, and score the episode when it ends."""
        self._turns += 1
        reply = cut_reply(action)
        parsed: Action | None = find_action(reply)
        # After max_turns searches comes its rollout's final generation: nothing is searched.
        done = self._turns > self.max_turns or (parsed is not None and parsed.kind == "answer")
        if done:
            obs = ""
        elif parsed is None:
            obs = self._token_cap(INVALID_MESSAGE)
        else:
            obs = self._token_cap(self._search(parsed.content))
        self._transcript += [reply, obs]
        info = self._info(obs, valid=parsed is not None)
        info["response"] = reply
        if not done:
            return obs, 0.0, False, info
        return self._scored(obs, searchr1_answer("".join(self._transcript)), info)

    def _scored(self, obs: str, answer: str | None, info: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        """The end of an episode: exact match and F1 of ``answer`` (None: no answer, 0)."""
        gold = self._question.golden_answers
        em = 0.0 if answer is None else exact_match(answer, gold)
        f1 = 0.0 if answer is None else f1_score(answer, gold)
        info.update(won=em == 1.0, em=em, f1=f1, gold_answers=list(gold))
        return obs, em, True, info

    def _search(self, query: str) -> str:
        query = query[:MAX_QUERY_CHARS]  # an absurdly long query is cut, not an exception
        self._queries.add(query)
        docs = [hit.document for hit in self.retriever.search([query], self.topk)[0]]
        self._retrieved.update(doc.id for doc in docs)
        self._titles.update(doc.title.strip('"') for doc in docs)
        return self._bounded(format_information(docs))

    def _token_cap(self, obs: str) -> str:
        """Search-R1 keeps the first ``max_obs_length`` tokens of an observation (500 in its scripts)."""
        if self.tokenizer is None:
            return obs
        ids = self.tokenizer.encode(obs, add_special_tokens=False)
        return obs if len(ids) <= self.max_obs_tokens else self.tokenizer.decode(ids[: self.max_obs_tokens])

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

    def _info(self, obs: str, *, valid: bool) -> dict[str, Any]:
        question = self._question
        info: dict[str, Any] = {
            "admissible_actions": [],
            "anchor": digest({"task": question.id, "question": question.question, "retrieved": sorted(self._retrieved)}),
            "anchor_text": obs,
            "action_valid": valid,
            "won": False,
            "task_id": question.id,
            "task_type": question.task_type,
        }
        return info


def _check_protocol(protocol: Any, max_turns: Any, max_obs_tokens: Any, tokenizer: Any) -> str:
    if protocol not in PROTOCOLS:
        close = difflib.get_close_matches(str(protocol), PROTOCOLS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}.{hint}")
    if protocol == "default" and (max_turns is not None or tokenizer is not None):
        raise ValueError("max_turns and tokenizer belong to protocol='search-r1'; the default protocol's "
                         "turn limit is gym.make(..., max_episode_steps=N)")
    for name, value in (("max_turns", 1 if max_turns is None else max_turns), ("max_obs_tokens", max_obs_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return protocol


def _check_tokenizer(tokenizer: Any) -> Any:
    """The policy's tokenizer (``encode(text, add_special_tokens=False)`` / ``decode(ids)``), or None.

    An object, not a name: envs load no model library (the trainer has the tokenizer).
    """
    if tokenizer is not None and not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        raise TypeError(f"tokenizer must have encode() and decode() (e.g. a transformers tokenizer), "
                        f"got {type(tokenizer).__name__}")
    return tokenizer
