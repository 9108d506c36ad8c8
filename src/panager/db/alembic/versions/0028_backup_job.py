"""The scheduled backup: one row, claimed by one worker at a time, with its last result.

`backup_job` holds the instance's scheduled backup (`backup:` in the YAML config;
docs/backup.md): when the next one is due, which worker holds it and until when
(a worker that died releases it when the lease ends), and the last result that
`panager doctor` and the admin page show. `failure_told` remembers that the admins
were told about the current run of failures, so they are told once.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create backup_job."""
    op.execute(
        """
        CREATE TABLE backup_job (
            id                SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
            next_run_at       TIMESTAMPTZ NOT NULL,
            claimed_by        TEXT,
            claimed_until     TIMESTAMPTZ,
            last_started_at   TIMESTAMPTZ,
            last_finished_at  TIMESTAMPTZ,
            last_ok           BOOLEAN,
            last_detail       TEXT,
            last_path         TEXT,
            last_bytes        BIGINT,
            last_ok_at        TIMESTAMPTZ,
            failure_told      BOOLEAN NOT NULL DEFAULT false
        )
        """
    )


def downgrade() -> None:
    """Drop backup_job."""
    op.execute("DROP TABLE IF EXISTS backup_job")
