"""Documents a person sent: kept with their extracted text, found again like memories.

A document's text is cut into passages (~CHUNK_CHARS, on paragraph breaks, each
knowing its page), embedded with the memory embedder and searched with the
memory search itself (services/memory: `Retrieval` over `search_sql` for the
`document_chunks` table — the same hybrid plan, BM25 statistics and score
fusion: an exact scan for a person with up to EXACT_MAX passages, the HNSW
index beyond). Passages share the memory store's embedder: adding a document
binds the store as a first memory would (services/memory/binding.py), and
`panager memory reembed` converts passages with the memories. Documents
are never injected into a turn by themselves: only the turn that brings one
sees its text, and later turns reach them through `document_search`.

A per-person quota (`document_quota_bytes`) counts the originals and their text.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one, one
from panager.services.memory.binding import EmbedderChanged, ensure_bound
from panager.services.memory.queries import StoreTables, search_sql
from panager.services.memory.retrieval import Retrieval
from panager.services.memory.service import MemoryService, MemoryUnavailable

CHUNK_CHARS = 900
MAX_CHUNKS = 4_000  # per document (the page cap keeps real ones far below)
EMBED_BATCH = 64
_COLUMNS = ("id, content, page::text AS category, document_id::text AS source, created_at, "
            "updated_at, true AS tainted, NULL::text AS previous, NULL::jsonb AS previous_mark")
CHUNKS = StoreTables(
    "document_chunks", "document_stats", "document_terms", _COLUMNS,
    _COLUMNS.replace("id, content, page", "m.id, m.content, m.page")
    .replace("document_id::", "m.document_id::").replace(" created_at", " m.created_at")
    .replace(" updated_at", " m.updated_at"),
)
CHUNK_SQL = search_sql(CHUNKS)
_PAGE = re.compile(r"^\[page (\d+)\]$")

USED = """
SELECT coalesce(sum(size + octet_length(text)), 0)::bigint AS used
FROM documents WHERE user_id = %s
"""
INSERT = """
INSERT INTO documents (id, user_id, name, mime, size, pages, read_pages, outline, text,
                       original, tainted, created_at)
VALUES (%(id)s, %(user)s, %(name)s, %(mime)s, %(size)s, %(pages)s, %(read)s, %(outline)s,
        %(text)s, %(original)s, %(tainted)s, %(now)s)
