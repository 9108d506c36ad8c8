"""Google linking end to end: real google-auth-oauthlib / google-auth / googleapiclient against
FakeGoogle, the real web server, real Postgres.

Unlinked question → link + pending message → callback over HTTP → tokens sealed → the
question answered automatically; refresh, revoked grants, hostile callbacks, commands.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from panager.agent.commands import CommandContext, dispatch
from panager.errors import ToolError
from panager.framing import unframe
from tests.fakes.google_server import CALENDAR_SCOPE, FakeGoogle
from tests.fakes.scripted_model import ScriptedChatModel, call, calls
from tests.google_helpers import ALICE, BOB, start_harness

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _plain_http_oauth(monkeypatch):
    """oauthlib refuses http:// token endpoints unless told this is a test."""
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")


@pytest.fixture
async def fake():
    async with FakeGoogle() as server:
        yield server


async def thread(app, user) -> list:
    snap = await app.assistant.graph.aget_state(app.assistant.config_for(user))
    return (snap.values or {}).get("messages", [])


def answer_from_tool(messages) -> str:
    """Script step: report the titles the last tool result contained."""
    found = unframe(messages[-1].content)
    result = found[1] if found else json.loads(messages[-1].content)
    titles = [e["title"] for e in result.get("events", [])]
    return "On your calendar: " + ", ".join(titles)


def all_tokens(fake: FakeGoogle) -> list[str]:
    return [*fake._refresh_tokens, *fake._access]


async def database_dump(harness) -> tuple[str, bytes]:
    """Every value of every table of the public schema, as text and as bytes."""
    tables = await harness.sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    text, raw = [], []
    for row in tables:
        for record in await harness.sql(f'SELECT * FROM "{row["table_name"]}"'):
            for value in record.values():
                if isinstance(value, bytes | bytearray | memoryview):
                    raw.append(bytes(value))
                else:
                    text.append(str(value))
    return "\n".join(text), b"\n".join(raw)


async def test_unlinked_question_is_answered_automatically_after_linking(make_app, fake, caplog):
    caplog.set_level(logging.DEBUG)
    fake.add_event(
        ALICE, summary="Dentist", start="2026-11-23T09:00:00Z", end="2026-11-23T10:00:00Z"
    )
    model = ScriptedChatModel(
        script=[
            calls(call("set_timezone", {"timezone": "Asia/Seoul"}), call("calendar_list_events")),
            call("calendar_list_events"),
            answer_from_tool,
        ]
    )
    h = await start_harness(make_app, fake, model)
    user = await h.app.local_user()
    question = "what's on my calendar this week?"

    result = await h.app.assistant.run_turn(user, question)
    assert result.link and result.link["url"].startswith("https://panager.example/oauth/google/start?")
    assert len(result.link["url"]) < 200  # fits a Discord link button
    assert result.link["label"] == "Connect Google" and "Connect it here" in result.text
    pending = await h.sql(
        "SELECT text, replayed_at FROM pending_messages WHERE user_id = %s", user.id
    )
    assert pending == [{"text": question, "replayed_at": None}]
    assert fake.requests == []  # nothing was sent to Google without a link

    redirect = await h.authorize(result.link["url"], account=ALICE)
    status, body = await h.follow(redirect)
    assert status == 200 and "Google account linked" in body and ALICE in body

    sent = await h.recorder.wait()
    assert sent == [
        (user.id, f"✅ Google account {ALICE} linked. On your calendar: Dentist", None)
    ]
    messages = await thread(h.app, user)
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    assert [m.content for m in humans] == [question]  # replayed, not duplicated
    assert not any(
        m.additional_kwargs.get("panager_link") for m in messages if isinstance(m, AIMessage)
    )
    assert len(model.requests) == 3
    # the other tool call of the linking turn kept its result and was not run again
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [(m.name, m.status) for m in results] == [
        ("set_timezone", "success"),
        ("calendar_list_events", "error"),  # now says: linked, call again
        ("calendar_list_events", "success"),
    ]
    assert "call again" in results[1].content
    assert (await h.app.deps.users.get(user.id)).timezone == "Asia/Seoul"

    account = (await h.sql("SELECT * FROM google_accounts WHERE user_id = %s", user.id))[0]
    assert account["status"] == "connected" and account["email"] == ALICE
    assert set(account["scopes"]) == {CALENDAR_SCOPE, "https://www.googleapis.com/auth/tasks"}
    assert (await h.sql("SELECT replayed_at FROM pending_messages"))[0]["replayed_at"] is not None

    text, raw = await database_dump(h)
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    secrets_ = [*all_tokens(fake), code, fake.client_secret]
    assert len(fake._refresh_tokens) == 1
    for secret in secrets_:
        assert secret not in text and secret.encode() not in raw
        assert secret not in caplog.text
    state = parse_qs(urlsplit(redirect).query)["state"][0]
    assert state not in text  # only its hash is kept


