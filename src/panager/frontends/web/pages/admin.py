"""Admin pages: users, invites, usage per user, scheduler health, doctor, backups, MCP servers.

Every route is wrapped with `admin=True`: anyone but an admin gets 403.
Changes go through AccessService, the same as `panager users|invite`. The
doctor's checks run only on a POST carrying the CSRF token (they make model
calls), never on opening the page.
"""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from panager.doctor import run_checks
from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import render
from panager.services.access import AccessError, parse_duration
from panager.services.backup.scheduled import backup_status, same_filesystem
from panager.services.schedules.health import scheduler_health
from panager.services.usage import last_used, per_user
from panager.services.web_sessions import WebSession, WebSessionService

USAGE_DAYS = 30
DOCTOR_LIMIT = 10.0


class AdminPages:
    """/admin/*."""

    def __init__(self, app) -> None:
        self.app = app

    @property
    def access(self):
        """The access service."""
        return self.app.deps.access

    def routes(self, gate) -> list[web.RouteDef]:
        """The admin routes (all admin-only)."""
        def admin(handler):
            return gate.page(handler, admin=True)

        return [
            web.get("/admin", admin(self.users)),
            web.get("/admin/users", admin(self.users)),
            web.post("/admin/users/{id}/{action:allow|block}", admin(self.set_access)),
            web.get("/admin/invites", admin(self.invites)),
            web.post("/admin/invites", admin(self.create_invite)),
            web.post("/admin/invites/{code}/revoke", admin(self.revoke_invite)),
            web.get("/admin/usage", admin(self.usage)),
            web.get("/admin/scheduler", admin(self.scheduler)),
            web.get("/admin/doctor", admin(self.doctor_page)),
            web.post("/admin/doctor", admin(self.doctor)),
            web.get("/admin/backups", admin(self.backups)),
            web.get("/admin/mcp", admin(self.mcp)),
            web.post("/admin/mcp/{name}/approve", admin(self.approve_mcp)),
        ]

    async def users(self, request: web.Request, session: WebSession,
                    error: str | None = None) -> web.Response:
        """Everyone, with status and last activity."""
        users = await self.app.deps.users.list()
        model = await last_used(self.app.deps.usage) if self.app.deps.usage else {}
        web_seen = await WebSessionService(self.app.pool, self.app.clock).last_seen()
        activity = {u.id: max([t for t in (model.get(u.id), web_seen.get(u.id)) if t],
                              default=None) for u in users}
        context = page(session, "admin-users", "Users", request, users=users,
                       activity=activity, admin_ids=self.access.admin_ids)
        context["error"] = error
        return render("admin_users.html", status=400 if error else 200, **context)

    async def set_access(self, request: web.Request, session: WebSession) -> web.Response:
        """Allow or block one user."""
        try:
            user_id = int(request.match_info["id"])
        except ValueError:
            return not_found(session, "user")
        if await self.app.deps.users.get(user_id) is None:
            return not_found(session, "user")
        action = request.match_info["action"]
        if action == "block" and user_id == session.user.id:
            return await self.users(request, session, error="You cannot block yourself.")
        try:
            if action == "allow":
                await self.access.allow(user_id)
            else:
                await self.access.block(user_id)
        except AccessError as exc:
            return await self.users(request, session, error=str(exc))
        raise see_other("/admin/users", "allowed" if action == "allow" else "blocked")

    async def invites(self, request: web.Request, session: WebSession,
                      error: str | None = None) -> web.Response:
        """Invite codes with uses left and expiry."""
        invites = await self.access.invites()
        context = page(session, "admin-invites", "Invites", request, invites=invites,
                       now=self.app.clock.now(), mode=self.app.settings.access)
        context["error"] = error
        return render("admin_invites.html", status=400 if error else 200, **context)

    async def create_invite(self, request: web.Request, session: WebSession) -> web.Response:
        """A new code (uses, expiry as in `panager invite create`)."""
        form = await form_of(request)
        try:
            uses = int(form.get("uses") or 1)
            expires = parse_duration(form.get("expires") or "7d")
            await self.access.create_invite(session.user.id, max_uses=uses, expires_in=expires)
        except ValueError:
            return await self.invites(request, session, error="Uses must be a whole number.")
        except AccessError as exc:
            return await self.invites(request, session, error=str(exc))
        raise see_other("/admin/invites", "invited")

    async def revoke_invite(self, request: web.Request, session: WebSession) -> web.Response:
        """End a code now."""
        if await self.access.revoke_invite(request.match_info["code"]) is None:
            return not_found(session, "active invite")
        raise see_other("/admin/invites", "revoked")

    async def usage(self, request: web.Request, session: WebSession) -> web.Response:
        """Tokens per user over the last 30 days."""
        since = self.app.clock.now().date() - timedelta(days=USAGE_DAYS - 1)
        rows = await per_user(self.app.deps.usage, since) if self.app.deps.usage else []
        names = {u.id: u.name for u in await self.app.deps.users.list()}
        return render("admin_usage.html", **page(
            session, "admin-usage", "Usage per user", request, rows=rows, names=names,
            days=USAGE_DAYS, total=sum(r.total for r in rows)))

    async def scheduler(self, request: web.Request, session: WebSession) -> web.Response:
        """Due, late, missed and failed deliveries, per worker."""
        health = await scheduler_health(self.app.pool, self.app.clock.now())
        return render("admin_scheduler.html", **page(
            session, "admin-scheduler", "Scheduler health", request, health=health))

    async def doctor_page(self, request: web.Request, session: WebSession) -> web.Response:
        """The doctor page with its button; opening it runs nothing."""
        return render("admin_doctor.html", **page(
            session, "admin-doctor", "Doctor", request, results=None))

    async def doctor(self, request: web.Request, session: WebSession) -> web.Response:
        """The `panager doctor` checks, run now. A POST with the session's CSRF token: the
        checks call the model endpoint, so another site must not be able to set them off."""
        results = await run_checks(
            self.app.settings, limit=DOCTOR_LIMIT, mcp_hub=self.app.deps.mcp
        )
        return render("admin_doctor.html", **page(
            session, "admin-doctor", "Doctor", request, results=results))

    async def backups(self, request: web.Request, session: WebSession) -> web.Response:
        """The scheduled backup: last result, next run, and a warning when it is kept on the
        same filesystem as PANAGER_HOME."""
        config = self.app.settings.runtime.backup
        status = await backup_status(self.app.pool)
        same_disk = config is not None and same_filesystem(config.path, self.app.settings.home)
        return render("admin_backups.html", **page(
            session, "admin-backups", "Backups", request, config=config, job=status,
            same_disk=same_disk))

    async def mcp(self, request: web.Request, session: WebSession) -> web.Response:
        """MCP servers: state, tools offered, tools waiting for approval (no env or headers)."""
        hub = self.app.deps.mcp
        statuses = await hub.status() if hub is not None else []
        reviews = {s.name: hub.review(s.name) for s in statuses
                   if hub is not None and (s.awaiting_approval or s.first_listing)}
        return render("admin_mcp.html", **page(
            session, "admin-mcp", "MCP servers", request, statuses=statuses, reviews=reviews))

    async def approve_mcp(self, request: web.Request, session: WebSession) -> web.Response:
        """Approve a server's tools as it lists them now."""
        hub = self.app.deps.mcp
        name = request.match_info["name"]
        if hub is None or name not in hub.connections:
            return not_found(session, "MCP server")
        await hub.approve(name, f"web:{session.user.id}")
        raise see_other("/admin/mcp", "approved")
