"""BM25 product search over the fields the original indexes.

The original indexes, per product, the lower-cased concatenation of title,
description, first bullet point and an option text (``"color: red, blue, and
size: s, m"``) with Lucene (pyserini; English analyzer: stop words, possessives,
Porter stemming; BM25 k1=0.9, b=0.4) and returns the top 50 hits.  Here the same
text goes through an equivalent analyzer (Lucene's 33 English stop words, PyStemmer's
Porter stemmer) into a ``bm25s`` index with the same parameters.  Ties are broken by
catalog order, as Lucene breaks them by document id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN
from bm25s.tokenization import Tokenized

from gigpo_gym.envs.webshop.schema import Product

#: Hits a search returns (the original's SEARCH_RETURN_N).
SEARCH_RETURN_N = 50
#: Lucene's (pyserini's) BM25 defaults.
BM25_K1, BM25_B = 0.9, 0.4

_WORD = re.compile(r"\w+")
_POSSESSIVE = re.compile(r"'s\b")


def index_text(product: Product) -> str:
    """The text the original indexes for ``product`` (lower-cased)."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


class Analyzer:
    """Lower-case, split on non-word characters, drop possessives and stop words, stem."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("porter")
        self._stop = frozenset(STOPWORDS_EN)
        self._cache: dict[str, str | None] = {}

    def __call__(self, text: str) -> list[str]:
        out = []
        cache = self._cache
        for word in _WORD.findall(_POSSESSIVE.sub("", text.lower())):
            stem = cache.get(word, "")
            if stem == "":
                # Snowball's Porter stems "s" to "" (Lucene's keeps it): keep the word
                stem = None if word in self._stop else self._stemmer.stemWord(word) or word
                cache[word] = stem
            if stem is not None:
                out.append(stem)
        return out


class SearchEngine:
    """BM25 over a catalog; ``search(query)`` gives up to 50 catalog positions, best first."""

    def __init__(self, products: Sequence[Product], show_progress: bool = False):
        self.analyzer = Analyzer()
        vocab: dict[str, int] = {}
        ids = [self._ids(index_text(p), vocab) for p in products]
        self.vocab = vocab
        self.num_docs = len(products)
        self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        if self.num_docs:
            self._bm25.index(Tokenized(ids=ids, vocab=vocab), show_progress=show_progress)

    def _ids(self, text: str, vocab: dict[str, int]) -> list[int]:
        return [vocab.setdefault(token, len(vocab)) for token in self.analyzer(text)]

    def query_ids(self, query: str) -> list[int]:
        """Token ids of ``query`` known to the index (unknown words score nothing, as in Lucene)."""
        return [self.vocab[t] for t in self.analyzer(query) if t in self.vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every product for ``query``."""
        ids = self.query_ids(query)
        if not ids or not self.num_docs:
            return np.zeros(self.num_docs, dtype=np.float32)
        return self._bm25.get_scores_from_ids(ids)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Catalog positions of the top ``k`` products with a positive score, best first."""
        scores = self.scores(query)
        matched = np.flatnonzero(scores > 0)  # in catalog order
        if len(matched) == 0:
            return []
        values = scores[matched]
        k = min(k, len(matched))
        kth = np.partition(values, len(values) - k)[len(values) - k]
        # Strictly better than the k-th score: sort them (fewer than k); then the ties
        # at the k-th score in catalog order (Lucene breaks ties by document id).
        better = values > kth
        top, top_values = matched[better], values[better]
        tied = matched[values == kth][: k - len(top)]
        return top[np.lexsort((top, -top_values))].tolist() + tied.tolist()
