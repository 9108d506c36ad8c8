"""Access control: invites and the Discord inbox.

`invites` holds the codes admins hand out. Redemption is one conditional
`UPDATE … SET uses = uses + 1 WHERE uses < max_uses AND not expired`: the row
lock makes two racing redemptions of a single-use code produce exactly one
winner. `invite_redemptions` records who used which code.

`discord_inbox` is the exactly-once fence and the per-user queue for Discord
messages: a message is inserted (`ON CONFLICT DO NOTHING`, keyed by Discord's
message id) before anything else happens, so a MESSAGE_CREATE replayed after a
gateway RESUME finds its row and is dropped. A user's rows are handled oldest
first, one at a time (`status` + a lease, so it holds across processes and a
crashed process's claim expires). The text is cleared once handled; finished
rows are pruned after a week.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create invites, invite_redemptions and discord_inbox."""
    op.execute(
        """
        CREATE TABLE invites (
            code        TEXT PRIMARY KEY,
            created_by  BIGINT,
            max_uses    INTEGER NOT NULL DEFAULT 1 CHECK (max_uses >= 1),
            uses        INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
            expires_at  TIMESTAMPTZ,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE invite_redemptions (
            code         TEXT NOT NULL REFERENCES invites (code) ON DELETE CASCADE,
            user_id      BIGINT NOT NULL,
            redeemed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (code, user_id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE discord_inbox (
            message_id    BIGINT PRIMARY KEY,
            user_id       BIGINT NOT NULL,
            channel_id    BIGINT NOT NULL,
            username      TEXT NOT NULL,
            display_name  TEXT,
            content       TEXT NOT NULL,
            attachments   BOOLEAN NOT NULL DEFAULT false,
            status        TEXT NOT NULL DEFAULT 'queued'
                          CHECK (status IN ('queued', 'processing', 'done', 'failed',
                                            'abandoned')),
            claimed_by    TEXT,
            lease_until   TIMESTAMPTZ,
            received_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            finished_at   TIMESTAMPTZ
        )
        """
    )
    op.execute(
        "CREATE INDEX discord_inbox_open_idx ON discord_inbox (user_id, message_id) "
        "WHERE status IN ('queued', 'processing')"
    )
    op.execute("CREATE INDEX discord_inbox_received_idx ON discord_inbox (received_at)")


def downgrade() -> None:
    """Drop the tables."""
    op.execute("DROP TABLE IF EXISTS discord_inbox")
    op.execute("DROP TABLE IF EXISTS invite_redemptions")
    op.execute("DROP TABLE IF EXISTS invites")
