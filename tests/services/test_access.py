"""Access control and the Discord inbox on a real PostgreSQL database."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.commands.access import parse_invite_args
from panager.services.access import AccessError, AccessService, parse_duration
from panager.services.inbox import MAX_RETRIES, InboxService

ADMIN = 4242


@pytest.fixture
async def app(make_app):
    return await make_app(access="invite", admin_ids=[ADMIN])


def service(app, mode: str = "invite") -> AccessService:
    return AccessService(app.pool, app.deps.users, app.clock, mode=mode, admin_ids=[ADMIN])


async def newcomer(access: AccessService, user_id: int):
    admission = await access.admit(user_id, f"user{user_id}")
    assert not admission.allowed
    return admission.user


async def test_modes_decide_before_anything_else(app):
    for mode, allowed in (("open", True), ("allowlist", False), ("invite", False)):
        access = service(app, mode)
        admission = await access.admit(100 + len(mode), "someone")
        assert admission.allowed is allowed, mode
        assert (admission.refusal is None) is allowed
    admin = await service(app).admit(ADMIN, "boss")
    assert admin.allowed and admin.user.role == "admin" and admin.user.status == "active"
    # a pending user in an open instance is let in; a blocked one never is
    assert (await service(app, "open").admit(100 + len("invite"), "someone")).allowed
    await service(app).block(77)
    assert not (await service(app, "open").admit(77, "mallory")).allowed
    with pytest.raises(AccessError, match="PANAGER_ADMIN_IDS"):
        await service(app).block(ADMIN)


async def test_racing_redemptions_of_a_single_use_code_have_one_winner(app):
    access = service(app)
    invite = await access.create_invite(ADMIN)
    users = [await newcomer(access, 200 + i) for i in range(12)]
    results = await asyncio.gather(*(access.redeem(invite.code, u) for u in users))
    assert sum(r.ok for r in results) == 1
    assert {r.message for r in results if not r.ok} == {
        "That invite code has already been used. Ask the admin for a new one."
    }
    statuses = [(await app.deps.users.get(u.id)).status for u in users]
    assert statuses.count("active") == 1 and statuses.count("pending") == 11


async def test_multi_use_code_admits_exactly_its_uses(app):
    access = service(app)
    invite = await access.create_invite(ADMIN, max_uses=3)
    users = [await newcomer(access, 300 + i) for i in range(8)]
    results = await asyncio.gather(*(access.redeem(f" {invite.code.lower()} ", u) for u in users))
    assert sum(r.ok for r in results) == 3
    (stored,) = [i for i in await access.invites() if i.code == invite.code]
    assert stored.uses == 3 and stored.remaining == 0


async def test_expired_unknown_and_repeated_codes(app, clock):
    access = service(app)
    invite = await access.create_invite(ADMIN, expires_in=timedelta(hours=1))
    user = await newcomer(access, 400)
    clock.advance(hours=2)
    assert "expired" in (await access.redeem(invite.code, user)).message
    assert "isn't valid" in (await access.redeem("NOPE", user)).message
    lasting = await access.create_invite(ADMIN, max_uses=2, expires_in=None)
    won = await access.redeem(lasting.code, user)
    assert won.ok and won.user.status == "active"
    again = await access.redeem(lasting.code, won.user)  # already in: the code is not spent
    assert again.ok and "already registered" in again.message
    (stored,) = [i for i in await access.invites() if i.code == lasting.code]
    assert stored.uses == 1


async def test_start_and_invite_commands(app):
    access = service(app)
    admin = (await access.admit(ADMIN, "boss")).user
    ctx = CommandContext(user=admin, assistant=app.assistant, front_end="discord")
    reply = await dispatch(ctx, "/invite 2 never")
    code = reply.text.split("Invite code: ")[1].split(" ")[0]
    assert "2 of 2 uses, never expires" in reply.text
    bad = await dispatch(ctx, "/invite 2 tomorrow")
    assert not bad.ok and "Invalid expiry" in bad.text
    user = await newcomer(access, 500)
    ctx = CommandContext(user=user, assistant=app.assistant, front_end="discord")
    assert not (await dispatch(ctx, "/start")).ok
    assert (await dispatch(ctx, f"/start {code}")).text.startswith("Welcome, user500!")
    assert "admins only" in (await dispatch(ctx, "/invite")).text


def test_durations_and_invite_arguments():
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("12H") == timedelta(hours=12)
    assert parse_duration("2w") == timedelta(weeks=2)
    assert parse_duration("never") is None
    for bad in ("soon", "0d", "7", "-1d", "3y"):
        with pytest.raises(AccessError):
            parse_duration(bad)
    assert parse_invite_args("") == (1, timedelta(days=7))
    assert parse_invite_args("5 30m") == (5, timedelta(minutes=30))


@pytest.mark.parametrize("text", ["9999999999d", "1000000w", "53w", "366d", "8785h", "9" * 5000 + "m"])
def test_expiry_beyond_a_year_is_refused_with_the_limit(text):
    with pytest.raises(AccessError, match="too long: at most 365 days"):
        parse_duration(text)


def test_the_longest_expiries_are_accepted():
    assert parse_duration("365d") == parse_duration("8760h") == timedelta(days=365)
    assert parse_duration("52w") == timedelta(weeks=52)


async def test_invite_command_with_a_huge_expiry_or_uses_answers_and_stores_nothing(app):
    access = service(app)
    admin = (await access.admit(ADMIN, "boss")).user
    ctx = CommandContext(user=admin, assistant=app.assistant, front_end="terminal")
    for args, words in (("1 1000000w", "too long"), ("1 9999999999d", "too long"),
                        ("1" * 5000, "Uses must be between"), ("² 7d", "Invalid expiry")):
        reply = await dispatch(ctx, f"/invite {args}")
        assert not reply.ok and words in reply.text and "Usage: /invite" in reply.text, args
        assert "Traceback" not in reply.text and "Overflow" not in reply.text
    assert await access.invites() == []
    with pytest.raises(AccessError, match="between 1 minute and 365 days"):
        await access.create_invite(ADMIN, expires_in=timedelta(weeks=1000000))


async def test_inbox_accepts_once_and_hands_out_in_order(app):
    one = InboxService(app.pool, app.clock, "worker-1")
    two = InboxService(app.pool, app.clock, "worker-2")
    common = {"user_id": 9, "channel_id": 900009, "username": "u", "display_name": None}
    assert await one.accept(message_id=30, content="third", **common)
    assert await one.accept(message_id=10, content="first", **common)
    assert not await two.accept(message_id=10, content="first", **common)  # a replay
    assert await one.accept(message_id=20, content="second", **common)
    first = await one.claim_next(9)
    assert first.content == "first"
    # while one message is in progress nobody, in any process, takes the next
    assert await two.claim_next(9) is None and await one.claim_next(9) is None
    await one.finish(first.message_id)
    assert (await two.claim_next(9)).content == "second"
    assert await one.queued_count(9) == 1


async def test_inbox_requeues_stale_claims_then_retires_them_and_prunes(app, clock):
    inbox = InboxService(app.pool, app.clock, "w")
    common = {"user_id": 9, "channel_id": 900009, "username": "u", "display_name": None}
    await inbox.accept(message_id=1, content="lost in a crash", **common)
    await inbox.accept(message_id=2, content="next", **common)
    assert (await inbox.claim_next(9)).message_id == 1
    assert await inbox.recover_stale() == []  # the lease still holds
    for attempt in range(1, MAX_RETRIES + 1):  # its process died: queued again, still first
        clock.advance(minutes=2)
        assert await inbox.recover_stale() == []
        again = await inbox.claim_next(9)
        assert (again.message_id, again.attempts, again.content) == (1, attempt, "lost in a crash")
    clock.advance(minutes=2)
    (stale,) = await inbox.recover_stale()  # it keeps killing the process: retired
    assert (stale.content, stale.status) == ("lost in a crash", "abandoned")
    assert (await inbox.claim_next(9)).message_id == 2
    await inbox.finish(2)
    clock.advance(days=8)
    assert await inbox.prune() == 2
    assert await inbox.accept(message_id=3, content="new", **common)
