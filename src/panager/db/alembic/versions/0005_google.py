"""Google accounts, OAuth state and pending messages.

Revision ID: 0005
Revises: 0004
"""

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables (filled in by the feature that owns them)."""


def downgrade() -> None:
    """Drop the tables."""