async def test_callback_served_by_another_process_replays_there(fake, make_app):
    """The link comes from one app (say the Discord process); another serves the callback."""
    model = ScriptedChatModel(script=[call("task_list"), call("task_list"), "Your tasks: Milk"])
    fake.add_task(ALICE, title="Milk")
    asking = await start_harness(make_app, fake, model)
    serving = await start_harness(make_app, fake, model)
    user = await asking.app.local_user()
    result = await asking.app.assistant.run_turn(user, "what are my tasks?")
    status, _ = await serving.follow(await serving.authorize(result.link["url"]))
    assert status == 200
    assert (await serving.recorder.wait())[0][1].endswith("Your tasks: Milk")
    assert asking.recorder.sent == []


async def test_expired_access_token_is_refreshed_and_saved(fake, make_app):
    h = await start_harness(make_app, fake)
    user = await h.app.local_user()
    assert (await h.link(user))[0] == 200
    sealed = (await h.sql("SELECT token_ciphertext FROM google_accounts"))[0]["token_ciphertext"]
    fake.expire_access_tokens()
    exchanges = len(fake.token_requests)

    assert (await h.tools(user)["task_list"].ainvoke({}))["count"] == 0
    assert [r["grant_type"] for r in fake.token_requests[exchanges:]] == ["refresh_token"]
    assert [r["status"] for r in fake.requests[-2:]] == [401, 200]
    resealed = (await h.sql("SELECT * FROM google_accounts"))[0]
    assert resealed["token_ciphertext"] != sealed and resealed["refreshed_at"] is not None

    await h.tools(user)["task_list"].ainvoke({})  # the saved token is used: no new refresh
    assert len(fake.token_requests) == exchanges + 1 and fake.requests[-1]["status"] == 200


async def test_revoked_grant_disconnects_and_gives_a_reconnect_link(fake, make_app):
    model = ScriptedChatModel(script=[call("task_list"), call("task_list")])
    h = await start_harness(make_app, fake, model)
    user = await h.app.local_user()
    await h.link(user)
    fake.revoke_account(ALICE)
    fake.expire_access_tokens()

    result = await h.app.assistant.run_turn(user, "my tasks?")
    assert result.link and "revoked or expired" in result.text
    account = (await h.sql("SELECT status, disconnected_at FROM google_accounts"))[0]
    assert account["status"] == "disconnected" and account["disconnected_at"] is not None
    refreshes = sum(r.get("grant_type") == "refresh_token" for r in fake.token_requests)
    assert refreshes == 1

    again = await h.app.assistant.run_turn(user, "my tasks, please?")
    assert again.link and again.link["url"] != result.link["url"]
    assert sum(r.get("grant_type") == "refresh_token" for r in fake.token_requests) == 1

    model.add(call("task_list"), "No open tasks.")
    assert (await h.follow(await h.authorize(again.link["url"])))[0] == 200
    _, text, _ = (await h.recorder.wait(2))[-1]  # the first: "connected" after h.link
    assert "No open tasks." in text
    assert (await h.sql("SELECT status FROM google_accounts"))[0]["status"] == "connected"
    # both pending requests were claimed once; the thread holds each user message once
    humans = [m.content for m in await thread(h.app, user) if isinstance(m, HumanMessage)]
    assert humans[:2] == ["my tasks?", "my tasks, please?"]
    assert "Please finish the request(s)" in humans[2]


async def test_hostile_or_failed_callbacks_store_nothing(fake, make_app, clock):
    h = await start_harness(make_app, fake)
    user = await h.app.local_user()
    service = h.app.deps.google

    status, body = await h.follow("https://x/cb?code=4/0Aabc")
    assert status == 400 and "not valid" in body
    # our short start link refuses what the callback refuses, before anything reaches Google
    for bad in ("", "?state=bogus.value", "?state=" + "x" * 40):
        status, body, _ = await h.get(f"/oauth/google/start{bad}")
        assert status == 400 and "not valid" in body
    stale = await service.create_link(user.id)
    clock.advance(minutes=11)
    status, body, _ = await h.get("/oauth/google/start?" + urlsplit(stale).query)
    assert status == 400 and "expired" in body
    clock.advance(minutes=-11)
    real = await h.authorize(await service.create_link(user.id))
    query = parse_qs(urlsplit(real).query)
    nonce, _, _ = query["state"][0].partition(".")
    for forged in (f"{nonce}.AAAAAAAA", "bogus.value", "x" * 40):
        status, body = await h.follow(f"https://x/cb?state={forged}&code={query['code'][0]}")
        assert status == 400 and "altered" in body

    expiring = await h.authorize(await service.create_link(user.id))
    clock.advance(minutes=11)
    status, body = await h.follow(expiring)
    assert status == 400 and "expired" in body

    denied = await h.authorize(await service.create_link(user.id), deny=True)
    status, body = await h.follow(denied)
    assert status == 200 and "did not allow access" in body

    no_refresh = await h.authorize(await service.create_link(user.id), grant_refresh_token=False)
    status, body = await h.follow(no_refresh)
    assert status == 400 and "lasting access" in body
    assert 'href="https://panager.example/oauth/google/start?state=' in body

    assert await h.sql("SELECT * FROM google_accounts") == []
    exchanged = [r for r in fake.token_requests if r.get("grant_type") == "authorization_code"]
    assert len(exchanged) == 1  # only the no-refresh-token one reached Google

    used = await h.authorize(await service.create_link(user.id))
    assert (await h.follow(used))[0] == 200
    stored = await h.sql("SELECT * FROM google_accounts")
    exchanges = len(fake.token_requests)
    status, body = await h.follow(used)
    assert status == 400 and "already used" in body and len(fake.token_requests) == exchanges
    assert await h.sql("SELECT * FROM google_accounts") == stored

    _, _, headers = await h.get("/oauth/google/callback")
    assert headers["Referrer-Policy"] == "no-referrer" and headers["Cache-Control"] == "no-store"
    h.app.settings.metrics_token = "metrics-token-for-tests"
    async with aiohttp.ClientSession() as session, session.get(
        h.server.url + "/metrics", headers={"Authorization": "Bearer metrics-token-for-tests"}
    ) as response:
        metrics = await response.text()
    assert 'panager_oauth_callbacks_total{outcome="forged"} 3' in metrics
    assert 'panager_oauth_callbacks_total{outcome="replayed"} 1' in metrics


