"""Home: the next reminders and tasks, today's calendar, tokens this week."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from panager.agent.tools import build_tools
from panager.frontends.web.pages import page
from panager.frontends.web.render import render
from panager.services.usage import daily
from panager.services.web_sessions import WebSession

log = logging.getLogger(__name__)
NEXT_COUNT = 8
CALENDAR_TIMEOUT = 5.0


class HomePage:
    """GET /."""

    def __init__(self, app) -> None:
        self.app = app

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [web.get("/", gate.page(self.home))]

    async def home(self, request: web.Request, session: WebSession) -> web.Response:
        """The overview."""
        user, deps = session.user, self.app.deps
        schedules = [s for s in await deps.scheduler.list(user.id) if s.status == "active"]
        week = await daily(deps.usage, user, 7) if deps.usage is not None else []
        events = await self._today_events(session)
        return render("home.html", **page(
            session, "home", "Home", request, schedules=schedules[:NEXT_COUNT],
            more=max(len(schedules) - NEXT_COUNT, 0), events=events,
            week_tokens=sum(d.total for d in week), zone=user.zone,
            now=deps.clock.now()))

    async def _today_events(self, session: WebSession) -> dict | None:
        """Today's events through the calendar tool (None when Google is not linked)."""
        deps, user = self.app.deps, session.user
        google = deps.accounts.oauth_link("google") if deps.accounts is not None else None
        if google is None:
            return None
        account = await google.linked(user.id)
        if account is None or not account.connected:
            return None
        tool = next((t for t in build_tools(deps, user) if t.name == "calendar_list_events"),
                    None)
        if tool is None:
            return None
        today = deps.clock.now().astimezone(user.zone).date()
        try:
            async with asyncio.timeout(CALENDAR_TIMEOUT):
                day = today.isoformat()  # a bare date covers the whole local day
                result = await tool.ainvoke({"start": day, "end": day})
        except Exception as exc:
            log.warning("home page: calendar not loaded (%s)", type(exc).__name__)
            return {"error": "Your calendar could not be loaded just now.", "events": []}
        return result if isinstance(result, dict) else {"events": []}
