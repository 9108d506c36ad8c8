"""Long-term memories (pgvector).

Revision ID: 0002
Revises: 0001
"""

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables (filled in by the feature that owns them)."""


def downgrade() -> None:
    """Drop the tables."""
