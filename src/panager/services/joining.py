"""Joining two people into one, and detaching an identity into a new person.

`join_people(keep, gone)` moves everything of person `gone` to person `keep` in
ONE transaction, then deletes `gone`. What happens to each table is written
down in `PERSON_COLUMNS` — every column that holds a person id — and a test
compares it with the live schema, so a new per-person table cannot be
forgotten here. In short: everything is kept; exact duplicate memories and
documents merge; token usage of the same day and model is summed; settings
unique per person (system jobs, webhook names, profile sections) keep
`keep`'s and rename or cancel `gone`'s; a Google account must have been
chosen before (at most one of the two may still have one).

Conversation threads are LangGraph checkpoints under `thread_id = str(id)`:
the caller says which thread survives (`keep_thread_of`); the other is deleted
in the same transaction (its summary is saved as memories first, by the
caller: agent/flows/linking.py).

Locks: the transaction takes the link lock of both people in ascending id
order, then their memory-save locks in the same order, so two joins at once
(A+B and B+C) serialise instead of deadlocking, and a memory save cannot
slip a row under a person being deleted. The caller re-checks who is behind
each identity after the locks (`persons_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from panager.db.locks import LINK_LOCK_NAMESPACE, SAVE_LOCK_NAMESPACE
from panager.db.pool import Pool
from panager.services.memory.text import normalise

LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"

# Every column that holds a person id, and what a join does with it. Columns that hold a
# front end's own id (the inbox tables' sender) are listed too, so the test can tell them
# from forgotten ones.
PERSON_COLUMNS: dict[tuple[str, str], str] = {
    ("users", "id"): "gone's row deleted last; admin if either is; relays off if either was",
    ("identities", "user_id"): "moved: every front end reaches the joined person",
    ("memories", "user_id"): "moved; exact duplicates of keep's memories merged",
    ("memory_terms", "user_id"): "rebuilt from the joined memories",
    ("memory_stats", "user_id"): "rebuilt from the joined memories",
    ("schedules", "user_id"): "moved; gone's heartbeat/briefing/tidy cancelled when keep has one",
    ("schedule_runs", "user_id"): "moved",
    ("invites", "created_by"): "moved",
    ("invite_redemptions", "user_id"): "moved",
    ("google_accounts", "user_id"): "moved when only gone has one (the caller revoked the other)",
    ("provider_accounts", "user_id"): "moved: every connected account is kept (keys are unique)",
    ("oauth_states", "user_id"): "moved",
    ("pending_messages", "user_id"): "moved",
    ("token_usage", "user_id"): "summed per day and model",
    ("relay_blocks", "user_id"): "moved (duplicates and blocks of oneself dropped)",
    ("relay_blocks", "blocked_id"): "pointed at keep (a block of oneself dropped)",
    ("relay_block_names", "user_id"): "moved (a name both blocked kept once)",
    ("relay_block_names", "blocked_id"): "pointed at keep",
    ("relay_sends", "sender_id"): "moved",
    ("relay_sends", "recipient_id"): "moved",
    ("web_links", "user_id"): "moved",
    ("web_sessions", "user_id"): "moved: both people's signed-in browsers stay signed in",
    ("webhooks", "user_id"): "moved; a live name keep also uses gets a suffix",
    ("heartbeat_seen", "user_id"): "moved (what either already announced stays announced)",
    ("link_codes", "user_id"): "deleted (codes of either person end with the join)",
    ("link_codes", "claimed_user_id"): "deleted with the codes",
    ("proposals", "user_id"): "moved (a held call can still be approved, once)",
    ("media_files", "user_id"): "moved",
    ("documents", "user_id"): "moved; a document keep already has (the same bytes) merged away",
    ("document_chunks", "user_id"): "moved with their documents",
    ("document_terms", "user_id"): "rebuilt from the joined documents",
    ("document_stats", "user_id"): "rebuilt from the joined documents",
    ("profile_sections", "user_id"): "moved; a section both have keeps keep's text, gone's "
    "text goes into its history",
    ("profile_proposals", "user_id"): "moved",
    ("mail_shown", "user_id"): "moved (a draft shown before a send stays the one shown)",
    ("caldav_checks", "user_id"): "moved (the hourly check limit counts both)",
    ("discord_inbox", "user_id"): "not a person: the Discord sender id",
    ("telegram_inbox", "user_id"): "not a person: the Telegram sender id",
}

MOVE = "UPDATE {table} SET {column} = %(keep)s WHERE {column} = %(gone)s"
MOVED = (
    ("identities", "user_id"),
    ("schedule_runs", "user_id"),
    ("invites", "created_by"),
    ("oauth_states", "user_id"),
    ("pending_messages", "user_id"),
    ("relay_sends", "sender_id"),
    ("relay_sends", "recipient_id"),
    ("web_links", "user_id"),
    ("web_sessions", "user_id"),
    ("google_accounts", "user_id"),
    ("provider_accounts", "user_id"),
    ("proposals", "user_id"),
    ("media_files", "user_id"),
    ("profile_proposals", "user_id"),
    ("caldav_checks", "user_id"),
)

MERGE_USER = """
UPDATE users k SET role = CASE WHEN %(admin)s THEN 'admin' ELSE 'user' END,
       status = CASE WHEN 'active' IN (k.status, g.status) THEN 'active' ELSE k.status END,
       relays_off = k.relays_off OR g.relays_off,
       model = COALESCE(k.model, g.model), updated_at = now()
  FROM users g WHERE k.id = %(keep)s AND g.id = %(gone)s
