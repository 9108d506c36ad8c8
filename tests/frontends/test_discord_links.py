"""Links in Discord answers: a link button when Discord allows one, else the URL in the text."""

from __future__ import annotations

import pytest

from panager.frontends.discord.replies import MAX_BUTTON_URL
from tests.discord_helpers import STEP, running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import tool_call

ADMIN = 4242
GOOGLE = {
    "google_client_id": "cid.apps.googleusercontent.com",
    "google_client_secret": "client-secret",
    "secret_key": "k" * 43,
}
# A real client id is this long; with it, the consent URL is over Discord's 512-character
# limit for button URLs, so the link goes in the text instead.
REAL_CLIENT_ID = "123456789012-abcdefghijklmnopqrstuvwxyz012345.apps.googleusercontent.com"


@pytest.fixture
async def fake():
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server


@pytest.fixture
async def google_app(make_app, openai):
    async def make(**overrides):
        return await make_app(
            openai_base_url=openai.base_url,
            openai_api_key="test",
            access="invite",
            admin_ids=[ADMIN],
            **{**GOOGLE, **overrides},
        )

    return make


def button(message: dict) -> dict | None:
    rows = message["components"]
    return rows[0]["components"][0] if rows else None


async def test_connect_command_link_is_a_button(google_app, fake, openai):
    async with running_bot(await google_app(), fake):
        await fake.send_dm(ADMIN, "/connect google")
        (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    link = button(reply)
    assert link is not None and (link["style"], link["label"]) == (5, "Connect Google")
    assert link["url"].startswith("http://localhost:8765/oauth/google/start?state=")
    assert len(link["url"]) <= MAX_BUTTON_URL and link["url"] not in reply["content"]
    assert openai.requests == []


async def test_link_from_a_turn_is_a_button_on_the_last_chunk(google_app, fake, openai):
    openai.script(tool_call("calendar_list_events", {}))
    async with running_bot(await google_app(), fake):
        await fake.send_dm(ADMIN, "what's on my calendar this week?")
        await fake.wait_for(lambda: any(m["components"] for m in fake.messages_to(ADMIN)), STEP)
    answer = next(m for m in fake.messages_to(ADMIN) if m["components"])
    assert button(answer)["url"].startswith("http://localhost:8765/oauth/google/start?state=")
    assert len(openai.requests) == 1  # the link ends the turn; the model is not asked again


async def test_a_real_client_id_still_gets_a_button(google_app, fake, openai):
    app = await google_app(google_client_id=REAL_CLIENT_ID, public_url="https://pa.example.org")
    async with running_bot(app, fake):
        await fake.send_dm(ADMIN, "/connect google")
        (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    # Google's own consent URL would be over 512 characters; our short start link is not
    assert button(reply)["url"].startswith("https://pa.example.org/oauth/google/start?state=")


async def test_a_link_too_long_for_a_button_goes_in_the_text(google_app, fake, openai):
    long_base = "https://pa.example.org/" + "p" * 480
    app = await google_app(google_client_id=REAL_CLIENT_ID, public_url=long_base)
    async with running_bot(app, fake):
        await fake.send_dm(ADMIN, "/connect google")
        (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    assert reply["components"] == []
    assert f"Connect Google: {long_base}/oauth/google/start?state=" in reply["content"]