async def test_partial_grant_links_calendar_only(fake, make_app):
    h = await start_harness(make_app, fake)
    user = await h.app.local_user()
    status, body = await h.link(user, granted_scopes=[CALENDAR_SCOPE])
    assert status == 200 and "Only part of the access" in body
    tools = h.tools(user)
    assert (await tools["calendar_list_events"].ainvoke({}))["count"] == 0
    with pytest.raises(ToolError, match="does not include Tasks access"):
        await tools["task_list"].ainvoke({})


async def test_users_never_share_tokens(fake, make_app):
    fake.add_event(
        ALICE, summary="Alice only", start="2026-11-22T10:00:00Z", end="2026-11-22T11:00:00Z"
    )
    fake.add_event(
        BOB, summary="Bob only", start="2026-11-22T10:00:00Z", end="2026-11-22T11:00:00Z"
    )
    model = ScriptedChatModel(script=[call("calendar_list_events")])
    h = await start_harness(make_app, fake, model)
    alice = await h.app.deps.users.ensure(111, "alice")
    bob = await h.app.deps.users.ensure(222, "bob")
    carol = await h.app.deps.users.ensure(333, "carol")
    await h.link(alice, ALICE)
    await h.link(bob, BOB)
    await h.recorder.wait(2)

    import asyncio

    start = len(fake.requests)
    a_result, b_result = await asyncio.gather(
        h.tools(alice)["calendar_list_events"].ainvoke({}),
        h.tools(bob)["calendar_list_events"].ainvoke({}),
    )
    assert [e["title"] for e in a_result["events"]] == ["Alice only"]
    assert [e["title"] for e in b_result["events"]] == ["Bob only"]
    assert {r["account"] for r in fake.requests[start:]} == {ALICE, BOB}

    before = len(fake.requests)
    result = await h.app.assistant.run_turn(carol, "my calendar?")
    assert result.link is not None and len(fake.requests) == before
    pending = await h.sql("SELECT user_id FROM pending_messages WHERE replayed_at IS NULL")
    assert pending == [{"user_id": 333}]


async def test_connect_and_disconnect_commands(fake, make_app):
    h = await start_harness(make_app, fake)
    user = await h.app.local_user()
    ctx = CommandContext(user=user, assistant=h.app.assistant, front_end="discord")

    reply = await dispatch(ctx, "/connect google")
    assert reply.ok and reply.link["label"] == "Connect Google"
    google_url = await h.consent(reply.link["url"])
    assert google_url.startswith(fake.auth_uri) and "access_type=offline" in google_url
    assert "code_challenge_method=S256" in google_url and "prompt=consent" in google_url
    assert not (await dispatch(ctx, "/connect dropbox")).ok
    assert (await h.follow(await fake.authorize(google_url)))[0] == 200
    assert (await h.recorder.wait())[0][
        1
    ] == "✅ Google account alice@example.com linked: Calendar and Tasks are connected."
    assert "connected as alice@example.com" in (await dispatch(ctx, "/connect google")).text

    refresh = next(iter(fake._refresh_tokens))
    reply = await dispatch(ctx, "/disconnect google")
    assert reply.ok and "revoked" in reply.text
    assert fake.token_requests[-1] == {"revoke": refresh}
    assert fake._refresh_tokens[refresh].revoked
    assert await h.sql("SELECT * FROM google_accounts") == []
    assert "not connected" in (await dispatch(ctx, "/disconnect google")).text


async def test_without_google_the_tools_and_commands_explain(make_app):
    model = ScriptedChatModel(script=[calls(call("task_list"), call("calendar_list_events")), "ok"])
    app = await make_app(model=model)
    assert app.deps.google is None
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "tasks?")
    assert result.ok and result.text == "ok"
    errors = [m for m in await thread(app, user) if isinstance(m, ToolMessage)]
    assert len(errors) == 2 and all(
        "not configured on this Panager instance" in m.content for m in errors
    )
    ctx = CommandContext(user=user, assistant=app.assistant)
    reply = await dispatch(ctx, "/connect google")
    assert not reply.ok and "GOOGLE_CLIENT_ID" in reply.text
