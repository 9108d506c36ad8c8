"""People and their identities: the migration keeps every id, Telegram people get ids no
Discord snowflake can take, and access follows PANAGER_ADMIN_IDS per platform."""

from __future__ import annotations

import asyncio

import pytest

from panager.config import ConfigError, load_settings
from panager.db import migrate
from panager.db.pool import open_pool
from panager.services.access import AccessService
from panager.services.users import LOCAL_USER_ID, UserService

SNOWFLAKE = 123456789012345678
TG = 987654321


async def test_migration_keeps_every_id_and_gives_identities(fresh_db):
    url = fresh_db()
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
        await migrate.downgrade(url, pool, "0020")  # the schema before identities
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO users (id, username, timezone) VALUES (%s, 'mina', 'UTC'), "
                "(%s, 'me', 'UTC')",
                (SNOWFLAKE, LOCAL_USER_ID),
            )
        await migrate.upgrade(url, pool)
        users = UserService(pool)
        assert await users.person_id("discord", SNOWFLAKE) == SNOWFLAKE
        assert await users.person_id("terminal", LOCAL_USER_ID) == LOCAL_USER_ID
        again = await users.ensure_identity("discord", SNOWFLAKE, "mina")
        assert again.id == SNOWFLAKE and again.thread_id == str(SNOWFLAKE)  # the same thread
        telegram = await users.ensure_identity("telegram", TG, "tgmina")
        assert telegram.id < 0 and telegram.id != TG  # never a snowflake, never the platform id
        assert await users.identities(telegram.id) == [("telegram", TG)]
    finally:
        await pool.close()


async def test_a_new_telegram_person_is_made_once_even_when_racing(make_app):
    app = await make_app()
    users = app.deps.users
    made = await asyncio.gather(*(users.ensure_identity("telegram", TG, "x") for _ in range(6)))
    assert len({u.id for u in made}) == 1
    other = await users.ensure_identity("telegram", TG + 1, "y")
    assert other.id < 0 and other.id != made[0].id
    discord = await users.ensure_identity("discord", SNOWFLAKE, "z")
    assert discord.id == SNOWFLAKE  # Discord people keep person id = their snowflake


async def test_the_same_name_on_two_platforms_names_two_people_apart(make_app):
    app = await make_app()
    users = app.deps.users
    discord = await users.ensure_identity("discord", SNOWFLAKE, "alice")
    telegram = await users.ensure_identity("telegram", TG, "Alice")
    assert (discord.username, telegram.username) == ("alice", "Alice-2")
    again = await users.ensure_identity("telegram", TG, "Alice")  # every message: stable
    assert again.username == "Alice-2" and again.id == telegram.id
    assert [u.id for u in await users.active_by_username("alice")] == [SNOWFLAKE]


async def test_telegram_admins_follow_admin_ids_at_every_message(make_app):
    app = await make_app(access="invite")
    users = app.deps.users
    listed = AccessService(app.pool, users, app.clock, mode="invite", telegram_admin_ids=[TG])
    admission = await listed.admit_identity("telegram", TG, "boss")
    assert (
        admission.allowed and admission.user.role == "admin" and await listed.is_admin(admission.user.id)
    )
    # The same number as a Discord id is somebody else, and not an admin.
    assert not (await listed.admit_identity("discord", TG, "stranger")).allowed
    unlisted = AccessService(app.pool, users, app.clock, mode="allowlist")
    demoted = await unlisted.admit_identity("telegram", TG, "boss")  # no longer listed
    assert (
        demoted.allowed and demoted.user.role == "user" and not await unlisted.is_admin(demoted.user.id)
    )
    refused = await unlisted.admit_identity("telegram", TG + 5, "newcomer")
    assert not refused.allowed
    assert f"panager users allow telegram:{TG + 5}" in (refused.refusal or "")
    allowed = await unlisted.allow(TG + 5, "telegram")
    assert allowed.id == refused.user.id and allowed.status == "active"
    assert (await unlisted.admit_identity("telegram", TG + 5, "newcomer")).allowed


def test_admin_ids_name_platforms(monkeypatch):
    monkeypatch.setenv("PANAGER_ADMIN_IDS", "123, telegram:456,discord:789")
    settings = load_settings(_env_file=None)
    assert settings.admin_ids == [123, 789] and settings.telegram_admin_ids == [456]
    assert settings.admin_identities() == (
        ("discord", 123), ("discord", 789), ("telegram", 456))
    monkeypatch.setenv("PANAGER_ADMIN_IDS", "slack:1")  # a front end added later: its own ids
    assert load_settings(_env_file=None).admin_identities() == (("slack", 1),)
    for wrong in ("Slack!:1", "telegram:abc"):
        monkeypatch.setenv("PANAGER_ADMIN_IDS", wrong)
        with pytest.raises(ConfigError, match="PANAGER_ADMIN_IDS"):
            load_settings(_env_file=None)


async def test_a_known_sender_is_read_with_all_their_identities_at_every_message(make_app):
    """`touch_known` (one round trip for a known sender who kept their name) notes the
    identity as seen and brings every identity of the person, so rights that come through
    another, joined identity are decided from what is stored now; a new name or a new
    sender goes the whole way (`ensure_identity`)."""
    app = await make_app(access="allowlist")
    users = app.deps.users
    assert await users.touch_known("telegram", TG, "carol") is None  # never seen
    listed = AccessService(app.pool, users, app.clock, mode="allowlist", admin_ids=[SNOWFLAKE])
    carol = (await listed.admit_identity("telegram", TG, "carol")).user
    async with app.pool.connection() as conn:
        await conn.execute("UPDATE identities SET last_seen_at = NULL WHERE platform_id = %s",
                           (TG,))
    user, identities = await users.touch_known("telegram", TG, "carol", "Carol C")
    assert user.id == carol.id and user.display_name == "Carol C"
    assert identities == [("telegram", TG)]
    async with app.pool.connection() as conn:
        seen = await (await conn.execute(
            "SELECT last_seen_at FROM identities WHERE platform_id = %s", (TG,))).fetchone()
    assert seen["last_seen_at"] is not None
    assert await users.touch_known("telegram", TG, "carol-renamed") is None  # the whole way
    async with app.pool.connection() as conn:  # carol's listed Discord account joins her
        await conn.execute(
            "INSERT INTO identities (platform, platform_id, user_id) VALUES ('discord', %s, %s)",
            (SNOWFLAKE, carol.id))
    admitted = await listed.admit_identity("telegram", TG, "carol")
    assert admitted.allowed and admitted.user.role == "admin"
    assert (await users.touch_known("telegram", TG, "carol"))[1] == [
        ("discord", SNOWFLAKE), ("telegram", TG)]
    async with app.pool.connection() as conn:  # ... and leaves again: the rights go with it
        await conn.execute("DELETE FROM identities WHERE platform = 'discord' AND user_id = %s",
                           (carol.id,))
    again = await listed.admit_identity("telegram", TG, "carol")
    assert again.user.role == "user" and not await listed.is_admin(carol.id)
