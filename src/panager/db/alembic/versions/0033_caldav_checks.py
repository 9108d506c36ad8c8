"""CalDAV connection checks: when each person's checks ran, so at most 10 run an hour.

A check logs in to the server the person typed; without a limit the Connections page
would be a password-guessing or port-scanning proxy. CalDAV accounts themselves live in
`provider_accounts` (0031): the app password sealed, the server address, the calendars
found and chosen as settings.

Revision ID: 0033
Revises: 0032
"""

from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the table of connection checks."""
    op.execute(
        """
        CREATE TABLE caldav_checks (
            user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            at      TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        CREATE INDEX caldav_checks_user_at ON caldav_checks (user_id, at)
        """
    )


def downgrade() -> None:
    """Drop the table."""
    op.execute("DROP TABLE caldav_checks")
