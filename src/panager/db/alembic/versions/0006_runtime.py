"""Agent runtime: token usage.

Revision ID: 0006
Revises: 0005
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables (filled in by the feature that owns them)."""


def downgrade() -> None:
    """Drop the tables."""
