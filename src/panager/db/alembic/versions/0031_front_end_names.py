"""Front-end names are checked by shape in the database, by name in the application.

`identities.platform` and `users.notify` listed the front ends by name
(`'discord', 'telegram', 'terminal'`; `'auto', 'discord', 'telegram'`), so every
new front end needed this migration again. They now take any front-end name
(lower-case letters, digits and `_`, starting with a letter, at most 32); which
names exist is decided where front ends register (panager/platforms.py:
`UserService.ensure_identity` and `LinkService.set_notify` refuse an unknown
one). A new front end's own migration is then its inbox table only, when it
stores messages.

Revision ID: 0031
Revises: 0030
"""

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

NAME = "'^[a-z][a-z0-9_]{0,31}$'"


def upgrade() -> None:
    """Replace the two name lists with a shape check."""
    op.execute("ALTER TABLE identities DROP CONSTRAINT IF EXISTS identities_platform_check")
    op.execute(
        f"ALTER TABLE identities ADD CONSTRAINT identities_platform_check "
        f"CHECK (platform ~ {NAME})"
    )
    op.execute("ALTER TABLE users DROP CONSTRAINT IF EXISTS users_notify_check")
    op.execute(
        f"ALTER TABLE users ADD CONSTRAINT users_notify_check CHECK (notify ~ {NAME})"
    )


def downgrade() -> None:
    """The lists again (rows of other front ends must be gone first)."""
    op.execute("ALTER TABLE identities DROP CONSTRAINT IF EXISTS identities_platform_check")
    op.execute(
        "ALTER TABLE identities ADD CONSTRAINT identities_platform_check "
        "CHECK (platform IN ('discord', 'telegram', 'terminal'))"
    )
    op.execute("ALTER TABLE users DROP CONSTRAINT IF EXISTS users_notify_check")
    op.execute(
        "ALTER TABLE users ADD CONSTRAINT users_notify_check "
        "CHECK (notify IN ('auto', 'discord', 'telegram'))"
    )