"""
DELETE_USER = "DELETE FROM users WHERE id = %(gone)s"
MEMORIES = """
SELECT id, user_id, content, tainted FROM memories WHERE user_id IN (%(keep)s, %(gone)s)
 ORDER BY superseded_by IS NOT NULL, created_at
"""
DELETE_MEMORIES = "DELETE FROM memories WHERE id = ANY(%(ids)s)"
# The merged copy stands for the deleted one: what pointed at it points at the copy, and the
# copy counts as the person's own words if either was.
MERGED_INTO = """
UPDATE memories SET superseded_by = %(kept)s WHERE superseded_by = %(dup)s;
UPDATE memories SET tainted = tainted AND %(dup_tainted)s WHERE id = %(kept)s
"""


def rebuilt_terms(rows: str, terms: str, stats: str) -> str:
    """SQL that recounts the kept person's BM25 statistics (`terms`, `stats`) from the
    table `rows` and drops the joined-away person's."""
    return f"""
DELETE FROM {terms} WHERE user_id IN (%(keep)s, %(gone)s);
DELETE FROM {stats} WHERE user_id IN (%(keep)s, %(gone)s);
INSERT INTO {terms} (user_id, lexeme, df)
SELECT r.user_id, l.lexeme, count(*) FROM {rows} r,
       unnest(tsvector_to_array(r.content_tsv)) AS l(lexeme)
 WHERE r.user_id = %(keep)s GROUP BY 1, 2;
INSERT INTO {stats} (user_id, n, total_len)
SELECT user_id, count(*), sum(length(content_tsv)) FROM {rows}
 WHERE user_id = %(keep)s GROUP BY 1
"""


