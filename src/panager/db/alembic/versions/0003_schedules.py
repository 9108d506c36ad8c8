"""Schedules and per-occurrence runs.

`schedules` holds one row per reminder or scheduled agent task. Besides the
next fire instant it keeps the naive local anchor time and the zone, so
recurrences are computed on wall-clock time (09:00 stays 09:00 across DST).
`claimed_by` / `lease_until` let any number of workers claim due rows with
`FOR UPDATE SKIP LOCKED`; a crashed worker's claim simply expires.

`schedule_runs` records what happened to each occurrence. The UNIQUE
(schedule_id, scheduled_for) constraint is the fence against double delivery:
a worker must insert (or take over) the occurrence's row before it sends.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create schedules and schedule_runs with their indexes."""
    op.execute(
        """
        CREATE TABLE schedules (
            id            TEXT PRIMARY KEY,
            user_id       BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            kind          TEXT NOT NULL CHECK (kind IN ('reminder', 'agent')),
            message       TEXT NOT NULL,
            timezone      TEXT NOT NULL,
            rrule         TEXT,
            anchor_local  TIMESTAMP NOT NULL,
            next_run_at   TIMESTAMPTZ,
            status        TEXT NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'done', 'cancelled', 'failed', 'missed')),
            attempts      INTEGER NOT NULL DEFAULT 0,
            last_error    TEXT,
            last_run_at   TIMESTAMPTZ,
            claimed_by    TEXT,
            lease_until   TIMESTAMPTZ,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE status = 'active'"
    )
    op.execute("CREATE INDEX schedules_user_idx ON schedules (user_id, created_at)")
    op.execute(
        """
        CREATE TABLE schedule_runs (
            id            BIGSERIAL PRIMARY KEY,
            schedule_id   TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
            user_id       BIGINT NOT NULL,
            scheduled_for TIMESTAMPTZ NOT NULL,
            status        TEXT NOT NULL
                          CHECK (status IN ('sending', 'retry', 'delivered', 'failed', 'missed')),
            late          BOOLEAN NOT NULL DEFAULT false,
            attempts      INTEGER NOT NULL DEFAULT 0,
            missed_count  INTEGER NOT NULL DEFAULT 0,
            claimed_by    TEXT,
            output        TEXT,
            error         TEXT,
            delivered_at  TIMESTAMPTZ,
            reported_at   TIMESTAMPTZ,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            CONSTRAINT schedule_runs_once UNIQUE (schedule_id, scheduled_for)
        )
        """
    )
    op.execute(
        "CREATE INDEX schedule_runs_unreported_idx ON schedule_runs (user_id) "
        "WHERE status = 'missed' AND reported_at IS NULL"
    )


def downgrade() -> None:
    """Drop the scheduler tables."""
    op.execute("DROP TABLE IF EXISTS schedule_runs")
    op.execute("DROP TABLE IF EXISTS schedules")
