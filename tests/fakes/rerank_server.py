"""A local fake of the `/rerank` API shared by llama.cpp's server, vLLM, Jina and Cohere,
and of Hugging Face TEI's variant of it, scoring by a known rule.

`POST /rerank` (and `/v1/rerank`) with `{"model", "query", "documents", "top_n"}` answers
`{"model", "results": [{"index", "relevance_score", "document": {"text"}}]}`, best first, at
most `top_n` of them, as those servers do. With `tei=True` it is TEI instead: the body must
be `{"query", "texts"}` (HTTP 422 otherwise, as TEI answers a body without `texts`) and the
answer is a bare list of `{"index", "score"}`.

The rule (`score`): how many distinct words of three or more letters of the query the
document holds, so a test knows the order to expect. `mode` makes it misbehave: "error"
(HTTP 500), "hang" (never answers until the server stops), "garbage" (a results list
naming an index out of range). With `key` set, a request without `Authorization: Bearer
<key>` gets HTTP 401. Every request is recorded.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

WORD = re.compile(r"\w{3,}")


def score(query: str, document: str) -> float:
    """The fake's relevance rule: the query's distinct words (3+ letters) the document holds."""
    words = set(WORD.findall(document.lower()))
    return float(sum(1 for w in set(WORD.findall(query.lower())) if w in words))


class FakeRerank:
    """The fake endpoint; `requests` holds (path, JSON body, headers) of each call."""

    def __init__(self, *, tei: bool = False, key: str | None = None) -> None:
        self.tei = tei
        self.key = key
        self.mode = "ok"
        self.requests: list[tuple[str, Any, dict[str, str]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()

    @property
    def base(self) -> str:
        """http://127.0.0.1:PORT (TEI's base URL; the others' is `base + "/v1"`)."""
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeRerank:
        app = web.Application()
        app.router.add_post("/rerank", self._rerank)
        app.router.add_post("/v1/rerank", self._rerank)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._stop.set()
        assert self._runner is not None
        await self._runner.cleanup()

    async def _rerank(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((request.path, body, dict(request.headers)))
        if self.key and request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": "unauthorized"}, status=401)
        if self.mode == "error":
            return web.json_response({"error": "model crashed"}, status=500)
        if self.mode == "hang":
            await self._stop.wait()
            return web.json_response({"error": "stopped"}, status=503)
        field = "texts" if self.tei else "documents"
        docs = body.get(field)
        if not isinstance(docs, list) or not isinstance(body.get("query"), str):
            return web.json_response({"error": f"missing field `{field}`"}, status=422)
        ranked = sorted(range(len(docs)), key=lambda i: (-score(body["query"], docs[i]), i))
        if self.mode == "garbage":
            return web.json_response({"results": [{"index": len(docs), "relevance_score": 1.0}]})
        if self.tei:
            return web.json_response(
                [{"index": i, "score": score(body["query"], docs[i])} for i in ranked])
        top = ranked[: int(body.get("top_n") or len(docs))]
        return web.json_response({"model": body.get("model", ""), "results": [
            {"index": i, "relevance_score": score(body["query"], docs[i]),
             "document": {"text": docs[i]}} for i in top]})
