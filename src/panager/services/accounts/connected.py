"""Calendars of accounts connected beside Google (CalDAV now), as the tools and jobs see them.

A provider that keeps accounts of its own (`providers/caldav`) gives the calendars of one
person's accounts through this; `calendar_list_events`, the briefing and the heartbeat read
them beside Google's, each event with its calendar named.
"""

from __future__ import annotations

from typing import Protocol

from panager.services.accounts.provider import Account, Calendar


class ConnectedCalendars(Protocol):
    """The person's connected accounts that hold calendars, each with its `Calendar`."""

    async def connected(self, user_id: int) -> list[tuple[Account, Calendar]]:
        """Every account of `user_id` with a calendar, in the order they were connected."""
        ...
