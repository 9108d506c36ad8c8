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

from panager.agent.commands import CommandContext, dispatch, is_command
from panager.agent.confirm import APPROVE, DENY, proposal_ids, question_text
from panager.services.web_sessions import WebSession
from panager.web.pages import form_of, page
from panager.web.render import HEADERS, render
from panager.web.sse import frame, translate

log = logging.getLogger(__name__)
HISTORY = 40


class ChatPage:
    """/chat: history, the message form and the streamed answer."""

    def __init__(self, app, spawn: Callable) -> None:
        self.app = app
        self.spawn = spawn  # runs a turn so that server shutdown waits for it

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [web.get("/chat", gate.page(self.index)), web.post("/chat", gate.page(self.send)),
                web.post("/chat/answer", gate.page(self.answer)),
                web.post("/chat/approve", gate.page(self.approve))]

    async def index(self, request: web.Request, session: WebSession,
                    reply: dict | None = None) -> web.Response:
        """The conversation so far, an open question with its buttons, and the form."""
        entries = await self.history(session)
        question = await self.app.assistant.pending_question(session.user)
        asked = None
        if question is not None:
            asked = {"key": question.key, "text": question_text(question),
                     "calls": [{"n": n, "tool": c.tool} for n, c in enumerate(question.calls)]}
        return render("chat.html", **page(session, "chat", "Chat", request, entries=entries,
                                          reply=reply, question=asked))

    async def answer(self, request: web.Request, session: WebSession) -> web.Response:
        """Approve/Deny pressed on the open question: resume the turn, then show the page.

        `which` is a call's position (that call approved, the others denied) or "all"."""
        form = await form_of(request)
        assistant = self.app.assistant
        question = await assistant.pending_question(session.user)
        key, which, verdict = form.get("key", ""), form.get("which", ""), form.get("verdict")
        if question is None or question.key != key:
            shown = {"text": "That question is no longer open.", "ok": False, "command": ""}
            return await self.index(request, session, reply=shown)
        if which == "all":
            decisions = {c.id: APPROVE if verdict == APPROVE else DENY for c in question.calls}
        else:
            decisions = {c.id: APPROVE if str(n) == which and verdict == APPROVE else DENY
                         for n, c in enumerate(question.calls)}
        task = self.spawn(assistant.answer(session.user, key, decisions))
        result = await asyncio.shield(task)
        if not result.ok:
            shown = {"text": result.text, "ok": False, "command": ""}
            return await self.index(request, session, reply=shown)
        raise web.HTTPSeeOther("/chat")

    async def approve(self, request: web.Request, session: WebSession) -> web.Response:
        """Approve pressed on a held call of a scheduled answer: run it once."""
        ident = (await form_of(request)).get("proposal", "")
        result = await self.app.assistant.approve_proposal(session.user, ident)
        shown = {"text": result.text, "ok": result.ok, "link": result.link,
                 "command": f"/approve {ident}"}
        return await self.index(request, session, reply=shown)

    async def history(self, session: WebSession) -> list[dict]:
        """The thread's last messages as (who, text, tools) for the page."""
        assistant = self.app.assistant
        snapshot = await assistant.graph.aget_state(assistant.config_for(session.user))
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        entries: list[dict] = []
        for message in messages:
            if isinstance(message, HumanMessage):
                scheduled = bool(message.additional_kwargs.get("panager_system_trigger"))
                entries.append({"who": "task" if scheduled else "you", "text": message.text,
                                "tools": []})
            elif isinstance(message, AIMessage):
                if message.tool_calls:
                    entries.append({"who": "tools", "text": "",
                                    "tools": [c["name"] for c in message.tool_calls]})
                if message.text:
                    entries.append({"who": "panager", "text": message.text, "tools": [],
                                    "proposals": proposal_ids(message.text)})
        return entries[-HISTORY:]

    async def send(self, request: web.Request, session: WebSession) -> web.StreamResponse:
        """Run a command or a turn; stream it to scripts, redirect plain forms."""
        text = (await form_of(request)).get("text", "")
        streaming = request.headers.get("X-Requested-With") == "fetch"
        if is_command(text):
            ctx = CommandContext(user=session.user, assistant=self.app.assistant,
                                 front_end="web")
            reply = await dispatch(ctx, text)
            shown = {"text": reply.text, "ok": reply.ok, "link": reply.link, "command": text}
            if streaming:
                return await self._stream(request, None, shown)
            return await self.index(request, session, reply=shown)
        emitter = self.app.emitter.child()
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        def forward(event) -> None:
            data = translate(event)
            if data is not None:
                queue.put_nowait(data)

        emitter.subscribe(forward)
        task = self.spawn(self.app.assistant.run_turn(session.user, text, emitter=emitter))
        if not streaming:
            await asyncio.shield(task)
            raise web.HTTPSeeOther("/chat")
        return await self._stream(request, (task, queue), None)

    async def _stream(self, request: web.Request, running, shown: dict | None):
        response = web.StreamResponse(headers={**HEADERS, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
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
                                            "link": result.link,
                                            "question": result.question is not None}))
        return response
