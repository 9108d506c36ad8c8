"""Chat: the user's own conversation (the same thread as Discord and the terminal).

With JavaScript, the form posts with `X-Requested-With: fetch` and the
response is a `text/event-stream` of the turn's events (see frontends/web/sse.py), so
tool status and the answer appear as they happen. Without JavaScript the
post waits for the answer and redirects back to the page. The turn runs in a
background task: closing the tab does not cancel a running turn, and the answer
is in the thread when the page is opened again. A person has at most one web
turn running and one waiting behind it (`WebTurns`); more is a 429, and a
waiting turn whose page went away is dropped before it starts (nothing of it
was stored). Slash commands work as in Discord.

Approve/Deny forms for held calls come only from offers (services/proposals.py):
under an answer, those offered on it (`offer_key` of its message id); in the
"Waiting for your approval" panel, every pending one with its description, age
and expiry. Never from the text of a message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from langchain_core.messages import AIMessage, HumanMessage

from panager.agent.commands import CommandContext, dispatch, is_command
from panager.agent.graph.attachments import ATTACHMENTS_NAME, attached_text
from panager.agent.graph.confirm import APPROVE, DENY, offer_key, question_text
from panager.agent.turns import approvals
from panager.agent.turns.result import TurnResult
from panager.frontends.web.pages import form_of, page
from panager.frontends.web.render import HEADERS, message_page, render
from panager.frontends.web.sse import frame, translate
from panager.services.media.intake import Attachment
from panager.services.proposals import Offer
from panager.services.web_sessions import WebSession

log = logging.getLogger(__name__)
HISTORY = 40
MAX_UPLOADS = 4  # files taken from one message (frontends/web/server.py sizes requests for them)
TURNS_PER_PERSON = 2  # one running, one waiting
HEARTBEAT = 10.0  # seconds between keep-alive comments, which also notice a closed page
BUSY = ("One message is being answered and another is waiting; send this one when an "
        "answer arrives.")


class WebTurns:
    """Web turns per person in this process: at most TURNS_PER_PERSON at once, run one at a
    time; entries go when a person's last turn ends, so memory stays bounded."""

    def __init__(self) -> None:
        self._count: dict[int, int] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def claim(self, user_id: int) -> bool:
        """Take a slot for one more turn; False when the person already has the maximum."""
        if self._count.get(user_id, 0) >= TURNS_PER_PERSON:
            return False
        self._count[user_id] = self._count.get(user_id, 0) + 1
        self._locks.setdefault(user_id, asyncio.Lock())
        return True

    def release(self, user_id: int) -> None:
        """Give a slot back (the turn ended, failed or was dropped)."""
        left = self._count.get(user_id, 1) - 1
        if left > 0:
            self._count[user_id] = left
        else:
            self._count.pop(user_id, None)
            self._locks.pop(user_id, None)

    async def run(self, user_id: int, started: asyncio.Event,
                  turn: Callable[[], Awaitable[TurnResult]]) -> TurnResult:
        """Wait for the person's previous web turn, then run this one."""
        async with self._locks[user_id]:
            started.set()
            return await turn()


