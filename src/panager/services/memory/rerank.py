"""A reranking stage over a hybrid search's fused candidates: an operator's `/rerank` endpoint.

The endpoint is a cross-encoder served behind the `/rerank` API that llama.cpp's
server, vLLM, Jina and Cohere share (`PANAGER_RERANK_BASE_URL`, `PANAGER_RERANK_MODEL`,
`PANAGER_RERANK_API_KEY`):

    POST {base_url}/rerank
    {"model": "...", "query": "...", "documents": ["...", ...], "top_n": N}
    -> {"results": [{"index": 0, "relevance_score": 0.92}, ...]}

The base URL is given the way OPENAI_BASE_URL is (`http://host:8080/v1` for llama.cpp and
vLLM, `https://api.cohere.com/v1`, `https://api.jina.ai/v1`). Hugging Face TEI serves
`POST /rerank` with `{"query", "texts"}` and answers a bare list of `{"index", "score"}`:
when the common request is refused as unprocessable (HTTP 422, TEI's answer to a body
without `texts`), the same call is made once in TEI's shape and that shape is kept for the
endpoint (base URL `http://host:8080`). Both answers are read: `results` or a bare list,
`relevance_score` or `score`.

A reranker that fails (unreachable, timeout, an error status, an answer that does not
name every document once) leaves the search as fused: one warning in the log, nothing
reaches the person, and the endpoint is not asked again for RETRY_AFTER seconds (a turn
does not wait a timeout on every search while it is down).

No offline cross-encoder ships its weights inside a PyPI package (docs/memory.md says what
was searched), so without an endpoint there is no reranking.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

import httpx

from panager.services.memory.queries import MemoryHit

log = logging.getLogger(__name__)

RERANK_DEPTH = 30  # fused candidates sent to the reranker (more when a search asks for more)
MAX_DEPTH = 50  # never more than this many
TIMEOUT_SECONDS = 3.0
RETRY_AFTER = 60.0  # seconds a failed endpoint is left alone
MAX_DOCUMENT_CHARS = 2_000  # memories reach 4,000 characters; cross-encoders read ~512 tokens

Shape = Literal["common", "tei"]


class RerankError(RuntimeError):
    """The endpoint's answer could not be used."""


class EndpointReranker:
    """Scores (query, document) pairs with an operator's `/rerank` endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = base_url.rstrip("/") + "/rerank"
        self.model = model or ""
        self._api_key = api_key or ""
        self.timeout = timeout
        self._transport = transport
        self._monotonic = monotonic
        self.shape: Shape = "common"
        self._down_until = -math.inf
        self.failures = 0
        self._client: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        """Close the kept-alive connections (App.stop)."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    @property
    def name(self) -> str:
        return f"endpoint {self.url}" + (f" ({self.model})" if self.model else "")

    def _body(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self.shape == "tei":
            return {"query": query, "texts": documents, "raw_scores": False}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model:
            body["model"] = self.model
        return body

    async def scores(self, query: str, documents: Sequence[str]) -> list[float] | None:
        """One relevance score per document (higher is more relevant), or None when the
        endpoint failed or is resting after a failure (logged once per failure)."""
        if not documents:
            return []
        if self._monotonic() < self._down_until:
            return None
        texts = [d[:MAX_DOCUMENT_CHARS] for d in documents]
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        if self._client is None:  # one client (and its kept-alive connections) per endpoint
            self._client = httpx.AsyncClient(
                timeout=self.timeout, trust_env=False, transport=self._transport
            )
        client = self._client
        try:
            response = await client.post(self.url, json=self._body(query, texts), headers=headers)
            if response.status_code == 422 and self.shape == "common":
                self.shape = "tei"
                response = await client.post(self.url, json=self._body(query, texts),
                                             headers=headers)
                if response.status_code >= 400:
                    self.shape = "common"
            response.raise_for_status()
            return _read(response.json(), len(texts))
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, RerankError) as exc:
            self.failures += 1
            self._down_until = self._monotonic() + RETRY_AFTER
            log.warning("rerank endpoint %s failed (%s); search results are not reranked "
                        "for %.0f s", self.url, _describe(exc), RETRY_AFTER)
            return None


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:200]


def _read(payload: Any, count: int) -> list[float]:
    """Scores in document order from either answer shape; every document named exactly once."""
    items = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise RerankError("no results list in the answer")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise RerankError("a result is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankError(f"result index {index!r} out of range")
        if not isinstance(score, int | float) or isinstance(score, bool):
            raise RerankError(f"result score {score!r} is not a number")
        if not math.isfinite(score):
            raise RerankError(f"result score {score!r} is not finite")
        if scores[index] is not None:
            raise RerankError(f"index {index} named twice")
        scores[index] = float(score)
    if any(s is None for s in scores):
        raise RerankError(f"{sum(s is None for s in scores)} of {count} documents not scored")
    return [float(s) for s in scores if s is not None]


def rerank_order(scores: Sequence[float]) -> list[int]:
    """Positions best first by score; equal scores keep the fused order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def reranker_from_settings(settings: Any) -> EndpointReranker | None:
    """The configured endpoint (PANAGER_RERANK_*), or None when none is set."""
    base = getattr(settings, "rerank_base_url", None)
    if not base:
        return None
    return EndpointReranker(base, getattr(settings, "rerank_model", None),
                            getattr(settings, "rerank_api_key", None))


async def rerank_hits(
    reranker: EndpointReranker, query: str, hits: Sequence[MemoryHit], limit: int
) -> list[MemoryHit]:
    """The best `limit` of `hits` (fused order) with their first RERANK_DEPTH (or `limit`,
    at most MAX_DEPTH) reordered by the reranker's scores, which become their `score`;
    the fused order as it was when the reranker fails."""
    depth = min(max(RERANK_DEPTH, limit), MAX_DEPTH, len(hits))
    head = list(hits[:depth])
    scores = await reranker.scores(query, [h.content for h in head])
    if scores is None:
        return list(hits[:limit])
    ranked = [replace(head[i], score=scores[i]) for i in rerank_order(scores)]
    return (ranked + list(hits[depth:]))[:limit]
