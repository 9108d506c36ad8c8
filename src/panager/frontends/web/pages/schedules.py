"""Schedules: week and month views, the list, and create/edit/pause/resume/cancel.

Every change goes through `ScheduleService` — the same validation as the
schedule tools, so a bad time, zone or rule gets the tools' words. The form's
"Preview" button (no JavaScript needed) describes the recurrence and lists the
next five firings before anything is saved.
"""

from __future__ import annotations

import calendar as calmod
from datetime import date, timedelta

from aiohttp import web

from panager.agent.commands.jobs import parse_clock
from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import render
from panager.services.schedules.calendar import grid, preview
from panager.services.schedules.recurrence import ScheduleInputError, parse_zone
from panager.services.schedules.system import MAX_HEARTBEAT
from panager.services.schedules.types import Schedule
from panager.services.web_sessions import WebSession

VIEWS = ("week", "month")
KIND_CHOICES = (("reminder", "Reminder (sends the text as written)"),
                ("agent", "Task (the assistant runs it and sends the answer)"))
REPEAT_EXAMPLES = ("FREQ=DAILY", "FREQ=WEEKLY;BYDAY=MO", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
                   "FREQ=MONTHLY;BYMONTHDAY=1", "FREQ=MONTHLY;BYDAY=-1FR")


class SchedulesPage:
    """/schedules and its forms."""

    def __init__(self, app) -> None:
        self.app = app

    @property
    def service(self):
        """The schedule service."""
        return self.app.deps.scheduler

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [
            web.get("/schedules", gate.page(self.index)),
            web.get("/schedules/new", gate.page(self.new)),
            web.post("/schedules/new", gate.page(self.create)),
            web.post("/schedules/heartbeat", gate.page(self.heartbeat)),
            web.get("/schedules/{id}", gate.page(self.edit)),
            web.post("/schedules/{id}", gate.page(self.save)),
            web.post("/schedules/{id}/{action:pause|resume|cancel}", gate.page(self.act)),
        ]

    async def index(self, request: web.Request, session: WebSession) -> web.Response:
        """Calendar view (week or month) and the list."""
        user = session.user
        zone, now = user.zone, self.app.deps.clock.now()
        view = request.query.get("view", "week")
        view = view if view in VIEWS else "week"
        anchor = _parse_day(request.query.get("start")) or now.astimezone(zone).date()
        schedules = await self.service.list_all(user.id)
        jobs = self.app.deps.system_jobs
        heartbeat = await jobs.heartbeat(user.id) if jobs is not None else None
        hooks = await jobs.webhooks(user.id) if jobs is not None else None
        first, days, prev_day, next_day = _window(view, anchor)
        slots = grid(schedules, first, days, zone)
        return render("schedules.html", **page(
            session, "schedules", "Schedules", request, schedules=schedules, view=view,
            weeks=_weeks(first, days, slots), anchor=anchor, today=now.astimezone(zone).date(),
            prev_day=prev_day, next_day=next_day, zone=zone, now=now, heartbeat=heartbeat,
            webhooks=hooks,
            title_range=_range_title(view, first, days)))

    async def new(self, request: web.Request, session: WebSession) -> web.Response:
        """An empty form."""
        return self._form(request, session, None, {"timezone": session.user.timezone,
                                                   "kind": "reminder"})

    async def create(self, request: web.Request, session: WebSession) -> web.Response:
        """Preview or save a new schedule."""
        form = await form_of(request)
        problem = _check_zone(form)
        if problem or form.get("action") != "save":
            return self._form(request, session, None, form, error=problem)
        try:
            await self.service.create(session.user, form.get("message", ""), form.get("at", ""),
                                      kind=form.get("kind", "reminder"),
                                      repeat=form.get("repeat") or None,
                                      timezone=form.get("timezone"))
        except ScheduleInputError as exc:
            return self._form(request, session, None, form, error=str(exc), status=400)
        raise see_other("/schedules", "created")

    async def heartbeat(self, request: web.Request, session: WebSession) -> web.Response:
        """Turn the heartbeat on (interval, active hours) or off — the /heartbeat command."""
        jobs = self.app.deps.system_jobs
        if jobs is None:
            return not_found(session, "heartbeat")
        form = await form_of(request)
        if form.get("action") == "off":
            await jobs.end(session.user.id, "heartbeat")
            raise see_other("/schedules", "heartbeat-off")
        try:
            every = _every(form.get("every", "30") or "30")
            start = parse_clock(form.get("start", "08:00"))
            end = parse_clock(form.get("end", "22:00"))
            await jobs.set_heartbeat(session.user, every, start, end)
        except (ValueError, ScheduleInputError):
            raise see_other("/schedules", "heartbeat-invalid") from None
        raise see_other("/schedules", "heartbeat-on")

    async def edit(self, request: web.Request, session: WebSession) -> web.Response:
        """The form for one of the user's schedules (others' ids: 404)."""
        schedule = await self.service.get(session.user.id, request.match_info["id"])
        if schedule is None:
            return not_found(session, "schedule")
        return self._form(request, session, schedule, _form_values(schedule))

    async def save(self, request: web.Request, session: WebSession) -> web.Response:
        """Preview or save changes to one of the user's schedules."""
        schedule = await self.service.get(session.user.id, request.match_info["id"])
        if schedule is None:
            return not_found(session, "schedule")
        form = await form_of(request)
        problem = _check_zone(form)
        if problem or form.get("action") != "save":
            return self._form(request, session, schedule, form, error=problem)
        try:
            changed = await self.service.update(
                session.user, schedule.id, form.get("message", ""), form.get("at", ""),
                kind=form.get("kind", "reminder"), repeat=form.get("repeat") or None,
                timezone=form.get("timezone"))
        except ScheduleInputError as exc:
            return self._form(request, session, schedule, form, error=str(exc), status=400)
        if changed is None:
            return not_found(session, "schedule")
        raise see_other("/schedules", "saved")

    async def act(self, request: web.Request, session: WebSession) -> web.Response:
        """Pause, resume or cancel one of the user's schedules."""
        action, schedule_id = request.match_info["action"], request.match_info["id"]
        method = {"pause": self.service.pause, "resume": self.service.resume,
                  "cancel": self.service.cancel}[action]
        try:
            changed = await method(session.user.id, schedule_id)
        except ScheduleInputError as exc:
            schedule = await self.service.get(session.user.id, schedule_id)
            if schedule is None:
                return not_found(session, "schedule")
            return self._form(request, session, schedule, _form_values(schedule),
                              error=str(exc), status=409)
        if changed is None:
            return not_found(session, "schedule")
        done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
        raise see_other("/schedules", done)

    def _form(self, request: web.Request, session: WebSession, schedule: Schedule | None,
              values: dict, *, error: str | None = None, status: int = 200) -> web.Response:
        """The create/edit form, with the preview of what is typed in (or its error)."""
        shown = None
        if error is None and values.get("at"):
            try:
                zone = parse_zone(values.get("timezone") or session.user.timezone)
                shown = preview(values["at"], values.get("repeat") or None, zone,
                                self.app.deps.clock.now())
            except ScheduleInputError as exc:
                error, status = str(exc), 400 if values.get("action") else 200
        context = page(session, "schedules", "Edit schedule" if schedule else "New schedule",
                       request, schedule=schedule, values=values, preview=shown,
                       kinds=KIND_CHOICES, examples=REPEAT_EXAMPLES)
        context["error"] = error
        return render("schedule_form.html", status=status, **context)


