"""Access control: invites and processed Discord messages.

Revision ID: 0004
Revises: 0003
"""

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables (filled in by the feature that owns them)."""


def downgrade() -> None:
    """Drop the tables."""