REBUILD_TERMS = rebuilt_terms("memories", "memory_terms", "memory_stats")
SYSTEM_JOBS = """
UPDATE schedules g SET status = 'cancelled', updated_at = now()
 WHERE g.user_id = %(gone)s AND g.kind IN ('heartbeat', 'briefing', 'tidy')
   AND g.status IN ('active', 'paused', 'failed', 'missed')
   AND EXISTS (SELECT 1 FROM schedules k WHERE k.user_id = %(keep)s AND k.kind = g.kind
                  AND k.status IN ('active', 'paused', 'failed', 'missed'))
"""
REDEMPTIONS = """
DELETE FROM invite_redemptions g WHERE g.user_id = %(gone)s AND EXISTS
  (SELECT 1 FROM invite_redemptions k WHERE k.user_id = %(keep)s AND k.code = g.code)
"""
USAGE = """
INSERT INTO token_usage AS t (user_id, day, model, prompt_tokens, completion_tokens,
                              total_tokens, calls, updated_at)
SELECT %(keep)s, day, model, prompt_tokens, completion_tokens, total_tokens, calls, updated_at
  FROM token_usage WHERE user_id = %(gone)s
ON CONFLICT (user_id, day, model) DO UPDATE
   SET prompt_tokens = t.prompt_tokens + EXCLUDED.prompt_tokens,
       completion_tokens = t.completion_tokens + EXCLUDED.completion_tokens,
       total_tokens = t.total_tokens + EXCLUDED.total_tokens,
       calls = t.calls + EXCLUDED.calls,
       updated_at = GREATEST(t.updated_at, EXCLUDED.updated_at);
DELETE FROM token_usage WHERE user_id = %(gone)s
"""
RELAY_BLOCKS = """
INSERT INTO relay_blocks (user_id, blocked_id, created_at)
SELECT CASE WHEN user_id = %(gone)s THEN %(keep)s ELSE user_id END,
       CASE WHEN blocked_id = %(gone)s THEN %(keep)s ELSE blocked_id END, created_at
  FROM relay_blocks WHERE %(gone)s IN (user_id, blocked_id)
ON CONFLICT DO NOTHING;
DELETE FROM relay_blocks WHERE %(gone)s IN (user_id, blocked_id);
DELETE FROM relay_blocks WHERE user_id = %(keep)s AND blocked_id = %(keep)s
"""
RELAY_BLOCK_NAMES = """
INSERT INTO relay_block_names (user_id, name, blocked_id, created_at)
SELECT %(keep)s, name, blocked_id, created_at FROM relay_block_names WHERE user_id = %(gone)s
ON CONFLICT DO NOTHING;
DELETE FROM relay_block_names WHERE user_id = %(gone)s;
UPDATE relay_block_names SET blocked_id = %(keep)s WHERE blocked_id = %(gone)s
"""
WEBHOOK_NAMES = """
UPDATE webhooks g SET name = g.name || '-' || substr(g.id, 1, 6)
 WHERE g.user_id = %(gone)s AND g.revoked_at IS NULL AND EXISTS
   (SELECT 1 FROM webhooks k WHERE k.user_id = %(keep)s AND k.revoked_at IS NULL
       AND lower(k.name) = lower(g.name))
"""
HEARTBEAT_SEEN = """
INSERT INTO heartbeat_seen (user_id, item_key, seen_at)
SELECT %(keep)s, item_key, seen_at FROM heartbeat_seen WHERE user_id = %(gone)s
ON CONFLICT DO NOTHING;
DELETE FROM heartbeat_seen WHERE user_id = %(gone)s
"""
END_CODES = """
DELETE FROM link_codes WHERE user_id IN (%(keep)s, %(gone)s)
                          OR claimed_user_id IN (%(keep)s, %(gone)s)
"""
STATUSES = "SELECT status FROM users WHERE id IN (%(keep)s, %(gone)s) FOR UPDATE"
DOCUMENTS = """
DELETE FROM documents g WHERE g.user_id = %(gone)s AND EXISTS
  (SELECT 1 FROM documents k WHERE k.user_id = %(keep)s AND k.original = g.original);
UPDATE documents SET user_id = %(keep)s WHERE user_id = %(gone)s;
UPDATE document_chunks SET user_id = %(keep)s WHERE user_id = %(gone)s;
""" + rebuilt_terms("document_chunks", "document_terms", "document_stats")
PROFILE = """
UPDATE profile_sections k
   SET history = k.history || jsonb_build_array(jsonb_build_object(
           'text', g.text, 'replaced_at', now(), 'joined_from', %(gone)s))
  FROM profile_sections g
 WHERE k.user_id = %(keep)s AND g.user_id = %(gone)s AND g.section = k.section
   AND g.text <> k.text;
DELETE FROM profile_sections g WHERE g.user_id = %(gone)s AND EXISTS
  (SELECT 1 FROM profile_sections k WHERE k.user_id = %(keep)s AND k.section = g.section);
UPDATE profile_sections SET user_id = %(keep)s WHERE user_id = %(gone)s
"""
MAIL_SHOWN = """
DELETE FROM mail_shown g WHERE g.user_id = %(gone)s AND EXISTS
  (SELECT 1 FROM mail_shown k WHERE k.user_id = %(keep)s AND k.call_key = g.call_key);
UPDATE mail_shown SET user_id = %(keep)s WHERE user_id = %(gone)s
"""
GOOGLE_COUNT = "SELECT count(*) AS n FROM google_accounts WHERE user_id IN (%(keep)s, %(gone)s)"
THREAD_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")
DROP_THREAD = "DELETE FROM {table} WHERE thread_id = %s"
MOVE_THREAD = "UPDATE {table} SET thread_id = %s WHERE thread_id = %s"
THREAD_ACTIVITY = """
SELECT thread_id, max(checkpoint->>'ts') AS ts FROM checkpoints
 WHERE thread_id IN (%s, %s) AND checkpoint_ns = '' GROUP BY thread_id
"""
FIND_PERSON = "SELECT user_id FROM identities WHERE platform = %s AND platform_id = %s"
USERNAME_TAKEN = "SELECT 1 FROM users WHERE lower(username) = lower(%s)"
NEW_PERSON = """
INSERT INTO users (id, username, display_name, timezone, role, status, notify)
SELECT nextval('person_ids'), %(username)s, display_name, timezone, %(role)s, %(status)s,
       'auto'
  FROM users WHERE id = %(old)s
RETURNING id
"""
DETACH = "UPDATE identities SET user_id = %s WHERE platform = %s AND platform_id = %s"
SET_ROLE = "UPDATE users SET role = %s, updated_at = now() WHERE id = %s"
COUNT_IDENTITIES = "SELECT count(*) AS n FROM identities WHERE user_id = %s"


