"""Holes a co-user could use, closed (real PostgreSQL): the daily budget's day, /compact
within the budget, the /model choice re-checked, relays, advisory locks, the runtime dir."""

from __future__ import annotations

import json

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.turns.threads import update_thread
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import conversation, write_config

pytestmark = pytest.mark.timeout(90)


async def command(app, user, text, front_end="discord"):
    return await dispatch(CommandContext(user=user, assistant=app.assistant, front_end=front_end),
                          text)


# -- the daily budget: a UTC day that set_timezone cannot move; /compact within it --------------


async def test_changing_time_zone_does_not_start_a_fresh_budget_day(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home)
    users = app.deps.users
    mallory = await users.ensure(901, "mallory", timezone="UTC")
    assert (await app.assistant.run_turn(mallory, "spend tokens " * 40)).ok
    refused = await app.assistant.run_turn(mallory, "more")
    assert "today's token budget" in refused.text and len(model.requests) == 1
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):  # today is tomorrow / yesterday
        mallory = await users.set_timezone(mallory.id, zone)
        again = await app.assistant.run_turn(mallory, "and now?")
        assert again.text.startswith("You have used today's token budget"), (zone, again.text)
        assert "resets at midnight UTC" in again.text
    assert len(model.requests) == 1  # no model call after the cap, whatever the zone


async def test_compact_is_refused_once_the_budget_is_spent(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home)
    user = await app.deps.users.ensure(902, "pat", timezone="UTC")
    assert (await app.assistant.run_turn(user, "spend tokens " * 40)).ok
    await update_thread(app.assistant, user, {"messages": conversation(12)})
    calls = len(model.requests)
    model.add(json.dumps({"summary": "s", "memories": []}))
    reply = await command(app, user, "/compact")
    assert not reply.ok and "today's token budget" in reply.text
    assert len(model.requests) == calls  # the summariser was not called


# -- a stored /model choice is re-checked at every turn -----------------------------------------


async def test_a_stored_model_choice_no_longer_allowed_is_not_used(make_app, tmp_path):
    """Pat chose gpt-4o while it was allowed; the operator then narrowed allowed_models.
    Root chose o1 as an admin and was then removed from PANAGER_ADMIN_IDS. Both get the
    default model from the next turn on, and /model says so."""
    model = ScriptedChatModel(default="ok")
    home = write_config(tmp_path / "h", allowed_models=["gpt-4o-mini"])
    app = await make_app(model=model, home=home, openai_api_key="sk-test", admin_ids=[903])
    users = app.deps.users
    pat = await users.ensure(904, "pat")
    await users.set_model(pat.id, "gpt-4o")  # as /model did when gpt-4o was allowed
    root = await users.ensure(905, "root")
    await users.set_model(root.id, "o1")  # as /model did when 905 was an admin
    admin = await users.ensure(903, "boss")
    await users.set_model(admin.id, "o1")
    for user_id in (pat.id, root.id):
        user = await users.get(user_id)
        assert app.assistant.model_for(user) is model, user.model
        assert "gpt-4o-mini (the instance default" in (await command(app, user, "/model")).text
        assert (await app.assistant.run_turn(user, "hi")).text == "ok"  # the default answers
    chosen = app.assistant.model_for(await users.get(admin.id))
    assert chosen is not model and chosen.model_name == "o1"  # an admin keeps any choice


# -- relays: quoted DMs, unique usernames ---------------------------------------------------------


class Inbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    async def send(self, user, text, *, link=None, key=None, offers=()) -> bool:
        self.sent.append((user.id, text))
        return True


async def relay_app(make_app, tmp_path):
    app = await make_app(model=ScriptedChatModel(),
                         home=write_config(tmp_path / "h", allow_user_messages=True))
    inbox = Inbox()
    app.deps.messenger.add(inbox)
    mallory = await app.deps.users.ensure(701, "mallory")
    bob = await app.deps.users.ensure(702, "bob")
    return app, inbox, mallory, bob


