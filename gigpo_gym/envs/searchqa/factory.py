"""Turn a retriever name ("bm25", "dense" or a URL) and a data source into a shared retriever."""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

from gigpo_gym.envs.searchqa.corpus import load_corpus_jsonl
from gigpo_gym.envs.searchqa.dataset import DataSource, load_questions
from gigpo_gym.envs.searchqa.questions import Question
from gigpo_gym.envs.searchqa.retrieval import Retriever, shared_retriever

LOCAL_RETRIEVERS = ("bm25", "dense")


def is_url(retriever: str) -> bool:
    return retriever.startswith(("http://", "https://"))


def check_retriever_name(retriever: object) -> str:
    if not isinstance(retriever, str) or not (is_url(retriever) or retriever in LOCAL_RETRIEVERS):
        close = difflib.get_close_matches(str(retriever), LOCAL_RETRIEVERS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"retriever must be one of {LOCAL_RETRIEVERS} or a URL such as 'http://127.0.0.1:8000/retrieve', "
            f"got {retriever!r}.{hint}"
        )
    return retriever


def open_retriever(retriever: str, source: DataSource) -> Retriever:
    """The process-wide retriever for this name and corpus (built, or loaded from the disk cache, once)."""
    check_retriever_name(retriever)
    if is_url(retriever):
        from gigpo_gym.envs.searchqa.http_retriever import HTTPRetriever

        return shared_retriever(("http", retriever), lambda: HTTPRetriever(retriever))
    if source.corpus_path is None:
        raise FileNotFoundError(f"the {retriever} retriever needs a corpus file; none was found")
    corpus_path, version = source.corpus_path, source.version

    def build() -> Retriever:
        corpus = load_corpus_jsonl(corpus_path)
        if retriever == "bm25":
            from gigpo_gym.envs.searchqa.bm25 import BM25Retriever

            return BM25Retriever.cached(corpus, version)
        from gigpo_gym.envs.searchqa.dense import DenseRetriever

        return DenseRetriever.cached(corpus, version)

    return shared_retriever((retriever, str(corpus_path), version), build)


@functools.lru_cache(maxsize=16)
def _questions(path: str, size: int, mtime_ns: int) -> tuple[Question, ...]:
    return tuple(load_questions(Path(path)))


def shared_questions(path: Path) -> tuple[Question, ...]:
    """The questions of ``path``, read once per process per file version."""
    st = path.stat()
    return _questions(str(path.resolve()), st.st_size, st.st_mtime_ns)
