"""`web_fetch` and `web_search`: reading the web, with results framed as outside content.

`web_fetch(url)` is on unless `web_fetch: false`; every address it reaches
passes the address guard (services/web/guard.py). `web_search(query, limit)`
is offered only when a provider is configured (`web_search:` in the YAML).

Both can carry data out of the instance: a URL's path, query and even its
host name (`<secret>.evil.example`) reach whoever runs that server, and a
query reaches the search provider. So in a tainted call — one whose input held
outside content — a fetch of a URL the person did not write themselves, and a
search with a word the person did not write, are *consequential* and wait for
the person's Approve (in runs with nobody present they are not made at all).
The rule reads only the call's arguments and the person's own text: it is
decided before the tool runs, so no name is looked up before the decision.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool

from panager.agent.graph.tool import CONSEQUENTIAL, ORDINARY, CallView, ToolClass, shown_text, tool
from panager.errors import ToolError
from panager.framing import frame
from panager.services.web.guard import WebError

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.services.users import User
    from panager.services.web.fetch import Page, WebFetcher
    from panager.services.web.search import SearchProvider

MAX_QUERY_CHARS = 400
MAX_RESULTS = 10
FRAME_ROOM = 400  # characters the frame and the other fields take besides the text
_URL_TOKEN = re.compile(r"[^\s<>()\[\]{}\"'`|]+")
_SCHEME = re.compile(r"^https?://", re.IGNORECASE)
_TRAILING = ".,;:!?*_~"
_WORD = re.compile(r"\w+")


def web_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """web_fetch (unless turned off) and web_search (when a provider is configured)."""
    tools: list[BaseTool] = []
    if deps.web is not None:
        tools.append(_fetch_tool(deps.web, deps.config.max_tool_result_chars))
    if deps.search is not None:
        tools.append(_search_tool(deps.search))
    return tools


def _fetch_tool(fetcher: WebFetcher, max_chars: int) -> BaseTool:
    @tool(classify=fetch_class, describe=describe_fetch)
    async def web_fetch(url: str) -> str:
        """Read a web page or PDF and return its main text (with its title and final URL).

        url: the full http:// or https:// address, e.g. one the user gave or a web_search
        result. Private and local network addresses are refused."""
        try:
            page = await fetcher.fetch(url)
        except WebError as exc:
            raise ToolError(_error_text(exc, url)) from None
        return framed_page(page, max_chars)

    return web_fetch


def _search_tool(provider: SearchProvider) -> BaseTool:
    @tool(classify=search_class, describe=describe_search)
    async def web_search(query: str, limit: int = 5) -> str:
        """Search the web; returns results with title, URL and snippet.

        Use web_fetch on a result's URL to read the page itself. limit: 1-10 results."""
        text = " ".join(str(query).split())
        if not text:
            raise ToolError("The query is empty; say what to search for.")
        if len(text) > MAX_QUERY_CHARS:
            raise ToolError(f"The query is too long ({len(text)} characters; at most 400).")
        count = max(1, min(MAX_RESULTS, int(limit)))
        try:
            results = await provider.search(text, count)
        except WebError as exc:
            raise ToolError(str(exc)) from None
        return frame(
            f"web search ({provider.name})",
            {"query": text, "results": [r.as_dict() for r in results]},
        )

    return web_search


def framed_page(page: Page, max_chars: int) -> str:
    """The page as one framed result that fits `max_chars` (the text cut to fit, and said so)."""
    room = max(200, max_chars - FRAME_ROOM)
    text, cut = page.text, False
    while True:
        value: dict[str, Any] = {"url": page.url, "title": page.title, "text": text}
        if page.truncated or cut:
            value["note"] = "Only the start of the document is shown; it is longer."
        result = frame(f"web page {page.url}", value)
        if len(result) <= max_chars or len(text) <= room // 4:
            return result
        text, cut = text[: max(room // 4, len(text) - (len(result) - max_chars) - 50)], True


def _error_text(exc: WebError, url: str) -> str:
    if exc.outside:  # it quotes what a server sent: framed like any outside content
        return frame(f"web_fetch error {url[:100]}", str(exc))
    return str(exc)


# -- classification: decided from the arguments and the person's own words, nothing else --


def url_key(text: str) -> str:
    """A URL as compared with what the person wrote: no scheme, host lower-cased, no bare '/'."""
    core = _SCHEME.sub("", text.strip().rstrip(_TRAILING))
    host, sep, rest = core.partition("/")
    rest = sep + rest
    return host.lower() + ("" if rest == "/" else rest)


def written_by_person(url: str, person_text: str) -> bool:
    """Whether the person typed this URL themselves (up to scheme, host case and a final '/')."""
    key = url_key(url)
    if not key:
        return False
    return any(url_key(token) == key for token in _URL_TOKEN.findall(person_text))


def fetch_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """Consequential in a tainted call unless the person wrote the URL themselves."""
    if not view.tainted:
        return ORDINARY
    mine = written_by_person(str(args.get("url", "")), view.person_text)
    return ORDINARY if mine else CONSEQUENTIAL


def search_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """Consequential in a tainted call unless every word of the query is in the person's
    latest message (a word typed turns ago may be what outside text steers back to)."""
    if not view.tainted:
        return ORDINARY
    words = set(_WORD.findall(str(args.get("query", "")).casefold()))
    mine = set(_WORD.findall(view.latest_text.casefold()))
    return ORDINARY if words <= mine else CONSEQUENTIAL


def describe_fetch(args: Mapping[str, Any]) -> str:
    """The fetch a confirmation question shows."""
    return (
        f"Open the web address {shown_text(str(args.get('url', '')))} — everything in it, "
        "host name included, reaches whoever runs that site"
    )


def describe_search(args: Mapping[str, Any]) -> str:
    """The search a confirmation question shows."""
    return (
        f"Search the web for {shown_text(str(args.get('query', '')))} — the search provider "
        "sees the query"
    )
