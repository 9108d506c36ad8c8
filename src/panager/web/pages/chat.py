"""Chat: the user's own conversation (the same thread as Discord and the terminal).

With JavaScript, the form posts with `X-Requested-With: fetch` and the
response is a `text/event-stream` of the turn's events (see web/sse.py), so
tool status and the answer appear as they happen. Without JavaScript the
post waits for the answer and redirects back to the page. The turn runs in a
background task: closing the tab does not cancel it, and the answer is in the
thread when the page is opened again. Slash commands work as in Discord.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web
from langchain_core.messages import AIMessage, HumanMessage

from panager.agent.attachments import ATTACHMENTS_NAME, attached_text
from panager.agent.commands import CommandContext, dispatch, is_command
from panager.services.media.intake import Attachment
from panager.services.web_sessions import WebSession
from panager.web.pages import form_of, page
from panager.web.render import HEADERS, render
from panager.web.sse import frame, translate

log = logging.getLogger(__name__)
HISTORY = 40
MAX_UPLOADS = 4  # files taken from one message (web/server.py sizes requests for them)


class ChatPage:
    """/chat: history, the message form and the streamed answer."""

    def __init__(self, app, spawn: Callable) -> None:
        self.app = app
        self.spawn = spawn  # runs a turn so that server shutdown waits for it

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [web.get("/chat", gate.page(self.index)), web.post("/chat", gate.page(self.send))]

    async def index(self, request: web.Request, session: WebSession,
                    reply: dict | None = None) -> web.Response:
        """The conversation so far and the form."""
        entries = await self.history(session)
        return render("chat.html", **page(session, "chat", "Chat", request, entries=entries,
                                          reply=reply))

    async def history(self, session: WebSession) -> list[dict]:
        """The thread's last messages as (who, text, tools) for the page."""
        assistant = self.app.assistant
        snapshot = await assistant.graph.aget_state(assistant.config_for(session.user))
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        entries: list[dict] = []
        for message in messages:
            if isinstance(message, HumanMessage) and message.name == ATTACHMENTS_NAME:
                entries.append({"who": "you", "text": attached_text(message), "tools": []})
            elif isinstance(message, HumanMessage):
                scheduled = bool(message.additional_kwargs.get("panager_system_trigger"))
                entries.append({"who": "task" if scheduled else "you", "text": message.text,
                                "tools": []})
            elif isinstance(message, AIMessage):
                if message.tool_calls:
                    entries.append({"who": "tools", "text": "",
                                    "tools": [c["name"] for c in message.tool_calls]})
                if message.text:
                    entries.append({"who": "panager", "text": message.text, "tools": []})
        return entries[-HISTORY:]

    async def send(self, request: web.Request, session: WebSession) -> web.StreamResponse:
        """Run a command or a turn; stream it to scripts, redirect plain forms."""
        text = (await form_of(request)).get("text", "")
        streaming = request.headers.get("X-Requested-With") == "fetch"
        attachments = await self._attachments(request, session)
        if attachments:
            return await self._turn(request, session, text, streaming, attachments)
        if is_command(text):
            ctx = CommandContext(user=session.user, assistant=self.app.assistant,
                                 front_end="web")
            reply = await dispatch(ctx, text)
            shown = {"text": reply.text, "ok": reply.ok, "link": reply.link, "command": text}
            if streaming:
                return await self._stream(request, None, shown)
            return await self.index(request, session, reply=shown)
        return await self._turn(request, session, text, streaming, [])

    async def _attachments(self, request: web.Request, session: WebSession) -> list[Attachment]:
        """Files sent with the message (upload button, paste, drop), taken in."""
        media = self.app.deps.media
        posted = await request.post()
        uploads = [f for f in posted.getall("file", []) if isinstance(f, web.FileField)]
        uploads = [f for f in uploads if f.filename][:MAX_UPLOADS]
        if not uploads or media is None:
            return []
        cap = media.limits.max_bytes
        return [await media.take(session.user.id, f.filename, f.file.read(cap + 1),
                                 declared_type=f.content_type) for f in uploads]

    async def _turn(self, request: web.Request, session: WebSession, text: str, streaming: bool,
                    attachments: list[Attachment]) -> web.StreamResponse:
        notes = self.app.assistant.attachment_notes(session.user, attachments)
        if not text.strip() and not any(a.kind != "rejected" for a in attachments):
            shown = {"text": "\n".join(notes), "ok": False, "link": None}
            if streaming:
                return await self._stream(request, None, shown)
            raise web.HTTPSeeOther("/chat")
        emitter = self.app.emitter.child()
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        def forward(event) -> None:
            data = translate(event)
            if data is not None:
                queue.put_nowait(data)

        emitter.subscribe(forward)
        task = self.spawn(self.app.assistant.run_turn(session.user, text, emitter=emitter,
                                                      attachments=attachments))
        if not streaming:
            await asyncio.shield(task)
            raise web.HTTPSeeOther("/chat")
        return await self._stream(request, (task, queue), None, notes)

    async def _stream(self, request: web.Request, running, shown: dict | None,
                      notes: list[str] | None = None):
        response = web.StreamResponse(headers={**HEADERS, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        for line in notes or ():  # what was heard, what could not be used: first
            await response.write(frame("notice", {"text": line}))
        if running is None:
            await response.write(frame("done", shown or {}))
            return response
        task, queue = running
        while not (task.done() and queue.empty()):
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                await response.write(getter.result())
            else:
                getter.cancel()
        result = task.result()
        await response.write(frame("done", {"text": result.text, "ok": result.ok,
                                            "link": result.link}))
        return response