class ChatPage:
    """/chat: history, the message form and the streamed answer."""

    def __init__(self, app, spawn: Callable) -> None:
        self.app = app
        self.spawn = spawn  # runs a turn so that server shutdown waits for it
        self.turns = WebTurns()

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
        waiting = [
            {"id": p.id, "on": "", "description": p.description, "age": age, "left": left}
            for p, age, left in await approvals.waiting(self.app.assistant, session.user)
        ]
        return render("chat.html", **page(session, "chat", "Chat", request, entries=entries,
                                          reply=reply, question=asked, waiting=waiting))

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
        """Approve or Deny pressed on a held call: under the answer it was offered on (run
        once), in the waiting panel (shown there with its description: run once), else
        its description is shown again with the question."""
        form = await form_of(request)
        ident, on, where = form.get("proposal", ""), form.get("on", ""), form.get("where", "")
        assistant, user = self.app.assistant, session.user
        if form.get("verdict") == DENY:
            result = await assistant.deny_proposal(user, ident)
        elif where == "panel":
            result = await approvals.approve_shown(assistant, user, ident)
        else:
            result = await assistant.approve_proposal(user, ident, on or None)
        shown = {"text": result.text, "ok": result.ok, "link": result.link,
                 "command": "Deny" if form.get("verdict") == DENY else "Approve",
                 "offers": _offers(result.offers)}
        return await self.index(request, session, reply=shown)

    async def history(self, session: WebSession) -> list[dict]:
        """The thread's last messages as (who, text, tools) for the page."""
        assistant = self.app.assistant
        snapshot = await assistant.graph.aget_state(assistant.config_for(session.user))
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        offered = await self._offered(session, messages)
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
                offers = offered.get(offer_key(message.id), [])
                if message.text or offers:
                    entries.append({"who": "panager", "text": message.text, "tools": [],
                                    "offers": _offers(offers)})
        return entries[-HISTORY:]

    async def _offered(self, session: WebSession, messages: list) -> dict[str, list[Offer]]:
        """The held calls offered on each answer shown (by the answer's offer key)."""
        proposals = self.app.deps.proposals
        keys = [offer_key(m.id) for m in messages[-HISTORY * 2:]
                if isinstance(m, AIMessage) and m.id]
        if proposals is None or not keys:
            return {}
        return await proposals.offered(session.user.id, keys, self.app.deps.clock.now())

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
            shown = {"text": reply.text, "ok": reply.ok, "link": reply.link, "command": text,
                     "offers": _offers(reply.offers)}
            if streaming:  # a held call shown again: the page reloads to its panel
                done = {k: v for k, v in shown.items() if k != "offers"}
                return await self._stream(request, None, {**done, "question": bool(reply.offers)})
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
        user = session.user
        if not self.turns.claim(user.id):
            return message_page(429, "Please wait for the answer", BUSY, session=session)
        started = asyncio.Event()
        task = self.spawn(self.turns.run(
            user.id, started, lambda: self.app.assistant.run_turn(
                user, text, emitter=emitter, attachments=attachments)))
        task.add_done_callback(lambda _: self.turns.release(user.id))
        if not streaming:
            return await self._plain_result(request, session, await asyncio.shield(task), text,
                                            attachments)
        return await self._stream(request, (task, queue, started), None, notes)

    async def _plain_result(self, request: web.Request, session: WebSession, result,
                            text: str, attachments: list[Attachment]) -> web.Response:
        """A plain form's turn: an answer shows in the conversation (redirect); a refusal or
        a failure is shown on the page, and a message refused before it was kept (too long)
        is given back in the box, so nothing typed is lost."""
        if result.ok:
            raise web.HTTPSeeOther("/chat")
        refused = self.app.assistant.check_message(text, attachments) is not None
        shown = {"text": result.text, "ok": False, "link": result.link, "command": "",
                 "draft": text if refused else ""}
        return await self.index(request, session, reply=shown)

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
        task, queue, started = running
        try:
            while not (task.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, timeout=HEARTBEAT,
                                   return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    await response.write(getter.result())
                    continue
                getter.cancel()
                if not task.done():
                    await response.write(b": waiting\n\n")  # raises once the page is gone
        except (ConnectionError, asyncio.CancelledError):
            if not started.is_set():
                task.cancel()  # still waiting behind the previous turn: drop it
            raise
        result = task.result()
        await response.write(frame("done", {"text": result.text, "ok": result.ok,
                                            "link": result.link,
                                            "question": result.question is not None}))
        return response


def _offers(offers) -> list[dict]:  # a sequence of Offer
    """Offers as the template draws their forms (numbered when there are several)."""
    many = len(offers) > 1
    return [{"id": o.id, "on": o.on, "description": o.description,
             "label": f" {n}" if many else ""} for n, o in enumerate(offers, 1)]
