"""Web search through a configured provider: SearXNG (self-hosted, JSON API) or Brave Search.

`web_search: {provider: searxng|brave, url, api_key_env}` in the YAML config
names the provider; Brave's key is read from the environment variable
`api_key_env` names (default `BRAVE_API_KEY`), never written in the file. The
provider's address is the operator's choice, so it is not put through the
address guard (a SearXNG instance usually runs next to Panager); the result
pages are, when `web_fetch` opens them.

Both providers answer with a list of results; each becomes a `SearchResult`
(title, URL, snippet) with markup removed. Bodies are read with the same
decoded-size cap as pages.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from panager.config import ConfigError, WebSearchConfig
from panager.services.web.fetch import read_capped
from panager.services.web.guard import WebError

TIMEOUT_SECONDS = 10.0
MAX_RESPONSE_BYTES = 1_000_000
MAX_LIMIT = 10
_TAGS = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class SearchResult:
    """One hit: what the page calls itself, where it is, and the provider's snippet."""

    title: str
    url: str
    snippet: str

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form for a tool result."""
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


class SearchProvider(Protocol):
    """A web search backend."""

    @property
    def name(self) -> str:
        """The provider's name, as results and errors show it."""
        ...

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        """Up to `limit` results for `query`; raise WebError with a clear message."""
        ...


def plain(text: Any, limit: int) -> str:
    """Provider text without markup or entities, one line, at most `limit` characters."""
    cleaned = _SPACES.sub(" ", html.unescape(_TAGS.sub("", str(text or "")))).strip()
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def _result(title: Any, url: Any, snippet: Any) -> SearchResult | None:
    address = str(url or "").strip()
    if not address.lower().startswith(("http://", "https://")):
        return None
    return SearchResult(plain(title, 200) or address, address[:2_000], plain(snippet, 500))


async def _get_json(
    name: str, url: str, params: Mapping[str, Any], headers: Mapping[str, str]
) -> Any:
    async with httpx.AsyncClient(trust_env=False, timeout=TIMEOUT_SECONDS) as client:
        try:
            async with client.stream("GET", url, params=params, headers=dict(headers)) as response:
                body, truncated = await read_capped(response, MAX_RESPONSE_BYTES)
                status = response.status_code
        except httpx.TimeoutException:
            raise WebError(f"{name} did not answer within {TIMEOUT_SECONDS:g} s.") from None
        except httpx.HTTPError as exc:
            raise WebError(f"{name} could not be reached ({type(exc).__name__}).") from None
    if status >= 400:
        raise WebError(_status_message(name, status))
    if truncated:
        raise WebError(f"{name} answered with more than {MAX_RESPONSE_BYTES:,} bytes.")
    try:
        return json.loads(body)
    except ValueError:
        raise WebError(f"{name} did not answer with JSON.") from None


def _status_message(name: str, status: int) -> str:
    if status in (401, 403) and name == "SearXNG":
        return (
            f"SearXNG refused the request (HTTP {status}): enable the json format under "
            "search.formats in the instance's settings.yml"
        )
    if status in (401, 403):
        return f"{name} refused the API key (HTTP {status}); check the key"
    if status == 429:
        return f"{name} is rate-limiting searches (HTTP 429); try again later"
    return f"{name} answered HTTP {status}"


@dataclass(frozen=True)
class SearxngSearch:
    """A SearXNG instance's JSON API (`/search?format=json`; json must be enabled)."""

    url: str
    name: str = "SearXNG"

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        """Up to `limit` general web results for `query`."""
        endpoint = self.url.rstrip("/") + "/search"
        params = {"q": query, "format": "json", "categories": "general", "pageno": 1}
        data = await _get_json(self.name, endpoint, params, {"Accept": "application/json"})
        items = data.get("results") if isinstance(data, dict) else None
        results = [
            _result(item.get("title"), item.get("url"), item.get("content"))
            for item in items or []
            if isinstance(item, dict)
        ]
        return [r for r in results if r is not None][:limit]


@dataclass(frozen=True)
class BraveSearch:
    """Brave Search's web API (`X-Subscription-Token` header)."""

    url: str
    api_key: str
    name: str = "Brave Search"

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        """Up to `limit` web results for `query`."""
        headers = {"Accept": "application/json", "X-Subscription-Token": self.api_key}
        params = {"q": query, "count": limit}
        data = await _get_json(self.name, self.url, params, headers)
        web = data.get("web") if isinstance(data, dict) else None
        items = web.get("results") if isinstance(web, dict) else None
        results = [
            _result(item.get("title"), item.get("url"), item.get("description"))
            for item in items or []
            if isinstance(item, dict)
        ]
        return [r for r in results if r is not None][:limit]


def make_search(
    config: WebSearchConfig | None, environ: Mapping[str, str] | None = None
) -> SearchProvider | None:
    """The configured provider, or None; raise ConfigError when Brave's key is missing."""
    if config is None:
        return None
    assert config.url is not None  # WebSearchConfig fills or requires it
    if config.provider == "searxng":
        return SearxngSearch(config.url)
    env = os.environ if environ is None else environ
    variable = config.api_key_env or "BRAVE_API_KEY"
    key = (env.get(variable) or "").strip()
    if not key:
        raise ConfigError(
            f"{variable} is not set: web_search uses Brave Search, whose API key is read from "
            f"{variable} (web_search.api_key_env); set it or remove web_search from the config."
        )
    return BraveSearch(config.url, key)
