"""Claims due schedules like a worker, reports them on stdout, then hangs until killed.

Run by tests/services/test_scheduler.py as a real subprocess that is killed with SIGKILL
after claiming and before delivering: `python -m tests.scheduler_claim_helper
URL NOW_ISO LEASE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta

from panager.clock import FakeClock
from panager.db.pool import open_pool
from panager.services.schedules.service import ScheduleService


async def main(url: str, now_iso: str, lease_seconds: float) -> None:
    """Claim everything due at `now_iso`, print the ids, then block forever."""
    now = datetime.fromisoformat(now_iso)
    pool = await open_pool(url, max_size=2)
    service = ScheduleService(pool, FakeClock(now))
    claimed = await service.claims.claim_due("doomed-worker", now, lease=timedelta(seconds=lease_seconds))
    print(json.dumps([s.id for s in claimed]), flush=True)
    await asyncio.Event().wait()  # "delivering" — until SIGKILL


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
