"""Baseline: the pgvector extension and the users table.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the vector extension and users."""
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(
        """
        CREATE TABLE users (
            id            BIGINT PRIMARY KEY,
            username      TEXT NOT NULL,
            display_name  TEXT,
            timezone      TEXT NOT NULL DEFAULT 'UTC',
            role          TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
            status        TEXT NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'pending', 'blocked')),
            model         TEXT,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX users_username_idx ON users (lower(username))")


def downgrade() -> None:
    """Drop users (the extension is left in place: other schemas may use it)."""
    op.execute("DROP TABLE IF EXISTS users")
