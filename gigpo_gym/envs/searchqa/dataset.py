"""Where an env's corpus and questions come from: the embedded world or a data folder.

A data folder (``data_dir=`` or ``$GIGPO_SEARCHQA_DATA``) holds::

    corpus.jsonl        wiki-18 style passages (also corpus.jsonl.gz or wiki-18.jsonl[.gz]);
                        not needed with an HTTP retriever
    train.parquet       Search-R1 questions, or train.jsonl (FlashRAG); the same for test

The embedded default is the generated world (``world.py``), written once to the
cache folder in the same file formats (so one loader serves both) under a
version stamp, and re-read on later runs.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from gigpo_gym.core.data import cache_dir
from gigpo_gym.envs.searchqa.corpus import write_jsonl_atomic
from gigpo_gym.envs.searchqa.questions import Question, check_unique_ids, load_flashrag_jsonl, load_searchr1_parquet

#: Bump when the generator's output changes: old caches are then never read.
WORLD_VERSION = 1
SPLITS = ("train", "test")
CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz", "wiki-18.jsonl", "wiki-18.jsonl.gz")


@dataclass(frozen=True)
class DataSource:
    """A corpus file (None when the retriever brings its own) and the question file of a split."""

    corpus_path: Path | None
    questions_path: Path | None
    #: Version stamp of the corpus, part of index cache keys.
    version: str


def embedded_world_dir(world_size: int = 600, world_seed: int = 0) -> Path:
    """The cache folder of the generated world, written on first use."""
    folder = cache_dir("searchqa", f"world-v{WORLD_VERSION}-n{world_size}-s{world_seed}")
    stamp = folder / "VERSION"
    if stamp.is_file() and stamp.read_text().strip() == str(WORLD_VERSION):
        return folder
    from gigpo_gym.envs.searchqa.world import generate_world
    from gigpo_gym.envs.searchqa.world_text import split_questions, world_passages, world_questions

    world = generate_world(world_size, seed=world_seed)
    write_jsonl_atomic(folder / "corpus.jsonl", ({"id": d.id, "contents": d.contents} for d in world_passages(world, world_seed)))
    for split, questions in split_questions(list(world_questions(world, world_seed)), seed=world_seed).items():
        write_jsonl_atomic(folder / f"{split}.jsonl", (q.to_record() for q in questions))
    tmp = folder / f".VERSION.{os.getpid()}.tmp"
    tmp.write_text(f"{WORLD_VERSION}\n")
    os.replace(tmp, stamp)  # written last: a folder with a stamp is complete
    return folder


def find_corpus(folder: Path) -> Path | None:
    for name in CORPUS_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def locate(data_dir: Path | None, split: str, *, need_corpus: bool, world_size: int, world_seed: int) -> DataSource:
    """The files of ``split`` in ``data_dir`` (None: the embedded world); errors name what is missing."""
    if split not in SPLITS:
        close = difflib.get_close_matches(str(split), SPLITS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}.{hint}")
    if data_dir is None:
        folder = embedded_world_dir(world_size, world_seed)
        return DataSource(folder / "corpus.jsonl", folder / f"{split}.jsonl", _world_version(world_size, world_seed))
    candidates = [data_dir / f"{split}.parquet", data_dir / f"{split}.jsonl"]
    questions = next((p for p in candidates if p.is_file()), None)
    if questions is None:
        present = sorted(p.name for p in data_dir.iterdir())
        raise FileNotFoundError(f"{data_dir} has no question file for split {split!r}: expected one of "
                                f"{[p.name for p in candidates]}; found {present}")
    corpus = find_corpus(data_dir)
    if corpus is None and need_corpus:
        raise FileNotFoundError(
            f"{data_dir} has no corpus file (expected one of {list(CORPUS_NAMES)}); an HTTP retriever "
            f"(retriever='http://host:port/retrieve') needs none"
        )
    return DataSource(corpus, questions, _file_version(corpus) if corpus is not None else "")


def locate_corpus(data_dir: Path | None, *, world_size: int = 600, world_seed: int = 0) -> DataSource:
    """Only the corpus of ``data_dir`` (None: the embedded world), for a retriever server."""
    if data_dir is None:
        corpus = embedded_world_dir(world_size, world_seed) / "corpus.jsonl"
        return DataSource(corpus, None, _world_version(world_size, world_seed))
    corpus = find_corpus(data_dir)
    if corpus is None:
        raise FileNotFoundError(f"{data_dir} has no corpus file (expected one of {list(CORPUS_NAMES)})")
    return DataSource(corpus, None, _file_version(corpus))


def _world_version(world_size: int, world_seed: int) -> str:
    return f"world-v{WORLD_VERSION}-n{world_size}-s{world_seed}"


def _file_version(path: Path) -> str:
    """Path, size and mtime: a changed file gets new index caches."""
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def load_questions(path: Path) -> list[Question]:
    """Questions of a parquet (Search-R1) or jsonl (FlashRAG) file; ids must be unique."""
    if path.suffix == ".parquet":
        questions = load_searchr1_parquet(path)
    else:
        questions = load_flashrag_jsonl(path, default_task_type=path.parent.name)
    if not questions:
        raise ValueError(f"{path}: no questions")
    check_unique_ids(questions, str(path))
    return questions


