"""A shared instance people can trust: one Google account per user, relays as data.

- `google_accounts.google_sub`: the Google account's stable id (OpenID `sub`),
  unique, so one Google account is linked to at most one Panager user.
- `users.relays_off`: the user turned `send_user_message` relays off.
- `relay_blocks`: senders a recipient blocked.
- `relay_sends`: one row per relayed message, so the rate limit holds across
  processes and restarts.
- `schedules_user_due_idx`: the fair claim ranks due schedules per user.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the Google sub, relay settings, blocks and the relay log."""
    op.execute("ALTER TABLE google_accounts ADD COLUMN google_sub TEXT")
    op.execute(
        "CREATE UNIQUE INDEX google_accounts_sub_key ON google_accounts (google_sub) "
        "WHERE google_sub IS NOT NULL"
    )
    op.execute("ALTER TABLE users ADD COLUMN relays_off BOOLEAN NOT NULL DEFAULT false")
    op.execute(
        """
        CREATE TABLE relay_blocks (
            user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            blocked_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (user_id, blocked_id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE relay_sends (
            id BIGSERIAL PRIMARY KEY,
            sender_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            recipient_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            sent_at TIMESTAMPTZ NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX relay_sends_sender ON relay_sends (sender_id, sent_at)")
    op.execute(
        "CREATE INDEX schedules_user_due_idx ON schedules (user_id, next_run_at) "
        "WHERE status = 'active'"
    )


def downgrade() -> None:
    """Drop the relay tables and columns and the Google sub."""
    op.execute("DROP INDEX IF EXISTS schedules_user_due_idx")
    op.execute("DROP TABLE IF EXISTS relay_sends")
    op.execute("DROP TABLE IF EXISTS relay_blocks")
    op.execute("ALTER TABLE users DROP COLUMN IF EXISTS relays_off")
    op.execute("DROP INDEX IF EXISTS google_accounts_sub_key")
    op.execute("ALTER TABLE google_accounts DROP COLUMN IF EXISTS google_sub")
