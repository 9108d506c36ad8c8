"""Calendar objects already parsed and expanded, per account: a listing reads each changed
object once, not on every turn.

Parsing iCalendar (`icalendar`) and expanding a series (`recurring-ical-events`) is this
process's own work — about a millisecond an object — which no concurrency can overlap,
and a person's calendar is listed on many turns ("what's on Thursday?", the heartbeat, the
briefing) while few of its objects change between them. So each account keeps, by object
href, the parsed calendar and the instances of the last few windows asked for.

An entry is served only when the object the server just sent has the **same ETag and
the same text** (its SHA-256) as the one parsed: the REPORT always carries the object's
text, so an event changed on the server — a new ETag, or even a server that kept the ETag
— is parsed again, never served stale. Bounded: at most `OBJECTS` objects per account (the
least recently listed go first) and `WINDOWS` windows per object; the provider keeps at
most `ACCOUNTS` accounts' caches and drops an account's when it is removed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from icalendar.cal.component import Component

from panager.providers.caldav import ical
from panager.providers.caldav.dav import DavObject

# ~7 KiB an object parsed (measured with tracemalloc, a plain event with a description):
# at most 16 × 500 objects ≈ 55 MiB in a process, a few MiB for a household
OBJECTS = 500  # per account: several months of a busy calendar
WINDOWS = 4  # per object: the month, the week, today, ... asked for lately
ACCOUNTS = 16  # per process (the provider's), the least recently listed dropped first
Instances = tuple[tuple[ical.Occurrence, ...], bool]  # the instances, and whether more exist
Window = tuple[dt.datetime, dt.datetime, str]


@dataclass
class _Entry:
    etag: str | None
    digest: bytes
    calendar: Component
    windows: OrderedDict[Window, Instances] = field(default_factory=OrderedDict)


class ParsedObjects:
    """One account's parsed objects, by href (see the module's text for when one is served)."""

    def __init__(self, objects: int = OBJECTS) -> None:
        self.limit = objects
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.parsed = 0  # objects parsed (a miss); for tests and the bench
        self.expanded = 0  # windows expanded

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def instances(
        self, obj: DavObject, start: dt.datetime, end: dt.datetime, zone: ZoneInfo, cap: int
    ) -> Instances:
        """`obj`'s instances overlapping [start, end) in `zone`, at most `cap`, and whether
        there were more (as `ical.occurrences`), parsed and expanded only when not known."""
        digest = hashlib.sha256(obj.ics.encode("utf-8", "surrogatepass")).digest()
        entry = self._entries.get(obj.url)
        if entry is None or entry.etag != obj.etag or entry.digest != digest:
            entry = _Entry(obj.etag, digest, ical.parse(obj.ics))
            self.parsed += 1
            self._entries[obj.url] = entry
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
        self._entries.move_to_end(obj.url)
        window = (start, end, zone.key)
        known = entry.windows.get(window)
        if known is None or (len(known[0]) < cap and known[1]):
            found, more = ical.occurrences(entry.calendar, start, end, zone, cap)
            known = (tuple(found), more)
            self.expanded += 1
            entry.windows[window] = known
            while len(entry.windows) > WINDOWS:
                entry.windows.popitem(last=False)
        entry.windows.move_to_end(window)
        instances, more = known
        return instances[:cap], more or len(instances) > cap


class ParsedCaches:
    """The provider's caches, one per (person, account), at most `ACCOUNTS` of them."""

    def __init__(self, accounts: int = ACCOUNTS) -> None:
        self.limit = accounts
        self._caches: OrderedDict[tuple[int, str], ParsedObjects] = OrderedDict()

    def of(self, user_id: int, key: str) -> ParsedObjects:
        cache = self._caches.get((user_id, key))
        if cache is None:
            cache = self._caches[(user_id, key)] = ParsedObjects()
            while len(self._caches) > self.limit:
                self._caches.popitem(last=False)
        self._caches.move_to_end((user_id, key))
        return cache

    def drop(self, user_id: int, key: str) -> None:
        cache = self._caches.pop((user_id, key), None)
        if cache is not None:
            cache.clear()  # a calendar opened before the removal may still hold it

    def clear(self) -> None:
        """Forget every parsed object (the accounts' caches stay, empty)."""
        for cache in self._caches.values():
            cache.clear()
