"""Images kept per person in PostgreSQL, within a per-person quota.

The thread (checkpoint) holds only an image's id and a short placeholder; the
bytes are read from here for the turn the image arrives in.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from panager.db.pool import Pool
from panager.db.queries import fetch_one, one

USED = "SELECT coalesce(sum(size), 0)::bigint AS used FROM media_files WHERE user_id = %s"
INSERT = """
INSERT INTO media_files (id, user_id, name, mime, size, data, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
"""
SELECT = "SELECT mime, data FROM media_files WHERE user_id = %s AND id = %s"
DROP_OLDEST = """
DELETE FROM media_files WHERE id IN (
    SELECT id FROM media_files WHERE user_id = %s ORDER BY created_at LIMIT 1)
"""


class QuotaExceeded(Exception):
    """The person's stored files would exceed their quota."""


@dataclass(frozen=True)
class StoredFile:
    """An image's bytes and type."""

    mime: str
    data: bytes


class MediaStore:
    """Images by person; `put` keeps the quota by dropping that person's oldest images."""

    def __init__(self, pool: Pool, quota_bytes: int) -> None:
        self.pool = pool
        self.quota_bytes = quota_bytes

    async def put(self, user_id: int, name: str, mime: str, data: bytes, now: datetime) -> str:
        """Store an image; returns its id. Older images of the person make room: an image
        is sent to the model in full only in the turn it arrives, so old bytes are spare."""
        if len(data) > self.quota_bytes:
            raise QuotaExceeded
        file_id = str(uuid.uuid4())
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('media'), %s::int)",
                               (user_id % 2**31,))
            while True:
                used = one(await (await conn.execute(USED, (user_id,))).fetchone())["used"]
                if used + len(data) <= self.quota_bytes or used == 0:
                    break
                await conn.execute(DROP_OLDEST, (user_id,))
            await conn.execute(INSERT, (file_id, user_id, name, mime, len(data), data, now))
        return file_id

    async def get(self, user_id: int, file_id: str) -> StoredFile | None:
        """The person's image, or None (gone, or not theirs)."""
        try:
            uuid.UUID(file_id)
        except ValueError:
            return None
        row = await fetch_one(self.pool, SELECT, (user_id, file_id))
        return StoredFile(row["mime"], bytes(row["data"])) if row else None
