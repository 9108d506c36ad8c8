"""CalDAV over the door: discovery, calendars, calendar-query REPORTs, PUT and DELETE.

The request bodies are built with ElementTree from RFC 4918 / RFC 4791 names and
the answers parsed with defusedxml (no entity expansion): four small documents —
a PROPFIND for the principal, one for the calendar home, one listing the
calendars, and a calendar-query REPORT with a time range. Why not the `caldav`
library: docs/calendars.md ("Why not the caldav library").
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import unquote

from defusedxml import ElementTree as SafeET

from panager.providers.caldav.door import Answer, CalDavError, Door
from panager.services.web.guard import Refused

DAV = "DAV:"
CALDAV = "urn:ietf:params:xml:ns:caldav"
APPLE = "http://apple.com/ns/ical/"
CS = "http://calendarserver.org/ns/"
ET.register_namespace("d", DAV)
ET.register_namespace("c", CALDAV)
ET.register_namespace("a", APPLE)
ET.register_namespace("cs", CS)
ICS_TYPE = "text/calendar; charset=utf-8"


def _q(ns: str, name: str) -> str:
    return f"{{{ns}}}{name}"


@dataclass(frozen=True)
class DavCalendar:
    """One calendar collection as the server describes it (display name is outside text)."""

    url: str
    name: str
    writable: bool
    color: str | None = None


@dataclass(frozen=True)
class DavObject:
    """One calendar object resource: where it is, its ETag, its iCalendar text."""

    url: str
    etag: str | None
    ics: str


def _propfind(*props: tuple[str, str]) -> bytes:
    root = ET.Element(_q(DAV, "propfind"))
    prop = ET.SubElement(root, _q(DAV, "prop"))
    for ns, name in props:
        ET.SubElement(prop, _q(ns, name))
    return ET.tostring(root, xml_declaration=True, encoding="utf-8")


def _ical_utc(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def calendar_query(start: dt.datetime, end: dt.datetime) -> bytes:
    """RFC 4791 §7.8: every VEVENT overlapping [start, end), with its ETag and data."""
    root = ET.Element(_q(CALDAV, "calendar-query"))
    prop = ET.SubElement(root, _q(DAV, "prop"))
    ET.SubElement(prop, _q(DAV, "getetag"))
    ET.SubElement(prop, _q(CALDAV, "calendar-data"))
    outer = ET.SubElement(ET.SubElement(root, _q(CALDAV, "filter")), _q(CALDAV, "comp-filter"))
    outer.set("name", "VCALENDAR")
    inner = ET.SubElement(outer, _q(CALDAV, "comp-filter"))
    inner.set("name", "VEVENT")
    span = ET.SubElement(inner, _q(CALDAV, "time-range"))
    span.set("start", _ical_utc(start))
    span.set("end", _ical_utc(end))
    return ET.tostring(root, xml_declaration=True, encoding="utf-8")


@dataclass
class _Response:
    href: str
    props: dict[str, ET.Element]  # "{ns}name" -> element, from 200 propstats only


def _multistatus(answer: Answer) -> list[_Response]:
    if answer.status != 207:
        raise CalDavError(f"The calendar server answered HTTP {answer.status}, not a listing.")
    try:
        root = SafeET.fromstring(answer.body)
    except (ET.ParseError, ValueError) as exc:
        raise CalDavError("The calendar server sent a listing that is not valid XML.") from exc
    found: list[_Response] = []
    for response in root.iter(_q(DAV, "response")):
        href = response.findtext(_q(DAV, "href"), default="").strip()
        props: dict[str, ET.Element] = {}
        for propstat in response.iter(_q(DAV, "propstat")):
            status = propstat.findtext(_q(DAV, "status"), default="")
            if " 200 " not in f"{status} ":
                continue
            for prop in propstat.iter(_q(DAV, "prop")):
                for child in prop:
                    props[child.tag] = child
        found.append(_Response(href, props))
    return found


def _href_in(element: ET.Element | None) -> str | None:
    if element is None:
        return None
    text = element.findtext(_q(DAV, "href"))
    return text.strip() if text else None


class CalDav:
    """The CalDAV requests Panager makes, for one account, through its `Door`."""

    def __init__(self, door: Door) -> None:
        self.door = door

    async def _propfind(self, url: str, depth: str, *props: tuple[str, str]) -> list[_Response]:
        answer = await self.door.request(
            "PROPFIND",
            url,
            body=_propfind(*props),
            headers={"Depth": depth, "Content-Type": "application/xml; charset=utf-8"},
        )
        return _multistatus(answer)

    async def principal(self) -> str:
        """The current user's principal URL: from the URL entered, else `/.well-known/caldav`."""
        entered = str(self.door.entered)
        candidates = [entered]
        if self.door.entered.target in ("/", ""):
            candidates = [self.door.resolve(entered, "/.well-known/caldav"), entered]
        last: CalDavError | None = None
        for url in candidates:
            try:
                answer = await self.door.request(
                    "PROPFIND",
                    url,
                    body=_propfind((DAV, "current-user-principal")),
                    headers={"Depth": "0", "Content-Type": "application/xml; charset=utf-8"},
                )
                for response in _multistatus(answer):
                    href = _href_in(response.props.get(_q(DAV, "current-user-principal")))
                    if href:
                        return self.door.resolve(answer.url, href)
            except Refused:
                raise
            except CalDavError as exc:
                if type(exc) is not CalDavError:  # authentication, time-out: stop here
                    raise
                last = exc
        raise last or CalDavError(
            f"{self.door.where} did not say where your calendars are; enter the full CalDAV "
            "address your provider gives."
        )

    async def home(self, principal: str) -> str:
        for response in await self._propfind(principal, "0", (CALDAV, "calendar-home-set")):
            href = _href_in(response.props.get(_q(CALDAV, "calendar-home-set")))
            if href:
                return self.door.resolve(principal, href)
        raise CalDavError(f"{self.door.where} did not say where your calendars are kept.")

    async def calendars(self) -> list[DavCalendar]:
        """Every calendar collection holding events, as the server lists them."""
        home = await self.home(await self.principal())
        found: list[DavCalendar] = []
        for response in await self._propfind(
            home,
            "1",
            (DAV, "resourcetype"),
            (DAV, "displayname"),
            (DAV, "current-user-privilege-set"),
            (CALDAV, "supported-calendar-component-set"),
            (APPLE, "calendar-color"),
        ):
            kind = response.props.get(_q(DAV, "resourcetype"))
            if kind is None or kind.find(_q(CALDAV, "calendar")) is None:
                continue
            components = response.props.get(_q(CALDAV, "supported-calendar-component-set"))
            if components is not None and not any(
                comp.get("name", "").upper() == "VEVENT" for comp in components
            ):
                continue  # a task list or a journal
            url = self.door.resolve(home, response.href)
            shown = response.props.get(_q(DAV, "displayname"))
            name = shown.text if shown is not None else None
            color = response.props.get(_q(APPLE, "calendar-color"))
            found.append(
                DavCalendar(
                    url=url,
                    name=(name or "").strip() or unquote(url.rstrip("/").rsplit("/", 1)[-1]),
                    writable=_writable(response.props.get(_q(DAV, "current-user-privilege-set"))),
                    color=(color.text or "").strip() or None if color is not None else None,
                )
            )
        return found

    async def events(
        self, calendar_url: str, start: dt.datetime, end: dt.datetime
    ) -> list[DavObject]:
        """Every event object with an instance in [start, end) (series whole, unexpanded)."""
        answer = await self.door.request(
            "REPORT",
            calendar_url,
            body=calendar_query(start, end),
            headers={"Depth": "1", "Content-Type": "application/xml; charset=utf-8"},
        )
        found: list[DavObject] = []
        for response in _multistatus(answer):
            data = response.props.get(_q(CALDAV, "calendar-data"))
            if data is None or not (data.text or "").strip():
                continue
            etag = response.props.get(_q(DAV, "getetag"))
            found.append(
                DavObject(
                    url=self.door.resolve(calendar_url, response.href),
                    etag=(etag.text or "").strip() or None if etag is not None else None,
                    ics=data.text or "",
                )
            )
        return found

    async def get(self, url: str) -> DavObject:
        answer = await self.door.request("GET", url, headers={"Accept": "text/calendar"})
        return DavObject(url=answer.url, etag=answer.etag, ics=answer.text)

    async def put(self, url: str, ics: str, *, etag: str | None) -> str | None:
        """Create (`etag` None: only if nothing is there) or replace (only if still `etag`);
        the new ETag when the server says it. PreconditionFailed when it changed."""
        condition = {"If-Match": etag} if etag else {"If-None-Match": "*"}
        answer = await self.door.request(
            "PUT",
            url,
            body=ics.encode("utf-8"),
            headers={"Content-Type": ICS_TYPE, **condition},
        )
        return answer.etag

    async def delete(self, url: str, *, etag: str | None) -> None:
        headers = {"If-Match": etag} if etag else {}
        await self.door.request("DELETE", url, headers=headers)


def _writable(privileges: ET.Element | None) -> bool:
    if privileges is None:
        return True  # not said: try, and the server answers 403 if not
    names = {child.tag for privilege in privileges for child in privilege}
    return bool(names & {_q(DAV, "write"), _q(DAV, "write-content"), _q(DAV, "all")})
