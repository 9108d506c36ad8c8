"""Tool pins in PostgreSQL: what the operator approved, per (server, tool).

Nothing is offered until the operator approved it: `panager mcp approve NAME` (or an
admin on the web page) after being shown every description and parameter description
in full. A tool that appears or changes (description or schema) stays hidden until the
operator approves the server again; approval pins every tool as last seen. Approved text
counts as the operator's words.

Before that rule, a server's first listing was pinned as it came (`approved_by` =
"first listing"); those pins keep working, but their descriptions still count as the
server's (framed, so a call that sees them is tainted) and `panager doctor` asks for a
review until the operator approves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from panager.db.pool import Pool
from panager.db.queries import fetch_all
from panager.services.mcp.listing import ListedTool
from panager.services.mcp.schemas import cap_description

FIRST_LISTING = "first listing"
LOCK_SERVER = "SELECT pg_advisory_xact_lock(hashtext('panager.mcp_pins'), hashtext(%s))"
RECORD_SEEN = """
INSERT INTO mcp_tool_pins (server, tool, seen_hash, description, seen_at,
                           approved_hash, approved_at, approved_by)
VALUES (%(server)s, %(tool)s, %(hash)s, %(description)s, now(),
        %(approved)s, CASE WHEN %(approved)s::text IS NULL THEN NULL ELSE now() END,
        %(by)s)
ON CONFLICT (server, tool) DO UPDATE
   SET seen_hash = EXCLUDED.seen_hash, description = EXCLUDED.description, seen_at = now()
"""
APPROVED = """
SELECT server, tool, approved_hash, approved_by FROM mcp_tool_pins WHERE approved_hash IS NOT NULL
"""
APPROVE_SERVER = """
UPDATE mcp_tool_pins SET approved_hash = seen_hash, approved_at = now(), approved_by = %s
 WHERE server = %s AND (approved_hash IS DISTINCT FROM seen_hash
                        OR approved_by IS NOT DISTINCT FROM 'first listing')
RETURNING tool
"""
LIST_PINS = """
SELECT server, tool, seen_hash, description, seen_at, approved_hash, approved_at, approved_by
  FROM mcp_tool_pins WHERE server = ANY(%s) ORDER BY server, tool
"""


@dataclass(frozen=True)
class Pin:
    """One tool's pin as stored."""

    server: str
    tool: str
    seen_hash: str
    description: str
    seen_at: datetime
    approved_hash: str | None
    approved_at: datetime | None
    approved_by: str | None

    @property
    def approved(self) -> bool:
        """Whether what was last seen is what was approved."""
        return self.approved_hash == self.seen_hash


class PinStore:
    """Reads and writes `mcp_tool_pins`."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def record(self, server: str, tools: Sequence[ListedTool]) -> None:
        """Store what the server lists now (nothing is approved by being listed)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_SERVER, (server,))
            for tool in tools:
                await conn.execute(
                    RECORD_SEEN,
                    {
                        "server": server,
                        "tool": tool.name,
                        "hash": tool.hash,
                        "description": cap_description(tool.description),
                        "approved": None,
                        "by": None,
                    },
                )

    async def approved(self) -> dict[tuple[str, str], tuple[str, bool]]:
        """(approved hash, approved by the operator — not merely by a first listing) of
        every pinned tool."""
        rows = await fetch_all(self.pool, APPROVED)
        return {
            (r["server"], r["tool"]): (r["approved_hash"], r["approved_by"] != FIRST_LISTING)
            for r in rows
        }

    async def approve(self, server: str, by: str) -> list[str]:
        """Approve every tool of `server` as last seen; the tools whose pin changed."""
        rows = await fetch_all(self.pool, APPROVE_SERVER, (by, server))
        return sorted(r["tool"] for r in rows)

    async def pins(self, servers: Sequence[str]) -> list[Pin]:
        """The stored pins of these servers."""
        rows = await fetch_all(self.pool, LIST_PINS, (list(servers),))
        return [Pin(**r) for r in rows]
