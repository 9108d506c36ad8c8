"""Google links are bound to the browser that continued them, signed in or not.

Until now a link was bound only when the browser pressing Continue was signed in
to Panager's web page (`oauth_states.web_session`, the hash of that session's
cookie, migration 0014), so a link continued in a private window gave a consent
address that any browser could finish. Now the link's page sets a random cookie
of its own and Continue always binds the state to that cookie's hash
(web/google_link.py); the column is renamed for what it holds. A state bound to
a web session before the upgrade (states live ten minutes) matches no cookie and
is refused at the callback; /connect google gives a new link.

Revision ID: 0024
Revises: 0023
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Rename oauth_states.web_session to browser_key."""
    op.execute("ALTER TABLE oauth_states RENAME COLUMN web_session TO browser_key")


def downgrade() -> None:
    """The column's old name."""
    op.execute("ALTER TABLE oauth_states RENAME COLUMN browser_key TO web_session")
