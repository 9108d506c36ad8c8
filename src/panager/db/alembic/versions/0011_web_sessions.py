"""Web sign-in: one-time links and sessions; schedules may be paused.

`web_links` holds the one-time sign-in links `/web` hands out and
`web_sessions` the browser sessions they start. Neither stores a usable
secret: only the SHA-256 of the random token in the link or the cookie, so a
leaked table signs nobody in. `schedules.status` gains `paused` (the web page
pauses and resumes schedules; a paused schedule is never claimed).

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

STATUSES = "'active', 'done', 'cancelled', 'failed', 'missed'"


def upgrade() -> None:
    """Create web_links and web_sessions; allow schedules.status = 'paused'."""
    op.execute(
        """
        CREATE TABLE web_links (
            token_hash  BYTEA PRIMARY KEY,
            user_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            created_at  TIMESTAMPTZ NOT NULL,
            expires_at  TIMESTAMPTZ NOT NULL,
            used_at     TIMESTAMPTZ
        )
        """
    )
    op.execute("CREATE INDEX web_links_user_idx ON web_links (user_id)")
    op.execute(
        """
        CREATE TABLE web_sessions (
            id_hash       BYTEA PRIMARY KEY,
            user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            csrf_token    TEXT NOT NULL,
            created_at    TIMESTAMPTZ NOT NULL,
            last_seen_at  TIMESTAMPTZ NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX web_sessions_user_idx ON web_sessions (user_id)")
    op.execute("ALTER TABLE schedules DROP CONSTRAINT IF EXISTS schedules_status_check")
    op.execute(
        "ALTER TABLE schedules ADD CONSTRAINT schedules_status_check "
        f"CHECK (status IN ({STATUSES}, 'paused'))"
    )


def downgrade() -> None:
    """Drop the web tables; paused schedules become active again."""
    op.execute("UPDATE schedules SET status = 'active' WHERE status = 'paused'")
    op.execute("ALTER TABLE schedules DROP CONSTRAINT IF EXISTS schedules_status_check")
    op.execute(
        "ALTER TABLE schedules ADD CONSTRAINT schedules_status_check "
        f"CHECK (status IN ({STATUSES}))"
    )
    op.execute("DROP TABLE IF EXISTS web_sessions")
    op.execute("DROP TABLE IF EXISTS web_links")
