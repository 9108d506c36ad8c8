"""The shared OAuth link state, as any OAuth provider uses it (a test-only provider
"example" here): signed, bound to its provider, single use, expiring, tied to the browser
that pressed Continue; and the messages kept for the replay after linking."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from panager.db.pool import open_pool
from panager.providers.memory.provider import MemoryProvider
from panager.services.accounts.oauth import (
    Browser,
    Claimed,
    LinkOutcome,
    OAuthStates,
    PendingMessages,
    finish_link,
)
from panager.services.accounts.sealing import Sealer
from panager.services.accounts.service import AccountService
from panager.services.users import UserService
from tests.oauth_helpers import ExampleLink, challenge_of, example_provider, token_endpoint


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


async def test_a_registered_oauth_provider_links_through_the_shared_flow(db_url, clock):
    pool = await open_pool(db_url, max_size=2)
    try:
        async with token_endpoint() as (fake, token_url):
            await _link_example(pool, clock, fake, token_url)
    finally:
        await pool.close()


async def _link_example(pool, clock, fake, token_url) -> None:
    users = UserService(pool)
    ann = (await users.ensure_identity("discord", 101, "ann")).id
    link = ExampleLink(pool, clock, Sealer("a secret key"), token_url)
    accounts = AccountService([MemoryProvider()])
    accounts.register(example_provider(link))  # one registration line
    assert accounts.oauth_links() == [link] and accounts.oauth_link("example") is link
    assert accounts.oauth_link("memory") is None
    assert [p.name for p in accounts.form_providers()] == ["memory"]

    await link.pending.add(ann, "summarise my inbox")
    url = await link.create_link(ann, ("mail",))
    state = parse_qs(urlsplit(url).query)["state"][0]
    key = Browser.key_of("the-browser")
    assert key is not None and await link.states.bind(state, key)
    consent = await link.consent_url(state)
    assert isinstance(consent, str)
    fake.challenges["good-code"] = challenge_of(consent)

    forged = await finish_link(link, state=state[:-2] + "xx", code="good-code", error=None,
                               browser=Browser(key))
    assert (forged.ok, forged.reason) == (False, "forged")
    wrong = await finish_link(link, state=state, code="bad-code", error=None,
                              browser=Browser(key))
    assert (wrong.ok, wrong.reason) == (False, "exchange_failed")  # the state is used up
    again = await finish_link(link, state=state, code="good-code", error=None,
                              browser=Browser(key))
    assert again.reason == "replayed"

    state = parse_qs(urlsplit(await link.create_link(ann, ("mail",))).query)["state"][0]
    await link.states.bind(state, key)
    denied = await finish_link(link, state=state, code=None, error="access_denied",
                               browser=Browser(key))
    assert (denied.ok, denied.reason) == (False, "denied")

    state = parse_qs(urlsplit(await link.create_link(ann, ("mail",))).query)["state"][0]
    await link.states.bind(state, key)
    consent = await link.consent_url(state)
    assert isinstance(consent, str)
    fake.challenges["good-code"] = challenge_of(consent)
    linked = await finish_link(link, state=state, code="good-code", error=None,
                               browser=Browser(key))
    assert (linked.ok, linked.reason, linked.user_id) == (True, "linked", ann)
    assert linked.scopes == ("mail",)
    stored = await link.connections.accounts(ann, "example")
    assert [a.label for a in stored] == ["ann@example"]
    assert "REFRESH-abc" not in stored[0].sealed and "REFRESH-abc" not in str(stored[0])
    assert link.connections.secret(stored[0])["refresh_token"] == "REFRESH-abc"
    assert await link.pending.claim(ann) == ["summarise my inbox"]  # replayed once
    assert await link.pending.claim(ann) == []

    await users.set_status(ann, "blocked")
    state = parse_qs(urlsplit(await link.create_link(ann)).query)["state"][0]
    await link.states.bind(state, key)
    blocked = await finish_link(link, state=state, code="good-code", error=None,
                                browser=Browser(key))
    assert (blocked.ok, blocked.reason) == (False, "blocked")
