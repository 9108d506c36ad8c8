"""Discord inbox: count how often a message was picked up again after a crash.

A message whose processing process died (its lease ran out) is queued again
and answered after the restart instead of being dropped; `attempts` counts
those retries so a message that keeps killing the process is eventually
retired with a note to the user instead of crash-looping.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add discord_inbox.attempts."""
    op.execute("ALTER TABLE discord_inbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0")


def downgrade() -> None:
    """Drop discord_inbox.attempts."""
    op.execute("ALTER TABLE discord_inbox DROP COLUMN IF EXISTS attempts")
