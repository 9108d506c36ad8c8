"""Joining two people who both have data loses none of it; the join covers every table.

Everything runs on the test's own PostgreSQL database through the real services
and the real `/link` commands (CommandContext names the front-end identity).
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from panager.agent.commands import CommandContext, dispatch
from panager.agent.turns.threads import thread_values, update_thread
from panager.services.joining import PERSON_COLUMNS
from tests.fakes.scripted_model import ScriptedChatModel

DISCORD_ID = 111_000_000_000_000_001
TELEGRAM_ID = 222_001
OTHER_ID = 333_000_000_000_000_003

# Every column holding a person id, found in the live schema: named user_id, or a foreign
# key to users.
PERSON_COLUMNS_SQL = """
SELECT table_name, column_name FROM information_schema.columns
 WHERE table_schema = current_schema() AND column_name = 'user_id'
UNION
SELECT tc.table_name, kcu.column_name
  FROM information_schema.table_constraints tc
  JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name)
  JOIN information_schema.constraint_column_usage ccu USING (constraint_schema, constraint_name)
 WHERE tc.constraint_type = 'FOREIGN KEY' AND ccu.table_name = 'users'
   AND tc.table_schema = current_schema()
"""


async def run(app, identity, text: str, user=None):
    """A slash command as it arrives from `identity` (the person found as the adapters do)."""
    platform, pid = identity
    if user is None:
        user = await app.deps.users.ensure_identity(platform, pid, f"{platform}-{pid}")
    front_end = platform
    ctx = CommandContext(user=user, assistant=app.assistant, front_end=front_end, identity=identity)
    return (await dispatch(ctx, text)).text


def code_in(text: str) -> str:
    return text.split("Your link code: ")[1].split()[0]


async def link(app, issuer, claimant, *, approve="approve") -> str:
    """The whole dance: a code on `issuer`, used and confirmed on `claimant`, approved on
    `issuer`."""
    code = code_in(await run(app, issuer, "/link"))
    claimed = await run(app, claimant, f"/link {code}")
    assert "Code accepted" in claimed, claimed
    assert "Confirmed" in await run(app, claimant, "/link confirm")
    return await run(app, issuer, f"/link {approve}")


async def test_every_person_column_of_the_schema_is_handled_by_the_join(make_app):
    """Fails when a migration adds a per-person column the join does not name."""
    app = await make_app()
    async with app.pool.connection() as conn:
        rows = await (await conn.execute(PERSON_COLUMNS_SQL)).fetchall()
    live = {(r["table_name"], r["column_name"]) for r in rows}
    assert live - set(PERSON_COLUMNS) == set(), "a per-person column the join does not handle"
    stale = {k for k in set(PERSON_COLUMNS) - live if k[1] == "user_id"}
    assert stale == set(), "the join names columns the schema no longer has"


async def seed(app, person: int, tag: str, other: int) -> None:
    """A row in every per-person table for `person` (`other` is a third person)."""
    memory = app.deps.memory
    await memory.save(person, f"{tag} likes green tea")
    await memory.save(person, "My sister is called Hana")  # the same fact on both sides
    now = app.clock.now()
    stmts = [
        ("INSERT INTO schedules (id, user_id, kind, message, timezone, anchor_local, next_run_at) "
         "VALUES (%s, %s, 'reminder', 'water the plants', 'UTC', '2026-11-22 09:00', %s)",
         (f"s{tag}", person, now)),
        ("INSERT INTO schedule_runs (schedule_id, user_id, scheduled_for, status) "
         "VALUES (%s, %s, %s, 'delivered')", (f"s{tag}", person, now)),
        ("INSERT INTO schedules (id, user_id, kind, message, timezone, anchor_local, next_run_at) "
         "VALUES (%s, %s, 'heartbeat', '', 'UTC', '2026-11-22 09:00', %s)",
         (f"h{tag}", person, now)),
        ("INSERT INTO invites (code, created_by) VALUES (%s, %s)", (f"INV{tag}", person)),
        ("INSERT INTO invite_redemptions (code, user_id) VALUES (%s, %s)", (f"INV{tag}", person)),
        ("INSERT INTO oauth_states (state_hash, user_id, code_verifier, expires_at) "
         "VALUES (%s, %s, 'v', %s)", (f"st{tag}", person, now)),
        ("INSERT INTO pending_messages (user_id, text) VALUES (%s, 'later')", (person,)),
        ("INSERT INTO token_usage (user_id, day, model, prompt_tokens, completion_tokens, "
         "total_tokens, calls) VALUES (%s, '2026-11-21', 'm', 10, 5, 15, 1)", (person,)),
        ("INSERT INTO token_usage (user_id, day, model, total_tokens, calls) "
         "VALUES (%s, %s, 'm', 7, 1)", (person, "2026-11-11" if tag == "A" else "2026-11-12")),
        ("INSERT INTO relay_blocks (user_id, blocked_id) VALUES (%s, %s)", (person, other)),
        ("INSERT INTO relay_sends (sender_id, recipient_id, sent_at) VALUES (%s, %s, %s)",
         (person, other, now)),
        ("INSERT INTO web_links (token_hash, user_id, created_at, expires_at) "
         "VALUES (%s, %s, %s, %s)", (tag.encode() * 4, person, now, now)),
        ("INSERT INTO web_sessions (id_hash, user_id, csrf_token, created_at, last_seen_at) "
         "VALUES (%s, %s, 'c', %s, %s)", (tag.encode() * 5, person, now, now)),
        ("INSERT INTO webhooks (id, user_id, name, instruction, token_hash, created_at) "
         "VALUES (%s, %s, 'deploys', 'x', %s, %s)", (f"wh{tag}", person, tag.encode() * 6, now)),
        ("INSERT INTO heartbeat_seen (user_id, item_key, seen_at) VALUES (%s, 'mail:1', %s)",
         (person, now)),
        ("INSERT INTO heartbeat_seen (user_id, item_key, seen_at) VALUES (%s, %s, %s)",
         (person, f"mail:{tag}", now)),
    ]
    same = b"%PDF same file on both sides"
    stmts += [
        ("INSERT INTO proposals (id, user_id, tool, args, description, created_at, expires_at) "
         "VALUES (%s, %s, 'web_fetch', '{}', 'fetch', %s, %s + interval '1 day')",
         (f"p{tag}", person, now, now)),
        ("INSERT INTO media_files (id, user_id, name, mime, size, data) "
         "VALUES (gen_random_uuid(), %s, 'a.png', 'image/png', 1, 'x')", (person,)),
        ("INSERT INTO profile_sections (user_id, section, text, updated_at) "
         "VALUES (%s, 'about', %s, %s)", (person, f"{tag} is a cook", now)),
        ("INSERT INTO profile_sections (user_id, section, text, updated_at) "
         "VALUES (%s, %s, 'tea, not coffee', %s)",
         (person, "preferences" if tag == "A" else "people", now)),
        ("INSERT INTO profile_proposals (id, user_id, section, text, created_at) "
         "VALUES (%s, %s, 'about', 'x', %s)", (f"pp{tag}", person, now)),
        ("INSERT INTO mail_shown (user_id, call_key, draft_id, digest, created_at) "
         "VALUES (%s, %s, 'd1', 'h', %s)", (person, f"call{tag}", now)),
    ]
    for name, original in ((f"{tag}.pdf", f"only {tag}".encode()), ("same.pdf", same)):
        doc = f"00000000-0000-0000-0000-0000000000{ord(tag):02x}" if original != same else None
        stmts += [
            ("INSERT INTO documents (id, user_id, name, mime, size, text, original) "
             "VALUES (COALESCE(%s::uuid, gen_random_uuid()), %s, %s, 'application/pdf', 1, "
             "%s, %s)", (doc, person, name, original.decode(), original)),
            ("INSERT INTO document_chunks (user_id, document_id, seq, content, embedding) "
             "SELECT %s, id, 0, text, array_fill(0.1::real, ARRAY[(SELECT dim FROM memory_meta)])"
             "::vector FROM documents WHERE user_id = %s "
             "AND name = %s", (person, person, name)),
        ]
    async with app.pool.connection() as conn:
        for sql, params in stmts:
            await conn.execute(sql, params)


async def counts(app, people: list[int]) -> dict[tuple[str, str], int]:
    """Rows per (table, column) belonging to any of `people`."""
    found = {}
    async with app.pool.connection() as conn:
        for table, column in PERSON_COLUMNS:
            if table in ("users", "discord_inbox", "telegram_inbox", "link_codes"):
                continue
            sql = f"SELECT count(*) AS n FROM {table} WHERE {column} = ANY(%s)"
            found[(table, column)] = (await (await conn.execute(sql, (people,))).fetchone())["n"]
    return found


async def test_joining_two_people_with_data_loses_none_of_it(make_app):
    app = await make_app(model=ScriptedChatModel())
    users = app.deps.users
    a = await users.ensure_identity("discord", DISCORD_ID, "mina")
    b = await users.ensure_identity("telegram", TELEGRAM_ID, "mina_tg")
    other = await users.ensure_identity("discord", OTHER_ID, "sam")
    await seed(app, a.id, "A", other.id)
    await seed(app, b.id, "B", other.id)
    async with app.pool.connection() as conn:  # blocks pointing at the joined people
        await conn.execute(
            "INSERT INTO relay_blocks (user_id, blocked_id) VALUES (%s, %s), (%s, %s)",
            (other.id, a.id, other.id, b.id),
        )
        await conn.execute(
            "INSERT INTO google_accounts (user_id, email, token_ciphertext) VALUES (%s, 'b@x', 't')",
            (b.id,),
        )
    await update_thread(app.assistant, a, {"messages": [HumanMessage("old discord chat")]})
    await update_thread(
        app.assistant, b, {"messages": [HumanMessage("I fly to Oslo"), AIMessage("Noted.")]}
    )
    await update_thread(app.assistant, a, {"messages": [HumanMessage("newest, on discord")]})
    before = await counts(app, [a.id, b.id])

    joined = await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))
    assert joined.startswith("Joined"), joined

    assert await users.get(b.id) is None
    after = await counts(app, [a.id])
    assert await counts(app, [b.id]) == dict.fromkeys(after, 0)  # nothing left behind
    merged = {
        ("memories", "user_id"): 1,  # "My sister is called Hana" was on both sides
        ("token_usage", "user_id"): 1,  # the same day and model, summed into one row
        ("heartbeat_seen", "user_id"): 1,  # both had already announced mail:1
        ("relay_blocks", "blocked_id"): 1,  # sam blocked both: one block of the joined person
        ("relay_blocks", "user_id"): 1,  # both blocked sam: one block
        ("memory_terms", "user_id"): None,  # rebuilt: checked below
        ("memory_stats", "user_id"): 1,  # one row per person
        ("documents", "user_id"): 1,  # same.pdf (the same bytes) was on both sides
        ("document_chunks", "user_id"): 1,  # … with its passage
        ("document_terms", "user_id"): None,  # rebuilt
        ("document_stats", "user_id"): 1,
        ("profile_sections", "user_id"): 1,  # both had "about": keep's text, gone's in history
    }
    for key, n in before.items():
        if key in merged:
            continue
        assert after[key] == n, (key, n, after[key])
    summary = before[("memories", "user_id")] - 1 + 1  # + the summary of the dropped thread
    assert after[("memories", "user_id")] == summary
    assert after[("token_usage", "user_id")] == before[("token_usage", "user_id")] - 1
    assert after[("heartbeat_seen", "user_id")] == before[("heartbeat_seen", "user_id")] - 1
    assert after[("relay_blocks", "user_id")] == after[("relay_blocks", "blocked_id")] == 1
    assert after[("documents", "user_id")] == before[("documents", "user_id")] - 1 == 3
    assert after[("document_chunks", "user_id")] == 3
    assert after[("profile_sections", "user_id")] == 3  # about, preferences, people
    async with app.pool.connection() as conn:
        usage = await (
            await conn.execute(
                "SELECT prompt_tokens, total_tokens, calls FROM token_usage "
                "WHERE user_id = %s AND day = '2026-11-21'",
                (a.id,),
            )
        ).fetchone()
        assert usage == {"prompt_tokens": 20, "total_tokens": 30, "calls": 2}
        jobs = await (
            await conn.execute(
                "SELECT id, status FROM schedules WHERE user_id = %s AND kind = 'heartbeat' "
                "ORDER BY id", (a.id,),
            )
        ).fetchall()
        assert [(j["id"], j["status"]) for j in jobs] == [("hA", "active"), ("hB", "cancelled")]
        hooks = await (
            await conn.execute("SELECT name FROM webhooks WHERE user_id = %s ORDER BY id", (a.id,))
        ).fetchall()
        assert hooks[0]["name"] == "deploys" and hooks[1]["name"].startswith("deploys-")
        stats = await (
            await conn.execute("SELECT n FROM memory_stats WHERE user_id = %s", (a.id,))
        ).fetchone()
        assert stats["n"] == after[("memories", "user_id")]  # BM25 statistics follow
        doc_stats = await (
            await conn.execute("SELECT n FROM document_stats WHERE user_id = %s", (a.id,))
        ).fetchone()
        assert doc_stats["n"] == 3
        about = await (
            await conn.execute(
                "SELECT text, history FROM profile_sections WHERE user_id = %s "
                "AND section = 'about'", (a.id,),
            )
        ).fetchone()
        assert about["text"] == "A is a cook" and about["history"][-1]["text"] == "B is a cook"
        google = await (
            await conn.execute("SELECT email FROM google_accounts WHERE user_id = %s", (a.id,))
        ).fetchone()
        assert google["email"] == "b@x"
    # The thread written last (Discord's) is kept; the other is saved as marked memories.
    messages = (await thread_values(app.assistant, a))["messages"]
    assert [m.content for m in messages] == ["old discord chat", "newest, on discord"]
    saved = [h.content for h in await app.deps.memory.list(a.id) if "Oslo" in h.content]
    assert len(saved) == 1 and "Telegram" in saved[0] and "Noted." in saved[0]
    async with app.pool.connection() as conn:
        source = await (
            await conn.execute(
                "SELECT source FROM memories WHERE user_id = %s AND content LIKE '%%Oslo%%'",
                (a.id,),
            )
        ).fetchone()
    assert source["source"] == "link"
    assert await users.identities(a.id) == [("discord", DISCORD_ID), ("telegram", TELEGRAM_ID)]


async def test_a_code_used_without_the_issuing_sides_approve_joins_nothing(make_app):
    app = await make_app()
    users = app.deps.users
    a = await users.ensure_identity("discord", DISCORD_ID, "mina")
    b = await users.ensure_identity("telegram", TELEGRAM_ID, "mallory")
    code = code_in(await run(app, ("discord", DISCORD_ID), "/link"))
    claimed = await run(app, ("telegram", TELEGRAM_ID), f"/link {code}")
    assert "Nothing is joined until you confirm" in claimed
    # The claimant cannot approve its own claim, and the code cannot be used again.
    assert "Nothing is waiting" in await run(app, ("telegram", TELEGRAM_ID), "/link approve")
    third = await users.ensure_identity("telegram", TELEGRAM_ID + 1, "eve")
    again = await run(app, ("telegram", TELEGRAM_ID + 1), f"/link {code}", third)
    assert "already used" in again
    assert await users.person_id("telegram", TELEGRAM_ID) == b.id != a.id
    # The issuing side sees the request and denies it: still nothing joined.
    assert "/link approve" in await run(app, ("discord", DISCORD_ID), "/link")
    assert "Denied" in await run(app, ("discord", DISCORD_ID), "/link deny")
    assert "Nothing is waiting" in await run(app, ("discord", DISCORD_ID), "/link approve")
    assert await users.identities(a.id) == [("discord", DISCORD_ID)]
    assert await users.identities(b.id) == [("telegram", TELEGRAM_ID)]
    # A claimant blocked before the approve is not joined either.
    code = code_in(await run(app, ("discord", DISCORD_ID), "/link"))
    assert "Code accepted" in await run(app, ("telegram", TELEGRAM_ID), f"/link {code}")
    assert "Confirmed" in await run(app, ("telegram", TELEGRAM_ID), "/link confirm")
    await app.deps.access.block(TELEGRAM_ID, "telegram")
    refused = await run(app, ("discord", DISCORD_ID), "/link approve")
    assert "blocked account cannot be joined" in refused
    assert await users.identities(b.id) == [("telegram", TELEGRAM_ID)]


async def test_a_wrong_code_three_times_locks_the_front_end_for_the_period(make_app, clock):
    app = await make_app()
    await app.deps.users.ensure_identity("discord", DISCORD_ID, "mina")
    code = code_in(await run(app, ("discord", DISCORD_ID), "/link"))
    guesser = ("telegram", TELEGRAM_ID)
    for left in (2, 1):
        assert f"{left} attempt(s) left" in await run(app, guesser, "/link ABCDEFGHJK")
    assert "now locked" in await run(app, guesser, "/link ABCDEFGHJK")
    locked = await run(app, guesser, f"/link {code}")  # even the right code, while locked
    assert "Too many wrong codes" in locked
    clock.advance(minutes=9)
    assert "Too many wrong codes" in await run(app, guesser, f"/link {code}")
    # Another front end is not locked by someone else's guesses.
    other = ("telegram", TELEGRAM_ID + 7)
    assert "Code accepted" in await run(app, other, f"/link {code}")
    clock.advance(minutes=2)
    assert "already used" in await run(app, guesser, f"/link {code}")  # unlocked, code spent


async def test_a_person_not_let_in_may_use_a_code_but_not_make_one(make_app):
    app = await make_app(access="invite")
    users = app.deps.users
    member = await users.ensure_identity("discord", DISCORD_ID, "mina")
    stranger = (await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")).user
    assert stranger.status == "pending"
    assert "only use a code" in await run(app, ("telegram", TELEGRAM_ID), "/link", stranger)
    code = code_in(await run(app, ("discord", DISCORD_ID), "/link", member))
    assert "Code accepted" in await run(app, ("telegram", TELEGRAM_ID), f"/link {code}", stranger)
    assert "Confirmed" in await run(app, ("telegram", TELEGRAM_ID), "/link confirm", stranger)
    assert (await run(app, ("discord", DISCORD_ID), "/link approve", member)).startswith("Joined")
    now_in = await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")
    assert now_in.allowed and now_in.user.id == member.id


@pytest.mark.parametrize("mode", ["invite", "allowlist"])
async def test_unlinking_is_no_way_in_past_invite_or_allowlist(make_app, mode):
    """A member lets a stranger join, the stranger unlinks: the detached front end is a
    new person waiting to be let in, exactly as at its first message, not an active one."""
    app = await make_app(access=mode)
    users = app.deps.users
    member = await users.ensure_identity("discord", DISCORD_ID, "mina")
    stranger = (await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")).user
    assert stranger.status == "pending"
    assert (await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))).startswith(
        "Joined")
    joined = (await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")).user
    reply = await run(app, ("telegram", TELEGRAM_ID), "/unlink", joined)
    assert reply.startswith("Unlinked.") and "needs an invite or an admin's allow" in reply
    after = await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")
    assert not after.allowed and after.user.id != member.id
    assert after.user.status == "pending" and after.refusal
    assert (await users.get(member.id)).status == "active"


async def test_unlinking_in_open_mode_leaves_both_front_ends_in(make_app):
    app = await make_app(access="open")
    member = await app.deps.users.ensure_identity("discord", DISCORD_ID, "mina")
    assert (await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))).startswith(
        "Joined")
    reply = await run(app, ("telegram", TELEGRAM_ID), "/unlink", member)
    assert reply.startswith("Unlinked.") and "invite" not in reply
    after = await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "new")
    assert after.allowed and after.user.id != member.id and after.user.status == "active"


async def test_a_code_used_by_its_own_person_and_an_expired_code_are_refused(make_app, clock):
    app = await make_app()
    await app.deps.users.ensure_identity("discord", DISCORD_ID, "mina")
    code = code_in(await run(app, ("discord", DISCORD_ID), "/link"))
    assert "That code is yours" in await run(app, ("discord", DISCORD_ID), f"/link {code}")
    clock.advance(minutes=11)
    assert "expired" in await run(app, ("telegram", TELEGRAM_ID), f"/link {code}")


async def test_an_admin_is_never_joined_into_someone_elses_account(make_app):
    app = await make_app(admin_ids=[DISCORD_ID])
    users = app.deps.users
    admin = (await app.deps.access.admit_identity("discord", DISCORD_ID, "boss")).user
    evil = await users.ensure_identity("telegram", TELEGRAM_ID, "evil")
    code = code_in(await run(app, ("telegram", TELEGRAM_ID), "/link", evil))
    refused = await run(app, ("discord", DISCORD_ID), f"/link {code}", admin)
    assert "admin rights" in refused
    assert "Nothing is waiting" in await run(app, ("telegram", TELEGRAM_ID), "/link approve", evil)
    assert (await users.get(evil.id)).role == "user"
    # The admin's own code, used on Telegram and approved by the admin: admin rights follow.
    assert (await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))).startswith("Joined")
    joined = (await app.deps.access.admit_identity("telegram", TELEGRAM_ID, "boss_tg")).user
    assert joined.id == admin.id and joined.role == "admin"


async def test_two_joins_at_once_end_in_one_consistent_person(make_app):
    app = await make_app()
    users = app.deps.users
    a = await users.ensure_identity("discord", DISCORD_ID, "a")
    b = await users.ensure_identity("telegram", TELEGRAM_ID, "b")
    c = await users.ensure_identity("discord", OTHER_ID, "c")
    for person, tag in ((a, "A"), (b, "B"), (c, "C")):
        await app.deps.memory.save(person.id, f"fact of {tag}")
    # b's code claimed by a, and c's code claimed by b: approving both at once.
    code_b = code_in(await run(app, ("telegram", TELEGRAM_ID), "/link"))
    code_c = code_in(await run(app, ("discord", OTHER_ID), "/link"))
    assert "Code accepted" in await run(app, ("discord", DISCORD_ID), f"/link {code_b}")
    assert "Code accepted" in await run(app, ("telegram", TELEGRAM_ID), f"/link {code_c}")
    assert "Confirmed" in await run(app, ("discord", DISCORD_ID), "/link confirm")
    assert "Confirmed" in await run(app, ("telegram", TELEGRAM_ID), "/link confirm")
    results = await asyncio.gather(
        run(app, ("telegram", TELEGRAM_ID), "/link approve", b),
        run(app, ("discord", OTHER_ID), "/link approve", c),
    )
    joined = [r for r in results if r.startswith("Joined")]
    assert joined, results
    refused = [r for r in results if not r.startswith("Joined")]
    assert all("Nothing" in r for r in refused), refused  # a clear answer, never a half join
    identities = (("discord", DISCORD_ID), ("telegram", TELEGRAM_ID), ("discord", OTHER_ID))
    people = {await users.person_id(*i) for i in identities}
    assert len(people) == 3 - len(joined)
    for person in people:
        assert await users.get(person) is not None
    async with app.pool.connection() as conn:
        rows = await (await conn.execute("SELECT user_id, content FROM memories")).fetchall()
        orphans = await (
            await conn.execute("SELECT count(*) AS n FROM identities WHERE user_id <> ALL(%s)",
                               (list(people),))
        ).fetchone()
    assert {r["user_id"] for r in rows} <= people and orphans["n"] == 0
    assert len(rows) == 3  # no memory lost, whatever order the joins took


async def test_two_google_accounts_the_person_picks_one_and_the_other_is_revoked(
    make_app, monkeypatch
):
    from tests.fakes.google_server import FakeGoogle
    from tests.google_helpers import ALICE, BOB, start_harness

    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    async with FakeGoogle() as fake:
        h = await start_harness(make_app, fake)
        app = h.app
        try:
            a = await app.deps.users.ensure_identity("discord", DISCORD_ID, "mina")
            b = await app.deps.users.ensure_identity("telegram", TELEGRAM_ID, "mina_tg")
            assert (await h.link(a, account=ALICE))[0] == 200
            assert (await h.link(b, account=BOB))[0] == 200
            question = await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))
            assert ALICE in question and BOB in question and "/link approve 2" in question
            assert await app.deps.users.get(b.id) is not None  # nothing joined yet
            revoked_before = len([r for r in fake.token_requests if "revoke" in r])
            joined = await run(app, ("discord", DISCORD_ID), f"/link approve {BOB}")
            assert joined.startswith("Joined"), joined
            account = await app.deps.google.account(a.id)
            assert account is not None and account.email == BOB
            revokes = [r for r in fake.token_requests if "revoke" in r]
            assert len(revokes) == revoked_before + 1  # ALICE's grant, revoked at Google
            assert await app.deps.users.get(b.id) is None
        finally:
            await h.server.stop()


async def test_unlinking_the_listed_identity_takes_the_admin_rights_with_it(make_app):
    app = await make_app(admin_ids=[DISCORD_ID])
    access = app.deps.access
    admin = (await access.admit_identity("discord", DISCORD_ID, "boss")).user
    await app.deps.memory.save(admin.id, "The server password hint is blue")
    assert (await link(app, ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID))).startswith("Joined")
    on_telegram = (await access.admit_identity("telegram", TELEGRAM_ID, "boss_tg")).user
    assert on_telegram.id == admin.id and on_telegram.role == "admin"
    # Discord leaves: it becomes a new, empty person, still an admin (it is the listed one);
    # the person left on Telegram is an admin no more.
    unlinked = await run(app, ("discord", DISCORD_ID), "/unlink", on_telegram)
    assert unlinked.startswith("Unlinked"), unlinked
    fresh = (await access.admit_identity("discord", DISCORD_ID, "boss")).user
    assert fresh.id != admin.id and fresh.role == "admin"
    assert await app.deps.memory.list(fresh.id) == []
    rest = (await access.admit_identity("telegram", TELEGRAM_ID, "boss_tg")).user
    assert rest.id == admin.id and rest.role == "user" and not await access.is_admin(rest.id)
    assert len(await app.deps.memory.list(rest.id)) == 1  # the joined data stayed
    assert "only front end" in await run(app, ("telegram", TELEGRAM_ID), "/unlink", rest)


async def test_the_claimant_is_told_whose_account_and_keeps_their_data_until_they_confirm(
    make_app, clock
):
    """Mallory hands Alice a code. Typing it tells Alice, in plain words, whose account it
    is; Mallory's approve alone joins nothing; when the code expires unconfirmed, Alice's
    memories are still hers. Only both sides agreeing joins."""
    app = await make_app()
    ALI, MAL = ("discord", DISCORD_ID), ("telegram", TELEGRAM_ID)
    users = app.deps.users
    alice = await users.ensure_identity("discord", DISCORD_ID, "alice")
    mallory = await users.ensure_identity("telegram", TELEGRAM_ID, "mallory")
    await users.ensure(mallory.id, "mallory", display_name="Mallory M.")
    await app.deps.memory.save(alice.id, "My bank PIN is 4821")
    code = code_in(await run(app, MAL, "/link", mallory))
    told = await run(app, ALI, f"/link {code}", alice)
    # names shown literally (inline code), as every value in a question
    assert ('This makes you and the Telegram account `"mallory"` (`"Mallory M."`) one person: '
            "whoever uses that account will read your memories, documents, mail and "
            "calendar. Only continue if that account is yours") in told
    waits = await run(app, MAL, "/link approve", mallory)
    assert "has not confirmed yet" in waits
    assert await users.person_id("discord", DISCORD_ID) == alice.id != mallory.id
    assert [m.content for m in await app.deps.memory.list(alice.id)] == ["My bank PIN is 4821"]
    assert await app.deps.memory.list(mallory.id) == []
    clock.advance(minutes=11)  # the confirmations expire with the code
    assert "Nothing is waiting" in await run(app, ALI, "/link confirm", alice)
    assert "Nothing is waiting" in await run(app, MAL, "/link approve", mallory)
    assert await users.identities(alice.id) == [("discord", DISCORD_ID)]
    # a claim can be withdrawn; then the issuer has nothing to approve
    code = code_in(await run(app, MAL, "/link", mallory))
    await run(app, ALI, f"/link {code}", alice)
    assert "Cancelled" in await run(app, ALI, "/link cancel", alice)
    assert "Nothing is waiting" in await run(app, MAL, "/link approve", mallory)
    # both sides agreeing joins, the issuer's approve after the claimant's confirm
    code = code_in(await run(app, MAL, "/link", mallory))
    await run(app, ALI, f"/link {code}", alice)
    assert "Confirmed" in await run(app, ALI, "/link confirm", alice)
    assert (await run(app, MAL, "/link approve", mallory)).startswith("Joined")
    assert await users.person_id("discord", DISCORD_ID) == mallory.id
