"""The pgvector extension and the app role's privileges on a server we do not own.

`CREATE EXTENSION vector` needs a superuser (pgvector is not a trusted
extension), so an operator's ordinary owner role cannot create it: the
migration checks first and stops with one line naming the fix instead of a
traceback deep inside alembic. `doctor` reads what is installed
(`pg_extension`, not `pg_available_extensions`) and what the role may do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection

from panager.config import ConfigError

ITERATIVE_SCAN_VERSION = (0, 8, 0)

SERVER_FACTS = """
SELECT current_user AS role, current_database() AS db, current_schema() AS schema,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS installed,
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector') AS available,
       has_schema_privilege(current_schema(), 'CREATE') AS can_create_tables,
       current_setting('server_version') AS server_version
"""


class ExtensionMissing(ConfigError):
    """The vector extension is not in the database and this role cannot create it."""


@dataclass(frozen=True)
class ServerFacts:
    """What the connected role finds and may do in its database."""

    role: str
    db: str
    schema: str | None
    superuser: bool
    installed: str | None
    available: str | None
    can_create_tables: bool
    server_version: str

    def privilege_problems(self) -> list[str]:
        """What the role lacks besides the extension, each with the exact fix."""
        if self.can_create_tables:
            return []
        schema = self.schema or "public"
        return [
            f'role "{self.role}" may not create tables in schema {schema}: as its owner or '
            f'a superuser run: GRANT CREATE ON SCHEMA {schema} TO "{self.role}";'
        ]


def create_extension_fix(role: str, db: str) -> str:
    """The one-line fix for a role that may not create the extension."""
    return (
        f'role "{role}" may not create the vector extension: run '
        f'"CREATE EXTENSION vector;" once, as a superuser, in database "{db}", then retry'
    )


def version_tuple(version: str | None) -> tuple[int, ...]:
    """'0.8.1' → (0, 8, 1); None or junk → ()."""
    parts = []
    for piece in (version or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def supports_iterative_scan(version: str | None) -> bool:
    """pgvector ≥ 0.8 can continue an HNSW scan until enough rows pass the filter."""
    found = version_tuple(version)
    return bool(found) and found >= ITERATIVE_SCAN_VERSION


async def server_facts(conn: AsyncConnection[Any]) -> ServerFacts:
    """Read the role, the installed extension and the privileges that matter."""
    cur = await conn.execute(SERVER_FACTS)
    row = await cur.fetchone()
    names = [c.name for c in cur.description or ()]
    data: dict[str, Any]
    data = row if isinstance(row, dict) else dict(zip(names, row or (), strict=True))
    return ServerFacts(**{k: data[k] for k in ServerFacts.__dataclass_fields__})


async def ensure_vector(conn: AsyncConnection[Any]) -> None:
    """Create the extension when missing; raise ExtensionMissing (one line) when we may not."""
    facts = await server_facts(conn)
    if facts.installed is not None:
        return
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise ExtensionMissing(create_extension_fix(facts.role, facts.db)) from None
    except (psycopg.errors.UndefinedFile, psycopg.errors.FeatureNotSupported) as exc:
        raise ExtensionMissing(
            f"the server has no pgvector ({str(exc).splitlines()[0]}); install pgvector on "
            "the database server (e.g. postgresql-15-pgvector or the pgvector/pgvector image)"
        ) from None
