"""MCP tool pins: what each server's tools looked like when the operator approved them.

One row per (server, tool): the hash of the name, description and input schema the
server last listed (`seen_hash`, with the description as seen, for the admin page) and
the hash the operator approved (`approved_hash`). A tool is offered only while the
two match, so a server that changes a description or schema after approval has that
tool hidden until `panager mcp approve NAME` (or the admin page) approves it again.

Revision ID: 0017
Revises: 0015
"""

from alembic import op

revision = "0017"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create mcp_tool_pins."""
    op.execute(
        """
        CREATE TABLE mcp_tool_pins (
            server         TEXT NOT NULL,
            tool           TEXT NOT NULL,
            seen_hash      TEXT NOT NULL,
            description    TEXT NOT NULL DEFAULT '',
            seen_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
            approved_hash  TEXT,
            approved_at    TIMESTAMPTZ,
            approved_by    TEXT,
            PRIMARY KEY (server, tool)
        )
        """
    )


def downgrade() -> None:
    """Drop mcp_tool_pins."""
    op.execute("DROP TABLE IF EXISTS mcp_tool_pins")
