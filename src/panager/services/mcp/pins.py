"""Tool pins in PostgreSQL: what the operator approved, per (server, tool).

Trust on first listing: the tools a server lists the first time it is ever seen are
pinned as they are (configuring the server was the operator's approval). After
that, a tool that appears or changes (description or schema) stays hidden until the
operator approves the server again; approval pins every tool as last seen.
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
SERVER_KNOWN = "SELECT 1 FROM mcp_tool_pins WHERE server = %s LIMIT 1"
RECORD_SEEN = """
INSERT INTO mcp_tool_pins (server, tool, seen_hash, description, seen_at,
                           approved_hash, approved_at, approved_by)
VALUES (%(server)s, %(tool)s, %(hash)s, %(description)s, now(),
        %(approved)s, CASE WHEN %(approved)s::text IS NULL THEN NULL ELSE now() END,
        %(by)s)
ON CONFLICT (server, tool) DO UPDATE
   SET seen_hash = EXCLUDED.seen_hash, description = EXCLUDED.description, seen_at = now()
"""
APPROVED = "SELECT server, tool, approved_hash FROM mcp_tool_pins WHERE approved_hash IS NOT NULL"
APPROVE_SERVER = """
UPDATE mcp_tool_pins SET approved_hash = seen_hash, approved_at = now(), approved_by = %s
 WHERE server = %s AND approved_hash IS DISTINCT FROM seen_hash
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
        """Store what the server lists now; a never-seen server's tools are pinned as listed."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_SERVER, (server,))
            known = await (await conn.execute(SERVER_KNOWN, (server,))).fetchone()
            for tool in tools:
                await conn.execute(
                    RECORD_SEEN,
                    {
                        "server": server,
                        "tool": tool.name,
                        "hash": tool.hash,
                        "description": cap_description(tool.description),
                        "approved": None if known else tool.hash,
                        "by": None if known else FIRST_LISTING,
                    },
                )

    async def approved(self) -> dict[tuple[str, str], str]:
        """The approved hash of every pinned tool."""
        rows = await fetch_all(self.pool, APPROVED)
        return {(r["server"], r["tool"]): r["approved_hash"] for r in rows}

    async def approve(self, server: str, by: str) -> list[str]:
        """Approve every tool of `server` as last seen; the tools whose pin changed."""
        rows = await fetch_all(self.pool, APPROVE_SERVER, (by, server))
        return sorted(r["tool"] for r in rows)

    async def pins(self, servers: Sequence[str]) -> list[Pin]:
        """The stored pins of these servers."""
        rows = await fetch_all(self.pool, LIST_PINS, (list(servers),))
        return [Pin(**r) for r in rows]
