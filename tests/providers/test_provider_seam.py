"""The provider seam end to end: ids from before providers existed, several providers in one
listing, stale writes shown to the model, capabilities read once per turn, sealed form
connects and the doctor's check, and an upgrade that keeps a Google link working."""

from __future__ import annotations

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.graph.tool import LOOKUP_KEY
from panager.agent.tools import build_tools, tools_for_turn
from panager.db import migrate
from panager.doctor import check_secret
from panager.errors import ToolError
from panager.framing import unframe
from panager.providers.google.service import GoogleService
from panager.providers.memory.provider import MemoryProvider
from panager.services.accounts.connections import Connections, sealed_count, split_fields
from panager.services.accounts.provider import Capability, Field, FormConnect, NewEvent
from panager.services.accounts.sealing import Sealer
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import ALICE, SECRET, start_harness
from tests.providers.drivers import ZONE

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _plain_http_oauth(monkeypatch):
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")


@pytest.fixture
async def fake():
    async with FakeGoogle() as server:
        yield server


async def linked(make_app, fake):
    h = await start_harness(make_app, fake)
    user = await h.app.local_user()
    assert (await h.link(user))[0] == 200
    await h.recorder.wait()
    return h, user


def data(value):
    """A tool result's data, framed (outside content) or not."""
    found = unframe(value) if isinstance(value, str) else None
    return found[1] if found else value


async def test_an_event_id_from_before_the_upgrade_still_updates_its_event(make_app, fake):
    h, user = await linked(make_app, fake)
    old = fake.add_event(ALICE, summary="Dentist", start="2026-11-23T09:00:00Z",
                         end="2026-11-23T10:00:00Z")
    # the schema as on the release before providers (0030), then upgraded again
    await migrate.downgrade(h.app.url, h.app.pool, "0030")
    await migrate.upgrade(h.app.url, h.app.pool)
    assert (await h.app.deps.accounts.capabilities(user.id)) >= {
        Capability.CALENDAR_READ, Capability.TASKS_WRITE}
    tools = {t.name: t for t in build_tools(h.app.deps, user)}
    moved = data(await tools["calendar_update_event"].ainvoke(
        {"event_id": old["id"], "title": "Dentist (moved)"}))
    assert moved["event"]["id"] == old["id"]
    stored = fake.calendars[ALICE]["primary"]["events"][old["id"]]
    assert stored["summary"] == "Dentist (moved)"
    again = data(await tools["calendar_update_event"].ainvoke(
        {"event_id": f"google:{old['id']}", "location": "Main St"}))
    stored = fake.calendars[ALICE]["primary"]["events"][old["id"]]
    assert again["event"]["location"] == "Main St" and stored["location"] == "Main St"
    await h.server.stop()


async def test_google_and_a_second_provider_list_together_and_route_by_id(make_app, fake):
    h, user = await linked(make_app, fake)
    memory = MemoryProvider()
    h.app.deps.accounts.register(memory)
    account = memory.add_account(user.id, "family@memory", calendars=("Kids",))
    family = memory.calendar(user.id, account)
    made = (await family.create("primary", NewEvent(
        "School play", h.app.clock.now().replace(hour=15, minute=0),
        h.app.clock.now().replace(hour=16, minute=0)), ZONE)).event
    fake.add_event(ALICE, summary="Dentist", start="2026-11-22T09:00:00Z",
                   end="2026-11-22T10:00:00Z")
    tools = {t.name: t for t in build_tools(h.app.deps, user)}
    listed = await tools["calendar_list_events"].ainvoke({})
    source, shown = unframe(listed)
    assert source == "Google Calendar, In-memory Calendar"
    by_title = {e["title"]: e for e in shown["events"]}
    assert by_title["School play"]["calendar"] == "Kids"
    assert by_title["School play"]["account"] == "family@memory"
    assert by_title["School play"]["id"] == made.id and made.id.startswith("memory:")
    assert by_title["Dentist"]["account"] == ALICE and "calendar" not in by_title["Dentist"]
    changed = data(await tools["calendar_update_event"].ainvoke(
        {"event_id": made.id, "title": "School play (2nd act)"}))
    assert changed["event"]["calendar"] == "Kids"
    assert (await family.event("primary", made.id)).title == "School play (2nd act)"
    before = len(fake.requests)
    created = data(await tools["calendar_create_event"].ainvoke(
        {"title": "Haircut", "start": "2026-11-24T10:00", "end": "2026-11-24T11:00"}))
    assert created["event"]["calendar_id"] == "primary"  # "primary": Google's, the default
    assert any(r["method"] == "POST" for r in fake.requests[before:])
    by_name = data(await tools["calendar_create_event"].ainvoke(
        {"title": "Recital", "start": "2026-11-25T18:00", "end": "2026-11-25T19:00",
         "calendar_id": "kids"}))  # a calendar's name as the person knows it
    assert by_name["event"]["calendar"] == "Kids" and by_name["event"]["id"].startswith("memory:")
    family = next(k for k in fake.calendars[ALICE] if k != "primary")
    on_google = data(await tools["calendar_create_event"].ainvoke(
        {"title": "Dinner", "start": "2026-11-26T18:00", "end": "2026-11-26T19:00",
         "calendar_id": "Family"}))
    assert on_google["event"]["calendar_id"] == family
    await h.server.stop()


