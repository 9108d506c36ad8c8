"""Form connects: accounts typed on the Connections page, their credentials sealed.

A form-connect provider (CalDAV, IMAP) checks what the person typed
(`FormProvider.check`) before anything is stored; `Connections.add` then
keeps the account with its secret fields sealed with PANAGER_SECRET_KEY
(`Sealer`, Fernet) — never logged, never shown back, never in a chat — and
its other fields as plain settings. Removing an account deletes its row (and
with it the sealed secret); the provider deletes what it cached.
`sealed_count` is what `panager doctor` asks: sealed credentials without a
key to open them are a failure.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from panager.clock import Clock
from panager.db.pool import Pool
from panager.services.accounts.provider import Field, FormConnect
from panager.services.accounts.sealing import InvalidToken, Sealer

INSERT = """
INSERT INTO provider_accounts (user_id, provider, key, label, secret_ciphertext, settings,
                               created_at, updated_at)
VALUES (%(user_id)s, %(provider)s, %(key)s, %(label)s, %(sealed)s, %(settings)s, %(now)s,
        %(now)s)
"""
SELECT = """
SELECT * FROM provider_accounts WHERE user_id = %s AND provider = %s ORDER BY id
"""
DELETE = "DELETE FROM provider_accounts WHERE user_id = %s AND provider = %s AND key = %s"
MARK = """
UPDATE provider_accounts SET status = %s, updated_at = %s
 WHERE user_id = %s AND provider = %s AND key = %s
"""
SEALED_COUNT = """
SELECT (SELECT count(*) FROM google_accounts) + (SELECT count(*) FROM provider_accounts)
     + (SELECT count(*) FROM webhooks WHERE signing_secret IS NOT NULL) AS n
"""


@dataclass(frozen=True)
class StoredAccount:
    """One form-connected account as stored (its secret still sealed)."""

    user_id: int
    provider: str
    key: str
    label: str
    settings: Mapping[str, Any]
    status: str
    created_at: datetime
    sealed: str

    @property
    def connected(self) -> bool:
        """False after the server refused the stored credentials."""
        return self.status == "connected"


def split_fields(
    connect: FormConnect, values: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(secret, plain) values of a form, each field once; a missing required field is a
    `ValueError` naming its label."""
    secret: dict[str, str] = {}
    plain: dict[str, str] = {}
    for one in connect.fields:
        value = (values.get(one.name) or "").strip() if not one.secret else values.get(
            one.name) or ""
        if one.required and not value:
            raise ValueError(f"{one.label} is required.")
        (secret if one.secret else plain)[one.name] = value
    return secret, plain


class Connections:
    """The sealed store of form-connected accounts."""

    def __init__(self, pool: Pool, clock: Clock, sealer: Sealer) -> None:
        self.pool, self.clock, self._sealer = pool, clock, sealer

    async def add(
        self,
        user_id: int,
        provider: str,
        label: str,
        secret: Mapping[str, str],
        settings: Mapping[str, Any],
    ) -> StoredAccount:
        """Store a checked account; its key is new and random (it starts the ids)."""
        params = {
            "user_id": user_id,
            "provider": provider,
            "key": secrets.token_hex(4),
            "label": label,
            "sealed": self._sealer.seal(json.dumps(dict(secret))),
            "settings": Jsonb(dict(settings)),
            "now": self.clock.now(),
        }
        async with self.pool.connection() as conn:
            await conn.execute(INSERT, params)
        stored = [a for a in await self.accounts(user_id, provider) if a.key == params["key"]]
        return stored[0]

    async def accounts(self, user_id: int, provider: str) -> list[StoredAccount]:
        """The person's accounts of `provider`, oldest first."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(SELECT, (user_id, provider))).fetchall()
        return [
            StoredAccount(r["user_id"], r["provider"], r["key"], r["label"], r["settings"],
                          r["status"], r["created_at"], r["secret_ciphertext"])
            for r in rows
        ]

    def secret(self, account: StoredAccount) -> dict[str, str] | None:
        """The account's secret fields, or None when they cannot be opened (another key)."""
        try:
            return dict(json.loads(self._sealer.open(account.sealed)))
        except (InvalidToken, ValueError):
            return None

    async def mark(self, user_id: int, provider: str, key: str, connected: bool) -> None:
        """Record that the server accepts (or refused) the stored credentials."""
        status = "connected" if connected else "disconnected"
        async with self.pool.connection() as conn:
            await conn.execute(MARK, (status, self.clock.now(), user_id, provider, key))

    async def remove(self, user_id: int, provider: str, key: str) -> bool:
        """Delete the account and its sealed secret; False when there was none."""
        async with self.pool.connection() as conn:
            done = await conn.execute(DELETE, (user_id, provider, key))
            return done.rowcount > 0


async def sealed_count(pool: Pool) -> int:
    """How many sealed credentials are stored (Google links, form-connected accounts,
    webhook signing secrets)."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SEALED_COUNT)).fetchone()
    return int(row["n"]) if row else 0


__all__ = ["Connections", "Field", "StoredAccount", "sealed_count", "split_fields"]