def _check_zone(form: dict) -> str | None:
    try:
        parse_zone(form.get("timezone") or "")
    except ScheduleInputError as exc:
        return str(exc)
    return None


def _form_values(schedule: Schedule) -> dict:
    when = schedule.next_run_at or schedule.anchor_local.replace(tzinfo=schedule.zone)
    local = when.astimezone(schedule.zone)
    if schedule.rrule:
        local = schedule.anchor_local  # a series is edited from its first wall time
    return {"message": schedule.message, "at": local.strftime("%Y-%m-%dT%H:%M"),
            "repeat": schedule.rrule or "", "kind": schedule.kind,
            "timezone": schedule.timezone}


def _parse_day(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


def _window(view: str, anchor: date) -> tuple[date, int, date, date]:
    """(first day shown, number of days, previous anchor, next anchor)."""
    if view == "week":
        first = anchor - timedelta(days=anchor.weekday())
        return first, 7, first - timedelta(days=7), first + timedelta(days=7)
    month_start = anchor.replace(day=1)
    first = month_start - timedelta(days=month_start.weekday())
    days_in = calmod.monthrange(anchor.year, anchor.month)[1]
    last = month_start + timedelta(days=days_in - 1)
    days = (last - first).days + 1
    days += (7 - days % 7) % 7
    prev_month = (month_start - timedelta(days=1)).replace(day=1)
    return first, days, prev_month, month_start + timedelta(days=days_in)


def _weeks(first: date, days: int, slots: dict) -> list[list[tuple[date, list]]]:
    cells = [(first + timedelta(days=i), slots.get(first + timedelta(days=i), []))
             for i in range(days)]
    return [cells[i:i + 7] for i in range(0, len(cells), 7)]


def _range_title(view: str, first: date, days: int) -> str:
    if view == "month":
        middle = first + timedelta(days=days // 2)
        return f"{calmod.month_name[middle.month]} {middle.year}"
    last = first + timedelta(days=days - 1)
    return f"{first:%d %b} – {last:%d %b %Y}"


def _every(text: str) -> timedelta:
    """The form's interval in minutes; beyond a day is refused before it can overflow."""
    minutes = int(text)
    if not 0 < minutes <= MAX_HEARTBEAT // timedelta(minutes=1):
        raise ScheduleInputError(f"{minutes} minutes is not a heartbeat interval.")
    return timedelta(minutes=minutes)