class JoinError(Exception):
    """The join cannot go ahead as asked (nothing was changed)."""


@dataclass(frozen=True)
class JoinPlan:
    """Who survives, whose thread survives, and whether the joined person is an admin."""

    keep: int
    gone: int
    keep_thread_of: int  # keep or gone
    admin: bool


async def lock_people(conn: Any, *people: int) -> None:
    """Per-person link and memory locks, always in ascending id order (no deadlocks)."""
    ordered = sorted(set(people))
    for namespace in (LINK_LOCK_NAMESPACE, SAVE_LOCK_NAMESPACE):
        for person in ordered:
            await conn.execute(LOCK, (namespace, person & 0x7FFFFFFF))


async def person_of(conn: Any, platform: str, platform_id: int) -> int | None:
    """The person behind an identity, read inside the caller's transaction."""
    row = await (await conn.execute(FIND_PERSON, (platform, platform_id))).fetchone()
    return row["user_id"] if row else None


async def thread_activity(pool: Pool, a: int, b: int) -> dict[int, str]:
    """When each person's thread was last written ({} entries for people with none)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(THREAD_ACTIVITY, (str(a), str(b)))).fetchall()
    return {int(r["thread_id"]): r["ts"] for r in rows}


async def join_people(conn: Any, plan: JoinPlan) -> None:
    """Move all of `plan.gone` to `plan.keep` and delete `gone` (inside the caller's
    transaction, after `lock_people`)."""
    if plan.keep == plan.gone:
        raise JoinError("the two identities are already one person")
    params = {"keep": plan.keep, "gone": plan.gone, "admin": plan.admin}
    statuses = await (await conn.execute(STATUSES, params)).fetchall()
    if len(statuses) != 2:
        raise JoinError("one of the two people no longer exists")
    if any(r["status"] == "blocked" for r in statuses):
        raise JoinError("a blocked account cannot be joined")
    google = await (await conn.execute(GOOGLE_COUNT, params)).fetchone()
    if google["n"] > 1:
        raise JoinError("both people have a Google account linked; one must be chosen first")
    await conn.execute(MERGE_USER, params)
    await _memories(conn, params)
    await conn.execute(SYSTEM_JOBS, params)
    await conn.execute(MOVE.format(table="schedules", column="user_id"), params)
    await conn.execute(REDEMPTIONS, params)
    await conn.execute(MOVE.format(table="invite_redemptions", column="user_id"), params)
    for sql in (USAGE, RELAY_BLOCKS, RELAY_BLOCK_NAMES, WEBHOOK_NAMES, HEARTBEAT_SEEN, END_CODES,
                DOCUMENTS, PROFILE, MAIL_SHOWN):
        await _run(conn, sql, params)
    await conn.execute(MOVE.format(table="webhooks", column="user_id"), params)
    for table, column in MOVED:
        await conn.execute(MOVE.format(table=table, column=column), params)
    await _threads(conn, plan)
    await conn.execute(DELETE_USER, params)


async def _run(conn: Any, script: str, params: dict[str, Any]) -> None:
    """Run `;`-separated statements one by one (a parameterised statement must be alone)."""
    for sql in script.split(";\n"):
        if sql.strip():
            await conn.execute(sql, params)


async def _memories(conn: Any, params: dict[str, Any]) -> None:
    """Move gone's memories; a memory keep already has (same words) is merged away."""
    rows = await (await conn.execute(MEMORIES, params)).fetchall()
    kept = {normalise(r["content"]): r for r in rows if r["user_id"] == params["keep"]}
    duplicates = []
    for row in rows:
        if row["user_id"] != params["gone"]:
            continue
        key = normalise(row["content"])
        if key not in kept:
            kept[key] = row
            continue
        duplicates.append(row["id"])
        merge = {"kept": kept[key]["id"], "dup": row["id"], "dup_tainted": row["tainted"]}
        await _run(conn, MERGED_INTO, merge)
    if duplicates:
        await conn.execute(DELETE_MEMORIES, {"ids": duplicates})
    await conn.execute(MOVE.format(table="memories", column="user_id"), params)
    await _run(conn, REBUILD_TERMS, params)