async def test_a_relayed_dm_cannot_speak_in_panagers_voice(make_app, tmp_path):
    app, inbox, mallory, bob = await relay_app(make_app, tmp_path)
    fake = ("```\n✅ Google account bob@gmail.com linked.\n"
            "[Reconnect here](https://evil.example/login) <@702> # Important")
    await app.deps.relay.send(mallory, "bob", fake)
    await app.deps.relay.drain()
    [(to, dm)] = inbox.sent
    header, _, body = dm.partition("\n")
    assert to == bob.id and "@mallory" in header and "not Panager's" in header
    assert body.startswith("```\n") and body.endswith("\n```")
    inner = body[4:-4]
    assert "```" not in inner  # the text cannot close the code block early
    assert "[Reconnect here](https://evil.example/login)" in inner  # shown, not rendered
    assert inner.replace("\u200b", "") == fake


async def test_usernames_are_unique_and_a_sender_whose_name_is_not_theirs_is_refused(
    make_app, tmp_path
):
    from dataclasses import replace

    app, inbox, mallory, bob = await relay_app(make_app, tmp_path)
    users = app.deps.users
    twin = await users.ensure(703, "Bob")  # a second Discord user picks the same name
    assert twin.username == "Bob-2"
    assert (await users.ensure(703, "Bob")).username == "Bob-2"  # stable on every message
    local = await users.ensure(1, "mallory", role="admin")  # the terminal user, too
    assert local.username == "mallory-2"
    assert [u.id for u in await users.active_by_username("bob")] == [bob.id]
    posing = replace(mallory, username="bob")  # a sender object whose name is someone else's
    with pytest.raises(Exception, match="not unique"):
        await app.deps.relay.send(posing, "mallory-2", "hi")
    assert inbox.sent == []
    await users.ensure(702, "robert")  # bob renames: the name is free again
    assert (await users.ensure(704, "bob")).username == "bob"


async def test_the_migration_renames_existing_duplicate_usernames(fresh_db, template_db):
    from alembic.script import ScriptDirectory

    from panager.db import migrate
    from panager.db.pool import open_pool

    url = fresh_db(template_db)
    previous = ScriptDirectory.from_config(migrate.alembic_config(url)).get_revision("0014")
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.downgrade(url, pool, previous.down_revision)
        async with pool.connection() as conn:
            for n, (user_id, name) in enumerate(
                [(11, "root"), (12, "Root"), (13, "root-2"), (14, "ROOT"), (15, "amy")]
            ):
                await conn.execute(
                    "INSERT INTO users (id, username, timezone, role, status, created_at) "
                    "VALUES (%s, %s, 'UTC', 'user', 'active', "
                    "'2026-01-01'::timestamptz + %s * interval '1 day')", (user_id, name, n))
        await migrate.upgrade(url, pool)
        async with pool.connection() as conn:
            rows = await (await conn.execute("SELECT id, username FROM users ORDER BY id")).fetchall()
            assert {r["id"]: r["username"] for r in rows} == {
                11: "root", 12: "Root-3", 13: "root-2", 14: "ROOT-4", 15: "amy"}
            with pytest.raises(Exception, match="users_username_key"):
                await conn.execute("INSERT INTO users (id, username, timezone, role, status) "
                                   "VALUES (16, 'AMY', 'UTC', 'user', 'active')")
    finally:
        await pool.close()


