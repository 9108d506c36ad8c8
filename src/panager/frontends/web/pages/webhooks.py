"""Webhooks on the Schedules page: the list there (never an address again), the form that
makes one and shows its address — and a signed one's signing secret — exactly once, and
revoke. `/webhook new` in a chat links to the form filled in through the query string (a
name and an instruction are not secret), so no secret is ever written into a chat."""

from __future__ import annotations

import logging

from aiohttp import web

from panager.agent.commands.jobs import WEBHOOK_FORM_PATH
from panager.frontends.web.hooks import HOOKS_PATH
from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import render
from panager.services.schedules.recurrence import ScheduleInputError
from panager.services.schedules.system import (
    SIGNING_HOWTO,
    WEBHOOK_INSTRUCTION_CHARS,
    WEBHOOK_NAME_CHARS,
)
from panager.services.web_sessions import WebSession

log = logging.getLogger(__name__)

TICKED = ("1", "on")


class WebhooksPage:
    """/schedules/webhooks/…: create (the address shown once) and revoke."""

    def __init__(self, app) -> None:
        self.app = app

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [
            web.get(WEBHOOK_FORM_PATH, gate.page(self.new)),
            web.post(WEBHOOK_FORM_PATH, gate.page(self.create)),
            web.post("/schedules/webhooks/{name}/revoke", gate.page(self.revoke)),
        ]

    async def new(self, request: web.Request, session: WebSession) -> web.Response:
        """The form, filled in from the query (what `/webhook new` links to)."""
        query = request.query
        return self._form(session, {"name": query.get("name", ""),
                                    "instruction": query.get("instruction", ""),
                                    "signed": query.get("signed", "") in TICKED})

    async def create(self, request: web.Request, session: WebSession) -> web.Response:
        """Make the hook and show its address (and signing secret) this once; a bad name or
        instruction gets the form back with what was typed and nothing stored."""
        jobs = self.app.deps.system_jobs
        if jobs is None:
            return not_found(session, "webhook")
        form = await form_of(request)
        values = {"name": form.get("name", ""), "instruction": form.get("instruction", ""),
                  "signed": form.get("signed", "") in TICKED}
        try:
            hook, token = await jobs.create_webhook(session.user, values["name"],
                                                    values["instruction"],
                                                    signed=values["signed"])
        except ScheduleInputError as exc:
            return self._form(session, values, error=str(exc), status=400)
        log.info("webhook %s created for user %s", hook.id, session.user.id)
        url = f"{self.app.settings.public_url.rstrip('/')}{HOOKS_PATH}{token}"
        return render("webhook_created.html", **page(
            session, "schedules", "Webhook created", hook=hook, url=url, howto=SIGNING_HOWTO))

    async def revoke(self, request: web.Request, session: WebSession) -> web.Response:
        """End one of the person's hooks by name (another person's name: 404)."""
        jobs = self.app.deps.system_jobs
        if jobs is None or not await jobs.revoke_webhook(session.user.id,
                                                         request.match_info["name"]):
            return not_found(session, "webhook")
        raise see_other("/schedules", "webhook-revoked")

    def _form(self, session: WebSession, values: dict, *, error: str | None = None,
              status: int = 200) -> web.Response:
        jobs = self.app.deps.system_jobs
        context = page(session, "schedules", "New webhook", values=values,
                       name_chars=WEBHOOK_NAME_CHARS, instruction_chars=WEBHOOK_INSTRUCTION_CHARS,
                       sealing=jobs is not None and jobs.sealer is not None)
        context["error"] = error
        return render("webhook_form.html", status=status, **context)
