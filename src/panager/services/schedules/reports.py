"""Missed-run reports: tell each user once about the runs recorded as `missed`.

An occurrence found more than the grace window after its due time is recorded
as missed instead of being sent (services/schedules/outcomes.py); the worker
claims the unreported ones and `MissedReports` sends each user one message
about theirs. A report that cannot be sent is unmarked and claimed again later.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta

from panager.services.schedules.claims import ScheduleClaims
from panager.services.schedules.delivery import Delivery
from panager.services.schedules.occurrences import missed_report
from panager.services.schedules.types import MissedRun
from panager.services.users import User

log = logging.getLogger(__name__)


class MissedReports:
    """Sends the missed runs a worker claimed, one message per user."""

    def __init__(
        self, claims: ScheduleClaims, delivery: Delivery, *, grace: timedelta, lease: timedelta
    ) -> None:
        self.claims = claims
        self.delivery = delivery
        self.grace = grace
        self.lease = lease

    async def send(self, missed: Sequence[MissedRun]) -> int:
        """Report claimed missed runs to their users; returns how many were reported."""
        by_user: dict[int, list[MissedRun]] = defaultdict(list)
        for run in missed:
            by_user[run.user_id].append(run)
        users = await self.claims.users(list(by_user)) if by_user else {}
        reported = 0
        for user_id, runs in by_user.items():
            if await self._send_report(users.get(user_id), runs):
                reported += len(runs)
            else:
                await self.claims.unmark_reported([r.id for r in runs])
        return reported

    async def _send_report(self, user: User | None, runs: list[MissedRun]) -> bool:
        if user is None or user.status == "blocked":
            return True  # nobody to tell; do not keep retrying
        try:
            text = missed_report(runs, self.grace)
            timeout = self.lease.total_seconds() / 2
            return await asyncio.wait_for(self.delivery.send(user, text), timeout)
        except Exception:
            log.warning("scheduler: could not report missed runs to %s", user.id, exc_info=True)
            return False
