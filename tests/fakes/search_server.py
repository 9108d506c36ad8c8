"""Local fakes of SearXNG's JSON API and Brave Search's web API for web_search tests.

One aiohttp server answers both: `GET /search?q=…&format=json` the way a SearXNG
instance with the json format enabled does (`{"results": [{"title", "url",
"content"}]}`; HTTP 403 when `json_enabled` is False, as SearXNG does), and `GET
/res/v1/web/search?q=…&count=N` the way Brave does (`{"web": {"results": [{"title",
"url", "description"}]}}`, markup in descriptions, HTTP 401 without the right
`X-Subscription-Token`). Every request is recorded.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

BRAVE_KEY = "brave-test-key-123"


def _hits(query: str, count: int) -> list[dict[str, str]]:
    return [
        {
            "title": f"Result {i} for {query}",
            "url": f"https://example.org/{i}",
            "text": f"Snippet {i} about <b>{query}</b> &amp; more",
        }
        for i in range(1, count + 1)
    ]


class FakeSearch:
    """Serves both providers; `requests` holds (path, query params, headers) of each call."""

    def __init__(self, results: int = 8) -> None:
        self.results = results
        self.json_enabled = True
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeSearch:
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_get("/res/v1/web/search", self._brave)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def _record(self, request: web.Request) -> None:
        self.requests.append((request.path, dict(request.query), dict(request.headers)))

    async def _searxng(self, request: web.Request) -> web.Response:
        self._record(request)
        if request.query.get("format") != "json" or not self.json_enabled:
            return web.Response(status=403, text="Forbidden")
        query = request.query.get("q", "")
        items = [
            {"title": h["title"], "url": h["url"], "content": h["text"], "engine": "fake"}
            for h in _hits(query, self.results)
        ]
        items.append({"title": "not a web page", "url": "javascript:alert(1)", "content": ""})
        return web.json_response({"query": query, "results": items})

    async def _brave(self, request: web.Request) -> web.Response:
        self._record(request)
        if request.headers.get("X-Subscription-Token") != BRAVE_KEY:
            return web.json_response({"error": "unauthorized"}, status=401)
        query = request.query.get("q", "")
        count = int(request.query.get("count", "20"))
        items = [
            {"title": h["title"], "url": h["url"], "description": h["text"]}
            for h in _hits(query, min(count, self.results))
        ]
        return web.json_response({"type": "search", "web": {"results": items}})
