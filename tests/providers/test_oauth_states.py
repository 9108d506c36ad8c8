"""The shared OAuth link state, as any OAuth provider uses it (a test-only provider
"example" here): signed, bound to its provider, single use, expiring, tied to the browser
that pressed Continue; and the messages kept for the replay after linking."""

from __future__ import annotations

from panager.db.pool import open_pool
from panager.services.accounts.oauth import (
    Browser,
    Claimed,
    LinkOutcome,
    OAuthStates,
    PendingMessages,
)
from panager.services.accounts.sealing import Sealer
from panager.services.users import UserService


def _reason(outcome: object) -> str:
    assert isinstance(outcome, LinkOutcome) and not outcome.ok, outcome
    return outcome.reason


async def test_a_providers_state_is_signed_bound_single_use_and_expires(db_url, clock):
    pool = await open_pool(db_url, max_size=2)
    try:
        users = UserService(pool)
        ann = (await users.ensure_identity("discord", 101, "ann")).id
        bob = (await users.ensure_identity("discord", 102, "bob")).id
        sealer = Sealer("a secret key")
        states = OAuthStates(pool, clock, sealer, "example")
        state = await states.new(ann, ["mail.read"])
        row = await states.check(state)
        assert isinstance(row, dict) and row["user_id"] == ann
        assert "mail.read" in row["scopes"] and state.split(".")[0] not in str(row)
        nonce, _, signature = state.partition(".")
        assert _reason(await states.check(f"{nonce}.{signature[::-1]}")) == "forged"
        assert _reason(await states.check("no-signature")) == "forged"
        assert _reason(await states.check(None)) == "missing_state"
        # another provider's (or another key's) store cannot use it
        assert _reason(await OAuthStates(pool, clock, sealer, "google").check(state)) == "forged"
        assert _reason(await OAuthStates(pool, clock, Sealer("other"), "example").check(
            state)) == "forged"

        mine, theirs = Browser.key_of("cookie-a"), Browser.key_of("cookie-b")
        assert mine is not None and theirs is not None
        assert _reason(await states.claim(state, Browser(mine))) == "other_browser"  # unbound
        assert await states.bind(state, mine) and not await states.bind(state, theirs)
        assert _reason(await states.claim(state, Browser(theirs))) == "other_browser"
        assert _reason(await states.claim(state, Browser(mine, bob))) == "other_browser"
        claimed = await states.claim(state, Browser(mine, ann))
        assert isinstance(claimed, Claimed)
        assert (claimed.user_id, claimed.scopes) == (ann, ("mail.read",))
        assert len(claimed.verifier) > 40  # the PKCE verifier, opened from its seal
        assert _reason(await states.claim(state, Browser(mine))) == "replayed"

        late = await states.new(ann)
        assert await states.bind(late, mine)
        clock.advance(minutes=11)
        assert _reason(await states.claim(late, Browser(mine))) == "expired"
    finally:
        await pool.close()


async def test_pending_messages_are_replayed_once_and_only_while_recent(db_url, clock):
    pool = await open_pool(db_url, max_size=2)
    try:
        ann = (await UserService(pool).ensure_identity("discord", 101, "ann")).id
        pending = PendingMessages(pool, clock)
        await pending.add(ann, "what is on my calendar?")
        clock.advance(hours=2)
        await pending.add(ann, "add lunch on Friday")
        await pending.add(ann, "add lunch on Friday")
        assert await pending.claim(ann) == ["add lunch on Friday"]
        assert await pending.claim(ann) == []
    finally:
        await pool.close()
