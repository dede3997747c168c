"""BM25 retrieval over a corpus with ``bm25s``, its index cached on disk.

The index of a corpus file is saved under the cache folder keyed by the corpus's
version stamp (the embedded world's version, or a real file's path, size and
mtime), so only the first env of the first process pays for indexing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import cache_dir
from gigpo_gym.envs.searchqa.corpus import Corpus
from gigpo_gym.envs.searchqa.retrieval import Hit, check_request, top_k

#: Bump when tokenisation or scoring changes: old index caches are then never read.
INDEX_VERSION = 1
_STOPWORDS = "en"


def _tokenize(texts: list[str], *, return_ids: bool):
    import bm25s

    return bm25s.tokenize(texts, stopwords=_STOPWORDS, return_ids=return_ids, show_progress=False)


class BM25Retriever:
    """Okapi BM25 (bm25s' Lucene variant, k1=1.5, b=0.75) over title and text, no stemming."""

    def __init__(self, corpus: Corpus, model):
        self.corpus = corpus
        self.model = model

    @classmethod
    def build(cls, corpus: Corpus) -> BM25Retriever:
        import bm25s

        model = bm25s.BM25()
        model.index(_tokenize(corpus.contents, return_ids=True), show_progress=False)
        return cls(corpus, model)

    def save(self, folder: Path) -> None:
        self.model.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: Path, corpus: Corpus) -> BM25Retriever:
        import bm25s

        return cls(corpus, bm25s.BM25.load(str(folder), show_progress=False, verbosity=0))

    @classmethod
    def cached(cls, corpus: Corpus, version: str) -> BM25Retriever:
        """Load the index of this corpus version from the cache, or build and save it."""
        folder = cache_dir("searchqa", "bm25") / f"v{INDEX_VERSION}-{digest([version, len(corpus)])}"
        if (folder / "params.index.json").is_file():
            try:
                return cls.load(folder, corpus)
            except Exception:  # a damaged cache is rebuilt, never trusted
                shutil.rmtree(folder, ignore_errors=True)
        retriever = cls.build(corpus)
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        retriever.save(tmp)
        try:
            os.replace(tmp, folder)  # atomic: readers see a whole index or none
        except OSError:  # another process saved it first
            shutil.rmtree(tmp, ignore_errors=True)
        return retriever

    def _scores(self, token_ids: list[int]) -> np.ndarray:
        """BM25 of every passage: the sum of the query tokens' precomputed postings.

        Same sums as bm25s' ``get_scores_from_ids``, but a token's postings hold each
        passage once, so plain fancy-index addition replaces the slow ``np.add.at``.
        """
        index = self.model.scores
        data, indices, indptr = index["data"], index["indices"], index["indptr"]
        scores = np.zeros(index["num_docs"], dtype=np.float32)
        for token in token_ids:
            start, end = indptr[token], indptr[token + 1]
            scores[indices[start:end]] += data[start:end]
        if self.model.nonoccurrence_array is not None:  # BM25L / BM25+ variants
            scores += self.model.nonoccurrence_array[token_ids].sum()
        return scores

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        check_request(queries, topk)
        results = []
        for tokens in _tokenize(list(queries), return_ids=False) if queries else []:
            ids = self.model.get_tokens_ids(tokens)
            if not ids:
                results.append([])
                continue
            scores = self._scores(ids)
            results.append([Hit(self.corpus[int(i)], float(scores[i])) for i in top_k(scores, topk)])
        return results