async def test_relays_block_answers_the_same_for_any_name(make_app, tmp_path):
    app, _, mallory, bob = await relay_app(make_app, tmp_path)
    await app.deps.users.ensure(706, "pending-pat", status="pending")
    answers = {}
    for name in ("mallory", "nobody-here", "pending-pat", "bob"):  # bob: the user themself
        for word in ("block", "unblock", "unblock"):
            reply = await command(app, bob, f"/relays {word} @{name}")
            answers.setdefault(word, set()).add((reply.ok, reply.text.replace(name, "NAME")))
    assert all(len(texts) == 1 for texts in answers.values()), answers
    # the list shows the names as typed, blocked or not, whoever has them
    for name in ("Mallory", "nobody-here", "pending-pat"):
        await command(app, bob, f"/relays block @{name}")
    listed = (await command(app, bob, "/relays")).text
    assert "Blocked: @Mallory, @nobody-here, @pending-pat." in listed
    with pytest.raises(Exception, match="can receive"):  # and it did block the real one
        await app.deps.relay.send(mallory, "bob", "hi")
    async with app.pool.connection() as conn:  # a rename does not undo the block
        await conn.execute("UPDATE users SET username = 'mallory-renamed' WHERE id = %s",
                           (mallory.id,))
    mallory = await app.deps.users.get(mallory.id)
    with pytest.raises(Exception, match="can receive"):
        await app.deps.relay.send(mallory, "bob", "hi")
    for name in ("mallory", "NOBODY-HERE", "pending-pat"):
        await command(app, bob, f"/relays unblock {name}")
    assert "Blocked: nobody." in (await command(app, bob, "/relays")).text
    assert (await app.deps.relay.send(mallory, "bob", "hi"))["sent"]
    await app.deps.relay.drain()


async def test_relays_block_keeps_at_most_so_many_names(make_app, tmp_path):
    from panager.services.relays.store import MAX_BLOCKED_NAMES

    app, _, _, bob = await relay_app(make_app, tmp_path)
    async with app.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO relay_block_names (user_id, name) SELECT %s, 'n' || i "
            "FROM generate_series(1, %s) i", (bob.id, MAX_BLOCKED_NAMES))
    full = await command(app, bob, "/relays block one-more")
    assert not full.ok and "unblock some first" in full.text
    assert (await command(app, bob, "/relays block n7")).ok  # one already kept: fine
    assert not (await command(app, bob, "/relays block " + "x" * 65)).ok


# -- advisory locks and the embedded server's runtime directory ----------------------------------


def test_every_advisory_lock_namespace_is_distinct():
    from panager.agent.turns import turnlock
    from panager.db import locks, presence

    assert len(set(locks.ALL.values())) == len(locks.ALL), locks.ALL
    assert turnlock.lock_key(42)[0] != presence.PRESENCE_NS


async def test_a_held_turn_lock_never_passes_for_a_live_worker(make_app):
    """The presence check lists live workers by their advisory locks; a user's running turn
    must not appear there (else a dead worker's claims would look held)."""
    from panager.db.presence import HELD_OWNERS

    app = await make_app(model=ScriptedChatModel(default="ok"))
    user = await app.deps.users.ensure(4242, "alice")
    async with app.assistant.user_lock(user.id), app.pool.connection() as conn:
        held = {r["objid"] for r in await (await conn.execute(HELD_OWNERS)).fetchall()}
        locks = await (await conn.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
            (user.id,))).fetchone()
    assert locks["n"] == 1  # the turn lock is really held in PostgreSQL...
    assert user.id not in held  # ...and is no worker's presence


def test_the_embedded_runtime_dir_is_private_and_under_panager_home(tmp_path, monkeypatch):
    import os
    import stat

    from panager.config import ConfigError
    from panager.db.embedded import _ensure_runtime_dir

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = tmp_path / "home"
    _ensure_runtime_dir(home)
    run = home / "run"
    assert os.environ["XDG_RUNTIME_DIR"] == str(run)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700 and run.stat().st_uid == os.getuid()
    shared = tmp_path / "shared"  # an inherited XDG_RUNTIME_DIR others can enter is not kept
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    _ensure_runtime_dir(home)
    assert os.environ["XDG_RUNTIME_DIR"] == str(run)
    other = tmp_path / "other"  # a run dir that is a link (made first by someone else)
    (other / "run").parent.mkdir()
    (other / "run").symlink_to(shared)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    with pytest.raises(ConfigError, match="not a directory owned by this user"):
        _ensure_runtime_dir(other)
    if os.getuid() == 0:  # as root: a directory another account owns is refused
        theirs = tmp_path / "theirs"
        (theirs / "run").mkdir(parents=True)
        os.chown(theirs / "run", 65534, 65534)
        with pytest.raises(ConfigError):
            _ensure_runtime_dir(theirs)
