"""Model endpoints' circuit breakers, shared by every process.

`model_breakers` holds, per named model endpoint (docs/models.md), how many calls
in a row failed and, once that reached the configured count, until when the
endpoint is skipped for its fallback. Workers, the web server and `panager
doctor` read the same rows.

Revision ID: 0029
Revises: 0028
"""

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create model_breakers."""
    op.execute(
        """
        CREATE TABLE model_breakers (
            endpoint    TEXT PRIMARY KEY,
            failures    INTEGER NOT NULL DEFAULT 0,
            open_until  TIMESTAMPTZ,
            last_error  TEXT,
            updated_at  TIMESTAMPTZ NOT NULL
        )
        """
    )


def downgrade() -> None:
    """Drop model_breakers."""
    op.execute("DROP TABLE IF EXISTS model_breakers")
