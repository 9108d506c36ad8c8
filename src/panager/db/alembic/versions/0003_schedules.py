"""Schedules and per-occurrence runs.

Revision ID: 0003
Revises: 0002
"""

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables (filled in by the feature that owns them)."""


def downgrade() -> None:
    """Drop the tables."""