async def test_a_change_made_since_the_question_is_refused_and_the_model_sees_it(make_app):
    app = await make_app()
    user = await app.local_user()
    memory = MemoryProvider()
    app.deps.accounts.register(memory)
    account = memory.add_account(user.id, "me@memory")
    cal = memory.calendar(user.id, account)
    made = (await cal.create("primary", NewEvent(
        "Lunch", app.clock.now().replace(hour=12), app.clock.now().replace(hour=13)),
        ZONE)).event
    tools = {t.name: t for t in build_tools(app.deps, user)}
    update = tools["calendar_update_event"]
    args = {"event_id": made.id, "title": "Mine"}
    asked = await update.metadata[LOOKUP_KEY].read(args)  # the question shows "Lunch"
    assert '`"Lunch"`' in asked and "In-memory account" in asked
    cal.book.events[made.id] = made.__class__(**{**made.__dict__, "title": "Lunch with Ann",
                                                 "version": memory.version()})
    with pytest.raises(ToolError) as refused:
        await update.ainvoke(args)
    assert "changed elsewhere" in str(refused.value)
    assert "Lunch with Ann" in str(refused.value) and "<outside_content" in str(refused.value)
    assert (await cal.event("primary", made.id)).title == "Lunch with Ann"  # nothing written


async def test_a_turn_reads_the_persons_accounts_once(make_app, fake, monkeypatch):
    h, user = await linked(make_app, fake)
    reads = []
    original = GoogleService.account

    async def counted(self, user_id):
        reads.append(user_id)
        return await original(self, user_id)

    monkeypatch.setattr(GoogleService, "account", counted)
    offered, unlisted = await tools_for_turn(h.app.deps, user)
    assert reads == [user.id]
    names = {t.name for t in offered}
    assert {"calendar_list_events", "task_list"} <= names
    assert not names & {"email_search", "email_send"}  # no Gmail scope: not offered
    assert {"email_search", "email_send"} <= {t.name for t in unlisted}
    await h.server.stop()


async def test_form_connects_are_sealed_and_the_doctor_wants_their_key(make_app, make_settings):
    app = await make_app(secret_key=SECRET)
    user = await app.local_user()
    connections = app.deps.connections
    assert isinstance(connections, Connections)
    memory = MemoryProvider()
    form = {"label": "Home", "password": "hunter2-app-password"}
    connect = FormConnect((Field("label", "Account name"),
                           Field("password", "App password", secret=True)))
    secret, plain = split_fields(connect, form)
    checked = await memory.check(user.id, plain)
    stored = await connections.add(user.id, "memory", checked.label, secret, plain)
    assert stored.label == "Home" and stored.key and "hunter2" not in stored.sealed
    async with app.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT secret_ciphertext, settings::text AS s FROM provider_accounts")).fetchall()
    assert len(rows) == 1 and "hunter2" not in rows[0]["secret_ciphertext"] + rows[0]["s"]
    assert connections.secret(stored) == {"password": "hunter2-app-password"}
    assert Connections(app.pool, app.clock, Sealer("another key " * 4)).secret(stored) is None
    with pytest.raises(ValueError, match="App password is required"):
        split_fields(connect, {"label": "x"})

    assert await sealed_count(app.pool) == 1
    no_key = make_settings()
    ok, line = await check_secret(no_key, {"pool": app.pool})
    assert ok is False and "1 sealed credential" in line and "PANAGER_SECRET_KEY" in line
    assert await connections.remove(user.id, "memory", stored.key)
    assert not await connections.remove(user.id, "memory", stored.key)
    ok, line = await check_secret(no_key, {"pool": app.pool})
    assert ok is None and "not set" in line


async def test_a_form_connect_is_typed_on_the_connections_page_only_and_checked_first(
    make_app,
):
    from tests.web_helpers import ALICE as WEB_ALICE
    from tests.web_helpers import web_harness

    h = await web_harness(make_app, secret_key=SECRET)
    memory = MemoryProvider(password="right-app-password")
    h.app.deps.accounts.register(memory)
    client = await h.client(WEB_ALICE)
    status, body = await client.get("/connections")
    assert status == 200 and "In-memory" in body and 'type="password"' in body
    status, body = await client.post("/connections/memory/add",
                                     {"label": "Home <b>", "password": "wrong"})
    assert status == 400 and "refused this password" in body
    assert "wrong" not in body and "Home &lt;b&gt;" in body  # the name kept, escaped
    async with h.app.pool.connection() as conn:
        assert await (await conn.execute("SELECT * FROM provider_accounts")).fetchall() == []
    status, body = await client.post("/connections/memory/add",
                                     {"label": "Home", "password": "right-app-password"})
    assert status == 200 and "Connected." in body and "<strong>Home</strong>" in body
    assert "right-app-password" not in body
    [stored] = await h.app.deps.connections.accounts(WEB_ALICE, "memory")
    assert h.app.deps.connections.secret(stored) == {"password": "right-app-password"}
    ctx = CommandContext(user=await h.app.deps.users.get(WEB_ALICE), assistant=h.app.assistant)
    for verb in ("connect", "disconnect"):
        reply = await dispatch(ctx, f"/{verb} memory")
        assert reply.ok and "Connections page" in reply.text and "never in a chat" in reply.text
        assert reply.link["url"] == h.app.settings.public_url.rstrip("/") + "/connections"
    assert not (await dispatch(ctx, "/connect dropbox")).ok
    status, body = await client.post(f"/connections/memory/{stored.key}/remove", {})
    assert status == 200 and "Removed" in body
    assert await h.app.deps.connections.accounts(WEB_ALICE, "memory") == []
    await client.close()
    await h.server.stop()


async def test_the_secret_check_on_a_database_not_yet_upgraded_says_what_to_run(
    fresh_db, make_settings
):
    """`panager doctor` before `panager db upgrade`: a SKIP line naming the command, never
    a crashed check."""
    from panager.db.pool import open_pool

    pool = await open_pool(fresh_db(), max_size=1)
    try:
        ok, line = await check_secret(make_settings(), {"pool": pool})
    finally:
        await pool.close()
    assert ok is None and "panager db upgrade" in line