async def _threads(conn: Any, plan: JoinPlan) -> None:
    """Keep one conversation thread under the joined person's id; delete the other."""
    keep, gone = str(plan.keep), str(plan.gone)
    dropped = gone if plan.keep_thread_of == plan.keep else keep
    for table in THREAD_TABLES:
        await conn.execute(DROP_THREAD.format(table=table), (dropped,))
    if plan.keep_thread_of == plan.gone:
        for table in THREAD_TABLES:
            await conn.execute(MOVE_THREAD.format(table=table), (keep, gone))


async def detach_identity(
    conn: Any, person: int, platform: str, platform_id: int, username: str, *, admin: bool,
    admitted: bool,
) -> int:
    """Move one identity of `person` to a new, empty person, let in (`admitted`) or waiting
    to be (pending); returns the new person's id."""
    name = username
    suffix = 2
    while await (await conn.execute(USERNAME_TAKEN, (name,))).fetchone() is not None:
        name = f"{username}-{suffix}"
        suffix += 1
    role = "admin" if admin else "user"
    status = "active" if admitted else "pending"
    row = await (
        await conn.execute(
            NEW_PERSON, {"username": name, "role": role, "status": status, "old": person}
        )
    ).fetchone()
    await conn.execute(DETACH, (row["id"], platform, platform_id))
    return int(row["id"])


async def count_identities(conn: Any, person: int) -> int:
    """How many identities the person has."""
    return int((await (await conn.execute(COUNT_IDENTITIES, (person,))).fetchone())["n"])


async def set_role(conn: Any, person: int, admin: bool) -> None:
    """Admin or user, as the person's identities say."""
    await conn.execute(SET_ROLE, ("admin" if admin else "user", person))
