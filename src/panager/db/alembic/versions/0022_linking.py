"""Linking front ends: one-time link codes, failed attempts, where proactive messages go.

`link_codes` holds the codes `/link` hands out: only the SHA-256 of the code
(a leaked table joins nobody), the issuing identity and person, when it
expires (10 minutes), and — once another front end used it — the claiming
identity. A code is claimed by one conditional UPDATE (`status = 'open'`), so
it is single use even when two front ends race; the join itself waits for
the issuing side's Approve (`status = 'claimed'` → `'joined'`).
`link_failures` records each wrong code per identity: three within ten
minutes lock that identity out of `/link CODE` for the rest of the period.
`identities.last_seen_at` is when the person last wrote from that identity
(`/notify auto` delivers to the chat front end written from last);
`users.notify` is the person's choice (`auto`, `discord`, `telegram`).
`memories.source` gains `link`: the summary of a conversation that a join
did not keep.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

SOURCES = "'tool', 'compaction', 'import'"


def _sources(extra: str) -> None:
    op.execute("ALTER TABLE memories DROP CONSTRAINT IF EXISTS memories_source_check")
    op.execute(
        "ALTER TABLE memories ADD CONSTRAINT memories_source_check "
        f"CHECK (source IN ({SOURCES}{extra}))"
    )


def upgrade() -> None:
    """Create link_codes and link_failures; add last_seen_at, notify and the 'link' source."""
    op.execute(
        """
        CREATE TABLE link_codes (
            code_hash            BYTEA PRIMARY KEY,
            user_id              BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            platform             TEXT NOT NULL,
            platform_id          BIGINT NOT NULL,
            status               TEXT NOT NULL DEFAULT 'open'
                                 CHECK (status IN ('open', 'claimed', 'joined', 'denied')),
            created_at           TIMESTAMPTZ NOT NULL,
            expires_at           TIMESTAMPTZ NOT NULL,
            claimed_platform     TEXT,
            claimed_platform_id  BIGINT,
            claimed_user_id      BIGINT REFERENCES users (id) ON DELETE CASCADE,
            claimed_at           TIMESTAMPTZ
        )
        """
    )
    op.execute("CREATE INDEX link_codes_user_idx ON link_codes (user_id, created_at DESC)")
    op.execute(
        """
        CREATE TABLE link_failures (
            platform     TEXT NOT NULL,
            platform_id  BIGINT NOT NULL,
            failed_at    TIMESTAMPTZ NOT NULL
        )
        """
    )
    op.execute(
        "CREATE INDEX link_failures_identity_idx "
        "ON link_failures (platform, platform_id, failed_at)"
    )
    op.execute("ALTER TABLE identities ADD COLUMN last_seen_at TIMESTAMPTZ")
    op.execute(
        "ALTER TABLE users ADD COLUMN notify TEXT NOT NULL DEFAULT 'auto' "
        "CHECK (notify IN ('auto', 'discord', 'telegram'))"
    )
    _sources(", 'link'")


def downgrade() -> None:
    """Drop what upgrade added (summaries saved from a join become 'import' memories)."""
    op.execute("UPDATE memories SET source = 'import' WHERE source = 'link'")
    _sources("")
    op.execute("ALTER TABLE users DROP COLUMN IF EXISTS notify")
    op.execute("ALTER TABLE identities DROP COLUMN IF EXISTS last_seen_at")
    op.execute("DROP TABLE IF EXISTS link_failures")
    op.execute("DROP TABLE IF EXISTS link_codes")
