"""People and their identities per front end; the Telegram inbox.

Until now a person's id *was* their Discord id (or 1, the terminal user), and
their conversation is the checkpointer thread `str(users.id)`. `identities`
maps (platform, platform id) to a person instead, so a person can be reached
on several front ends. No existing id changes: every Discord person gets the
identity ('discord', id) → id and the terminal user ('terminal', 1) → 1, so
their rows and threads stay as they are.

Id rule: Discord people keep person id = their Discord snowflake (positive),
the terminal user is 1, and every other new person (Telegram first) takes the
next value of the sequence `person_ids`, which counts down from -1. A
snowflake is never negative, so the ranges cannot collide.

`telegram_inbox` has the shape of `discord_inbox` (the same exactly-once and
per-person ordering code serves both, services/inbox.py), keyed by Telegram's
`update_id`. Both inboxes gain `payload` (JSON: what is not text — a button's
callback data, a message id to answer, file ids; never a file URL).
`telegram_state` holds the bot's small shared settings (the webhook secret).

Revision ID: 0016
Revises: 0020
"""

from alembic import op

revision = "0016"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create identities (filled from users), person_ids, telegram_inbox, telegram_state."""
    op.execute(
        """
        CREATE TABLE identities (
            platform     TEXT NOT NULL CHECK (platform IN ('discord', 'telegram', 'terminal')),
            platform_id  BIGINT NOT NULL,
            user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (platform, platform_id)
        )
        """
    )
    op.execute("CREATE INDEX identities_user_idx ON identities (user_id)")
    op.execute(
        """
        INSERT INTO identities (platform, platform_id, user_id)
        SELECT CASE WHEN id = 1 THEN 'terminal' ELSE 'discord' END, id, id
          FROM users WHERE id > 0
        """
    )
    op.execute("CREATE SEQUENCE person_ids INCREMENT BY -1 START WITH -1 MAXVALUE -1")
    op.execute("ALTER TABLE discord_inbox ADD COLUMN payload JSONB")
    op.execute(
        "CREATE TABLE telegram_inbox (LIKE discord_inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )
    op.execute("ALTER TABLE telegram_inbox ADD PRIMARY KEY (message_id)")
    op.execute(
        "CREATE INDEX telegram_inbox_open_idx ON telegram_inbox (user_id, message_id) "
        "WHERE status IN ('queued', 'processing')"
    )
    op.execute("CREATE INDEX telegram_inbox_received_idx ON telegram_inbox (received_at)")
    op.execute(
        """
        CREATE TABLE telegram_state (
            name        TEXT PRIMARY KEY,
            value       TEXT NOT NULL,
            updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    """Drop what upgrade made (Telegram people's rows stay in users, unreachable)."""
    op.execute("DROP TABLE IF EXISTS telegram_state")
    op.execute("DROP TABLE IF EXISTS telegram_inbox")
    op.execute("ALTER TABLE discord_inbox DROP COLUMN IF EXISTS payload")
    op.execute("DROP SEQUENCE IF EXISTS person_ids")
    op.execute("DROP TABLE IF EXISTS identities")
