"""Client of a Search-R1 style ``/retrieve`` server (theirs, or ``gigpo-gym serve retriever``).

Request ``{"queries": [...], "topk": k, "return_scores": true}``; response
``{"result": [[{"document": {"id", "contents", ...}, "score": s}, ...], ...]}``.
Uses the standard library only, so the envs need no HTTP package.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from gigpo_gym.core.anchor import digest
from gigpo_gym.envs.searchqa.corpus import Document
from gigpo_gym.envs.searchqa.retrieval import Hit, check_request


class RetrieverServerError(RuntimeError):
    """The server could not be reached or answered something that is not a retrieval result."""


def _document(url: str, entry: Any) -> Hit:
    doc, score = (entry.get("document"), entry.get("score", 0.0)) if isinstance(entry, dict) and "document" in entry else (entry, 0.0)
    if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
        raise RetrieverServerError(f"{url}: a result entry has no document with a 'contents' string: {entry!r:.120}")
    # Servers without ids get a content digest: the env's anchor needs a stable id per passage.
    doc_id = str(doc["id"]) if doc.get("id") is not None else f"sha:{digest(doc['contents'])}"
    return Hit(Document(doc_id, doc["contents"]), float(score))


class HTTPRetriever:
    """Retrieval by POSTing batches of queries to ``url`` (e.g. ``http://127.0.0.1:8000/retrieve``)."""

    def __init__(self, url: str, *, timeout: float = 30.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.timeout = timeout

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        check_request(queries, topk)
        if not queries:
            return []
        body = json.dumps({"queries": list(queries), "topk": topk, "return_scores": True}).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            raise RetrieverServerError(f"{self.url} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise RetrieverServerError(f"cannot reach the retriever server at {self.url}: {e}") from e
        except json.JSONDecodeError as e:
            raise RetrieverServerError(f"{self.url} answered something that is not JSON: {e}") from e
        result = payload.get("result") if isinstance(payload, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrieverServerError(
                f"{self.url}: expected {{'result': [...]}} with {len(queries)} lists, got {str(payload)[:200]}"
            )
        hits = []
        for ranked in result:
            if not isinstance(ranked, list):
                raise RetrieverServerError(f"{self.url}: each result must be a list, got {type(ranked).__name__}")
            hits.append([_document(self.url, entry) for entry in ranked[:topk]])
        return hits
