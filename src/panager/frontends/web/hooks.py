"""`POST /hooks/<token>`: a person's webhook. The call is stored before the 202.

The token is the only credential (cookies are never read here); it is looked up by
its SHA-256 in one indexed query, so a wrong token answers 404 in the same time as a
revoked one, and the access log shows `/hooks/…` without it. The body is capped
before it is read. A worker then runs the hook's instruction for its owner with the
payload framed as outside content (agent/flows/jobs.py), exactly once.

A hook made with a signing secret takes only calls carrying `X-Panager-Timestamp`
(Unix seconds, within 5 minutes of now) and `X-Panager-Signature` (hex HMAC-SHA256 of
the timestamp followed by the body); a signature already accepted is refused. A hook
without one refuses a body identical to one it accepted in the last 10 minutes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from panager.services.schedules.system import (
    WebhookLimited,
    WebhookReplayed,
    call_digest,
    signature_problem,
)

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

HOOKS_PATH = "/hooks/"
MAX_BODY = 64 * 1024
NOT_FOUND = {"error": "not found"}


class WebhookEndpoint:
    """The handler of `POST /hooks/{token}`."""

    def __init__(self, app: App) -> None:
        self.app = app

    def routes(self) -> list[web.RouteDef]:
        """Its one route."""
        return [web.post(HOOKS_PATH + "{token}", self.call)]

    async def call(self, request: web.Request) -> web.Response:
        """Store the call for a worker, then 202; 404 unknown, 413 too big, 401 a bad or stale
        signature, 409 a replay, 429 too often."""
        service = self.app.deps.system_jobs
        if service is None:
            return web.json_response(NOT_FOUND, status=404)
        hook = await service.webhook_for(request.match_info["token"])
        if hook is None:
            return web.json_response(NOT_FOUND, status=404)
        if (request.content_length or 0) > MAX_BODY:
            return web.json_response({"error": f"body over {MAX_BODY} bytes"}, status=413)
        body = await request.content.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return web.json_response({"error": f"body over {MAX_BODY} bytes"}, status=413)
        owner = await self.app.deps.users.get(hook.user_id)
        if owner is None:
            return web.json_response(NOT_FOUND, status=404)
        signature = request.headers.get("X-Panager-Signature")
        if hook.signed and hook.signing_secret is None:
            log.warning("webhook %s: its signing secret does not open with PANAGER_SECRET_KEY; "
                        "calls are refused until the key is restored", hook.id)
            return web.json_response({"error": "this webhook cannot check signatures now"},
                                     status=503)
        if hook.signing_secret is not None:
            why = signature_problem(hook.signing_secret, request.headers.get(
                "X-Panager-Timestamp"), signature, body, self.app.deps.clock.now())
            if why:
                return web.json_response({"error": why}, status=401)
        try:
            job = await service.accept_call(
                hook, owner.timezone, body.decode("utf-8", "replace"),
                call_digest(hook, body, signature),
            )
        except WebhookReplayed:
            said = ("this signature was already used" if hook.signed
                    else "the same body was accepted in the last 10 minutes")
            return web.json_response({"error": said}, status=409)
        except WebhookLimited:
            return web.json_response(
                {"error": "too many calls; try again in a minute"},
                status=429,
                headers={"Retry-After": "60"},
            )
        return web.json_response({"accepted": True, "id": job.id}, status=202)


def log_path(path: str) -> str:
    """A request path as the access log may show it (no webhook token)."""
    return HOOKS_PATH + "…" if path.startswith(HOOKS_PATH) else path
