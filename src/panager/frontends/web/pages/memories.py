"""Memories: the same hybrid search the assistant uses, edit (re-embedded), delete, export."""

from __future__ import annotations

import json

from aiohttp import web

from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import HEADERS, message_page, render
from panager.services.memory.service import MemoryHit, MemoryUnavailable, seen_digest
from panager.services.memory.text import MemoryInputError
from panager.services.profile import MAX_PROFILE_CHARS, SECTIONS, ProfileInputError
from panager.services.web_sessions import WebSession

PAGE_SIZE = 50
SEARCH_LIMIT = 20


class MemoriesPage:
    """/memories and its forms."""

    def __init__(self, app) -> None:
        self.app = app

    @property
    def service(self):
        """The memory service."""
        return self.app.deps.memory

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [
            web.get("/memories", gate.page(self.index)),
            web.get("/memories/export.json", gate.page(self.export)),
            web.get("/memories/{id}", gate.page(self.edit)),
            web.post("/memories/{id}", gate.page(self.save)),
            web.post("/memories/{id}/delete", gate.page(self.delete)),
            web.post("/profile/proposals/{id}/{action:approve|reject}", gate.page(self.decide)),
            web.post("/profile/{section}", gate.page(self.save_profile)),
        ]

    async def index(self, request: web.Request, session: WebSession) -> web.Response:
        """Search results for ?q=, else the newest memories a page at a time."""
        user_id = session.user.id
        query = request.query.get("q", "").strip()
        offset = _int(request.query.get("offset"))
        error, hits = None, []
        try:
            if query:
                hits = await self.service.search(user_id, query, SEARCH_LIMIT)
            else:
                hits = await self.service.list(user_id, PAGE_SIZE, offset)
        except (MemoryInputError, MemoryUnavailable) as exc:
            error = str(exc)
        total = await self.service.count(user_id)
        profiles = self.app.deps.profiles
        profile = await profiles.get(user_id) if profiles is not None else None
        proposals = await profiles.pending(user_id) if profiles is not None else []
        context = page(session, "memories", "Memories", request, hits=hits, query=query,
                       offset=offset, total=total, page_size=PAGE_SIZE, profile=profile,
                       proposals=proposals, sections=SECTIONS, profile_cap=MAX_PROFILE_CHARS)
        context["error"] = error
        return render("memories.html", **context)

    async def save_profile(self, request: web.Request, session: WebSession) -> web.Response:
        """Replace one profile section (the same rules as profile_update)."""
        profiles = self.app.deps.profiles
        section = request.match_info["section"]
        if profiles is None or section not in SECTIONS:
            return not_found(session, "profile section")
        form = await form_of(request)
        try:
            await profiles.update(session.user.id, section, form.get("text", ""))
        except ProfileInputError as exc:
            return message_page(400, "Profile not saved", str(exc), session=session)
        raise see_other("/memories", "profile-saved")

    async def decide(self, request: web.Request, session: WebSession) -> web.Response:
        """Approve (apply) or reject a suggested profile change."""
        profiles = self.app.deps.profiles
        if profiles is None:
            return not_found(session, "profile change")
        approve = request.match_info["action"] == "approve"
        try:
            done = await profiles.decide(session.user.id, request.match_info["id"], approve)
        except ProfileInputError as exc:
            return message_page(400, "Profile change not applied", str(exc), session=session)
        if done is None:
            return not_found(session, "profile change")
        raise see_other("/memories", "profile-approved" if approve else "profile-rejected")

    async def _mine(self, request: web.Request, session: WebSession) -> MemoryHit | None:
        try:
            return await self.service.get(session.user.id, request.match_info["id"])
        except MemoryInputError:
            return None  # not even an id: the same 404 as someone else's

    async def edit(self, request: web.Request, session: WebSession) -> web.Response:
        """The form for one of the user's memories."""
        memory = await self._mine(request, session)
        if memory is None:
            return not_found(session, "memory")
        return render("memory_form.html", **page(session, "memories", "Edit memory", request,
                                                 memory=memory, values=memory.__dict__,
                                                 seen=seen_digest(memory.content)))

    async def save(self, request: web.Request, session: WebSession) -> web.Response:
        """Store the new text (it is embedded again)."""
        memory = await self._mine(request, session)
        if memory is None:
            return not_found(session, "memory")
        form = await form_of(request)
        try:
            changed = await self.service.edit(session.user.id, memory.id,
                                              form.get("content", ""), form.get("category"),
                                              seen=form.get("seen"))
        except (MemoryInputError, MemoryUnavailable) as exc:
            context = page(session, "memories", "Edit memory", request, memory=memory,
                           values=form, seen=form.get("seen"))
            context["error"] = str(exc)
            return render("memory_form.html", status=400, **context)
        if changed is None:
            return not_found(session, "memory")
        raise see_other("/memories", "saved")

    async def delete(self, request: web.Request, session: WebSession) -> web.Response:
        """Forget one memory."""
        memory = await self._mine(request, session)
        if memory is None or await self.service.forget(session.user.id, memory.id) is None:
            return not_found(session, "memory")
        raise see_other("/memories", "deleted")

    async def export(self, request: web.Request, session: WebSession) -> web.Response:
        """All of the user's memories as a JSON download."""
        user_id = session.user.id
        hits = await self.service.list(user_id, max(await self.service.count(user_id), 1))
        body = json.dumps({"user": session.user.username, "count": len(hits),
                           "memories": [_exported(h) for h in hits]}, ensure_ascii=False)
        headers = {**HEADERS, "Content-Disposition": 'attachment; filename="memories.json"'}
        return web.Response(text=body, content_type="application/json", headers=headers)


def _exported(hit: MemoryHit) -> dict:
    return {"id": hit.id, "content": hit.content, "category": hit.category,
            "source": hit.source, "created_at": hit.created_at.isoformat(),
            "updated_at": hit.updated_at.isoformat()}


def _int(text: str | None) -> int:
    try:
        return max(int(text or 0), 0)
    except ValueError:
        return 0
