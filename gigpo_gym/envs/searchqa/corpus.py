"""Passages to search: the wiki-18 style corpus jsonl and its in-memory form.

A corpus line is ``{"id": "0", "contents": "\\"Title\\"\\ntext"}``: the title is the
first line of ``contents`` (wiki-18 keeps the quotes), the text the rest.  Lines
with ``title`` and ``text`` fields instead of ``contents`` are accepted too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


class DataFileError(ValueError):
    """A data file that cannot be read; the message names the file and the line or field."""


@dataclass(frozen=True)
class Document:
    """One passage: ``contents`` is the title line, a newline, then the text."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        return self.contents.partition("\n")[0]

    @property
    def text(self) -> str:
        return self.contents.partition("\n")[2]

    @classmethod
    def from_title_text(cls, doc_id: str, title: str, text: str) -> Document:
        return cls(doc_id, f"{title}\n{text}")


class Corpus:
    """Passages in index order; ``corpus[i]`` is the i-th, ``corpus.index_of(id)`` its place."""

    def __init__(self, documents: Iterable[Document], *, source: str = "<memory>"):
        self.ids: list[str] = []
        self.contents: list[str] = []
        for doc in documents:
            self.ids.append(doc.id)
            self.contents.append(doc.contents)
        self.source = source
        self._positions = {doc_id: i for i, doc_id in enumerate(self.ids)}
        if len(self._positions) != len(self.ids):
            duplicate = next(d for i, d in enumerate(self.ids) if self._positions[d] != i)
            raise DataFileError(f"{source}: document id {duplicate!r} appears more than once")
        if not self.ids:
            raise DataFileError(f"{source}: the corpus has no documents")

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, position: int) -> Document:
        return Document(self.ids[position], self.contents[position])

    def index_of(self, doc_id: str) -> int:
        return self._positions[doc_id]

    def fingerprint(self) -> str:
        """A digest of every id and passage: the key of caches built from this corpus."""
        h = hashlib.blake2b(digest_size=8)
        for doc_id, contents in zip(self.ids, self.contents):
            h.update(doc_id.encode("utf-8") + b"\x00" + contents.encode("utf-8") + b"\x01")
        return h.hexdigest()


def open_text(path: Path) -> IO[str]:
    """Open a (possibly gzipped) UTF-8 text file."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` for each non-blank line; bad JSON names file and line."""
    try:
        with open_text(path) as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataFileError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from e
                if not isinstance(record, dict):
                    raise DataFileError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
                yield lineno, record
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except (OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise DataFileError(f"{path}: cannot be read ({e})") from e


def _field(path: Path, lineno: int, record: dict[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    if name not in record:
        raise DataFileError(f"{path}:{lineno}: missing field {name!r} (fields present: {sorted(record)})")
    value = record[name]
    if not isinstance(value, kinds) or isinstance(value, bool):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise DataFileError(f"{path}:{lineno}: field {name!r} must be {wanted}, got {type(value).__name__}")
    return value


def _document(path: Path, lineno: int, record: dict[str, Any]) -> Document:
    doc_id = str(_field(path, lineno, record, "id", (str, int)))
    if "contents" in record or "title" not in record:
        return Document(doc_id, _field(path, lineno, record, "contents", (str,)))
    title = _field(path, lineno, record, "title", (str,))
    return Document.from_title_text(doc_id, title, _field(path, lineno, record, "text", (str,)))


def load_corpus_jsonl(path: str | os.PathLike) -> Corpus:
    """Read a wiki-18 style corpus (``.jsonl`` or ``.jsonl.gz``)."""
    path = Path(path)
    return Corpus((_document(path, lineno, record) for lineno, record in iter_jsonl(path)), source=str(path))


def write_jsonl_atomic(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Write records one per line through a temp file and ``os.replace`` (readers never see half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