"""
INSERT_CHUNK = """
INSERT INTO document_chunks (user_id, document_id, seq, page, content, embedding,
                             created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""
INFO = ("id, name, mime, size, pages, read_pages, length(text) AS chars, created_at")
LIST = f"SELECT {INFO} FROM documents WHERE user_id = %s ORDER BY created_at DESC, id"
GET = f"SELECT {INFO}, text, outline FROM documents WHERE user_id = %s AND id = %s"
ORIGINAL = "SELECT name, mime, original FROM documents WHERE user_id = %s AND id = %s"
NAMES = "SELECT id::text AS id, name FROM documents WHERE user_id = %s AND id = ANY(%s::uuid[])"
DELETE = f"DELETE FROM documents WHERE user_id = %s AND id = %s RETURNING {INFO}"


class DocumentQuotaExceeded(Exception):
    """The document does not fit in the person's storage."""


@dataclass(frozen=True)
class DocumentInfo:
    """A stored document, without its text."""

    id: str
    name: str
    mime: str
    size: int
    pages: int | None
    read_pages: int | None
    chars: int
    created_at: datetime


@dataclass(frozen=True)
class DocumentHit:
    """A passage found by a search."""

    document_id: str
    name: str
    page: int | None
    content: str
    score: float


@dataclass(frozen=True)
class Passage:
    """A piece of a document's text and the page it starts on."""

    page: int | None
    text: str


def _info(row: dict) -> DocumentInfo:
    return DocumentInfo(str(row["id"]), row["name"], row["mime"], row["size"], row["pages"],
                        row["read_pages"], row["chars"], row["created_at"])


def passages(text: str, size: int = CHUNK_CHARS) -> list[Passage]:
    """The text cut into passages of about `size` characters on paragraph breaks; a
    "[page N]" line (PDF extraction) sets the page of what follows."""
    out: list[Passage] = []
    page: int | None = None
    start_page: int | None = None
    buffer: list[str] = []
    for line in text.splitlines():
        marker = _PAGE.match(line.strip())
        if marker:
            page = int(marker.group(1))
            continue
        if not buffer:
            if not line.strip():
                continue  # a passage starts with text, on the page that text is on
            start_page = page
        buffer.append(line)
        if sum(len(b) + 1 for b in buffer) >= size and (not line.strip() or len(buffer) > 1):
            out.extend(_flush(buffer, start_page, size))
            buffer = []
    out.extend(_flush(buffer, start_page, size))
    return out[:MAX_CHUNKS]


def _flush(lines: list[str], page: int | None, size: int) -> list[Passage]:
    body = " ".join(" ".join(lines).split())
    return [Passage(page, body[i : i + size * 2]) for i in range(0, len(body), size * 2)
            if body[i : i + size * 2].strip()]


class DocumentService:
    """Adds, searches, lists and forgets a person's documents (every query by user_id)."""

    def __init__(self, pool: Pool, memory: MemoryService, clock: Clock, quota_bytes: int) -> None:
        self.pool = pool
        self.memory = memory
        self.clock = clock
        self.quota_bytes = quota_bytes
        self.retrieval = Retrieval(pool, sql=CHUNK_SQL)

    async def add(self, user_id: int, name: str, mime: str, original: bytes, text: str, *,
                  pages: int | None = None, read_pages: int | None = None,
                  outline: list[str] | None = None) -> DocumentInfo:
        """Store a document and its embedded passages; DocumentQuotaExceeded when full,
        MemoryUnavailable when the embedder fails or the store moved to another one."""
        pieces = passages(text)
        vectors = []
        for i in range(0, len(pieces), EMBED_BATCH):
            vectors += await self.memory.embed([p.text for p in pieces[i:i + EMBED_BATCH]])
        doc_id, now = str(uuid.uuid4()), self.clock.now()
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('documents'), %s::int)",
                               (user_id % 2**31,))
            if vectors:
                try:
                    await ensure_bound(conn, self.memory.embedder.name, len(vectors[0]))
                except EmbedderChanged as exc:
                    raise MemoryUnavailable(str(exc)) from exc
            used = one(await (await conn.execute(USED, (user_id,))).fetchone())["used"]
            if used + len(original) + len(text.encode()) > self.quota_bytes:
                raise DocumentQuotaExceeded
            await conn.execute(INSERT, {
                "id": doc_id, "user": user_id, "name": name, "mime": mime, "size": len(original),
                "pages": pages, "read": read_pages, "outline": Jsonb(outline or []),
                "text": text, "original": original, "tainted": True, "now": now,
            })
            async with conn.cursor() as cur:
                await cur.executemany(INSERT_CHUNK, [
                    (user_id, doc_id, seq, p.page, p.text, vector, now, now)
                    for seq, (p, vector) in enumerate(zip(pieces, vectors, strict=True))
                ])
        return DocumentInfo(doc_id, name, mime, len(original), pages, read_pages, len(text), now)

    async def search(self, user_id: int, query: str, limit: int = 5) -> list[DocumentHit]:
        """The person's passages best matching `query` (meaning and keywords, fused)."""
        vector = await self.memory.embed_query(query)
        try:
            hits = await self.retrieval.search(user_id, query, limit, "hybrid", vector)
        except psycopg.errors.DataException as exc:  # vectors of another size
            raise MemoryUnavailable(
                "some passages are stored with another embedding model; run `panager memory "
                "reembed` (or restart Panager if it was just run)."
            ) from exc
        ids = sorted({h.source for h in hits})
        rows = await fetch_all(self.pool, NAMES, (user_id, ids)) if ids else []
        names = {r["id"]: r["name"] for r in rows}
        return [DocumentHit(h.source, names.get(h.source, "?"),
                            int(h.category) if h.category else None, h.content, h.score)
                for h in hits]

    async def list(self, user_id: int) -> list[DocumentInfo]:
        """The person's documents, newest first."""
        return [_info(r) for r in await fetch_all(self.pool, LIST, (user_id,))]

    async def get(self, user_id: int, document_id: str) -> tuple[DocumentInfo, str] | None:
        """A document and its extracted text."""
        if not _is_uuid(document_id):
            return None
        row = await fetch_one(self.pool, GET, (user_id, document_id))
        return (_info(row), row["text"]) if row else None

    async def original(self, user_id: int, document_id: str) -> tuple[str, str, bytes] | None:
        """(name, type, bytes) of the file as it was sent."""
        if not _is_uuid(document_id):
            return None
        row = await fetch_one(self.pool, ORIGINAL, (user_id, document_id))
        return (row["name"], row["mime"], bytes(row["original"])) if row else None

    async def forget(self, user_id: int, document_id: str) -> DocumentInfo | None:
        """Delete a document and its passages; None when there is no such document."""
        if not _is_uuid(document_id):
            return None
        row = await fetch_one(self.pool, DELETE, (user_id, document_id))
        return _info(row) if row else None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(str(text))
    except ValueError:
        return False
    return True
