"""CalDAV accounts: any number per person, the password sealed, the calendars they chose.

- `caldav_accounts`: the server address entered, the user name, the app password sealed with
  PANAGER_SECRET_KEY (never stored or shown in clear), an optional pinned certificate
  fingerprint (SHA-256, for a server with its own certificate), a label, which calendars are
  read (NULL: all) and the default calendar for new events (NULL: the first writable one).
- `caldav_calendars`: the calendars the last check found (display names as the server sent
  them), shown on the Connections page; removed with their account.
- `caldav_checks`: when a person's connection checks ran, so at most 10 run an hour.

Revision ID: 0032
Revises: 0030
"""

from alembic import op

revision = "0032"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE caldav_accounts (
            id bigserial PRIMARY KEY,
            user_id bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            url text NOT NULL,
            username text NOT NULL,
            password_sealed text NOT NULL,
            fingerprint text,
            label text NOT NULL,
            read_calendars text[],
            default_calendar text,
            created_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (user_id, url, username)
        );
        CREATE TABLE caldav_calendars (
            account_id bigint NOT NULL REFERENCES caldav_accounts(id) ON DELETE CASCADE,
            user_id bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            path text NOT NULL,
            name text NOT NULL,
            writable boolean NOT NULL DEFAULT true,
            PRIMARY KEY (account_id, path)
        );
        CREATE INDEX caldav_calendars_user ON caldav_calendars (user_id);
        CREATE TABLE caldav_checks (
            user_id bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX caldav_checks_user_at ON caldav_checks (user_id, at);
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE caldav_checks; DROP TABLE caldav_calendars; DROP TABLE caldav_accounts")
