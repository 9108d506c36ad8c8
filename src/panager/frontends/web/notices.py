"""Reminders shown on an open web page, as they are delivered (Server-Sent Events).

Each signed-in page opens `GET /notices` (static/notices.js) and keeps it open;
`WebNotices` is a messenger with `platform = "web"`: for a person with a chat
front end it only shows a copy once the chat delivered (services/messengers.py),
for anyone else an open page is a destination like the terminal. It knows
only the pages open on this server process. Each page holds a small bounded
queue (a page that stopped reading loses notices, never the process memory),
and `close()` ends every stream so the server stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiohttp import web

from panager.frontends.web.render import HEADERS
from panager.frontends.web.sse import frame

if TYPE_CHECKING:
    from collections.abc import Sequence

    from panager.services.proposals import Offer
    from panager.services.users import User
    from panager.services.web_sessions import WebSession

HEARTBEAT = 15.0  # seconds between keep-alive comments (they also notice a closed page)
QUEUE_SIZE = 20
PAGES_PER_PERSON = 8
_CLOSED = object()


class WebNotices:
    """Open pages per person, and a messenger that writes to them."""

    platform = "web"

    def __init__(self) -> None:
        self._open: dict[int, set[asyncio.Queue[object]]] = {}

    def routes(self, gate) -> list[web.RouteDef]:
        """`GET /notices`: the page's stream of notices."""
        return [web.get("/notices", gate.page(self.stream))]

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Show `text` on the person's open pages; False when none is open. A notice has no
        buttons: the chat page shows a held call's Approve/Deny under the answer that
        offered it, and in its "Waiting for your approval" panel."""
        queues = self._open.get(user.id)
        if not queues:
            return False
        notice = {"text": text, "link": link}
        for queue in queues:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(notice)
        return True

    async def stream(self, request: web.Request, session: WebSession) -> web.StreamResponse:
        """Hold the page's stream open and write each notice as it comes."""
        pages = self._open.setdefault(session.user.id, set())
        if len(pages) >= PAGES_PER_PERSON:
            return web.Response(status=429, text="Too many open pages.")
        queue: asyncio.Queue[object] = asyncio.Queue(QUEUE_SIZE)
        pages.add(queue)
        response = web.StreamResponse(
            headers={**HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
        )
        try:
            await response.prepare(request)
            while True:
                try:
                    notice = await asyncio.wait_for(queue.get(), HEARTBEAT)
                except TimeoutError:
                    await response.write(b": waiting\n\n")  # raises once the page is gone
                    continue
                if notice is _CLOSED:
                    break
                await response.write(frame("notice", notice))  # type: ignore[arg-type]
        except ConnectionError:
            pass
        finally:
            pages.discard(queue)
            if not pages:
                self._open.pop(session.user.id, None)
        return response

    def close(self) -> None:
        """End every open stream (the server is stopping)."""
        for pages in self._open.values():
            for queue in pages:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(_CLOSED)
