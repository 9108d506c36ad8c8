"""Schedules: find claimed rows quickly (live workers look for dead owners every second).

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Index the (few) claimed schedules by owner."""
    op.execute(
        "CREATE INDEX schedules_claimed_idx ON schedules (claimed_by) "
        "WHERE claimed_by IS NOT NULL"
    )


def downgrade() -> None:
    """Drop the index."""
    op.execute("DROP INDEX IF EXISTS schedules_claimed_idx")
