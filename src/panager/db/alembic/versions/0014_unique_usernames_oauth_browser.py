"""Usernames unique (case-insensitively), so "@name" names one person; Google links bound
to the web session that continued them.

A relayed message names its sender by username, and `send_user_message` finds
its recipient by one; two people sharing "root" (say the terminal's user and a
Discord user) made both ambiguous. Existing duplicates are renamed first: in
each group of equal names (ignoring case) the oldest user keeps the name and
each later one gets the first free "-2", "-3", … suffix, in order of creation.
Then the plain index on lower(username) becomes a unique one. New names are
kept unique the same way by `UserService` (services/users.py).

`oauth_states.web_session` holds the hash of the Panager web session of the
browser that pressed Continue on a Google link's page, when it had one; the
callback must then come with that same session (web/server.py), so Google's
consent address cannot be forwarded to someone else's browser.

Revision ID: 0014
Revises: 0013
"""

from alembic import op
from sqlalchemy import text

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

DUPLICATES = """
SELECT id, username FROM (
    SELECT id, username,
           row_number() OVER (PARTITION BY lower(username) ORDER BY created_at, id) AS n
      FROM users
) ranked WHERE n > 1 ORDER BY lower(username), n
"""


def upgrade() -> None:
    """Rename later duplicates with a suffix, make lower(username) unique; add the column
    binding a Google link to a web session."""
    conn = op.get_bind()
    taken = {r[0] for r in conn.execute(text("SELECT lower(username) FROM users"))}
    for user_id, username in conn.execute(text(DUPLICATES)).fetchall():
        suffix = 2
        while f"{username}-{suffix}".lower() in taken:
            suffix += 1
        renamed = f"{username}-{suffix}"
        taken.add(renamed.lower())
        conn.execute(text("UPDATE users SET username = :name WHERE id = :id"),
                     {"name": renamed, "id": user_id})
    op.execute("DROP INDEX IF EXISTS users_username_idx")
    op.execute("CREATE UNIQUE INDEX users_username_key ON users (lower(username))")
    op.execute("ALTER TABLE oauth_states ADD COLUMN web_session BYTEA")


def downgrade() -> None:
    """Back to a plain index (renamed users keep their suffixed names); no session binding."""
    op.execute("ALTER TABLE oauth_states DROP COLUMN web_session")
    op.execute("DROP INDEX IF EXISTS users_username_key")
    op.execute("CREATE INDEX users_username_idx ON users (lower(username))")
