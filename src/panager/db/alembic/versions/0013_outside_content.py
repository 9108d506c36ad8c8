"""Outside content: memories and schedules remember whether outside text wrote them; proposals.

`memories.tainted` and `schedules.tainted` are true when the model call that
wrote the row had been sent text that did not come from the person (a calendar
invitation, a relayed message…): reading such a memory back frames it again,
and an agent run of such a schedule is itself tainted. `proposals` holds the
consequential calls a run with nobody present did not make: the person
approves each one (once) or lets it lapse.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the taint flags and the proposals table."""
    op.execute("ALTER TABLE memories ADD COLUMN tainted BOOLEAN NOT NULL DEFAULT false")
    op.execute("ALTER TABLE schedules ADD COLUMN tainted BOOLEAN NOT NULL DEFAULT false")
    op.execute(
        """
        CREATE TABLE proposals (
            id           TEXT PRIMARY KEY,
            user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            tool         TEXT NOT NULL,
            args         JSONB NOT NULL,
            description  TEXT NOT NULL,
            status       TEXT NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'approved', 'failed')),
            created_at   TIMESTAMPTZ NOT NULL,
            decided_at   TIMESTAMPTZ
        )
        """
    )
    op.execute("CREATE INDEX proposals_user_idx ON proposals (user_id, created_at DESC)")


def downgrade() -> None:
    """Drop the proposals and the flags."""
    op.execute("DROP TABLE IF EXISTS proposals")
    op.execute("ALTER TABLE schedules DROP COLUMN IF EXISTS tainted")
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS tainted")
