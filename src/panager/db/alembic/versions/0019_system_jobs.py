"""System jobs: heartbeat, briefing and webhook runs as schedule kinds; webhooks.

A system job is a schedule Panager runs for a person (not one they wrote): it is
claimed and delivered by the same workers, exactly once, but never listed in
`/schedules` nor counted against the person's cap or minimum interval.
`schedules.params` holds a job's settings (heartbeat interval and active hours,
a webhook call's payload). `webhooks` stores each hook's SHA-256 token hash only;
`heartbeat_seen` remembers what a heartbeat already announced.

Revision ID: 0019
Revises: 0017
"""

from alembic import op

revision = "0019"
down_revision = "0017"
branch_labels = None
depends_on = None

OLD_KINDS = "'reminder', 'agent'"
NEW_KINDS = "'reminder', 'agent', 'heartbeat', 'briefing', 'webhook', 'tidy'"


def _kinds(kinds: str) -> None:
    op.execute("ALTER TABLE schedules DROP CONSTRAINT IF EXISTS schedules_kind_check")
    op.execute(
        f"ALTER TABLE schedules ADD CONSTRAINT schedules_kind_check CHECK (kind IN ({kinds}))"
    )


def upgrade() -> None:
    """Widen schedules.kind, add schedules.params, create webhooks and heartbeat_seen."""
    _kinds(NEW_KINDS)
    op.execute("ALTER TABLE schedules ADD COLUMN IF NOT EXISTS params JSONB")
    op.execute(
        "CREATE UNIQUE INDEX schedules_one_system_job ON schedules (user_id, kind) "
        "WHERE kind IN ('heartbeat', 'briefing', 'tidy') "
        "AND status IN ('active', 'paused', 'failed', 'missed')"
    )
    op.execute(
        """
        CREATE TABLE webhooks (
            id           TEXT PRIMARY KEY,
            user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            name         TEXT NOT NULL,
            instruction  TEXT NOT NULL,
            token_hash   BYTEA NOT NULL UNIQUE,
            created_at   TIMESTAMPTZ NOT NULL,
            revoked_at   TIMESTAMPTZ
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX webhooks_live_name ON webhooks (user_id, lower(name)) "
        "WHERE revoked_at IS NULL"
    )
    op.execute(
        """
        CREATE TABLE heartbeat_seen (
            user_id   BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            item_key  TEXT NOT NULL,
            seen_at   TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (user_id, item_key)
        )
        """
    )


def downgrade() -> None:
    """Drop system jobs and their tables."""
    op.execute("DROP TABLE IF EXISTS heartbeat_seen")
    op.execute("DROP TABLE IF EXISTS webhooks")
    op.execute("DROP INDEX IF EXISTS schedules_one_system_job")
    op.execute(
        "DELETE FROM schedule_runs WHERE schedule_id IN "
        "(SELECT id FROM schedules WHERE kind NOT IN ('reminder', 'agent'))"
    )
    op.execute("DELETE FROM schedules WHERE kind NOT IN ('reminder', 'agent')")
    op.execute("ALTER TABLE schedules DROP COLUMN IF EXISTS params")
    _kinds(OLD_KINDS)
